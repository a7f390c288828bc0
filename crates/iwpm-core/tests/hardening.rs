//! What a hostile host on the network, or a hostile local user talking to the kernel, can
//! make the core do — and the bound. One test per threat; each fails on a core without the
//! defence (see `docs/HARDENING.md`).

use iwpm_testkit::core_host as common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use iwpm_core::{CoreConfig, PeerAllow, PeerSocket};
use iwpm_proto::consts::err::IWPM_REMOTE_QUERY_REJECT;
use iwpm_proto::netlink::{DaemonMsg, Hello, KernelMsg};
use iwpm_proto::peer::{PeerMessage, PeerMsgType};

const SEC: Duration = Duration::from_secs(1);

fn listener(h: &mut Host, local: &str) {
    let s = h.add(local, Some(0));
    h.expect_add_reply(s);
}

/// A REQUEST as a peer (or a spoofer) sends it: `cp` connects, `mapped_cp` is its mapping.
fn request(handle: u64, cp: &str, mapped_cp: &str, ap: &str) -> PeerMessage {
    PeerMessage::request(handle, addr(cp), addr(mapped_cp), addr(ap))
}

fn remote_infos(h: &mut Host) -> usize {
    let n = h
        .kernel_in
        .iter()
        .filter(|(_, m)| matches!(m, DaemonMsg::RemoteInfo(_)))
        .count();
    h.kernel_in.clear();
    n
}

fn sent(h: &mut Host, ty: PeerMsgType) -> usize {
    let n = h.peer_out.iter().filter(|s| s.msg.msg_type == ty).count();
    h.peer_out.clear();
    n
}

/// Threat 1: a REQUEST naming a trusted IP as `cp` and the attacker's address as mapped
/// `cp` would make the kernel report the trusted IP as the peer of the attacker's
/// connection.
#[test]
fn forged_connecting_identity_is_dropped() {
    let mut h = Host::booted();
    listener(&mut h, "10.0.0.2:4000");
    let forged = request(7, "10.9.9.9:5000", "10.0.0.66:41234", "10.0.0.2:4000");
    h.peer(PeerSocket::V4Listener, "10.0.0.66:3935", &forged);
    h.no_kernel();
    h.no_peer();
    assert_eq!(h.core.stats().peer_forged, 1);
    // The same request with consistent addresses is served.
    let honest = request(7, "10.0.0.66:5000", "10.0.0.66:41234", "10.0.0.2:4000");
    h.peer(PeerSocket::V4Listener, "10.0.0.66:3935", &honest);
    assert_eq!(remote_infos(&mut h), 1);
    assert_eq!(sent(&mut h, PeerMsgType::Accept), 1);
}

/// Threat 2: every REMOTE_INFO of a spoofed REQUEST pins kernel memory for ever.
#[test]
fn spoofed_requests_pin_at_most_the_remote_info_budget() {
    let mut h = Host::booted_with(CoreConfig {
        remote_info_budget: 8,
        remote_info_refill: SEC * 10,
        ..config()
    });
    listener(&mut h, "10.0.0.2:4000");
    // 3000 spoofed REQUESTs over 30 s, from many sources, never ACKed.
    for i in 0..3_000u32 {
        let ip = format!("10.{}.{}.{}", 1 + i % 200, (i / 200) % 250, 1 + i % 7);
        let req = request(
            u64::from(i) + 1,
            &format!("{ip}:5000"),
            &format!("{ip}:41000"),
            "10.0.0.2:4000",
        );
        h.peer(PeerSocket::V4Listener, &format!("{ip}:3935"), &req);
        if i % 100 == 99 {
            h.advance(SEC);
        }
    }
    let pinned = remote_infos(&mut h);
    // The budget, plus one refill per 10 s.
    assert!(
        pinned <= 8 + 3,
        "{pinned} REMOTE_INFOs for spoofed REQUESTs"
    );
    assert!(h.core.stats().remote_info_deferred > 2_900);
    // A real peer still gets its REMOTE_INFO: on its ACK.
    h.advance(SEC * 11);
    let real = request(99, "10.0.0.1:5000", "10.0.0.1:41234", "10.0.0.2:4000");
    h.peer(PeerSocket::V4Listener, "10.0.0.1:3935", &real);
    let accept = h.peer_out.pop_back().unwrap();
    h.ack(PeerSocket::V4Listener, "10.0.0.1:3935", &accept);
    assert!(remote_infos(&mut h) >= 1);
}

