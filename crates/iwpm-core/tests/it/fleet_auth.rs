//! Fleet keys (issue: a fleet that cannot be spoofed): what a sealed exchange between our
//! daemons gives, and what an on-path host that strips, replays or forges it gets (nothing).
//! Each test names the finding on 7d162f0 it answers where there was one.

use iwpm_testkit::core_host as common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use iwpm_core::{AuthFailure, CoreConfig, PeerAuth, PeerSocket};
use iwpm_proto::cidr::Cidr;
use iwpm_proto::fleet_key::{FleetKey, FleetKeys};
use iwpm_proto::netlink::DaemonMsg;
use iwpm_proto::peer::auth::{auth_block, seal, unseal, verify};
use iwpm_proto::peer::{PeerMessage, PeerMsgType, PEER_AUTH_LEN, PEER_REQUEST_LEN};

/// The wall clock every harness starts at (2025-12-06, as µs would count it).
const WALL: Duration = Duration::from_secs(1_765_000_000);

fn key(id: u32, accept_only: bool) -> FleetKey {
    FleetKey::new(id, vec![0x30 + id as u8; 32], accept_only).unwrap()
}

fn keys(list: &[(u32, bool)]) -> FleetKeys {
    FleetKeys::new(list.iter().map(|&(id, a)| key(id, a)).collect()).unwrap()
}

/// A booted core holding `set`, its wall clock at [`WALL`], started two minutes before.
fn keyed(config: CoreConfig, set: Option<FleetKeys>) -> CoreHarness {
    let mut h = CoreHarness::booted_with(config);
    // Started two minutes before WALL (nothing sealed before its start is believed), and
    // its clock now at WALL.
    h.host
        .handle_wall_clock(h.now, WALL - Duration::from_secs(120));
    h.host.handle_wall_clock(h.now, WALL);
    h.host.set_fleet_keys(h.now, set);
    h
}

fn listener(h: &mut CoreHarness, local: &str) {
    let s = h.add(local, Some(0));
    h.expect_add_reply(s);
}

fn remote_infos(h: &mut CoreHarness) -> usize {
    h.take_remote_infos()
}

/// A port-mapped peer's REQUEST to `ap`, sealed under `k` at the wall time `stamp`.
fn sealed_request(handle: u64, cp_ip: &str, ap: &str, k: &FleetKey, stamp: Duration) -> Vec<u8> {
    let ip: std::net::IpAddr = cp_ip.parse().unwrap();
    let (cp, mapped) = (SocketAddr::new(ip, 5000), SocketAddr::new(ip, 41000));
    let req = PeerMessage::request(handle, cp, mapped, addr(ap)).encode();
    seal(&req, k, stamp.as_micros() as u64).unwrap()
}

fn v4(h: &mut CoreHarness, from: &str, datagram: &[u8]) {
    h.peer_raw(PeerSocket::V4Listener, from, datagram);
}

#[test]
fn a_sealed_request_gets_its_remote_info_at_once_and_a_sealed_accept() {
    // budget 0: an unauthenticated port-mapped REQUEST would get its REMOTE_INFO only on
    // the verified ACK; a fleet member's is believed at once.
    let mut h = keyed(
        CoreConfig {
            remote_info_budget: 0,
            ..config()
        },
        Some(keys(&[(1, false)])),
    );
    listener(&mut h, "10.0.0.2:4000");
    let req = sealed_request(7, "10.0.0.1", "10.0.0.2:4000", &key(1, false), WALL);
    v4(&mut h, "10.0.0.1:3935", &req);
    assert_eq!(remote_infos(&mut h), 1);
    let accept = h.expect_peer();
    assert_eq!(accept.msg.msg_type, PeerMsgType::Accept);
    assert_eq!(accept.raw.len(), PEER_AUTH_LEN, "sealed like the REQUEST");
    assert!(verify(&accept.raw, &key(1, false)));
    assert_eq!(h.core().stats().peer_auth_verified, 1);
    // A retransmission (sealed afresh) gets the ACCEPT again, and no second REMOTE_INFO.
    let again = sealed_request(
        7,
        "10.0.0.1",
        "10.0.0.2:4000",
        &key(1, false),
        WALL + Duration::from_millis(1),
    );
    h.advance(Duration::from_secs(1));
    v4(&mut h, "10.0.0.1:3935", &again);
    assert_eq!(remote_infos(&mut h), 0);
    assert_eq!(h.expect_peer().raw.len(), PEER_AUTH_LEN);
    let peers = h.core().snapshot_peers(h.now);
    assert_eq!(peers[0].tally.auth, PeerAuth::Keyed { key_id: 1 });
}

