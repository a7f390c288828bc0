//! Peer protocol: active and passive state machines, retransmission and expiry on a virtual
//! clock, duplicates and late messages, caps.

use iwpm_testkit::core_host as common;

use std::time::Duration;

use common::*;
use iwpm_core::{CoreConfig, PeerSocket};
use iwpm_proto::consts::err::*;
use iwpm_proto::consts::{IWPM_FLAGS_NO_PORT_MAP, RDMA_NL_IWCM};
use iwpm_proto::netlink::{DaemonMsg, QueryMappingReply};
use iwpm_proto::peer::{PeerMessage, PeerMsgType, PEER_REQUEST_LEN, PEER_SHORT_LEN};

const SEC: Duration = Duration::from_secs(1);

fn expect_query_reply(h: &mut CoreHarness) -> QueryMappingReply {
    match h.expect_kernel() {
        (env, DaemonMsg::QueryMapping(r)) => {
            assert_eq!(env.client, RDMA_NL_IWCM);
            r
        }
        other => panic!("expected QUERY reply, got {other:?}"),
    }
}

fn expect_remote_info(h: &mut CoreHarness) -> QueryMappingReply {
    match h.expect_kernel() {
        (env, DaemonMsg::RemoteInfo(r)) => {
            assert_eq!(env.client, RDMA_NL_IWCM);
            r
        }
        other => panic!("expected REMOTE_INFO, got {other:?}"),
    }
}

/// The peer daemon at 10.0.0.2 (the one [`query`] asks) answers with `msg`.
fn answer(h: &mut CoreHarness, msg: &PeerMessage) {
    h.peer(PeerSocket::V4Client, "10.0.0.2:3935", msg);
}

/// A QUERY for 10.0.0.1:5000 → 10.0.0.2:4000; returns (kernel seq, REQUEST sent).
fn query(h: &mut CoreHarness) -> (u32, Sent) {
    let seq = h.query("10.0.0.1:5000", "10.0.0.2:4000", Some(0));
    h.no_kernel();
    (seq, h.expect_peer())
}

/// Our ACK is the ACCEPT it answers with the type changed, as rdma-core's: version bits,
/// pmtime and all 24 unused bytes of the IPv4 address fields come back (the peer's echo
/// cookie). Before, the 24 bytes were zeroed, leaving two of our daemons 10 echoed bits.
#[test]
fn our_ack_echoes_every_unused_byte_of_the_accept() {
    let mut h = CoreHarness::booted();
    let (_, req) = query(&mut h);
    let mut accept = PeerMessage::accept_for(&req.msg, addr("10.0.0.2:40123"));
    accept.version = 2;
    accept.pmtime = 0xa5;
    let mut marked = [0u8; iwpm_proto::peer::IPV4_ECHO_LEN];
    for (i, b) in marked.iter_mut().enumerate() {
        *b = 0xc1 + i as u8;
    }
    let datagram = accept.encode_with_echo(&marked);
    h.peer_raw(PeerSocket::V4Client, "10.0.0.2:3935", &datagram);
    expect_query_reply(&mut h);
    let ack = h.expect_peer();
    assert_eq!(ack.msg.msg_type, PeerMsgType::Ack);
    let mut want = datagram.clone();
    want[0] = (want[0] & !0x30) | (PeerMsgType::Ack.code() << 4);
    assert_eq!(ack.raw, want);
    assert_eq!(ack.raw[0], 0xa4);
    assert_eq!(iwpm_proto::peer::ipv4_echo(&ack.raw), marked);
}

