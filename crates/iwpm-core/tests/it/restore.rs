//! Restart from the state file (`Core::start_after_restart`) reconciled with the kernel's MAPINFO
//! replay: a complete replay sets the kernel's counts and frees what it does not list, a
//! truncated one keeps the saved counts, an empty one frees everything, and recorded ports
//! are reserved exactly once (a replayed record never binds a restored port again).

use iwpm_testkit::core_host as common;

use std::time::{Duration, Instant};

use common::*;
use iwpm_core::state_file::SavedMapping;
use iwpm_core::{Previous, SettleReport};

fn saved(local: &str, mapped: &str, refcount: u32) -> SavedMapping {
    SavedMapping {
        owner: iwpm_proto::consts::RDMA_NL_IWCM,
        refcount,
        no_port_map: local == mapped,
        connector: false,
        local: addr(local),
        mapped: addr(mapped),
    }
}

/// A core that restored `table` and whose kernel answered HELLO(4) (replay window open).
fn restored(table: &[SavedMapping]) -> CoreHarness {
    let mut h = CoreHarness::new(config(), Instant::now());
    let report = h.start_after_restart(Previous {
        mappings: table,
        inherited_ports: false,
    });
    assert_eq!(report.restored, table.len(), "{report:?}");
    assert!(h.core().recovering());
    h.start_answered();
    h
}

/// What settling did since the last look (the core settles within its `handle_*` calls).
fn settle(h: &mut CoreHarness) -> SettleReport {
    h.pump();
    std::mem::take(&mut h.settled)
}

fn table() -> Vec<SavedMapping> {
    vec![
        saved("0.0.0.0:5000", "0.0.0.0:40020", 3),
        saved("10.0.0.1:4000", "10.0.0.1:40010", 1),
        saved("10.0.0.1:6000", "10.0.0.1:6000", 1),
        saved("10.0.0.2:4000", "10.0.0.2:40011", 2),
    ]
}

#[test]
fn restore_reserves_exactly_the_saved_ports_once() {
    let h = restored(&table());
    let mut held: Vec<String> = h.ports().held.values().map(|a| a.to_string()).collect();
    held.sort();
    assert_eq!(held, ["0.0.0.0:40010", "0.0.0.0:40011", "0.0.0.0:40020"]);
    assert_eq!(h.refcount("0.0.0.0:5000"), Some(3));
    assert_eq!(h.refcount("10.0.0.2:4000"), Some(2));
    assert_eq!(h.core().saved_mappings().len(), 4);
}

#[test]
fn complete_replay_sets_the_kernels_counts_and_frees_the_rest() {
    let mut h = restored(&table());
    let binds_before = h.ports().binds.len();
    h.mapinfo_records(&[
        ("0.0.0.0:5000", "0.0.0.0:40020", Some(0)),
        ("0.0.0.0:5000", "0.0.0.0:40020", Some(0)),
        ("10.0.0.1:4000", "10.0.0.1:40010", Some(0)),
        ("10.0.0.1:4000", "10.0.0.1:40010", Some(0)),
        (
            "10.0.0.1:6000",
            "10.0.0.1:6000",
            Some(iwpm_proto::consts::IWPM_FLAGS_NO_PORT_MAP),
        ),
    ]);
    assert_eq!(h.ports().binds.len(), binds_before, "no port bound again");
    // Until the replay ends, nothing is decided.
    assert_eq!(settle(&mut h), SettleReport::default());
    h.mapinfo_num(5);
    let r = settle(&mut h);
    assert_eq!((r.confirmed, r.freed, r.kept), (3, 1, 0), "{r:?}");
    assert_eq!(
        h.refcount("0.0.0.0:5000"),
        Some(2),
        "the kernel has two users"
    );
    assert_eq!(
        h.refcount("10.0.0.1:4000"),
        Some(2),
        "more records than saved"
    );
    assert_eq!(h.refcount("10.0.0.1:6000"), Some(1));
    assert_eq!(
        h.refcount("10.0.0.2:4000"),
        None,
        "not in the kernel any more"
    );
    assert_eq!(h.ports().releases, 1);
    assert!(!h.core().recovering());
    h.core().check_invariants().unwrap();
}

