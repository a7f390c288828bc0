//! Each cross-host invariant can fail: the fault schedule is what keeps these runs green,
//! so with explanations switched off the simulator must report the trouble the faults
//! cause.

use std::time::Duration;

use iwpm_sim::plan::{Item, Scenario, Scope, What, JOB_PORT};
use iwpm_sim::{ViolationKind, World};

fn at(ms: u64, what: What) -> Item {
    Item {
        at: Duration::from_millis(ms),
        what,
    }
}

/// Host 0 listens on the job port at 100 ms.
fn listen() -> Item {
    at(
        100,
        What::Listen {
            host: 0,
            port: JOB_PORT,
        },
    )
}

/// Host 1 connects (connection `id`) to host 0's job port at `ms`.
fn connect(ms: u64, id: u32) -> Item {
    at(
        ms,
        What::Connect {
            id,
            from: 1,
            to: 0,
            port: JOB_PORT,
        },
    )
}

/// With explanations off the run reports `kind` first; with them on, nothing.
fn fails_only_unexplained(s: &Scenario, kind: ViolationKind) {
    assert_eq!(first_kind(s, false), Some(kind));
    assert_eq!(first_kind(s, true), None);
}

fn scenario(items: Vec<Item>) -> Scenario {
    Scenario {
        seed: 99,
        hosts: 2,
        ranks: 1,
        port_mapped: vec![true, true],
        items,
        families: Default::default(),
        auth: Default::default(),
    }
}

fn first_kind(s: &Scenario, explain: bool) -> Option<ViolationKind> {
    let mut w = World::new(s.clone());
    w.explain_faults = explain;
    let (violations, _, _) = w.run();
    violations.first().map(|v| v.kind)
}

/// Host 1's source has spent its half of host 0's REMOTE_INFO budget (spoofed REQUESTs),
/// so the REMOTE_INFO of its real connect waits for the ACK; held back by reordering for
/// longer than host 1's wait for the delivery notice (3 x 20 ms), the ACK loses the race
/// with the connection and host 0 names the peer by its mapped address. (With a 50 ms
/// delay the notice still comes in time: that run has no violation.)
#[test]
fn a_late_remote_info_is_a_wrong_peer() {
    let s = scenario(vec![
        listen(),
        at(
            200,
            What::Squat {
                victim: 1,
                target: 0,
                port: JOB_PORT,
                rate: 300,
                lasts: Duration::from_secs(1),
            },
        ),
        at(
            1_500,
            What::Reorder {
                scope: Scope::Host(1),
                per_mille: 1000,
                extra: Duration::from_millis(150),
                lasts: Duration::from_secs(3),
            },
        ),
        connect(2_000, 1),
        connect(2_100, 2),
        connect(2_200, 3),
        at(6_000, What::Close { id: 1 }),
        at(6_000, What::Close { id: 2 }),
        at(6_000, What::Close { id: 3 }),
    ]);
    fails_only_unexplained(&s, ViolationKind::WrongPeer);
}

/// A connect while host 1's daemon is down goes unmapped.
#[test]
fn a_connect_without_a_daemon_goes_unmapped() {
    let s = scenario(vec![
        listen(),
        at(
            1_000,
            What::Crash {
                host: 1,
                down: Duration::from_secs(2),
            },
        ),
        connect(1_500, 1),
        at(5_000, What::Close { id: 1 }),
    ]);
    fails_only_unexplained(&s, ViolationKind::Unmapped);
}

/// Every REQUEST lost for longer than the kernel waits: the 10 s timeout.
#[test]
fn a_connect_whose_requests_are_all_lost_times_out() {
    let s = scenario(vec![
        listen(),
        at(
            900,
            What::Loss {
                scope: Scope::Host(0),
                per_mille: 1000,
                lasts: Duration::from_secs(12),
            },
        ),
        connect(1_000, 1),
        at(15_000, What::Close { id: 1 }),
    ]);
    fails_only_unexplained(&s, ViolationKind::KernelTimeout);
}

/// A hand-built scenario naming a host the fleet lacks is refused, not a panic.
#[test]
fn an_item_naming_a_missing_host_is_refused() {
    let s = scenario(vec![at(
        100,
        What::Listen {
            host: 5,
            port: JOB_PORT,
        },
    )]);
    assert_eq!(first_kind(&s, true), Some(ViolationKind::Sim));
}