#[test]
fn active_request_accept_ack() {
    let mut h = CoreHarness::booted();
    let (seq, req) = query(&mut h);
    assert_eq!(req.via, PeerSocket::V4Client);
    assert_eq!(req.to, addr("10.0.0.2:3935"));
    assert_eq!(req.raw.len(), PEER_REQUEST_LEN);
    let m = req.msg;
    assert_eq!(m.msg_type, PeerMsgType::Request);
    assert_eq!(m.cp(), addr("10.0.0.1:5000"));
    assert_eq!(m.ap(), addr("10.0.0.2:4000"));
    assert_eq!(m.mapped_cp(), Some(addr("10.0.0.1:40000")));
    assert_ne!(m.assoc_handle, 0);
    assert_eq!(h.refcount("10.0.0.1:5000"), Some(1));

    let accept = PeerMessage::accept_for(&m, addr("10.0.0.2:40123"));
    answer(&mut h, &accept);
    let r = expect_query_reply(&mut h);
    assert_eq!(r.seq, seq);
    assert_eq!(r.local_addr, sa("10.0.0.1:5000"));
    assert_eq!(r.remote_addr, sa("10.0.0.2:4000"));
    assert_eq!(r.mapped_local_addr, sa("10.0.0.1:40000"));
    assert_eq!(r.mapped_remote_addr, sa("10.0.0.2:40123"));
    assert_eq!(r.err, 0);
    let ack = h.expect_peer();
    assert_eq!(
        (ack.via, ack.to),
        (PeerSocket::V4Client, addr("10.0.0.2:3935"))
    );
    assert_eq!(ack.msg, PeerMessage::ack_for(&accept));
    assert_eq!(ack.raw.len(), PEER_SHORT_LEN);

    // A duplicate ACCEPT (our ACK was lost): ACK again, no second kernel reply.
    answer(&mut h, &accept);
    h.no_kernel();
    assert_eq!(h.expect_peer().msg.msg_type, PeerMsgType::Ack);
    // No REQUEST retransmission after the answer; the record goes away after its lifetime.
    h.advance(SEC * 10);
    h.no_peer();
    assert_eq!(h.core().stats().exchanges_active, 0);
    assert_eq!(h.core().stats().exchanges_expired, 0);
    // A very late ACCEPT matches nothing and is dropped silently.
    answer(&mut h, &accept);
    h.no_kernel();
    h.no_peer();
    assert_eq!(h.core().stats().peer_unmatched, 1);
    assert_eq!(
        h.refcount("10.0.0.1:5000"),
        Some(1),
        "mapping stays for REMOVE"
    );
}

#[test]
fn request_is_retransmitted_9_times_then_expires_silently() {
    let mut h = CoreHarness::booted();
    let (_, req) = query(&mut h);
    let t0 = h.now;
    let mut times = vec![];
    for _ in 0..12 {
        h.advance(SEC);
        while let Some(s) = h.peer_out.pop_front() {
            assert_eq!(s.raw, req.raw, "same bytes");
            assert_eq!((s.via, s.to), (req.via, req.to));
            times.push((h.now - t0).as_secs());
        }
    }
    assert_eq!(times, (1..=9).collect::<Vec<_>>());
    assert_eq!(h.core().stats().retransmissions, 9);
    assert_eq!(h.core().stats().peer_out[0], 10);
    assert_eq!(h.core().stats().exchanges_expired, 1);
    assert_eq!(h.core().stats().exchanges_active, 0);
    assert_eq!(h.host.poll_timeout(), None);
    h.no_kernel();
}

#[test]
fn reject_answers_the_query_with_error_16() {
    let mut h = CoreHarness::booted();
    let (seq, req) = query(&mut h);
    let reject = PeerMessage::reject_for(&req.msg);
    answer(&mut h, &reject);
    let r = expect_query_reply(&mut h);
    assert_eq!((r.seq, r.err), (seq, IWPM_REMOTE_QUERY_REJECT));
    assert_eq!(r.mapped_local_addr, sa("10.0.0.1:40000"));
    assert_eq!(r.mapped_remote_addr, sa("10.0.0.2:4000"), "unmapped remote");
    h.no_peer();
    h.advance(SEC * 3);
    h.no_peer();
    // Duplicate REJECT and REJECT for nothing: counted, no answer.
    answer(&mut h, &reject);
    h.no_kernel();
    assert_eq!(h.core().stats().rejects_received, 1);
    assert_eq!(h.core().stats().peer_unmatched, 1);
    assert_eq!(h.refcount("10.0.0.1:5000"), Some(1));
}

#[test]
fn reject_after_accept_is_ignored() {
    let mut h = CoreHarness::booted();
    let (_, req) = query(&mut h);
    let accept = PeerMessage::accept_for(&req.msg, addr("10.0.0.2:40123"));
    answer(&mut h, &accept);
    expect_query_reply(&mut h);
    h.peer_out.clear();
    answer(&mut h, &PeerMessage::reject_for(&req.msg));
    h.no_kernel();
    h.no_peer();
}

