//! MAPINFO restart recovery: re-reserving recorded ports, duplicates restoring refcounts,
//! conflicts, failures, and the MAPINFO_NUM acknowledgement.

use iwpm_testkit::core_host as common;

use std::time::Instant;

use common::*;
use iwpm_core::ReserveError;
use iwpm_proto::consts::err::*;
use iwpm_proto::consts::{IWPM_FLAGS_NO_PORT_MAP, NLM_F_REQUEST, RDMA_NL_IWCM};
use iwpm_proto::netlink::DaemonMsg;

/// A started core whose kernel answered HELLO(4), not yet registered.
fn restarted() -> CoreHarness {
    let mut h = CoreHarness::new(config(), Instant::now());
    h.start_answered();
    h
}

fn expect_mapinfo_ack(h: &mut CoreHarness, seq: u32, send: u32, ack: u32) {
    match h.expect_kernel() {
        (env, DaemonMsg::MapInfoNum(r)) => {
            assert_eq!(env.client, RDMA_NL_IWCM);
            assert_ne!(env.flags & NLM_F_REQUEST, 0);
            assert_eq!((r.seq, r.send_num, r.ack_num), (seq, send, ack));
        }
        other => panic!("expected MAPINFO_NUM, got {other:?}"),
    }
}

#[test]
fn records_are_recovered_with_restored_refcounts() {
    let mut h = restarted();
    h.mapinfo_records(&[
        ("10.0.0.1:4000", "10.0.0.1:40010", Some(0)),
        ("0.0.0.0:5000", "0.0.0.0:40020", Some(0)),
        ("0.0.0.0:5000", "0.0.0.0:40020", Some(0)),
        (
            "10.0.0.1:6000",
            "10.0.0.1:6000",
            Some(IWPM_FLAGS_NO_PORT_MAP),
        ),
        ("[2001:db8::1]:7000", "[2001:db8::1]:40030", Some(0)),
    ]);
    h.no_kernel();
    let mut held: Vec<_> = h.ports().held.values().map(|a| a.to_string()).collect();
    held.sort();
    assert_eq!(held, ["0.0.0.0:40010", "0.0.0.0:40020", "[::]:40030"]);
    assert_eq!(
        h.refcount("0.0.0.0:5000"),
        Some(2),
        "duplicate restores a reference"
    );
    assert_eq!(h.refcount("10.0.0.1:4000"), Some(1));
    assert_eq!(h.refcount("10.0.0.1:6000"), Some(1));
    let s = h.core().stats();
    assert_eq!((s.mapinfo_accepted, s.mapinfo_duplicates), (5, 1));

    let seq = h.mapinfo_num(5);
    expect_mapinfo_ack(&mut h, seq, 5, 5);

    // After REG_PID the kernel removes them one reference at a time.
    h.reg_pid();
    h.kernel_in.clear();
    h.remove("0.0.0.0:5000");
    assert_eq!(h.ports().held.len(), 3, "one user of the wildcard left");
    h.remove("0.0.0.0:5000");
    assert_eq!(h.ports().held.len(), 2);
    h.remove("10.0.0.1:6000");
    assert_eq!(h.ports().releases, 1);
    // The freed port is gone; a fresh ADD maps the wildcard anew.
    let s = h.add("0.0.0.0:5000", Some(0));
    assert_eq!(h.expect_add_reply(s).port(), 40000);
}

#[test]
fn conflicting_record_gets_error_12_and_the_batch_goes_on() {
    let mut h = restarted();
    h.mapinfo_records(&[
        ("10.0.0.1:4000", "10.0.0.1:40010", Some(0)),
        ("10.0.0.1:4000", "10.0.0.1:40099", Some(0)),
        ("0.0.0.0:4000", "0.0.0.0:40098", Some(0)),
        ("10.0.0.2:4000", "10.0.0.2:40011", Some(0)),
    ]);
    h.expect_handle_err(0, IWPM_DUPLICATE_MAPPING_ERR);
    h.expect_handle_err(0, IWPM_DUPLICATE_MAPPING_ERR);
    h.no_kernel();
    assert_eq!(h.core().mappings().count(), 2);
    assert_eq!(h.core().stats().mapinfo_conflicts, 2);
    let seq = h.mapinfo_num(4);
    expect_mapinfo_ack(&mut h, seq, 4, 2);
}