/// An ACK returns the REMOTE_INFO token: real peers never exhaust the budget.
#[test]
fn confirmed_exchanges_return_their_remote_info_token() {
    let mut h = Host::booted_with(CoreConfig {
        remote_info_budget: 2,
        ..config()
    });
    listener(&mut h, "10.0.0.2:4000");
    for i in 0..100u64 {
        let req = request(i + 1, "10.0.0.1:5000", "10.0.0.1:41234", "10.0.0.2:4000");
        h.peer(PeerSocket::V4Listener, "10.0.0.1:3935", &req);
        let accept = h.peer_out.pop_back().unwrap();
        assert_eq!(
            remote_infos(&mut h),
            1,
            "REMOTE_INFO before the ACCEPT, #{i}"
        );
        h.ack(PeerSocket::V4Listener, "10.0.0.1:3935", &accept);
        h.no_kernel();
    }
    assert_eq!(h.core.stats().remote_info_deferred, 0);
}

/// Threat 3 (squatting): a source's REQUESTs that are never ACKed must not deny that
/// source's (or its IPv6 /64 neighbours') real connects. Every REQUEST is answered; no
/// passive state exists before a verified ACK. (Before echo cookies, 256 unACKed REQUESTs
/// filled the source's quota and its real REQUESTs were dropped: the kernel then connected
/// after its 10 s timeout.)
#[test]
fn unacked_requests_do_not_deny_their_source() {
    let mut h = Host::booted();
    listener(&mut h, "10.0.0.2:4000");
    listener(&mut h, "[fd00::2]:4000");
    for (flooder, real, ap) in [
        ("10.0.0.66", "10.0.0.66", "10.0.0.2:4000"),
        ("fd00::66", "fd00::1", "[fd00::2]:4000"),
    ] {
        let at = |ip: &str, port: u16| SocketAddr::new(ip.parse().unwrap(), port).to_string();
        for (i, mapped) in (0..2_000u64).zip([5000u16, 41000].into_iter().cycle()) {
            let port = 5000 + (i % 1000) as u16;
            let mapped = if mapped == 5000 {
                port
            } else {
                41000 + (i % 1000) as u16
            };
            let req = request(i + 1, &at(flooder, port), &at(flooder, mapped), ap);
            h.peer(PeerSocket::V4Listener, &at(flooder, 3935), &req);
        }
        assert_eq!(
            sent(&mut h, PeerMsgType::Accept),
            2_000,
            "{flooder}: all answered"
        );
        remote_infos(&mut h);
        for (handle, mapped) in [(90_001, 6000), (90_002, 46000)] {
            let req = request(handle, &at(real, 6000), &at(real, mapped), ap);
            h.peer(PeerSocket::V4Listener, &at(real, 3935), &req);
            let acc = h.expect_peer();
            assert_eq!(acc.msg.msg_type, PeerMsgType::Accept, "{real} is served");
            h.ack(PeerSocket::V4Listener, &at(real, 3935), &acc);
            // The port-mapped one gets its REMOTE_INFO (on its ACK: the flood spent the
            // source's share of the budget); the other needs none.
            let want = usize::from(mapped != 6000);
            assert_eq!(remote_infos(&mut h), want, "{real}, mapped port {mapped}");
            // (a REMOTE_INFO sent on an IPv4 ACK is followed by its delivery notice)
            let notice = want * usize::from(!real.contains(':'));
            assert_eq!(sent(&mut h, PeerMsgType::Accept), notice, "{real}: notice");
        }
    }
}