#[test]
fn truncated_replay_keeps_the_saved_counts() {
    let mut h = restored(&table());
    h.mapinfo_records(&[("0.0.0.0:5000", "0.0.0.0:40020", Some(0))]);
    // No MAPINFO_NUM: the window closes on its timer.
    assert!(h.host.poll_timeout().is_some());
    h.advance(Duration::from_secs(10));
    let r = settle(&mut h);
    assert_eq!((r.kept, r.freed, r.replayed), (4, 0, 1), "{r:?}");
    assert_eq!(h.refcount("0.0.0.0:5000"), Some(3));
    assert_eq!(h.refcount("10.0.0.2:4000"), Some(2));
    assert_eq!(h.ports().releases, 0);
    assert!(!h.core().recovering());
}

#[test]
fn truncated_replay_keeps_only_the_connectors_it_listed() {
    let connector = |local: &str, mapped: &str| SavedMapping {
        connector: true,
        ..saved(local, mapped, 1)
    };
    let mut t = table();
    t.push(connector("10.0.0.1:37358", "10.0.0.1:40030"));
    t.push(connector("10.0.0.1:54129", "10.0.0.1:40031"));
    let mut h = restored(&t);
    assert_eq!(
        h.core()
            .saved_mappings()
            .iter()
            .filter(|m| m.connector)
            .count(),
        2,
        "saved again as connectors"
    );
    h.mapinfo_records(&[
        ("0.0.0.0:5000", "0.0.0.0:40020", Some(0)),
        ("10.0.0.1:37358", "10.0.0.1:40030", Some(0)),
    ]);
    h.advance(Duration::from_secs(10));
    let r = settle(&mut h);
    // the listed connector stays; the other ended while no daemon listened
    assert_eq!((r.kept, r.freed, r.replayed), (5, 1, 2), "{r:?}");
    assert_eq!(h.refcount("10.0.0.1:37358"), Some(1));
    assert_eq!(h.refcount("10.0.0.1:54129"), None);
    assert_eq!(
        h.refcount("10.0.0.2:4000"),
        Some(2),
        "listeners keep the file's word"
    );
    assert_eq!(h.ports().releases, 1);
    h.core().check_invariants().unwrap();
}

#[test]
fn empty_replay_frees_every_restored_mapping() {
    let mut h = restored(&table());
    h.advance(Duration::from_secs(10));
    let r = settle(&mut h);
    assert_eq!(r.freed, 4, "{r:?}");
    assert!(h.ports().held.is_empty());
    assert_eq!(h.core().mappings().count(), 0);
}

#[test]
fn a_saved_port_taken_meanwhile_fails_that_mapping_only() {
    let mut h = CoreHarness::new(config(), Instant::now());
    h.ports_mut()
        .fail_next
        .push_back(iwpm_core::ReserveError::AddrInUse);
    let r = h.start_after_restart(Previous {
        mappings: &table(),
        inherited_ports: false,
    });
    assert_eq!((r.restored, r.failed), (3, 1), "{r:?}");
    assert_eq!(h.refcount("0.0.0.0:5000"), None);
    assert_eq!(h.refcount("10.0.0.1:4000"), Some(1));
}

/// The committed fuzz seeds of the state-file parser (`fuzz/corpus/state_file/`) replay
/// clean on stable; the valid ones are accepted.
#[test]
fn state_file_corpus_replays_clean() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/state_file");
    let mut n = 0;
    let mut valid = 0;
    for entry in std::fs::read_dir(&dir).expect("fuzz/corpus/state_file") {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        iwpm_testkit::model::state_file(&bytes);
        valid += usize::from(iwpm_core::state_file::StateFile::decode(&bytes).is_ok());
        n += 1;
    }
    assert!(n >= 4 && valid >= 2, "{n} seeds, {valid} valid");
}

/// A shell holding inherited ports is woken up when a truncated replay's window closes,
/// even with nothing restored, so it can close the ports no mapping claimed.
#[test]
fn watched_recovery_wakes_the_shell_at_the_window_end() {
    let mut h = restored(&[]);
    h.mapinfo_records(&[("0.0.0.0:5000", "0.0.0.0:40020", Some(0))]);
    assert_eq!(h.host.poll_timeout(), None, "nobody waits");
    let mut h = CoreHarness::new(config(), Instant::now());
    h.start_after_restart(Previous {
        mappings: &[],
        inherited_ports: true,
    });
    h.start_answered();
    h.mapinfo_records(&[("0.0.0.0:5000", "0.0.0.0:40020", Some(0))]);
    let end = h.host.poll_timeout().expect("the window's end");
    assert!(h.core().recovering());
    assert_eq!(h.recovery_ended, 0);
    h.advance(end - h.now);
    assert!(!h.core().recovering());
    assert_eq!(h.recovery_ended, 1);
    assert_eq!(h.host.poll_timeout(), None);
}