/// Finding "Replays": a captured REQUEST + ACK replayed once a second released 31
/// REMOTE_INFOs. Sealed, a replay releases nothing, within the window or after it.
#[test]
fn a_replayed_sealed_exchange_releases_nothing() {
    let mut h = keyed(config(), Some(keys(&[(1, false)])));
    listener(&mut h, "10.0.0.2:4000");
    let req = sealed_request(7, "10.0.0.1", "10.0.0.2:4000", &key(1, false), WALL);
    v4(&mut h, "10.0.0.1:3935", &req);
    assert_eq!(remote_infos(&mut h), 1);
    let accept = h.expect_peer();
    // the ACK a keyed active side sends: the ACCEPT's inner bytes echoed, sealed
    let inner_ack = {
        let inner = unseal(&accept.raw).unwrap();
        let mut b = inner.clone();
        b[0] = (b[0] & 0xcf) | (PeerMsgType::Ack.code() << 4);
        b
    };
    let ack = seal(
        &inner_ack,
        &key(1, false),
        (WALL + Duration::from_millis(2)).as_micros() as u64,
    )
    .unwrap();
    v4(&mut h, "10.0.0.1:3935", &ack);
    assert_eq!(remote_infos(&mut h), 0, "sent at once already");
    h.peer_out.clear();
    // The on-path host replays both once a second for 40 s.
    for _ in 0..40 {
        h.advance(Duration::from_secs(1));
        v4(&mut h, "10.0.0.1:3935", &req);
        v4(&mut h, "10.0.0.1:3935", &ack);
    }
    assert_eq!(remote_infos(&mut h), 0, "a replay releases nothing");
    assert!(
        h.peer_out.is_empty(),
        "and gets no answer: {:?}",
        h.peer_out
    );
    assert_eq!(h.core().stats().peer_auth_replayed, 80);
    // ... and after the window (60 s) the stamp itself is refused.
    h.advance(Duration::from_secs(30));
    v4(&mut h, "10.0.0.1:3935", &req);
    assert_eq!(remote_infos(&mut h), 0);
    assert_eq!(h.core().stats().peer_auth_clock, 1);
}

/// Finding "Downgrade by stripping": an on-path host removes the block. From a network in
/// `peer_auth_required` the stripped datagram is dropped and counted; elsewhere it is what
/// an rdma-core peer sends, and is served as today (unauthenticated, with its defences).
#[test]
fn a_stripped_request_is_dropped_where_authentication_is_required() {
    let required = CoreConfig {
        peer_auth_required: vec!["10.0.0.0/24".parse::<Cidr>().unwrap()],
        ..config()
    };
    let mut h = keyed(required, Some(keys(&[(1, false)])));
    listener(&mut h, "10.0.0.2:4000");
    let req = sealed_request(7, "10.0.0.1", "10.0.0.2:4000", &key(1, false), WALL);
    v4(&mut h, "10.0.0.1:3935", &req[..PEER_REQUEST_LEN]);
    assert_eq!(remote_infos(&mut h), 0);
    h.no_peer();
    assert_eq!(h.core().stats().peer_auth_missing, 1);
    let peers = h.core().snapshot_peers(h.now);
    assert_eq!(
        peers[0].tally.auth,
        PeerAuth::Failing {
            reason: AuthFailure::Missing,
            count: 1
        }
    );
    // Outside the required networks: served as an rdma-core peer is.
    let other = sealed_request(8, "10.0.1.1", "10.0.0.2:4000", &key(1, false), WALL);
    v4(&mut h, "10.0.1.1:3935", &other[..PEER_REQUEST_LEN]);
    assert_eq!(remote_infos(&mut h), 1, "on a budget token, as today");
    assert_eq!(
        h.expect_peer().raw.len(),
        48,
        "a plain ACCEPT, as to rdma-core"
    );
}

#[test]
fn a_wrong_key_an_unknown_id_a_changed_byte_and_a_skewed_clock_are_dropped_and_counted() {
    let mut h = keyed(config(), Some(keys(&[(1, false)])));
    listener(&mut h, "10.0.0.2:4000");
    let wrong = FleetKey::new(1, vec![0x99; 32], false).unwrap();
    v4(
        &mut h,
        "10.0.0.1:3935",
        &sealed_request(1, "10.0.0.1", "10.0.0.2:4000", &wrong, WALL),
    );
    v4(
        &mut h,
        "10.0.0.1:3935",
        &sealed_request(2, "10.0.0.1", "10.0.0.2:4000", &key(5, false), WALL),
    );
    let mut forged = sealed_request(3, "10.0.0.1", "10.0.0.2:4000", &key(1, false), WALL);
    forged[2] ^= 1; // another mapped port
    v4(&mut h, "10.0.0.1:3935", &forged);
    assert_eq!(h.core().stats().peer_auth_wrong_key, 3);
    let skewed = WALL + Duration::from_secs(61);
    v4(
        &mut h,
        "10.0.0.1:3935",
        &sealed_request(4, "10.0.0.1", "10.0.0.2:4000", &key(1, false), skewed),
    );
    assert_eq!(h.core().stats().peer_auth_clock, 1);
    assert_eq!(remote_infos(&mut h), 0);
    h.no_peer();
    // Within the window either way: believed.
    let early = WALL - Duration::from_secs(59);
    v4(
        &mut h,
        "10.0.0.1:3935",
        &sealed_request(5, "10.0.0.1", "10.0.0.2:4000", &key(1, false), early),
    );
    assert_eq!(remote_infos(&mut h), 1);
}