/// Threat 3 (blind pairs): REQUEST + ACK pairs whose ACK is written from the attacker's own
/// REQUEST (it never reads our ACCEPT) neither refund a REMOTE_INFO token nor release a
/// held REMOTE_INFO, and a peer that is not port mapped gets none at all: the kernel keeps
/// every REMOTE_INFO until a connection consumes it.
#[test]
fn blind_acks_pin_no_kernel_memory() {
    let mut h = Host::booted_with(CoreConfig {
        remote_info_budget: 8,
        remote_info_refill: SEC * 10,
        ..config()
    });
    // The attacker knows each listener's mapped address: it is stable, any ACCEPT shows
    // it, and with siw it is the listener's own.
    let mapped_v4 = h.add("10.0.0.2:4000", Some(0));
    let mapped_v4 = h.expect_add_reply(mapped_v4).to_socket_addr().unwrap();
    let mapped_v6 = h.add("[fd00::2]:4000", Some(0));
    let mapped_v6 = h.expect_add_reply(mapped_v6).to_socket_addr().unwrap();
    let mut pinned = 0;
    for (ip, ap, mapped_ap) in [
        ("10.0.0.66", "10.0.0.2:4000", mapped_v4),
        ("fd00::66", "[fd00::2]:4000", mapped_v6),
    ] {
        for i in 0..5_000u64 {
            let port = 1024 + (i % 30_000) as u16;
            let cp = SocketAddr::new(ip.parse().unwrap(), port);
            // Identity shape (mapped cp = cp) on even handles, port-mapped on odd ones.
            let mapped = if i % 2 == 0 {
                cp
            } else {
                SocketAddr::new(cp.ip(), port + 30_000)
            };
            let req = PeerMessage::request(i + 1, cp, mapped, addr(ap));
            let from = SocketAddr::new(cp.ip(), 3935).to_string();
            h.peer(PeerSocket::V4Listener, &from, &req);
            let blind = PeerMessage::accept_for(&req, mapped_ap);
            h.peer(PeerSocket::V4Listener, &from, &PeerMessage::ack_for(&blind));
            if i % 1000 == 999 {
                h.advance(SEC);
            }
        }
        pinned += remote_infos(&mut h);
    }
    // The budget (at most the per-source share of it) and one refill per 10 s, per family.
    assert!(
        pinned <= 2 * (8 + 1),
        "{pinned} REMOTE_INFOs pinned by blind pairs"
    );
    assert!(h.core.stats().peer_acks_unverified >= 9_900);
    assert_eq!(h.core.stats().remote_info_not_needed, 5_000);
    // Only the IPv6 port-mapped REQUESTs hold state (their cookie has no room for the
    // mapped port), within one source's quota.
    assert!(h.core.stats().peer_exchanges_unconfirmed <= 256);
}

/// Threat 3 (legitimate burst): an MPI job's 1000 connects from one host, every REQUEST read
/// before the first ACK, are all answered at once, and each gets exactly one REMOTE_INFO
/// (at once on the budget, the rest on its verified ACK). Before: 256 answered, 744 waited
/// for retransmissions.
#[test]
fn a_burst_of_1000_connects_from_one_peer_is_served_in_full() {
    let mut h = Host::booted();
    listener(&mut h, "10.0.0.2:4000");
    let mut accepts = Vec::new();
    for i in 0..1_000u64 {
        let port = 20_000 + i as u16;
        let req = request(
            i + 1,
            &format!("10.0.0.1:{port}"),
            &format!("10.0.0.1:{}", port + 20_000),
            "10.0.0.2:4000",
        );
        h.peer(PeerSocket::V4Listener, "10.0.0.1:47000", &req);
        accepts.push(h.peer_out.pop_back().expect("an ACCEPT"));
    }
    h.no_peer();
    let mut infos = Vec::new();
    for acc in &accepts {
        h.ack(PeerSocket::V4Listener, "10.0.0.1:47000", acc);
        // A duplicate ACK (the peer got our ACCEPT twice) changes nothing.
        h.ack(PeerSocket::V4Listener, "10.0.0.1:47000", acc);
    }
    while let Some((_, m)) = h.kernel_in.pop_front() {
        if let DaemonMsg::RemoteInfo(r) = m {
            infos.push(r.remote_addr);
        }
    }
    infos.sort_by_key(|a| a.port());
    infos.dedup();
    assert_eq!(
        infos.len(),
        1_000,
        "one REMOTE_INFO per connect, none twice"
    );
    assert_eq!(h.core.stats().peer_acks_unverified, 0);
}