#[test]
fn answers_after_the_kernel_gave_up_are_not_forwarded() {
    let mut h = CoreHarness::booted();
    let (_, req) = query(&mut h);
    h.advance(Duration::from_millis(9_500));
    h.peer_out.clear();
    let accept = PeerMessage::accept_for(&req.msg, addr("10.0.0.2:40123"));
    answer(&mut h, &accept);
    h.no_kernel();
    h.no_peer();
    assert_eq!(h.core().stats().replies_dropped_late, 1);
    assert_eq!(h.core().stats().exchanges_active, 0);

    let seq = h.query("10.0.0.1:5001", "10.0.0.2:4000", Some(0));
    let _ = seq;
    let req = h.expect_peer();
    h.advance(Duration::from_millis(9_600));
    h.peer_out.clear();
    answer(&mut h, &PeerMessage::reject_for(&req.msg));
    h.no_kernel();
    assert_eq!(h.core().stats().replies_dropped_late, 2);
}

fn listener(h: &mut CoreHarness, local: &str) -> iwpm_proto::sockaddr::SockAddrStorage {
    let s = h.add(local, Some(0));
    h.expect_add_reply(s)
}

fn request_to(ap: &str, handle: u64) -> PeerMessage {
    PeerMessage::request(
        handle,
        addr("10.0.0.1:5000"),
        addr("10.0.0.1:41234"),
        addr(ap),
    )
}

#[test]
fn passive_request_accept_remote_info_ack() {
    let mut h = CoreHarness::booted();
    let mapped = listener(&mut h, "10.0.0.2:4000");
    assert_eq!(mapped, sa("10.0.0.2:40000"));
    let req = request_to("10.0.0.2:4000", 0xfeed);
    h.order.clear();
    h.peer(PeerSocket::V4Listener, "10.0.0.1:33333", &req);
    // REMOTE_INFO must reach the kernel before the ACCEPT lets the peer connect.
    assert_eq!(h.order, "KP");
    let acc = h.expect_peer();
    assert_eq!(
        (acc.via, acc.to),
        (PeerSocket::V4Listener, addr("10.0.0.1:33333"))
    );
    assert_eq!(
        acc.msg,
        PeerMessage::accept_for(&req, addr("10.0.0.2:40000"))
    );
    assert_eq!(acc.raw.len(), PEER_SHORT_LEN);
    let ri = expect_remote_info(&mut h);
    assert_eq!(ri.seq, 0);
    assert_eq!(ri.local_addr, sa("10.0.0.2:4000"));
    assert_eq!(ri.remote_addr, sa("10.0.0.1:5000"));
    assert_eq!(ri.mapped_local_addr, sa("10.0.0.2:40000"));
    assert_eq!(ri.mapped_remote_addr, sa("10.0.0.1:41234"));
    assert_eq!(ri.err, 0);

    // A REQUEST retransmission arriving at once: nothing new (at most one ACCEPT per half
    // interval, never a second REMOTE_INFO).
    h.peer(PeerSocket::V4Listener, "10.0.0.1:33333", &req);
    h.no_peer();
    h.no_kernel();
    // We never retransmit the ACCEPT on our own...
    h.advance(SEC * 2);
    h.no_peer();
    // ...but the peer's next REQUEST retransmission gets it again.
    h.peer(PeerSocket::V4Listener, "10.0.0.1:33333", &req);
    assert_eq!(h.expect_peer().raw, acc.raw);
    h.no_kernel();
    h.ack(PeerSocket::V4Listener, "10.0.0.1:33333", &acc);
    h.no_peer();
    h.no_kernel();
    h.advance(SEC / 2);
    h.no_peer();
    // A late duplicate REQUEST soon after the ACK: still nothing (no second REMOTE_INFO).
    h.peer(PeerSocket::V4Listener, "10.0.0.1:33333", &req);
    h.no_peer();
    h.no_kernel();
    assert_eq!(h.core().stats().peer_duplicates, 3);
    // A full retransmission interval after the ACK the same key is a new association (C
    // reuses its handles as soon as an exchange is done): answered, with its REMOTE_INFO.
    h.advance(SEC * 3);
    h.peer(PeerSocket::V4Listener, "10.0.0.1:33333", &req);
    assert_eq!(h.expect_peer().msg.msg_type, PeerMsgType::Accept);
    expect_remote_info(&mut h);
    assert_eq!(h.core().stats().peer_reused_handles, 1);
    // Unconfirmed, it expires with its lifetime; then the same handle is new again.
    h.advance(SEC * 11);
    assert_eq!(h.core().stats().exchanges_active, 0);
    h.peer(PeerSocket::V4Listener, "10.0.0.1:33333", &req);
    assert_eq!(h.expect_peer().msg.msg_type, PeerMsgType::Accept);
    expect_remote_info(&mut h);
}

