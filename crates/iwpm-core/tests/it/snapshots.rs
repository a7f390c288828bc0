//! The read-only snapshots behind the control socket, on a virtual clock: mappings with
//! their ages, exchanges in flight with their retransmissions, and the per-peer tallies and
//! recent outcomes (accepted, rejected, timed out).

use iwpm_testkit::core_host as common;

use std::time::Duration;

use common::*;
use iwpm_core::{ExchangeOutcome, ExchangeSide, MappingRole, PeerSocket};
use iwpm_proto::peer::PeerMessage;

const SEC: Duration = Duration::from_secs(1);

#[test]
fn mappings_and_exchanges_in_flight() {
    let mut h = CoreHarness::booted();
    let t0 = h.now;
    h.query("10.0.0.1:5000", "10.0.0.2:4000", Some(0));
    let req = h.expect_peer();
    h.advance(SEC * 3 + Duration::from_millis(500));
    while h.peer_out.pop_front().is_some() {}
    let maps = h.core().snapshot_mappings(h.now);
    assert_eq!(maps.len(), 1);
    assert_eq!(maps[0].role, MappingRole::Connector);
    assert_eq!(maps[0].refcount, 1);
    assert_eq!(maps[0].age, h.now - t0);
    assert_eq!(maps[0].local.port, 5000);
    let ex = h.core().snapshot_exchanges(h.now);
    assert_eq!(ex.len(), 1);
    assert_eq!(ex[0].side, ExchangeSide::Requesting);
    assert_eq!(ex[0].peer, req.to);
    assert_eq!(ex[0].retransmissions, 3);
    assert_eq!(ex[0].age, Duration::from_millis(3500));
    assert_eq!(ex[0].expires_in, Duration::from_millis(6500));
    assert_eq!(h.core().handshake_state(), "done");
    assert_eq!(h.core().snapshot_clients().len(), 1);
}

#[test]
fn peer_tallies_count_accepts_rejects_and_timeouts() {
    let mut h = CoreHarness::booted();
    let peer = addr("10.0.0.2:3935");
    // Rejected at once.
    h.query("10.0.0.1:5000", "10.0.0.2:4000", Some(0));
    let req = h.expect_peer();
    h.peer(
        PeerSocket::V4Client,
        "10.0.0.2:3935",
        &PeerMessage::reject_for(&req.msg),
    );
    h.expect_kernel();
    // Timed out after nine retransmissions.
    h.query("10.0.0.1:5001", "10.0.0.2:4001", Some(0));
    h.expect_peer();
    h.advance(SEC * 11);
    while h.peer_out.pop_front().is_some() {}
    let peers = h.core().snapshot_peers(h.now);
    assert_eq!(peers.len(), 1);
    assert_eq!(peers[0].ip, peer.ip());
    let t = peers[0].tally;
    assert_eq!(
        (
            t.requests,
            t.retransmissions,
            t.accepts,
            t.rejects,
            t.timeouts
        ),
        (2, 9, 0, 1, 1)
    );
    let recent = h.core().recent_exchanges();
    let outcomes: Vec<_> = recent
        .iter()
        .map(|r| (r.outcome, r.retransmissions))
        .collect();
    assert_eq!(
        outcomes,
        [
            (ExchangeOutcome::Rejected, 0),
            (ExchangeOutcome::TimedOut, 9)
        ]
    );
    assert_eq!(recent[1].took, SEC * 10);
    assert!(h.core().snapshot_exchanges(h.now).is_empty());
}