/// Threat 3 (eviction): a table full of confirmed exchanges evicts them, not the exchange
/// still waiting for a real peer's ACK, whose held REMOTE_INFO then goes out on that ACK.
#[test]
fn eviction_spares_exchanges_waiting_for_their_ack() {
    let mut h = Host::booted_with(CoreConfig {
        remote_info_budget: 0,
        max_peer_exchanges: 4,
        ..config()
    });
    listener(&mut h, "[fd00::2]:4000");
    let ap = "[fd00::2]:4000";
    let waiting = request(1, "[fd00::1]:5000", "[fd00::1]:45000", ap);
    h.peer(PeerSocket::V6Listener, "[fd00::1]:3935", &waiting);
    let waiting_accept = h.peer_out.pop_back().unwrap();
    h.no_kernel();
    for i in 0..10u64 {
        let peer = format!("[fd00::{:x}]", 0x100 + i);
        let req = request(
            100 + i,
            &format!("{peer}:5000"),
            &format!("{peer}:45000"),
            ap,
        );
        h.peer(PeerSocket::V6Listener, &format!("{peer}:3935"), &req);
        let acc = h.peer_out.pop_back().unwrap();
        h.ack(PeerSocket::V6Listener, &format!("{peer}:3935"), &acc);
        assert_eq!(remote_infos(&mut h), 1, "peer {i}: REMOTE_INFO on its ACK");
    }
    h.ack(PeerSocket::V6Listener, "[fd00::1]:3935", &waiting_accept);
    assert_eq!(remote_infos(&mut h), 1, "the waiting exchange survived");
}

/// Threat 5 (REJECTs): one source flooding REQUESTs for a closed port takes only its own
/// share of the REJECT rate; another host still gets its fast REJECT.
#[test]
fn one_source_cannot_take_every_reject() {
    let mut h = Host::booted();
    for i in 0..1_000u64 {
        let r = request(i + 1, "10.0.0.66:5000", "10.0.0.66:5000", "10.0.0.2:9999");
        h.peer(PeerSocket::V4Listener, "10.0.0.66:3935", &r);
    }
    assert_eq!(sent(&mut h, PeerMsgType::Reject), 20);
    let r = request(1, "10.0.0.1:5000", "10.0.0.1:5000", "10.0.0.2:9999");
    h.peer(PeerSocket::V4Listener, "10.0.0.1:3935", &r);
    assert_eq!(
        sent(&mut h, PeerMsgType::Reject),
        1,
        "another host's REJECT"
    );
}

/// Threat 4: ACCEPT/REJECT forged by a third host that learned (or guessed) the handle.
#[test]
fn answers_count_only_from_the_host_asked() {
    let mut h = Host::booted();
    let seq = h.query("10.0.0.1:5000", "10.0.0.2:4000", Some(0));
    let req = h.expect_peer().msg;
    // From another IP: ignored.
    let accept = PeerMessage::accept_for(&req, addr("10.0.0.2:40123"));
    h.peer(PeerSocket::V4Client, "10.0.0.66:3935", &accept);
    let reject = PeerMessage::reject_for(&req);
    h.peer(PeerSocket::V4Client, "10.0.0.66:3935", &reject);
    h.no_kernel();
    assert_eq!(h.core.stats().peer_wrong_source, 2);
    // From the right IP but naming another IP as the mapped remote: ignored.
    let redirect = PeerMessage::accept_for(&req, addr("10.0.0.66:40123"));
    h.peer(PeerSocket::V4Client, "10.0.0.2:3935", &redirect);
    h.no_kernel();
    assert_eq!(h.core.stats().peer_forged, 1);
    // The real answer still works.
    h.peer(PeerSocket::V4Client, "10.0.0.2:3935", &accept);
    match h.expect_kernel() {
        (_, DaemonMsg::QueryMapping(r)) => {
            assert_eq!((r.seq, r.mapped_remote_addr), (seq, sa("10.0.0.2:40123")));
        }
        other => panic!("{other:?}"),
    }
    let _ = IWPM_REMOTE_QUERY_REJECT;
}

/// Threat 4: handles are a keyed stream, not a function of a counter.
#[test]
fn handles_depend_on_the_key_only() {
    let handles = |key: [u8; 32]| {
        let mut h = Host::booted_with(CoreConfig {
            handle_key: key,
            ..config()
        });
        (0..4)
            .map(|i| {
                h.query(&format!("10.0.0.1:{}", 5000 + i), "10.0.0.2:4000", Some(0));
                h.expect_peer().msg.assoc_handle
            })
            .collect::<Vec<u64>>()
    };
    assert_eq!(
        handles([3; 32]),
        handles([3; 32]),
        "deterministic under a key"
    );
    let (a, b) = (handles([3; 32]), handles([4; 32]));
    assert!(a.iter().all(|x| !b.contains(x)));
}