/// Rotation without a failing connect: add key 2 as accept-only (we still sign with 1 and
/// accept 2), make 2 the signing key, remove 1. A peer at any step is understood.
#[test]
fn a_rotation_is_understood_at_every_step() {
    let mut h = keyed(config(), Some(keys(&[(1, false)])));
    listener(&mut h, "10.0.0.2:4000");
    let mut handle = 0;
    let mut serve = |h: &mut CoreHarness, peer_key: &FleetKey, expect_signing: u32| {
        handle += 1;
        let req = sealed_request(
            handle,
            "10.0.0.1",
            "10.0.0.2:4000",
            peer_key,
            WALL + Duration::from_millis(handle),
        );
        v4(h, "10.0.0.1:3935", &req);
        assert_eq!(remote_infos(h), 1, "handle {handle}");
        let accept = h.expect_peer();
        assert_eq!(auth_block(&accept.raw).unwrap().key_id, expect_signing);
    };
    serve(&mut h, &key(1, false), 1);
    h.host
        .set_fleet_keys(h.now, Some(keys(&[(1, false), (2, true)])));
    serve(&mut h, &key(1, false), 1); // a peer not yet at step 2
    serve(&mut h, &key(2, false), 1); // a peer already signing with 2
    h.host
        .set_fleet_keys(h.now, Some(keys(&[(1, false), (2, false)])));
    serve(&mut h, &key(1, false), 2);
    serve(&mut h, &key(2, false), 2);
    h.host.set_fleet_keys(h.now, Some(keys(&[(2, false)])));
    serve(&mut h, &key(2, false), 2);
    let report = h.core().fleet_key_report();
    assert_eq!(report.len(), 1);
    assert_eq!((report[0].id, report[0].signing), (2, true));
    assert!(
        report[0].signed >= 3 && report[0].verified >= 3,
        "{report:?}"
    );
}

/// Two keyed cores: the active side seals its REQUEST and its ACK, the passive side its
/// ACCEPT; the connect is answered, the REMOTE_INFO is in the passive kernel first.
#[test]
fn two_keyed_daemons_exchange_sealed_datagrams_end_to_end() {
    for (active_ip, passive_ip, via) in [
        ("10.0.0.1", "10.0.0.2", PeerSocket::V4Listener),
        ("fd00::1", "fd00::2", PeerSocket::V6Listener),
    ] {
        let wrap = |ip: &str, port: u16| {
            if ip.contains(':') {
                format!("[{ip}]:{port}")
            } else {
                format!("{ip}:{port}")
            }
        };
        let cfg = CoreConfig {
            remote_info_budget: 0,
            ..config()
        };
        let mut a = keyed(cfg.clone(), Some(keys(&[(1, false)])));
        let mut p = keyed(cfg, Some(keys(&[(1, false)])));
        listener(&mut p, &wrap(passive_ip, 4000));
        let _q = a.query(&wrap(active_ip, 5000), &wrap(passive_ip, 4000), Some(0));
        let request = a.expect_peer();
        assert_eq!(request.raw.len(), PEER_AUTH_LEN);
        p.peer_raw(via, &wrap(active_ip, 3935), &request.raw);
        assert_eq!(remote_infos(&mut p), 1, "{active_ip}: at once, on no token");
        let accept = p.expect_peer();
        a.peer_raw(via, &wrap(passive_ip, 3935), &accept.raw);
        let ack = a.expect_peer();
        assert_eq!(ack.msg.msg_type, PeerMsgType::Ack);
        assert_eq!(ack.raw.len(), PEER_AUTH_LEN);
        p.peer_raw(via, &wrap(active_ip, 3935), &ack.raw);
        assert_eq!(p.core().stats().peer_auth_verified, 2);
        assert_eq!(a.core().stats().peer_auth_verified, 1);
        assert!(a
            .kernel_in
            .iter()
            .any(|(_, m)| matches!(m, DaemonMsg::QueryMapping(r) if r.err == 0)));
    }
}

