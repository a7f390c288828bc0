//! Reachability probes on a virtual clock: a REQUEST for port 0 that another core answers
//! with a REJECT and nothing for its kernel, repeated until the deadline when nobody
//! answers.

use iwpm_testkit::core_host as common;

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use iwpm_core::{Action, CoreConfig, Host, PeerSocket, ProbeOutcome, ProbeRequest, ProbeResult};
use iwpm_proto::peer::{PeerMessage, PeerMsgType};

/// A started core in its host (no port is ever reserved: probes map nothing), output
/// drained.
fn probe(target: IpAddr, source: IpAddr, wait: Duration) -> ProbeRequest {
    ProbeRequest {
        target,
        source,
        wait,
    }
}

fn core(now: Instant) -> Host<common::Ports> {
    let config = CoreConfig {
        netlink_pid: 4242,
        ..CoreConfig::default()
    };
    let mut c = Host::new(config, common::Ports::default(), None, now);
    c.start(now);
    while c.poll_action().is_some() {}
    c
}

/// A peer datagram the core sent: socket, destination, bytes.
type PeerSend = (PeerSocket, SocketAddr, Vec<u8>);

fn peer_sends(c: &mut Host<common::Ports>) -> Vec<PeerSend> {
    drain(c).0
}

/// The peer datagrams and the probe result among the core's actions.
fn drain(c: &mut Host<common::Ports>) -> (Vec<PeerSend>, Option<ProbeResult>) {
    let mut out = Vec::new();
    let mut done = None;
    while let Some(a) = c.poll_action() {
        match a {
            Action::ToPeer { via, to, datagram } => out.push((via, to, datagram)),
            Action::ProbeDone(r) => assert!(done.replace(r).is_none(), "two results"),
            other => panic!("unexpected action {other:?}"),
        }
    }
    (out, done)
}

#[test]
fn probe_gets_a_reject_and_leaves_nothing_on_the_peer() {
    let t0 = Instant::now();
    let a_ip: IpAddr = "127.0.0.1".parse().unwrap();
    let b_ip: IpAddr = "127.0.0.2".parse().unwrap();
    let mut a = core(t0);
    let mut b = core(t0);
    let id = a
        .start_probe(t0, probe(b_ip, a_ip, Duration::from_millis(1500)))
        .unwrap();
    let sent = peer_sends(&mut a);
    assert_eq!(sent.len(), 1);
    let (via, to, req) = &sent[0];
    assert_eq!(*to, SocketAddr::new(b_ip, 3935));
    let msg = PeerMessage::decode(req).unwrap();
    assert_eq!(msg.msg_type, PeerMsgType::Request);
    assert_eq!((msg.ap_ip, msg.ap_port), (b_ip, 0));

    let from = SocketAddr::new(a_ip, 40000);
    b.handle_peer_datagram(t0, PeerSocket::V4Listener, from, req);
    // Only a REJECT: no REMOTE_INFO (no ToKernel), no exchange kept.
    let answers = peer_sends(&mut b);
    assert_eq!(answers.len(), 1, "{answers:?}");
    let reject = PeerMessage::decode(&answers[0].2).unwrap();
    assert_eq!(reject.msg_type, PeerMsgType::Reject);
    assert!(b.core().snapshot_exchanges(t0).is_empty());
    assert_eq!(b.core().stats().rejects_sent, 1);

    let t1 = t0 + Duration::from_millis(3);
    a.handle_peer_datagram(t1, *via, SocketAddr::new(b_ip, 3935), &answers[0].2);
    let r = drain(&mut a).1.expect("no probe result");
    assert_eq!(r.id, id);
    assert_eq!(r.outcome, ProbeOutcome::Rejected);
    assert_eq!(r.elapsed, Duration::from_millis(3));
    assert_eq!(r.requests, 1);
    // The REJECT was the probe's: not an unmatched peer message.
    assert_eq!(a.core().stats().peer_unmatched, 0);
    assert!(a.core().check_invariants().is_ok());
}

#[test]
fn probe_without_answer_repeats_then_gives_up_at_the_deadline() {
    let t0 = Instant::now();
    let mut a = core(t0);
    let target: IpAddr = "192.0.2.9".parse().unwrap();
    a.start_probe(
        t0,
        probe(
            target,
            "192.0.2.1".parse().unwrap(),
            Duration::from_millis(1500),
        ),
    )
    .unwrap();
    let mut requests = peer_sends(&mut a).len();
    let (result, now) = loop {
        let now = a.poll_timeout().expect("probe has no timer");
        assert!(now <= t0 + Duration::from_millis(1500));
        a.handle_timeout(now);
        let (sent, done) = drain(&mut a);
        requests += sent.len();
        if let Some(r) = done {
            break (r, now);
        }
    };
    assert_eq!(result.outcome, ProbeOutcome::NoAnswer);
    assert_eq!(now, t0 + Duration::from_millis(1500));
    assert_eq!(result.requests as usize, requests);
    assert_eq!(requests, 5, "one REQUEST every 300 ms");
    // A REJECT from another host does not end a probe.
    let id2 = a
        .start_probe(
            now,
            probe(target, "192.0.2.1".parse().unwrap(), Duration::from_secs(1)),
        )
        .unwrap();
    let sent = peer_sends(&mut a);
    let req = PeerMessage::decode(&sent[0].2).unwrap();
    let reject = PeerMessage::reject_for(&req).encode();
    a.handle_peer_datagram(
        now,
        PeerSocket::V4Client,
        "192.0.2.77:3935".parse().unwrap(),
        &reject,
    );
    assert!(drain(&mut a).1.is_none());
    a.handle_peer_datagram(
        now,
        PeerSocket::V4Client,
        SocketAddr::new(target, 3935),
        &reject,
    );
    assert_eq!(
        drain(&mut a).1.map(|r| (r.id, r.outcome)),
        Some((id2, ProbeOutcome::Rejected))
    );
}
