//! What a hostile host on the network, or a hostile local user talking to the kernel, can
//! make the core do — and the bound. One test per threat; each fails on a core without the
//! defence (see `docs/HARDENING.md`).

mod common;

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
    let accept = h.peer_out.pop_back().unwrap().msg;
    h.peer(
        PeerSocket::V4Listener,
        "10.0.0.1:3935",
        &PeerMessage::ack_for(&accept),
    );
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
        let accept = h.peer_out.pop_back().unwrap().msg;
        assert_eq!(
            remote_infos(&mut h),
            1,
            "REMOTE_INFO before the ACCEPT, #{i}"
        );
        h.peer(
            PeerSocket::V4Listener,
            "10.0.0.1:3935",
            &PeerMessage::ack_for(&accept),
        );
        h.no_kernel();
    }
    assert_eq!(h.core.stats().remote_info_deferred, 0);
}

/// Threat 3: one source flooding REQUESTs; per-source quota, and other sources unaffected.
#[test]
fn one_source_cannot_use_more_than_its_quota() {
    let mut h = Host::booted_with(CoreConfig {
        peer_source_quota: 16,
        ..config()
    });
    listener(&mut h, "10.0.0.2:4000");
    for i in 0..1000u64 {
        let req = request(i + 1, "10.0.0.66:5000", "10.0.0.66:41000", "10.0.0.2:4000");
        h.peer(PeerSocket::V4Listener, "10.0.0.66:3935", &req);
    }
    assert_eq!(sent(&mut h, PeerMsgType::Accept), 16);
    assert_eq!(h.core.stats().peer_quota_dropped, 984);
    let other = request(1, "10.0.0.1:5000", "10.0.0.1:41234", "10.0.0.2:4000");
    h.peer(PeerSocket::V4Listener, "10.0.0.1:3935", &other);
    assert_eq!(
        sent(&mut h, PeerMsgType::Accept),
        1,
        "another host is served"
    );
    // After the lifetime the source's quota is free again.
    h.advance(SEC * 11);
    let req = request(5000, "10.0.0.66:5000", "10.0.0.66:41000", "10.0.0.2:4000");
    h.peer(PeerSocket::V4Listener, "10.0.0.66:3935", &req);
    assert_eq!(sent(&mut h, PeerMsgType::Accept), 1);
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
    h.core.handle_timeout(h.now);
    h.pump();
    assert_eq!(h.peer_out.len(), 1024, "one slice per call");
    assert!(
        h.core.poll_timeout().is_some_and(|t| t <= h.now),
        "more due at once"
    );
    h.core.handle_timeout(h.now);
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