/// The kernel replays nfsd's two wildcard listeners in either order: both records are
/// taken, each re-reserving its own port (C keeps whichever comes first and refuses the
/// other with error 12; `docs/protocol.md` §4.5).
#[test]
fn wildcard_records_of_both_families_are_both_recovered() {
    let v4 = ("0.0.0.0:20049", "0.0.0.0:40020", Some(0));
    let v6 = ("[::]:20049", "[::]:40021", Some(0));
    for records in [[v4, v6], [v6, v4]] {
        let mut h = restarted();
        h.mapinfo_records(&records);
        h.no_kernel();
        let mut held: Vec<_> = h.ports().held.values().map(|a| a.to_string()).collect();
        held.sort();
        assert_eq!(held, ["0.0.0.0:40020", "[::]:40021"]);
        assert_eq!(h.refcount("0.0.0.0:20049"), Some(1));
        assert_eq!(h.refcount("[::]:20049"), Some(1));
        assert_eq!(h.core().stats().mapinfo_conflicts, 0);
        let seq = h.mapinfo_num(2);
        expect_mapinfo_ack(&mut h, seq, 2, 2);
        // A specific record of either family on that port still conflicts.
        h.reg_pid();
        h.kernel_in.clear();
        let s = h.add("10.0.0.1:20049", Some(0));
        h.expect_handle_err(s, IWPM_DUPLICATE_MAPPING_ERR);
        let s = h.add("[2001:db8::1]:20049", Some(0));
        h.expect_handle_err(s, IWPM_DUPLICATE_MAPPING_ERR);
    }
}

#[test]
fn record_whose_port_is_taken_fails_with_error_11() {
    let mut h = restarted();
    h.ports_mut().fail_next.push_back(ReserveError::AddrInUse);
    h.mapinfo_records(&[
        ("10.0.0.1:4000", "10.0.0.1:40010", Some(0)),
        ("10.0.0.1:4001", "10.0.0.1:40011", Some(0)),
    ]);
    h.expect_handle_err(0, IWPM_CREATE_MAPPING_ERR);
    h.no_kernel();
    assert_eq!(h.core().mappings().count(), 1);
    assert_eq!(h.ports().held.len(), 1);
    // A port already held by another mapping is refused by the fake shell too.
    h.mapinfo_records(&[("10.0.0.3:4002", "10.0.0.3:40011", Some(0))]);
    h.expect_handle_err(0, IWPM_CREATE_MAPPING_ERR);
    let seq = h.mapinfo_num(3);
    expect_mapinfo_ack(&mut h, seq, 3, 1);
}

#[test]
fn shell_granting_another_port_is_a_failure() {
    let mut h = restarted();
    h.ports_mut().force_port.push_back(40011);
    h.mapinfo_records(&[("10.0.0.1:4000", "10.0.0.1:40010", Some(0))]);
    assert_eq!(
        h.ports().binds,
        [addr("0.0.0.0:40010")],
        "recorded port on the wildcard"
    );
    h.expect_handle_err(0, IWPM_CREATE_MAPPING_ERR);
    assert!(h.ports().held.is_empty(), "released");
    assert_eq!(h.core().mappings().count(), 0);
}

#[test]
fn unusable_records_fail_with_error_11() {
    let mut h = restarted();
    h.mapinfo_records(&[
        ("10.0.0.1:4000", "[2001:db8::1]:40010", Some(0)),
        ("10.0.0.1:4001", "10.0.0.1:40011", Some(0)),
    ]);
    h.expect_handle_err(0, IWPM_CREATE_MAPPING_ERR);
    h.no_kernel();
    assert_eq!(h.core().mappings().count(), 1);
}

#[test]
fn mapinfo_num_acknowledges_each_batch() {
    let mut h = restarted();
    h.mapinfo_records(&[("10.0.0.1:4000", "10.0.0.1:40010", Some(0))]);
    let seq = h.mapinfo_num(1);
    expect_mapinfo_ack(&mut h, seq, 1, 1);
    let seq = h.mapinfo_num(0);
    expect_mapinfo_ack(&mut h, seq, 0, 0);
}

#[test]
fn abi3_records_have_no_flags() {
    let mut h = CoreHarness::new(config(), Instant::now());
    h.host.start(h.now);
    h.pump();
    h.kernel_error(0, -22, None);
    h.kernel_in.clear();
    assert_eq!(h.core().abi(), 3);
    h.mapinfo_records(&[("10.0.0.1:4000", "10.0.0.1:40010", None)]);
    h.no_kernel();
    assert_eq!(h.ports().held.len(), 1);
    // ABI 4 records must carry FLAGS; without it they are invalid.
    let mut h = restarted();
    h.mapinfo_records(&[("10.0.0.1:4000", "10.0.0.1:40010", None)]);
    h.expect_handle_err(0, IWPM_INVALID_NLMSG_ERR);
}

#[test]
fn recovered_listener_answers_peer_requests() {
    let mut h = restarted();
    h.mapinfo_records(&[("0.0.0.0:4000", "0.0.0.0:40123", Some(0))]);
    let req = iwpm_proto::peer::PeerMessage::request(
        7,
        addr("10.0.0.1:5000"),
        addr("10.0.0.1:41234"),
        addr("10.0.0.2:4000"),
    );
    h.peer(iwpm_core::PeerSocket::V4Listener, "10.0.0.1:33333", &req);
    let accept = h.expect_peer();
    assert_eq!(accept.msg.ap(), addr("10.0.0.2:40123"));
    match h.expect_kernel().1 {
        DaemonMsg::RemoteInfo(r) => assert_eq!(r.mapped_local_addr, sa("0.0.0.0:40123")),
        other => panic!("{other:?}"),
    }
}