#[test]
fn accept_is_only_resent_for_requests_at_most_9_times() {
    let mut h = CoreHarness::booted();
    listener(&mut h, "10.0.0.2:4000");
    let req = request_to("10.0.0.2:4000", 1);
    h.peer(PeerSocket::V4Listener, "10.0.0.1:33333", &req);
    h.expect_peer();
    h.kernel_in.clear();
    // No ACK and no more REQUESTs: silence, then expiry.
    h.advance(SEC * 20);
    assert_eq!(h.peer_out.len(), 0, "no ACCEPT retransmission of our own");
    assert_eq!(h.core().stats().exchanges_expired, 1);
    // A hostile peer replaying one REQUEST 100 times a second for 9 s (the exchange lives 10).
    h.peer(PeerSocket::V4Listener, "10.0.0.1:33333", &req);
    for _ in 0..900 {
        h.advance(SEC / 100);
        h.peer(PeerSocket::V4Listener, "10.0.0.1:33333", &req);
    }
    assert_eq!(h.peer_out.len(), 1 + 9, "first ACCEPT + 9 resends, no more");
    assert_eq!(h.kernel_in.len(), 1, "one REMOTE_INFO");
}

#[test]
fn request_for_unmapped_address_is_rejected_at_once() {
    let mut h = CoreHarness::booted();
    listener(&mut h, "10.0.0.2:4000");
    let req = request_to("10.0.0.2:4001", 9);
    h.peer(PeerSocket::V4Listener, "10.0.0.1:33333", &req);
    let rej = h.expect_peer();
    assert_eq!(
        (rej.via, rej.to),
        (PeerSocket::V4Listener, addr("10.0.0.1:33333"))
    );
    assert_eq!(rej.msg, PeerMessage::reject_for(&req));
    h.no_kernel();
    assert_eq!(h.core().stats().rejects_sent, 1);
    assert_eq!(h.core().stats().exchanges_active, 0);
    // Another specific IP on the mapped port is not a match either.
    h.peer(
        PeerSocket::V4Listener,
        "10.0.0.1:33333",
        &request_to("10.0.0.3:4000", 9),
    );
    assert_eq!(h.expect_peer().msg.msg_type, PeerMsgType::Reject);
}

#[test]
fn wildcard_listener_answers_with_the_requested_ip() {
    let mut h = CoreHarness::booted();
    let mapped = listener(&mut h, "0.0.0.0:4000");
    let port = mapped.port();
    let req = request_to("10.0.0.2:4000", 5);
    h.peer(PeerSocket::V4Listener, "10.0.0.1:33333", &req);
    let acc = h.expect_peer();
    assert_eq!(acc.msg.ap(), addr(&format!("10.0.0.2:{port}")));
    let ri = expect_remote_info(&mut h);
    assert_eq!(ri.local_addr, sa("0.0.0.0:4000"));
    assert_eq!(ri.mapped_local_addr, mapped);
    // The ACK echoes the answered ap and stops the retransmission.
    h.ack(PeerSocket::V4Listener, "10.0.0.1:33333", &acc);
    h.advance(SEC * 3);
    h.no_peer();
}

#[test]
fn same_handle_from_two_peers_is_two_exchanges() {
    let mut h = CoreHarness::booted();
    listener(&mut h, "0.0.0.0:4000");
    let req = request_to("10.0.0.2:4000", 42);
    h.peer(PeerSocket::V4Listener, "10.0.0.1:33333", &req);
    h.peer(PeerSocket::V4Listener, "10.0.0.9:33333", &req);
    assert_eq!(h.peer_out.len(), 2);
    assert_eq!(h.kernel_in.len(), 2);
    assert_eq!(h.core().stats().exchanges_active, 2);
}

