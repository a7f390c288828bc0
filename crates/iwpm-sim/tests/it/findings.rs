//! Findings A-I (port-mapped peers' REMOTE_INFOs, the IPv6 cookie, REJECT fairness), one
//! fixed seed each. On the core before the fix (3bede92) each seed broke the invariant named
//! beside it; the fixed core must pass them all.
//!
//! The seeds and what each one found on the core before the fix are in
//! `docs/simulator.md` ("IPv6, the ledger and findings A-I").

use iwpm_sim::plan::{Profile, Scenario};
use iwpm_sim::{run, ViolationKind};

/// (finding, seed, profile, what the core before the fix breaks).
const FINDINGS: &[(&str, u64, Profile, ViolationKind)] = &[
    // Spoofed IPv6 REQUESTs from rotating /64s at an IPv6 listener.
    (
        "A (IPv6 listener)",
        15,
        Profile::Attack,
        ViolationKind::RemoteInfo,
    ),
    // The same at an IPv4 wildcard listener, asked over IPv6.
    (
        "A (IPv4 wildcard)",
        17,
        Profile::Attack,
        ViolationKind::Family,
    ),
    // One spoofed IPv6 REQUEST, then ACKs sweeping pmtime × version.
    ("B", 9, Profile::Attack, ViolationKind::Ledger),
    // 1000 concurrent port-mapped IPv6 connects from one host (and 1000 IPv4 ones).
    ("C", 1, Profile::Burst, ViolationKind::WrongPeer),
    // A real host pairing REQUEST + ACK at 2000/s, IPv4 and IPv6.
    ("D (IPv4)", 13, Profile::Attack, ViolationKind::RemoteInfo),
    ("D (IPv6)", 14, Profile::Attack, ViolationKind::RemoteInfo),
    // A captured IPv4 REQUEST + ACK replayed once a second from the victim's address.
    ("E", 10, Profile::Attack, ViolationKind::Ledger),
    // 100 spoofed sources flooding REQUESTs for a closed port.
    ("I", 20, Profile::Attack, ViolationKind::RejectLate),
];

/// What went wrong with one finding's seed, if anything.
fn check_finding(
    &(name, seed, profile, kind): &(&str, u64, Profile, ViolationKind),
) -> Option<String> {
    let out = run(&Scenario::generate(seed, profile));
    out.violations.first().map(|first| {
        format!(
            "finding {name}, seed {seed} ({}; {kind:?} before its fix): {first:?}",
            profile.name()
        )
    })
}

#[test]
fn each_finding_seed_passes() {
    // The seeds are independent and each takes seconds: two threads halve the wall time
    // of the README's test command, where this was the longest test.
    let (odd, even): (Vec<_>, Vec<_>) = FINDINGS.iter().enumerate().partition(|(i, _)| i % 2 == 1);
    let mut wrong: Vec<String> = std::thread::scope(|s| {
        let other = s.spawn(|| {
            odd.iter()
                .filter_map(|(_, f)| check_finding(f))
                .collect::<Vec<_>>()
        });
        let mut here: Vec<String> = even.iter().filter_map(|(_, f)| check_finding(f)).collect();
        here.extend(other.join().unwrap());
        here
    });
    wrong.sort();
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn attack_seeds_without_the_findings_attacks_pass() {
    // IPv6 and wildcard listeners and the rdma-core-like peer, on the same seeds: no
    // trouble without the attacks, and every one of the peer's connections found its
    // REMOTE_INFO.
    for &(_, seed, profile, _) in FINDINGS {
        if profile != Profile::Attack {
            continue;
        }
        let out = run(&Scenario::generate(seed, profile).without_findings_attacks());
        assert!(
            out.violations.is_empty(),
            "seed {seed}: {:?}",
            out.violations
        );
        assert_eq!(
            out.stats.rdma_peer_connects, out.stats.rdma_peer_found,
            "seed {seed}"
        );
        assert!(out.stats.rdma_peer_connects > 0, "seed {seed}");
    }
}