/// A keyed daemon and one without keys (ours, or any that reads the sealed form): the
/// unkeyed one serves the plain datagram inside and answers plainly; the keyed one, outside
/// `peer_auth_required`, accepts that plain answer.
#[test]
fn a_keyed_and_an_unkeyed_daemon_still_connect() {
    let mut a = keyed(config(), Some(keys(&[(1, false)])));
    let mut p = keyed(config(), None);
    listener(&mut p, "10.0.0.2:4000");
    let _q = a.query("10.0.0.1:5000", "10.0.0.2:4000", Some(0));
    let request = a.expect_peer();
    p.peer_raw(PeerSocket::V4Listener, "10.0.0.1:3935", &request.raw);
    assert_eq!(p.core().stats().peer_auth_unkeyed, 1);
    let accept = p.expect_peer();
    assert_eq!(accept.raw.len(), 48);
    a.peer_raw(PeerSocket::V4Client, "10.0.0.2:3935", &accept.raw);
    let ack = a.expect_peer();
    assert_eq!(ack.raw.len(), 48, "a plain answer is answered plainly");
    assert!(a
        .kernel_in
        .iter()
        .any(|(_, m)| matches!(m, DaemonMsg::QueryMapping(r) if r.err == 0)));
}

/// Finding "A legitimate rdma-core IPv6 burst", keyed: 1000 concurrent port-mapped IPv6
/// connects from one keyed host get 1000 REMOTE_INFOs at once, budget or not.
#[test]
fn a_keyed_burst_of_1000_ipv6_connects_is_served_in_full() {
    let mut h = keyed(
        CoreConfig {
            remote_info_budget: 0,
            ..config()
        },
        Some(keys(&[(1, false)])),
    );
    listener(&mut h, "[fd00::2]:4000");
    for i in 0..1_000u64 {
        let req = sealed_request(
            i + 1,
            "fd00::1",
            "[fd00::2]:4000",
            &key(1, false),
            WALL + Duration::from_micros(i),
        );
        h.peer_raw(PeerSocket::V6Listener, "[fd00::1]:3935", &req);
    }
    assert_eq!(remote_infos(&mut h), 1_000);
}

/// A restarted daemon's replay memory is empty: what was sealed before its start is not
/// believed, so a capture of the minute before a restart releases nothing either.
#[test]
fn a_restarted_daemon_believes_nothing_sealed_before_its_start() {
    let k = key(1, false);
    let captured = sealed_request(7, "10.0.0.1", "10.0.0.2:4000", &k, WALL);
    // The daemon (re)starts 5 s after the capture.
    let mut h = CoreHarness::booted_with(config());
    h.host
        .handle_wall_clock(h.now, WALL + Duration::from_secs(5));
    h.host.set_fleet_keys(h.now, Some(keys(&[(1, false)])));
    listener(&mut h, "10.0.0.2:4000");
    v4(&mut h, "10.0.0.1:3935", &captured);
    assert_eq!(remote_infos(&mut h), 0);
    h.no_peer();
    assert_eq!(h.core().stats().peer_auth_replayed, 1);
    // The peer's next (fresh) REQUEST passes.
    let fresh = sealed_request(
        7,
        "10.0.0.1",
        "10.0.0.2:4000",
        &k,
        WALL + Duration::from_secs(6),
    );
    v4(&mut h, "10.0.0.1:3935", &fresh);
    assert_eq!(remote_infos(&mut h), 1);
}

/// Found by the simulator (K1): the MAC does not cover the IP header, so a copy of a sealed
/// REQUEST sent first from another address (an on-path host racing the original) was
/// believed, its ACCEPT went to the copier, and the real REQUEST was refused as a replay of
/// it: the connect failed and the REMOTE_INFO stayed in the kernel. A sealed datagram is
/// now believed only from the address it names as its sender (`cp` for a REQUEST or an
/// ACK, `ap` for an ACCEPT or a REJECT), before it is remembered.
#[test]
fn a_sealed_copy_racing_from_another_address_is_refused_and_the_original_served() {
    let mut h = keyed(config(), Some(keys(&[(1, false)])));
    listener(&mut h, "10.0.0.2:4000");
    let req = sealed_request(7, "10.0.0.1", "10.0.0.2:4000", &key(1, false), WALL);
    v4(&mut h, "10.0.0.66:3935", &req);
    assert_eq!(remote_infos(&mut h), 0);
    h.no_peer();
    assert_eq!(h.core().stats().peer_auth_wrong_source, 1);
    // The original, second, is believed.
    v4(&mut h, "10.0.0.1:3935", &req);
    assert_eq!(remote_infos(&mut h), 1);
    assert_eq!(h.expect_peer().to, addr("10.0.0.1:3935"));
    assert_eq!(h.core().stats().peer_auth_replayed, 0);
}