/// A connect whose QUERY failed (a REJECT, or the daemon died before answering) leaves the
/// kernel with the identity mapping while the state file saved our connector to a reserved
/// port. The replayed identity record wins: the restored connector gives way (its port is
/// released), the record becomes the mapping, and the kernel's ACK_NUM counts it (before,
/// the record was refused as a duplicate and the ACK_NUM came out short). `iwpm-sim` seed
/// 2864 (`--keep 38,56`).
#[test]
fn a_replayed_identity_record_replaces_the_restored_connector_it_contradicts() {
    let connector = SavedMapping {
        connector: true,
        ..saved("10.0.0.1:5000", "10.0.0.1:41000", 1)
    };
    let mut h = restored(&[connector, saved("10.0.0.1:4000", "10.0.0.1:40010", 1)]);
    h.kernel_in.clear();
    h.mapinfo_records(&[
        ("10.0.0.1:5000", "10.0.0.1:5000", Some(0)),
        ("10.0.0.1:4000", "10.0.0.1:40010", Some(0)),
    ]);
    assert!(
        h.kernel_in
            .iter()
            .all(|(_, m)| !matches!(m, iwpm_proto::netlink::DaemonMsg::HandleErr(_))),
        "no HANDLE_ERR: {:?}",
        h.kernel_in
    );
    let seq = h.mapinfo_num(2);
    let ack = h.kernel_in.iter().find_map(|(_, m)| match m {
        iwpm_proto::netlink::DaemonMsg::MapInfoNum(r) if r.seq == seq => Some(r.ack_num),
        _ => None,
    });
    assert_eq!(ack, Some(2), "both records counted");
    let mapped: Vec<String> = h
        .core()
        .mappings()
        .map(|m| format!("{} -> {}", m.local_endpoint, m.mapped_endpoint))
        .collect();
    assert!(
        mapped.iter().any(|m| m == "10.0.0.1:5000 -> 10.0.0.1:5000"),
        "{mapped:?}"
    );
    assert!(!mapped.iter().any(|m| m.contains("41000")), "{mapped:?}");
    assert_eq!(h.core().stats().mapinfo_replaced, 1);
    assert_eq!(h.core().stats().mapinfo_conflicts, 0);
    settle(&mut h);
    h.core().check_invariants().unwrap();
}

/// Requests that arrive while restored mappings wait to be settled keep their effect: an
/// ADD sharing a restored wildcard listener during a truncated replay's window, and a
/// REMOVE after the records of a complete replay, both change the settled count. A REMOVE
/// read before any record was already missing from the kernel's replay, so it does not
/// count twice against a replayed count, but it does against the state file's count of a
/// listener the truncated replay never reached. Found by the core fuzzer's `Restore` op
/// (seed `restart-window`).
#[test]
fn requests_during_the_replay_keep_their_references() {
    let table = [
        saved("0.0.0.0:5000", "0.0.0.0:40020", 1),
        saved("10.0.0.1:4000", "10.0.0.1:40010", 2),
    ];
    let mut h = restored(&table);
    h.mapinfo_records(&[
        ("0.0.0.0:5000", "0.0.0.0:40020", Some(0)),
        ("10.0.0.1:4000", "10.0.0.1:40010", Some(0)),
    ]);
    h.reg_pid();
    h.kernel_in.clear();
    let seq = h.add("0.0.0.0:5000", Some(0));
    let _ = h.expect_add_reply(seq);
    assert_eq!(h.refcount("0.0.0.0:5000"), Some(2));
    h.advance(Duration::from_secs(10));
    let r = settle(&mut h);
    assert_eq!((r.kept, r.freed), (2, 0), "{r:?}");
    assert_eq!(
        h.refcount("0.0.0.0:5000"),
        Some(2),
        "the new listener's reference"
    );
    assert_eq!(h.refcount("10.0.0.1:4000"), Some(2), "the saved count");

    // (a REMOVE after the records of a complete replay)
    let mut h = restored(&table);
    h.mapinfo_records(&[
        ("0.0.0.0:5000", "0.0.0.0:40020", Some(0)),
        ("10.0.0.1:4000", "10.0.0.1:40010", Some(0)),
        ("10.0.0.1:4000", "10.0.0.1:40010", Some(0)),
    ]);
    h.remove("10.0.0.1:4000");
    h.mapinfo_num(3);
    let r = settle(&mut h);
    assert_eq!(r.confirmed, 2, "{r:?}");
    assert_eq!(
        h.refcount("10.0.0.1:4000"),
        Some(1),
        "one of two users went"
    );
    h.core().check_invariants().unwrap();

    // (a REMOVE before the records: the complete replay already lacks it)
    let mut h = restored(&table);
    h.remove("10.0.0.1:4000");
    assert_eq!(h.refcount("10.0.0.1:4000"), Some(1));
    h.mapinfo_records(&[
        ("0.0.0.0:5000", "0.0.0.0:40020", Some(0)),
        ("10.0.0.1:4000", "10.0.0.1:40010", Some(0)),
    ]);
    h.mapinfo_num(2);
    let r = settle(&mut h);
    assert_eq!((r.confirmed, r.freed), (2, 0), "{r:?}");
    assert_eq!(h.refcount("10.0.0.1:4000"), Some(1), "not dropped twice");
    h.core().check_invariants().unwrap();

    // (a REMOVE before a truncated replay that never reached the listener: the state
    // file's count loses it)
    let mut h = restored(&table);
    h.remove("10.0.0.1:4000");
    h.mapinfo_records(&[("0.0.0.0:5000", "0.0.0.0:40020", Some(0))]);
    h.advance(Duration::from_secs(10));
    let r = settle(&mut h);
    assert_eq!((r.kept, r.freed), (2, 0), "{r:?}");
    assert_eq!(h.refcount("10.0.0.1:4000"), Some(1), "saved 2, one removed");
    h.core().check_invariants().unwrap();
}