#[test]
fn legacy_48_byte_request_is_accepted() {
    let mut h = CoreHarness::booted();
    listener(&mut h, "10.0.0.2:4000");
    let req = request_to("10.0.0.2:4000", 3);
    let short = &req.encode()[..PEER_SHORT_LEN];
    h.host
        .handle_peer_datagram(h.now, PeerSocket::V4Listener, addr("10.0.0.1:33333"), short);
    h.pump();
    assert_eq!(h.expect_peer().msg.msg_type, PeerMsgType::Accept);
    let ri = expect_remote_info(&mut h);
    assert_eq!(ri.mapped_remote_addr, sa("10.0.0.1:41234"));
}

#[test]
fn malformed_peer_datagrams_are_dropped_and_counted() {
    let mut h = CoreHarness::booted();
    listener(&mut h, "10.0.0.2:4000");
    let good = request_to("10.0.0.2:4000", 3).encode();
    let mut bad_nibble = good.clone();
    bad_nibble[0] = 0x05;
    let mut long = good.clone();
    long.push(0);
    for d in [&good[..47], &bad_nibble[..], &long[..], &[][..]] {
        h.host
            .handle_peer_datagram(h.now, PeerSocket::V4Listener, addr("10.0.0.1:1"), d);
        h.pump();
    }
    h.no_peer();
    h.no_kernel();
    assert_eq!(h.core().stats().peer_malformed, 4);
}

#[test]
fn remote_traffic_never_refuses_local_connects() {
    let mut h = CoreHarness::booted_with(CoreConfig {
        max_exchanges: 2,
        max_peer_exchanges: 2,
        ..config()
    });
    listener(&mut h, "0.0.0.0:4000");
    for handle in 1..=3 {
        h.peer(
            PeerSocket::V4Listener,
            "10.0.0.1:33333",
            &request_to("10.0.0.2:4000", handle),
        );
    }
    assert_eq!(h.peer_out.len(), 3, "every REQUEST answered");
    assert_eq!(
        h.core().stats().exchanges_evicted,
        1,
        "the oldest made room"
    );
    assert_eq!(h.core().stats().peer_exchanges_active, 2);
    h.peer_out.clear();
    h.kernel_in.clear();
    // The peer flood does not count against local connects...
    h.query("10.0.0.1:5000", "10.0.0.2:4000", Some(0));
    assert_eq!(h.expect_peer().msg.msg_type, PeerMsgType::Request);
    h.query("10.0.0.1:5001", "10.0.0.2:4000", Some(0));
    assert_eq!(h.expect_peer().msg.msg_type, PeerMsgType::Request);
    // ...which have their own cap.
    let s = h.query("10.0.0.1:5002", "10.0.0.2:4000", Some(0));
    h.expect_handle_err(s, IWPM_CREATE_MAPPING_ERR);
    assert_eq!(h.core().stats().exchanges_refused, 1);
    assert_eq!(h.core().stats().exchanges_active, 4);
}

#[test]
fn removing_the_mapping_stops_its_exchanges() {
    let mut h = CoreHarness::booted();
    query(&mut h);
    h.remove("10.0.0.1:5000");
    assert!(h.ports().held.is_empty());
    assert_eq!(h.core().stats().exchanges_active, 0);
    h.advance(SEC * 5);
    h.no_peer();
}

#[test]
fn ipv6_query_uses_the_v6_client_socket() {
    let mut h = CoreHarness::booted();
    let seq = h.query("[2001:db8::1]:5000", "[2001:db8::2]:4000", Some(0));
    let req = h.expect_peer();
    assert_eq!(req.via, PeerSocket::V6Client);
    assert_eq!(req.to, addr("[2001:db8::2]:3935"));
    let accept = PeerMessage::accept_for(&req.msg, addr("[2001:db8::2]:40123"));
    h.peer(PeerSocket::V6Client, "[2001:db8::2]:3935", &accept);
    let r = expect_query_reply(&mut h);
    assert_eq!(r.seq, seq);
    assert_eq!(r.mapped_remote_addr, sa("[2001:db8::2]:40123"));
    assert_eq!(h.expect_peer().via, PeerSocket::V6Client);
}

#[test]
fn no_port_map_query_advertises_the_real_port() {
    let mut h = CoreHarness::booted();
    h.query(
        "10.0.0.1:5000",
        "10.0.0.2:4000",
        Some(IWPM_FLAGS_NO_PORT_MAP),
    );
    let req = h.expect_peer();
    assert_eq!(req.msg.mapped_cp(), Some(addr("10.0.0.1:5000")));
    assert!(h.ports().held.is_empty());
}

