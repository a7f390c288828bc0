//! Netlink side: handshake, ABI, registration, ADD/QUERY/REMOVE semantics, errors, caps.

use iwpm_testkit::core_host as common;

use std::time::{Duration, Instant};

use common::*;
use iwpm_core::{Action, CoreConfig, ReserveError};
use iwpm_proto::consts::err::*;
use iwpm_proto::consts::op::*;
use iwpm_proto::consts::{
    rdma_nl_get_type, IWPM_FLAGS_NO_PORT_MAP, NLM_F_REQUEST, RDMA_NL_IWCM, RDMA_NL_RSVD,
};
use iwpm_proto::netlink::{
    encode_kernel_msg, DaemonMsg, Envelope, Hello, KernelMsg, NlHeader, NlString,
    QueryMappingRequest, RegPidRequest,
};

#[test]
fn handshake_negotiates_abi4_and_requests_mapinfo() {
    let mut h = CoreHarness::new(config(), Instant::now());
    h.host.start(h.now);
    h.pump();
    assert_eq!(h.host.poll_timeout(), Some(h.now + Duration::from_secs(5)));
    let (env, msg) = h.expect_kernel();
    assert_eq!((env.client, env.seq, env.pid), (RDMA_NL_IWCM, 0, PID));
    assert!(matches!(
        msg,
        DaemonMsg::Hello(Hello { abi_version: 4, .. })
    ));
    assert_eq!(h.ready, 0, "Ready waits for the kernel's answer");
    h.kernel_msg(KernelMsg::Hello(Hello {
        abi_version: 4,
        unknown: vec![],
    }));
    let (env, msg) = h.expect_kernel();
    assert_eq!((env.client, env.seq), (RDMA_NL_IWCM, 1));
    match msg {
        DaemonMsg::MapInfo(m) => {
            assert_eq!(m.ulib_name, NlString::new("iWarpPortMapperUser"));
            assert_eq!(m.ulib_version, 4);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(h.ready, 1);
    assert!(h.core().is_ready());
    assert_eq!(h.core().abi(), 4);
    // The dump DONEs that follow are expected, not errors; nothing is re-sent.
    h.kernel_done(0, Some(0));
    h.kernel_done(1, Some(-22));
    h.no_kernel();
    assert_eq!(h.core().stats().netlink_done_in, 2);
    assert_eq!(h.core().stats().netlink_done_nonzero, 1);
    assert_eq!(h.host.poll_timeout(), None);
    // start twice does nothing.
    h.host.start(h.now);
    h.pump();
    h.no_kernel();
}

#[test]
fn abi3_fallback_on_hello_error_runs_once() {
    let mut h = CoreHarness::new(config(), Instant::now());
    h.host.start(h.now);
    h.pump();
    h.expect_kernel();
    let hello = NlHeader {
        len: 24,
        ty: rdma_nl_get_type(RDMA_NL_IWCM, RDMA_NL_IWPM_HELLO),
        flags: NLM_F_REQUEST,
        seq: 0,
        pid: PID,
    };
    h.kernel_error(0, -22, Some(&hello));
    assert_eq!(h.core().abi(), 3);
    let mut clients = vec![];
    while let Some((env, msg)) = h.kernel_in.pop_front() {
        match msg {
            DaemonMsg::MapInfo(m) => {
                assert_eq!(m.ulib_version, 3);
                clients.push((env.client, env.seq));
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(clients, vec![(RDMA_NL_IWCM, 1)]);
    assert_eq!(
        h.legacy_out,
        vec![RDMA_NL_IWPM_MAPINFO],
        "and one to legacy client 3"
    );
    assert_eq!(h.ready, 1);
    // The error for the legacy client-3 request also has seq 0: no second round.
    h.kernel_error(0, -22, None);
    h.no_kernel();
    assert_eq!(h.ready, 1);
    assert_eq!(h.core().stats().netlink_error_in, 2);

    // ABI 3: FLAGS is not part of ADD; a REG_PID reply says version 3.
    let seq = h.reg_pid();
    match h.expect_kernel().1 {
        DaemonMsg::RegPid(r) => assert_eq!((r.seq, r.ulib_version), (seq, 3)),
        other => panic!("{other:?}"),
    }
    let seq = h.add("10.0.0.1:4000", None);
    let mapped = h.expect_add_reply(seq);
    assert_eq!(mapped, sa("10.0.0.1:40000"));
}

#[test]
fn hello_with_unusable_version_gets_error_17() {
    for v in [5u16, 2] {
        let mut h = CoreHarness::new(config(), Instant::now());
        h.host.start(h.now);
        h.pump();
        h.expect_kernel();
        let seq = h.kernel_msg(KernelMsg::Hello(Hello {
            abi_version: v,
            unknown: vec![],
        }));
        h.expect_handle_err(seq, IWPM_VERSION_MISMATCH_ERR);
        h.no_kernel();
        assert_eq!(h.core().abi(), 4);
        assert_eq!(h.ready, 1);
    }
}

#[test]
fn handshake_without_answer_times_out_to_ready() {
    let mut h = CoreHarness::new(config(), Instant::now());
    h.host.start(h.now);
    h.pump();
    h.expect_kernel();
    h.kernel_done(0, Some(0));
    assert_eq!(h.ready, 0, "DONE(0) alone is not the answer");
    h.advance(Duration::from_millis(4_999));
    assert_eq!(h.ready, 0);
    h.advance(Duration::from_millis(1));
    assert_eq!(h.ready, 1);
    assert!(matches!(h.expect_kernel().1, DaemonMsg::MapInfo(_)));

    // A kernel that cannot reach us (DONE with an error for HELLO): Ready, no MAPINFO.
    let mut h = CoreHarness::new(config(), Instant::now());
    h.host.start(h.now);
    h.pump();
    h.expect_kernel();
    h.kernel_done(0, Some(-111));
    assert_eq!(h.ready, 1);
    h.no_kernel();
}

#[test]
fn reg_pid_reply_echoes_device_and_checks_library() {
    let mut h = CoreHarness::booted();
    let seq = h.reg_pid();
    let (env, msg) = h.expect_kernel();
    assert_eq!(env.client, RDMA_NL_IWCM);
    match msg {
        DaemonMsg::RegPid(r) => {
            assert_eq!(r.seq, seq);
            assert_eq!(r.ibdev_name, NlString::new("siw0"));
            assert_eq!(r.ulib_name, NlString::new("iWarpPortMapperUser"));
            assert_eq!((r.ulib_version, r.err), (4, 0));
        }
        other => panic!("{other:?}"),
    }
    let seq = h.kernel_msg(KernelMsg::RegPid(RegPidRequest {
        echo_seq: 0,
        if_name: NlString::padded("eth0", 16),
        ibdev_name: NlString::padded("siw0", 32),
        ulib_name: NlString::padded("SomethingElse", 32),
        unknown: vec![],
    }));
    h.expect_handle_err(seq, IWPM_USER_LIB_INFO_ERR);
}

#[test]
fn header_seqs_count_per_client() {
    let mut h = CoreHarness::booted();
    // HELLO 0, MAPINFO 1, REG_PID reply 2: the next message to client 2 has seq 3.
    let seq = h.add("10.0.0.1:4000", None);
    let _ = seq;
    let (env, _) = h.expect_kernel();
    assert_eq!(env.seq, 3);
}

/// A reserved port equal to the local one would make the mapping look unmapped (the
/// peer's REQUEST would then ask for no REMOTE_INFO): one more is drawn, the first released.
#[test]
fn a_mapped_port_never_equals_the_local_one() {
    let mut h = CoreHarness::booted();
    // The fake shell grants 40000 next: the local port of this listener.
    let seq = h.add("10.0.0.1:40000", Some(0));
    let mapped = h.expect_add_reply(seq);
    assert_eq!(mapped, sa("10.0.0.1:40001"));
    assert_eq!(h.ports().held.len(), 1);
    assert_eq!(h.core().stats().reservations_released, 1);
}

#[test]
fn add_reserves_a_port_and_remove_releases_it() {
    let mut h = CoreHarness::booted();
    let seq = h.add("10.0.0.1:4000", Some(0));
    let mapped = h.expect_add_reply(seq);
    assert_eq!(mapped, sa("10.0.0.1:40000"), "same IP, reserved port");
    assert_eq!(h.ports().held.len(), 1);
    assert_eq!(
        *h.ports().held.values().next().unwrap(),
        addr("0.0.0.0:40000")
    );
    let m = h.core().mappings().next().unwrap();
    assert_eq!(
        (m.refcount, m.owner_client, m.wildcard, m.no_port_map),
        (1, 2, false, false)
    );

    let seq = h.add("10.0.0.1:4000", Some(0));
    h.expect_handle_err(seq, IWPM_DUPLICATE_MAPPING_ERR);
    assert_eq!(h.refcount("10.0.0.1:4000"), Some(1));

    h.remove("10.0.0.1:4000");
    h.no_kernel();
    assert!(h.ports().held.is_empty());
    assert_eq!(h.core().mappings().count(), 0);
    assert_eq!(h.core().stats().reservations_released, 1);
    // REMOVE of an unknown address is ignored.
    h.remove("10.0.0.1:4000");
    h.no_kernel();
    assert_eq!(h.core().stats().remove_unknown, 1);
}

#[test]
fn wildcard_add_is_shared_with_refcount() {
    let mut h = CoreHarness::booted();
    let s1 = h.add("0.0.0.0:4000", Some(0));
    let m1 = h.expect_add_reply(s1);
    let s2 = h.add("0.0.0.0:4000", Some(0));
    let m2 = h.expect_add_reply(s2);
    assert_eq!(m1, m2);
    assert_eq!(h.refcount("0.0.0.0:4000"), Some(2));
    assert_eq!(h.ports().held.len(), 1);
    let v = h.core().mappings().next().unwrap();
    assert!(v.wildcard);

    // A specific address of its family on a wildcard-mapped port: a duplicate.
    let s = h.add("10.0.0.1:4000", Some(0));
    h.expect_handle_err(s, IWPM_DUPLICATE_MAPPING_ERR);
    assert_eq!(h.core().mappings().count(), 1);

    h.remove("0.0.0.0:4000");
    assert_eq!(h.ports().held.len(), 1, "one reference left");
    h.remove("0.0.0.0:4000");
    assert!(h.ports().held.is_empty());
}

#[test]
fn specific_addresses_on_one_port_are_independent_but_block_a_wildcard() {
    let mut h = CoreHarness::booted();
    let a = h.add("10.0.0.1:4000", Some(0));
    let ma = h.expect_add_reply(a);
    let b = h.add("10.0.0.2:4000", Some(0));
    let mb = h.expect_add_reply(b);
    assert_ne!(ma.port(), mb.port());
    let w = h.add("0.0.0.0:4000", Some(0));
    h.expect_handle_err(w, IWPM_DUPLICATE_MAPPING_ERR);
    assert_eq!(h.core().mappings().count(), 2);
}

/// nfsd listens on `0.0.0.0:20049` and `[::]:20049`: both are mapped, whichever comes
/// first, each with a port of its own (C refuses the second; `docs/protocol.md` §4.5).
#[test]
fn wildcards_of_both_families_share_a_local_port_in_either_order() {
    for (first, second) in [
        ("0.0.0.0:20049", "[::]:20049"),
        ("[::]:20049", "0.0.0.0:20049"),
    ] {
        let mut h = CoreHarness::booted();
        let s = h.add(first, Some(0));
        let m1 = h.expect_add_reply(s);
        let s = h.add(second, Some(0));
        let m2 = h.expect_add_reply(s);
        assert_ne!(m1.port(), m2.port(), "{first} then {second}");
        assert_eq!(h.ports().held.len(), 2, "one reservation per family");
        let mut held: Vec<bool> = h.ports().held.values().map(|a| a.is_ipv4()).collect();
        held.sort();
        assert_eq!(held, [false, true], "each reserved in its own family");
        assert_eq!((h.refcount(first), h.refcount(second)), (Some(1), Some(1)));

        // Each wildcard is still shared within its family ...
        let s = h.add(second, Some(0));
        assert_eq!(h.expect_add_reply(s), m2);
        assert_eq!(h.refcount(second), Some(2));
        // ... and still refuses a specific address of its family on the port.
        for specific in ["10.0.0.1:20049", "[2001:db8::1]:20049"] {
            let s = h.add(specific, Some(0));
            h.expect_handle_err(s, IWPM_DUPLICATE_MAPPING_ERR);
        }
        assert_eq!(h.core().mappings().count(), 2);

        // Removing one family's listener leaves the other's mapping and port.
        h.remove(first);
        assert_eq!(h.refcount(first), None);
        assert_eq!(h.refcount(second), Some(2));
        assert_eq!(h.ports().held.len(), 1);
        h.core().check_invariants().unwrap();
    }
}

/// A specific address and the other family's wildcard on one port do not collide either;
/// within a family a specific address still blocks the wildcard.
#[test]
fn a_specific_address_blocks_only_its_own_familys_wildcard() {
    let mut h = CoreHarness::booted();
    let s = h.add("[2001:db8::1]:4000", Some(0));
    h.expect_add_reply(s);
    let s = h.add("0.0.0.0:4000", Some(0));
    h.expect_add_reply(s);
    let s = h.add("[::]:4000", Some(0));
    h.expect_handle_err(s, IWPM_DUPLICATE_MAPPING_ERR);
    let s = h.add("10.0.0.1:4000", Some(0));
    h.expect_handle_err(s, IWPM_DUPLICATE_MAPPING_ERR);
    assert_eq!(h.core().mappings().count(), 2);
}

#[test]
fn ipv6_add() {
    let mut h = CoreHarness::booted();
    let s = h.add("[2001:db8::1]:4000", Some(0));
    let m = h.expect_add_reply(s);
    assert_eq!(m, sa("[2001:db8::1]:40000"));
    assert_eq!(*h.ports().held.values().next().unwrap(), addr("[::]:40000"));
}

#[test]
fn no_port_map_maps_to_itself_without_reservation() {
    let mut h = CoreHarness::booted();
    let s = h.add("10.0.0.1:4000", Some(IWPM_FLAGS_NO_PORT_MAP | 0x10));
    assert_eq!(h.expect_add_reply(s), sa("10.0.0.1:4000"));
    assert!(h.ports().held.is_empty());
    assert_eq!(h.core().stats().reservations_requested, 0);
    let v = h.core().mappings().next().unwrap();
    assert!(v.no_port_map && v.reservation.is_none());
    h.remove("10.0.0.1:4000");
    assert_eq!(h.ports().releases, 0);
    assert_eq!(h.core().mappings().count(), 0);
}

#[test]
fn add_and_query_from_unregistered_client_are_dropped() {
    let mut h = CoreHarness::new(config(), Instant::now());
    h.host.start(h.now);
    h.pump();
    h.kernel_in.clear();
    h.add("10.0.0.1:4000", Some(0));
    h.query("10.0.0.1:5000", "10.0.0.2:4000", Some(0));
    h.no_kernel();
    h.no_peer();
    assert_eq!(h.core().stats().netlink_unregistered, 2);
    assert_eq!(h.core().stats().netlink_in_op(RDMA_NL_IWPM_ADD_MAPPING), 1);
}

#[test]
fn reservation_failure_gives_create_mapping_err_and_leaks_nothing() {
    let mut h = CoreHarness::booted();
    h.ports_mut()
        .fail_next
        .push_back(ReserveError::NoDescriptors);
    let s = h.add("10.0.0.1:4000", Some(0));
    h.expect_handle_err(s, IWPM_CREATE_MAPPING_ERR);
    assert_eq!(h.core().mappings().count(), 0);
    assert!(h.ports().held.is_empty());
    h.ports_mut().fail_next.push_back(ReserveError::AddrInUse);
    let s = h.query("10.0.0.1:5000", "10.0.0.2:4000", Some(0));
    h.expect_handle_err(s, IWPM_CREATE_MAPPING_ERR);
    h.no_peer();
    assert_eq!(h.core().stats().reservations_failed, 2);
    assert_eq!(h.core().stats().handle_err(IWPM_CREATE_MAPPING_ERR), 2);
    // The address can be mapped afterwards.
    let s = h.add("10.0.0.1:4000", Some(0));
    h.expect_add_reply(s);
}

#[test]
fn port_zero_reservation_is_released() {
    let mut h = CoreHarness::booted();
    h.ports_mut().force_port.push_back(0);
    let s = h.add("10.0.0.1:4000", Some(0));
    h.expect_handle_err(s, IWPM_CREATE_MAPPING_ERR);
    assert!(h.ports().held.is_empty());
    assert_eq!(h.ports().releases, 1);
}

#[test]
fn malformed_message_gets_error_10_with_header_seq() {
    let mut h = CoreHarness::booted();
    // ABI 4 makes FLAGS mandatory: a QUERY without it is invalid.
    let seq = h.kernel_msg(KernelMsg::QueryMapping(QueryMappingRequest {
        echo_seq: 0,
        local_addr: sa("10.0.0.1:5000"),
        remote_addr: sa("10.0.0.2:4000"),
        flags: None,
        unknown: vec![],
    }));
    h.expect_handle_err(seq, IWPM_INVALID_NLMSG_ERR);
    assert_eq!(h.core().stats().netlink_malformed, 1);
    // A sockaddr attribute cut short: same answer for REMOVE too.
    let env = h.env();
    let mut b = Vec::new();
    encode_kernel_msg(
        &env,
        &KernelMsg::RemoveMapping(iwpm_proto::netlink::ManageMappingRequest {
            echo_seq: 0,
            addr: sa("10.0.0.1:4000"),
            flags: None,
            unknown: vec![],
        }),
        &mut b,
    );
    // Shrink the address attribute (second attribute, at payload offset 8) to 64 bytes.
    let nla_len = 4 + 64u16;
    b[24..26].copy_from_slice(&nla_len.to_ne_bytes());
    let new_len = 16 + 8 + 4 + 64;
    b.truncate(new_len);
    b[0..4].copy_from_slice(&(new_len as u32).to_ne_bytes());
    h.kernel_raw(&b);
    h.expect_handle_err(env.seq, IWPM_INVALID_NLMSG_ERR);
}

#[test]
fn unknown_ops_and_control_messages_are_dropped() {
    let mut h = CoreHarness::booted();
    for op in [RDMA_NL_IWPM_REMOTE_INFO, RDMA_NL_IWPM_HANDLE_ERR, 9, 0x3ff] {
        let header = NlHeader {
            len: 16,
            ty: rdma_nl_get_type(RDMA_NL_IWCM, op),
            flags: NLM_F_REQUEST,
            seq: 77,
            pid: 0,
        };
        h.kernel_raw(&header.to_bytes());
    }
    // Client 5 (NLDEV) and a NOOP control message.
    let mut other = NlHeader {
        len: 16,
        ty: rdma_nl_get_type(5, 1),
        flags: NLM_F_REQUEST,
        seq: 78,
        pid: 0,
    };
    h.kernel_raw(&other.to_bytes());
    other.ty = 1;
    h.kernel_raw(&other.to_bytes());
    h.no_kernel();
    assert_eq!(h.core().stats().netlink_unknown_op, 5);
    assert_eq!(h.core().stats().netlink_control_other, 1);
    // Broken framing.
    h.kernel_raw(&[1, 2, 3]);
    let mut bad = other.to_bytes().to_vec();
    bad[0] = 200;
    h.kernel_raw(&bad);
    assert_eq!(h.core().stats().netlink_bad_framing, 2);
    h.no_kernel();
}

#[test]
fn remove_by_another_client_is_ignored() {
    let mut h = CoreHarness::booted();
    let s = h.add("10.0.0.1:4000", Some(0));
    h.expect_add_reply(s);
    let env = Envelope {
        client: RDMA_NL_RSVD,
        ..h.env()
    };
    h.kernel_msg_with(
        env,
        &KernelMsg::RemoveMapping(iwpm_proto::netlink::ManageMappingRequest {
            echo_seq: 0,
            addr: sa("10.0.0.1:4000"),
            flags: None,
            unknown: vec![],
        }),
    );
    assert_eq!(h.refcount("10.0.0.1:4000"), Some(1));
    assert_eq!(h.core().stats().remove_wrong_owner, 1);
}

#[test]
fn mapping_cap_refuses_new_mappings_only() {
    let mut h = CoreHarness::booted_with(CoreConfig {
        max_mappings: 2,
        ..config()
    });
    let a = h.add("0.0.0.0:1000", Some(0));
    h.expect_add_reply(a);
    let b = h.add("10.0.0.1:2000", Some(IWPM_FLAGS_NO_PORT_MAP));
    h.expect_add_reply(b);
    let c = h.add("10.0.0.1:3000", Some(0));
    h.expect_handle_err(c, IWPM_CREATE_MAPPING_ERR);
    let d = h.query("10.0.0.1:3001", "10.0.0.2:4000", Some(0));
    h.expect_handle_err(d, IWPM_CREATE_MAPPING_ERR);
    let e = h.add("0.0.0.0:1000", Some(0));
    h.expect_add_reply(e);
    assert_eq!(h.core().stats().mappings_refused, 2);
    assert_eq!(h.core().mappings().count(), 2);
}

#[test]
fn a_kernel_seq_is_answered_at_most_once() {
    let mut h = CoreHarness::booted();
    let env = h.env();
    let msg = KernelMsg::AddMapping(iwpm_proto::netlink::ManageMappingRequest {
        echo_seq: 0,
        addr: sa("0.0.0.0:4000"),
        flags: Some(0),
        unknown: vec![],
    });
    h.kernel_msg_with(env, &msg);
    h.expect_add_reply(env.seq);
    h.kernel_msg_with(env, &msg);
    h.no_kernel();
    assert_eq!(h.refcount("0.0.0.0:4000"), Some(1));
    assert_eq!(h.core().stats().netlink_duplicate_seq, 1);
}

#[test]
fn messages_of_one_datagram_are_mapped_in_order() {
    let mut h = CoreHarness::booted();
    // Two ADDs in one datagram, then a third in its own datagram.
    let e1 = h.env();
    let e2 = h.env();
    let mut b = Vec::new();
    for (e, a) in [(e1, "10.0.0.1:4000"), (e2, "10.0.0.1:4001")] {
        encode_kernel_msg(
            &e,
            &KernelMsg::AddMapping(iwpm_proto::netlink::ManageMappingRequest {
                echo_seq: 0,
                addr: sa(a),
                flags: Some(0),
                unknown: vec![],
            }),
            &mut b,
        );
    }
    h.kernel_raw(&b);
    let s3 = h.add("10.0.0.1:4002", Some(IWPM_FLAGS_NO_PORT_MAP));
    assert_eq!(h.expect_add_reply(e1.seq), sa("10.0.0.1:40000"));
    assert_eq!(h.expect_add_reply(e2.seq), sa("10.0.0.1:40001"));
    assert_eq!(h.expect_add_reply(s3), sa("10.0.0.1:4002"));
    h.no_kernel();
    assert_eq!(h.ports().binds.len(), 2, "NO_PORT_MAP reserves nothing");
}

#[test]
fn unusable_addresses_are_answered_without_reserving() {
    let mut h = CoreHarness::booted();
    let mut unix = sa("10.0.0.1:4000");
    unix.0[0..2].copy_from_slice(&1u16.to_ne_bytes());
    let s = h.kernel_msg(KernelMsg::AddMapping(
        iwpm_proto::netlink::ManageMappingRequest {
            echo_seq: 0,
            addr: unix,
            flags: Some(0),
            unknown: vec![],
        },
    ));
    h.expect_handle_err(s, IWPM_CREATE_MAPPING_ERR);
    let s = h.kernel_msg(KernelMsg::QueryMapping(QueryMappingRequest {
        echo_seq: 0,
        local_addr: sa("10.0.0.1:5000"),
        remote_addr: unix,
        flags: Some(0),
        unknown: vec![],
    }));
    h.expect_handle_err(s, IWPM_INVALID_NLMSG_ERR);
    let s = h.query("10.0.0.1:5000", "[2001:db8::2]:4000", Some(0));
    h.expect_handle_err(s, IWPM_INVALID_NLMSG_ERR);
    let s = h.query("0.0.0.0:5000", "10.0.0.2:4000", Some(0));
    h.expect_handle_err(s, IWPM_CREATE_MAPPING_ERR);
    assert_eq!(h.core().stats().reservations_requested, 0);
    assert_eq!(h.core().mappings().count(), 0);
    h.no_peer();
}

#[test]
fn dump_has_the_c_lines_and_details_on_separate_lines() {
    let mut h = CoreHarness::booted();
    let s = h.add("10.0.0.1:4000", Some(0));
    h.expect_add_reply(s);
    let s = h.add("[2001:db8::1]:4001", Some(IWPM_FLAGS_NO_PORT_MAP));
    h.expect_add_reply(s);
    let lines = h.core().dump_lines();
    assert_eq!(lines[0], "print_iwpm_mapped_ports:");
    assert_eq!(lines[1], "Mapping #0");
    assert_eq!(lines[2], "Local address IPV6 2001:db8::1:4001(0x0FA1)");
    assert_eq!(lines[3], "Mapped address IPV6 2001:db8::1:4001(0x0FA1)");
    assert!(lines[4].contains("refcount 1") && lines[4].contains("no_port_map yes"));
    assert_eq!(lines[5], "Mapping #1");
    assert_eq!(lines[6], "Local address IPV4 10.0.0.1:4000(0x0FA0)");
    assert_eq!(lines[7], "Mapped address IPV4 10.0.0.1:40000(0x9C40)");
    let extra: Vec<_> = lines
        .iter()
        .filter(|l| {
            l.as_str() != "print_iwpm_mapped_ports:"
                && !l.starts_with("Mapping #")
                && !l.starts_with("Local address")
                && !l.starts_with("Mapped address")
        })
        .collect();
    assert!(extra.iter().all(|l| !l.contains("Mapping #")));
    assert_eq!(
        lines.iter().filter(|l| l.starts_with("Mapping #")).count(),
        2
    );
    // About the daemon, after the table: not indented under the last mapping (issue 43,
    // friction 13).
    assert!(lines
        .iter()
        .any(|l| l.starts_with("kernel client 2 registered: device siw0")));
    assert!(lines
        .last()
        .is_some_and(|l| l.starts_with("peer exchanges in flight: ")));
}

#[test]
fn every_kernel_bound_action_is_one_datagram() {
    let mut h = CoreHarness::new(config(), Instant::now());
    h.host.start(h.now);
    let mut n = 0;
    while let Some(a) = h.host.poll_action() {
        if let Action::ToKernel(b) = a {
            assert_eq!(
                u32::from_ne_bytes(b[0..4].try_into().unwrap()) as usize,
                b.len()
            );
            n += 1;
        }
    }
    assert_eq!(n, 1);
}

#[test]
fn the_mapping_gauge_follows_every_add_and_remove() {
    let mut h = CoreHarness::booted();
    for port in 5000..5010 {
        let s = h.add(&format!("10.0.0.1:{port}"), Some(IWPM_FLAGS_NO_PORT_MAP));
        h.expect_add_reply(s);
        assert_eq!(
            h.core().stats().mappings,
            h.core().mappings().count() as u64
        );
    }
    for port in 5000..5010 {
        h.remove(&format!("10.0.0.1:{port}"));
        assert_eq!(
            h.core().stats().mappings,
            h.core().mappings().count() as u64
        );
    }
    assert_eq!(h.core().stats().mappings, 0);
}