/// A MAPINFO record flagged NO_PORT_MAP whose mapped port is not its local port (no
/// kernel of ours sends one) once became a mapping that the state file wrote but refused
/// to read back, so after the next restart the whole file was ignored and every mapping
/// waited for the replay alone. The reader now keeps such a line. Found by the core
/// fuzzer's `Restore` op, which models the ignored file as `iwpmd` does.
#[test]
fn a_no_port_map_record_with_another_port_keeps_the_state_file_readable() {
    let mut h = restored(&[]);
    h.mapinfo_records(&[(
        "10.0.0.1:4000",
        "10.0.0.1:40000",
        Some(iwpm_proto::consts::IWPM_FLAGS_NO_PORT_MAP),
    )]);
    let file = iwpm_core::state_file::StateFile {
        host: "h".into(),
        boot_id: "b".into(),
        mappings: h.core().saved_mappings(),
    };
    assert_eq!(file.mappings.len(), 1);
    let back = iwpm_core::state_file::StateFile::decode(&file.encode());
    assert!(back.is_ok(), "{back:?}");
}

/// nfsd's `0.0.0.0:20049` and `[::]:20049` listeners, both mapped, survive a restart
/// through the state file and the kernel's replay, whichever record it replays first:
/// both restored, both confirmed, neither port bound twice (`docs/protocol.md` §4.5).
#[test]
fn wildcards_of_both_families_survive_a_restart() {
    let mut before = CoreHarness::booted();
    let mut mapped = Vec::new();
    for local in ["0.0.0.0:20049", "[::]:20049"] {
        let s = before.add(local, Some(0));
        mapped.push((local, before.expect_add_reply(s).to_socket_addr().unwrap()));
    }
    let saved_table = iwpm_core::state_file::StateFile {
        host: "h".into(),
        boot_id: "b".into(),
        mappings: before.core().saved_mappings(),
    };
    let decoded = iwpm_core::state_file::StateFile::decode(&saved_table.encode()).unwrap();
    assert_eq!(decoded.mappings.len(), 2);
    for reversed in [false, true] {
        let mut h = restored(&decoded.mappings);
        assert_eq!(h.ports().held.len(), 2);
        let binds_before = h.ports().binds.len();
        let mut replay: Vec<(String, String)> = mapped
            .iter()
            .map(|(l, m)| (l.to_string(), m.to_string()))
            .collect();
        if reversed {
            replay.reverse();
        }
        let records: Vec<(&str, &str, Option<u32>)> = replay
            .iter()
            .map(|(l, m)| (l.as_str(), m.as_str(), Some(0)))
            .collect();
        h.mapinfo_records(&records);
        h.no_kernel();
        assert_eq!(h.ports().binds.len(), binds_before, "no port bound again");
        h.mapinfo_num(2);
        let r = settle(&mut h);
        assert_eq!((r.confirmed, r.freed), (2, 0), "{r:?}");
        assert_eq!(h.refcount("0.0.0.0:20049"), Some(1));
        assert_eq!(h.refcount("[::]:20049"), Some(1));
        assert_eq!(h.core().stats().mapinfo_conflicts, 0);
        h.core().check_invariants().unwrap();
    }
}