/// Threat 5: reflection. A replayed ACCEPT earns at most 9 ACKs and does not keep the
/// exchange alive; REQUESTs for unknown addresses earn at most `max_rejects_per_sec`.
#[test]
fn reflection_is_bounded() {
    let mut h = Host::booted_with(CoreConfig {
        max_rejects_per_sec: 10,
        ..config()
    });
    h.query("10.0.0.1:5000", "10.0.0.2:4000", Some(0));
    let req = h.expect_peer().msg;
    let accept = PeerMessage::accept_for(&req, addr("10.0.0.2:40123"));
    for _ in 0..100 {
        h.peer(PeerSocket::V4Client, "10.0.0.2:3935", &accept);
        h.advance(SEC / 20);
    }
    assert_eq!(sent(&mut h, PeerMsgType::Ack), 1 + 9);
    h.advance(SEC * 6);
    assert_eq!(
        h.core.stats().exchanges_active,
        0,
        "not refreshed by duplicates"
    );

    for i in 0..1000u64 {
        let r = request(i + 1, "10.0.0.66:5000", "10.0.0.66:41000", "10.0.0.2:9999");
        h.peer(PeerSocket::V4Listener, "10.0.0.66:3935", &r);
    }
    assert_eq!(sent(&mut h, PeerMsgType::Reject), 10);
    assert_eq!(h.core.stats().rejects_suppressed, 990);
    h.advance(SEC);
    let r = request(1, "10.0.0.66:5000", "10.0.0.66:41000", "10.0.0.2:9999");
    h.peer(PeerSocket::V4Listener, "10.0.0.66:3935", &r);
    assert_eq!(sent(&mut h, PeerMsgType::Reject), 1, "refilled");
}

/// Threat 6: a local user makes the kernel send us a HELLO or a MAPINFO replay.
#[test]
fn kernel_answers_we_did_not_ask_for_are_dropped() {
    let mut h = Host::booted();
    listener(&mut h, "10.0.0.2:4000");
    h.mapinfo_num(0);
    h.kernel_in.clear();
    // Replay window closed by MAPINFO_NUM: an identical record must not add a reference.
    h.mapinfo_records(&[("10.0.0.2:4000", "10.0.0.2:40000", Some(0))]);
    h.no_kernel();
    assert_eq!(h.refcount("10.0.0.2:4000"), Some(1));
    // A HELLO(3) now must not change the ABI.
    h.kernel_msg(KernelMsg::Hello(Hello {
        abi_version: 3,
        unknown: vec![],
    }));
    h.no_kernel();
    assert_eq!(h.core.abi(), 4);
    assert_eq!(h.core.stats().kernel_unsolicited, 2);
    // Time alone closes the window too.
    let mut late = Host::booted();
    late.advance(SEC * 10);
    late.mapinfo_records(&[("10.0.0.2:4000", "10.0.0.2:40000", Some(0))]);
    assert_eq!(late.core.mappings().count(), 0);
}

/// Threat 7: kernel input lost to a full receive queue (a REG_PID multicast lost makes the
/// kernel think no port mapper runs): we say HELLO again, once a second at most.
#[test]
fn lost_kernel_input_resends_hello() {
    let mut h = Host::booted();
    h.core.handle_kernel_overrun(h.now);
    h.core.handle_kernel_overrun(h.now);
    h.pump();
    let (env, msg) = h.expect_kernel();
    assert!(matches!(
        msg,
        DaemonMsg::Hello(Hello { abi_version: 4, .. })
    ));
    h.no_kernel();
    // The kernel's answer completes it: no MAPINFO replay (we hold every mapping already).
    h.kernel_msg(KernelMsg::Hello(Hello {
        abi_version: 4,
        unknown: vec![],
    }));
    h.kernel_done(env.seq, Some(0));
    h.no_kernel();
    assert_eq!(h.ready, 1, "Ready only once");
    assert_eq!(h.core.stats().kernel_overruns, 2);
    h.advance(SEC * 2);
    h.core.handle_kernel_overrun(h.now);
    h.pump();
    assert!(matches!(h.expect_kernel().1, DaemonMsg::Hello(_)));
}