#[test]
fn active_port_reuse_shares_the_mapping_with_distinct_handles() {
    let mut h = CoreHarness::booted();
    let (_, r1) = query(&mut h);
    let s2 = h.query("10.0.0.1:5000", "10.0.0.3:4000", Some(0));
    let r2 = h.expect_peer();
    assert_ne!(r1.msg.assoc_handle, r2.msg.assoc_handle);
    assert_eq!(r1.msg.mapped_cp(), r2.msg.mapped_cp());
    assert_eq!(h.refcount("10.0.0.1:5000"), Some(2));
    assert_eq!(h.ports().held.len(), 1);
    // The second answer goes to the second kernel request.
    let accept = PeerMessage::accept_for(&r2.msg, addr("10.0.0.3:40000"));
    h.peer(PeerSocket::V4Client, "10.0.0.3:3935", &accept);
    assert_eq!(expect_query_reply(&mut h).seq, s2);
}

#[test]
fn query_resolving_to_a_wildcard_mapping_fails() {
    let mut h = CoreHarness::booted();
    listener(&mut h, "0.0.0.0:5000");
    let s = h.query("10.0.0.1:5000", "10.0.0.2:4000", Some(0));
    h.expect_handle_err(s, IWPM_CREATE_MAPPING_ERR);
    assert_eq!(h.refcount("0.0.0.0:5000"), Some(1));
    h.no_peer();
}

#[test]
fn peer_input_right_after_an_add_sees_the_mapping() {
    let mut h = CoreHarness::booted();
    listener(&mut h, "10.0.0.2:4000");
    h.add("10.0.0.2:4001", Some(0));
    h.expect_add_reply(h.kernel_seq);
    h.peer(
        PeerSocket::V4Listener,
        "10.0.0.1:33333",
        &request_to("10.0.0.2:4001", 1),
    );
    let acc = h.expect_peer();
    assert_eq!(
        acc.msg.msg_type,
        PeerMsgType::Accept,
        "REQUEST saw the new mapping"
    );
}

#[test]
fn handles_differ_between_cores_with_different_keys() {
    let mut a = CoreHarness::booted_with(CoreConfig {
        handle_key: [1; 32],
        ..config()
    });
    let mut b = CoreHarness::booted_with(CoreConfig {
        handle_key: [2; 32],
        ..config()
    });
    let (_, ra) = query(&mut a);
    let (_, rb) = query(&mut b);
    assert_ne!(ra.msg.assoc_handle, rb.msg.assoc_handle);
}

/// The C daemon's handle is a heap address, reused as soon as its record is freed after the
/// ACK. A REQUEST with a reused handle but a new connecting endpoint is a new association
/// (seen on the real kernel: C client, our server), not a duplicate to stay silent about.
#[test]
fn reused_handle_with_a_new_connecting_endpoint_is_a_new_association() {
    let mut h = CoreHarness::booted();
    listener(&mut h, "10.0.0.2:4000");
    let first = request_to("10.0.0.2:4000", 0x5633_7305_d1a0);
    h.peer(PeerSocket::V4Listener, "10.0.0.1:47222", &first);
    let acc = h.expect_peer();
    expect_remote_info(&mut h);
    h.ack(PeerSocket::V4Listener, "10.0.0.1:47222", &acc);
    h.advance(SEC / 10);
    // Same handle, same source socket, another connecting port (port mapped, so a
    // REMOTE_INFO is due).
    let second = PeerMessage::request(
        0x5633_7305_d1a0,
        addr("10.0.0.1:5001"),
        addr("10.0.0.1:41001"),
        addr("10.0.0.2:4000"),
    );
    h.order.clear();
    h.peer(PeerSocket::V4Listener, "10.0.0.1:47222", &second);
    assert_eq!(
        h.order, "KP",
        "a new association gets REMOTE_INFO then ACCEPT at once"
    );
    let ri = expect_remote_info(&mut h);
    assert_eq!(ri.remote_addr, sa("10.0.0.1:5001"));
    assert_eq!(h.expect_peer().msg.cp(), addr("10.0.0.1:5001"));
    // A retransmission of that second REQUEST is still a duplicate.
    h.peer(PeerSocket::V4Listener, "10.0.0.1:47222", &second);
    h.no_kernel();
}