/// Threat 8: a REQUEST must not disclose connecting (QUERY) mappings, nor answer for a
/// wildcard address.
#[test]
fn requests_see_listeners_only() {
    let mut h = Host::booted();
    h.query("10.0.0.2:5000", "10.0.0.1:4000", Some(0));
    h.peer_out.clear();
    let probe = request(1, "10.0.0.66:5000", "10.0.0.66:41000", "10.0.0.2:5000");
    h.peer(PeerSocket::V4Listener, "10.0.0.66:3935", &probe);
    assert_eq!(sent(&mut h, PeerMsgType::Reject), 1);
    listener(&mut h, "10.0.0.2:4000");
    let wild = request(2, "10.0.0.66:5000", "10.0.0.66:41000", "0.0.0.0:4000");
    h.peer(PeerSocket::V4Listener, "10.0.0.66:3935", &wild);
    assert_eq!(sent(&mut h, PeerMsgType::Reject), 1);
    h.no_kernel();
}

/// Threat 8: thousands of timers due at once are handled in bounded slices.
#[test]
fn timer_bursts_are_sliced() {
    let mut h = Host::booted();
    for i in 0..1500u32 {
        h.query(
            &format!("10.0.{}.{}:5000", 1 + i / 250, 1 + i % 250),
            "10.1.0.2:4000",
            Some(0),
        );
    }
    h.peer_out.clear();
    h.now += SEC * 2;
    h.core.handle_timeout(h.now, &mut h.ports);
    h.pump();
    assert_eq!(h.peer_out.len(), 1024, "one slice per call");
    assert!(
        h.core.poll_timeout().is_some_and(|t| t <= h.now),
        "more due at once"
    );
    h.core.handle_timeout(h.now, &mut h.ports);
    h.pump();
    assert_eq!(h.peer_out.len(), 1500, "the rest on the next call");
}

/// `peer_allow` drops everything from elsewhere before it is even decoded.
#[test]
fn peer_allow_filters_sources() {
    let mut h = Host::booted_with(CoreConfig {
        peer_allow: PeerAllow::only(vec!["10.0.0.0/24".parse().unwrap()]),
        ..config()
    });
    listener(&mut h, "10.0.0.2:4000");
    let req = request(1, "10.0.1.1:5000", "10.0.1.1:41000", "10.0.0.2:4000");
    h.peer(PeerSocket::V4Listener, "10.0.1.1:3935", &req);
    h.no_peer();
    h.no_kernel();
    assert_eq!(h.core.stats().peer_not_allowed, 1);
    let req = request(1, "10.0.0.1:5000", "10.0.0.1:41000", "10.0.0.2:4000");
    h.peer(PeerSocket::V4Listener, "10.0.0.1:3935", &req);
    assert_eq!(sent(&mut h, PeerMsgType::Accept), 1);
}

/// The delivery notice to an rdma-core active side: it ACKs every ACCEPT, the notice
/// included. That ACK still verifies (the notice byte is outside the MAC), sends no second
/// REMOTE_INFO, and gets the notice at most once more: no ping-pong.
#[test]
fn a_delivery_notice_and_its_echoed_acks_end_after_one_resend() {
    let mut h = Host::booted_with(CoreConfig {
        remote_info_budget: 0,
        ..config()
    });
    listener(&mut h, "10.0.0.2:4000");
    let from = "10.0.0.1:3935";
    let req = request(9, "10.0.0.1:5000", "10.0.0.1:45000", "10.0.0.2:4000");
    h.peer(PeerSocket::V4Listener, from, &req);
    let accept = h.expect_peer();
    h.no_kernel();
    h.ack(PeerSocket::V4Listener, from, &accept);
    assert_eq!(remote_infos(&mut h), 1, "REMOTE_INFO on the verified ACK");
    let notice = h.expect_peer();
    assert_eq!(notice.msg.msg_type, PeerMsgType::Accept);
    assert_ne!(notice.raw, accept.raw, "the notice is marked");
    h.no_peer();
    h.ack(PeerSocket::V4Listener, from, &notice);
    let again = h.expect_peer();
    assert_eq!(again.raw, notice.raw, "one resend of the notice");
    h.ack(PeerSocket::V4Listener, from, &again);
    h.no_peer();
    h.no_kernel();
    let st = h.core.stats();
    assert_eq!(st.remote_info_notices_sent, 2);
    assert_eq!(st.peer_acks_unverified, 0, "ACKs of a notice verify");
    assert_eq!(st.remote_info_on_ack, 1);
}
