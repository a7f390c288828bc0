//! The state-machine fuzzing driver (`iwpm_testkit::model`) on the stable toolchain: replays
//! the committed cargo-fuzz corpus `fuzz/corpus/core_sequence/` and the reproducers in
//! `fuzz/artifacts-found/core_sequence/`, and runs proptest-generated op sequences through
//! the same driver and checks.
//!
//! `IWPM_CORE_SEQ_CASES` sets the proptest case count (default 256 per property).

use std::fs;
use std::path::{Path, PathBuf};

use iwpm_testkit::model::{core_sequence, decode, encode, Driver, Op, Setup};
use proptest::prelude::*;

fn fuzz_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = match fs::read_dir(dir) {
        Ok(rd) => rd.map(|e| e.unwrap().path()).collect(),
        Err(_) => Vec::new(),
    };
    v.retain(|p| p.is_file());
    v.sort();
    v
}

fn replay(path: &Path) {
    let data = fs::read(path).unwrap();
    let outcome = std::panic::catch_unwind(|| core_sequence(&data));
    assert!(
        outcome.is_ok(),
        "core_sequence failed on {}",
        path.display()
    );
}

#[test]
fn corpus_replays_clean() {
    let dir = fuzz_dir().join("corpus/core_sequence");
    let inputs = files(&dir);
    assert!(!inputs.is_empty(), "no corpus in {}", dir.display());
    for p in &inputs {
        replay(p);
    }
}

/// Reproducers of past findings: `fixed-*` must pass (`known-*`, findings not fixed yet,
/// have their own ignored tests).
///
/// `fixed-stale-retransmit-late-timer`: a QUERY's REQUEST (3 s exchange lifetime), then one
/// `handle_timeout` 4.096 s later, as from a shell that was stopped. The core used to resend
/// the REQUEST once (its retransmission timer was due before the expiry) and only then drop
/// the exchange: `core_sequence: Request retransmitted 4.096s after it was first sent
/// (lifetime 3s)`. Fixed in the core by checking the expiry against `now`.
#[test]
fn fixed_findings_stay_fixed() {
    let dir = fuzz_dir().join("artifacts-found/core_sequence");
    let fixed: Vec<PathBuf> = files(&dir)
        .into_iter()
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("fixed-")
        })
        .collect();
    assert!(!fixed.is_empty(), "no reproducers in {}", dir.display());
    for p in &fixed {
        replay(p);
    }
}

#[test]
fn decode_inverts_encode() {
    for p in files(&fuzz_dir().join("corpus/core_sequence")) {
        let data = fs::read(&p).unwrap();
        let (setup, ops) = decode(&data);
        let again = encode(setup, &ops);
        assert_eq!(decode(&again), (setup, ops), "{}", p.display());
    }
}

// ----- seeds -----

/// Hand-written scenarios: each a full flow the fuzzer should start from.
pub(crate) fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let add = |local, flags, seq| Op::Add {
        client: 0,
        local,
        flags,
        seq,
    };
    let query = |local, remote| Op::Query {
        client: 0,
        local,
        remote,
        flags: 0,
        seq: 0,
    };
    let remove = |local| Op::Remove { client: 0, local };
    let reg_pid = Op::RegPid {
        client: 0,
        lib: 0,
        seq: 0,
    };
    let grant = Op::Answer { kind: 0, port: 0 };
    let auto = Setup {
        caps: 0xff,
        mode: 1,
        limits: 0x7f,
    };
    vec![
        (
            "add-remove",
            encode(
                auto,
                &[
                    add(4, 0, 0),
                    add(4, 0, 0),
                    add(0, 0, 0),
                    add(0, 0, 0),
                    add(10, 3, 0),
                    Op::Remove {
                        client: 0,
                        local: 4,
                    },
                    Op::Remove {
                        client: 0,
                        local: 0,
                    },
                ],
            ),
        ),
        (
            "query-accept-ack",
            encode(
                auto,
                &[
                    grant.clone(),
                    query(4, 0),
                    Op::Advance { ms: 1500 },
                    Op::Accept {
                        pick: 0,
                        port: 1,
                        from: 1,
                    },
                    Op::Accept {
                        pick: 0,
                        port: 1,
                        from: 1,
                    },
                    Op::Advance { ms: 12_000 },
                    Op::Remove {
                        client: 0,
                        local: 4,
                    },
                ],
            ),
        ),
        (
            "query-reject",
            encode(
                auto,
                &[
                    query(13, 2),
                    Op::Reject { pick: 0, from: 1 },
                    Op::Echo {
                        pick: 0,
                        at: 0,
                        xor: 0,
                    },
                ],
            ),
        ),
        (
            "passive-request-ack",
            encode(
                auto,
                &[
                    add(4, 0, 0),
                    Op::Request {
                        ap: 4,
                        src: 0,
                        handle: 1,
                        shape: 0,
                    },
                    Op::Request {
                        ap: 4,
                        src: 0,
                        handle: 1,
                        shape: 0,
                    },
                    Op::Advance { ms: 2500 },
                    Op::Ack { pick: 0, from: 1 },
                    Op::Request {
                        ap: 5,
                        src: 0,
                        handle: 2,
                        shape: 1,
                    },
                    Op::AdvanceLong { secs: 30 },
                ],
            ),
        ),
        (
            // A keyed core (mode bit 4): sealed REQUESTs (shape 8) of both families, a
            // plain one, the core's own sealed answer echoed back (from another address
            // than its sender's), replays of the model's sealed REQUESTs, a forged copy, a
            // daemon restart, and a replay after it.
            "keyed-sealed-and-replayed",
            encode(
                Setup {
                    mode: 1 | 16,
                    ..auto
                },
                &[
                    add(4, 0, 0),
                    add(9, 0, 0),
                    Op::Request {
                        ap: 4,
                        src: 0,
                        handle: 1,
                        shape: 8,
                    },
                    Op::Request {
                        ap: 12,
                        src: 2,
                        handle: 2,
                        shape: 8,
                    },
                    Op::Request {
                        ap: 4,
                        src: 0,
                        handle: 3,
                        shape: 0,
                    },
                    Op::Echo {
                        pick: 0,
                        at: 0,
                        xor: 0,
                    },
                    Op::Echo {
                        pick: 0,
                        at: 128,
                        xor: 0,
                    },
                    Op::Echo {
                        pick: 1,
                        at: 128,
                        xor: 0,
                    },
                    Op::Echo {
                        pick: 1,
                        at: 100,
                        xor: 1,
                    },
                    Op::Advance { ms: 2500 },
                    Op::Ack { pick: 0, from: 1 },
                    Op::Restore { how: 0 },
                    Op::Echo {
                        pick: 1,
                        at: 128,
                        xor: 0,
                    },
                    Op::AdvanceLong { secs: 30 },
                ],
            ),
        ),
        (
            "wildcard-listener",
            encode(
                auto,
                &[
                    add(0, 0, 0),
                    Op::Request {
                        ap: 3,
                        src: 0,
                        handle: 3,
                        shape: 6,
                    },
                    add(9, 0, 0),
                    Op::Request {
                        ap: 12,
                        src: 2,
                        handle: 4,
                        shape: 0,
                    },
                ],
            ),
        ),
        (
            "mapinfo-replay",
            encode(
                auto,
                &[
                    Op::MapInfo {
                        client: 0,
                        done: 1,
                        records: vec![[4, 0, 0], [4, 0, 0], [13, 1, 2], [5, 0x85, 0]],
                    },
                    Op::MapInfoNum {
                        client: 0,
                        send_num: 4,
                    },
                ],
            ),
        ),
        (
            "slow-reservation",
            encode(
                auto,
                &[
                    add(4, 0, 0),
                    query(7, 0),
                    Op::Request {
                        ap: 4,
                        src: 0,
                        handle: 1,
                        shape: 0,
                    },
                    Op::Advance { ms: 11_000 },
                    grant.clone(),
                    grant.clone(),
                    Op::AnswerUnknown {
                        pick: 0,
                        ok: 1,
                        port: 40_007,
                    },
                ],
            ),
        ),
        (
            "failed-reservations",
            encode(
                auto,
                &[
                    Op::Answer { kind: 3, port: 0 },
                    add(4, 0, 0),
                    Op::Answer { kind: 4, port: 0 },
                    add(4, 0, 0),
                    Op::Answer {
                        kind: 5,
                        port: 40_003,
                    },
                    Op::MapInfo {
                        client: 0,
                        done: 0,
                        records: vec![[7, 2, 0]],
                    },
                ],
            ),
        ),
        (
            "handshake-abi3",
            encode(
                Setup {
                    caps: 0x09,
                    mode: 3,
                    limits: 0x80,
                },
                &[
                    Op::NlError {
                        seq: 0,
                        error: 22,
                        request: 1,
                    },
                    Op::RegPid {
                        client: 2,
                        lib: 0,
                        seq: 0,
                    },
                    Op::Add {
                        client: 2,
                        local: 4,
                        flags: 4,
                        seq: 0,
                    },
                    Op::RegPid {
                        client: 0,
                        lib: 3,
                        seq: 0,
                    },
                    Op::Hello { abi: 4 },
                ],
            ),
        ),
        (
            "restart-replay",
            encode(
                auto,
                &[
                    add(0, 0, 0),
                    add(0, 0, 0),
                    add(10, 3, 0),
                    query(7, 0),
                    Op::Accept {
                        pick: 0,
                        port: 1,
                        from: 1,
                    },
                    Op::Restore { how: 0 },
                    reg_pid.clone(),
                    remove(4),
                    add(0, 0, 0),
                ],
            ),
        ),
        (
            "restart-window",
            encode(
                auto,
                &[
                    add(0, 0, 0),
                    add(4, 0, 0),
                    Op::Restore { how: 1 },
                    reg_pid.clone(),
                    add(0, 0, 0),
                    remove(4),
                    Op::AdvanceLong { secs: 15 },
                ],
            ),
        ),
        (
            "restart-kernel-plays",
            encode(
                auto,
                &[
                    add(4, 0, 0),
                    query(13, 0),
                    Op::Answer { kind: 3, port: 0 },
                    Op::Restore { how: 2 },
                    Op::Hello { abi: 4 },
                    Op::MapInfo {
                        client: 0,
                        done: 1,
                        records: vec![[4, 0, 0], [4, 0, 0], [13, 0x85, 0]],
                    },
                    Op::MapInfoNum {
                        client: 2,
                        send_num: 1,
                    },
                    Op::MapInfoNum {
                        client: 0,
                        send_num: 3,
                    },
                ],
            ),
        ),
        (
            "garbage",
            encode(
                auto,
                &[
                    Op::KernelRaw {
                        data: vec![0x14, 0, 0, 0, 0x01, 0x08, 1, 0, 9, 0, 0, 0],
                    },
                    Op::KernelMutate {
                        base: 0,
                        local: 4,
                        at: 40,
                        xor: 0x10,
                    },
                    Op::PeerRaw {
                        src: 0,
                        data: vec![0x24; 48],
                    },
                    Op::PeerForged {
                        ty: 0x10,
                        ips: 0,
                        handle: 7,
                        ap_port: 4000,
                        cp_port: 5000,
                        extra: 0,
                    },
                    Op::Jump { ms: 4000 },
                ],
            ),
        ),
    ]
}

/// Rewrites the seed files `fuzz/corpus/core_sequence/seed-*` (run by
/// `fuzz/make-seeds.sh`).
#[test]
#[ignore = "writes the seed corpus; run through fuzz/make-seeds.sh"]
fn write_seeds() {
    let dir = fuzz_dir().join("corpus/core_sequence");
    fs::create_dir_all(&dir).unwrap();
    for p in files(&dir) {
        if p.file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("seed-")
        {
            fs::remove_file(p).unwrap();
        }
    }
    for (name, bytes) in seeds() {
        fs::write(dir.join(format!("seed-{name}")), bytes).unwrap();
    }
}

#[test]
fn seeds_run_clean() {
    for (name, bytes) in seeds() {
        let outcome = std::panic::catch_unwind(|| core_sequence(&bytes));
        assert!(outcome.is_ok(), "seed {name} failed");
    }
}

#[test]
fn driver_sees_a_full_exchange() {
    // Sanity of the driver itself: a QUERY answered by ACCEPT leaves one reference.
    let mut d = Driver::new(Setup {
        caps: 0xff,
        mode: 1,
        limits: 0x7f,
    });
    d.step(&Op::Query {
        client: 0,
        local: 4,
        remote: 0,
        flags: 0,
        seq: 0,
    });
    d.step(&Op::Accept {
        pick: 0,
        port: 1,
        from: 1,
    });
    let s = d.core().stats();
    assert_eq!(s.mappings, 1);
    assert_eq!(s.peer_out[0], 1, "one REQUEST");
    assert_eq!(s.peer_out[2], 1, "one ACK");
    assert_eq!(d.core().mappings().next().unwrap().refcount, 1);
    assert_eq!(d.saves(), 0, "no write before the gathering delay");
    d.step(&Op::Advance { ms: 200 });
    assert_eq!(d.saves(), 1, "the new mapping is saved 200 ms later, once");
    d.finish();
}

#[test]
fn driver_restarts_settle_within_the_cores_own_calls() {
    // A restart restores the table and the kernel's replay settles it: nothing but
    // `handle_*` is called, so a core that left settling to its caller stays recovering.
    let mut d = Driver::new(Setup {
        caps: 0xff,
        mode: 1,
        limits: 0x7f,
    });
    // 0.0.0.0:4000 twice (a wildcard is shared), 10.0.0.1:4001 once.
    let add = |local| Op::Add {
        client: 0,
        local,
        flags: 0,
        seq: 0,
    };
    d.step(&add(0));
    d.step(&add(0));
    d.step(&add(4));
    d.step(&Op::Restore { how: 0 });
    assert!(!d.core().recovering(), "settled by the MAPINFO_NUM");
    let mut counts: Vec<u32> = d.core().mappings().map(|m| m.refcount).collect();
    counts.sort();
    assert_eq!(
        counts,
        [1, 2],
        "the kernel's references, through the restart"
    );
    d.step(&Op::Restore { how: 1 });
    assert!(d.core().recovering(), "the replay window is open");
    d.step(&Op::AdvanceLong { secs: 15 });
    assert!(!d.core().recovering(), "settled by the window's timeout");
    assert_eq!(d.core().mappings().count(), 2);
    d.finish();
}

// ----- proptest -----

fn op() -> impl Strategy<Value = Op> {
    let b = any::<u8>;
    prop_oneof![
        1 => (b(), b(), b()).prop_map(|(client, lib, seq)| Op::RegPid { client, lib, seq }),
        6 => (b(), b(), b(), b())
            .prop_map(|(client, local, flags, seq)| Op::Add { client, local, flags, seq }),
        6 => (b(), b(), b(), b(), b()).prop_map(|(client, local, remote, flags, seq)| {
            Op::Query { client, local, remote, flags, seq }
        }),
        5 => (b(), b()).prop_map(|(client, local)| Op::Remove { client, local }),
        2 => (b(), b(), prop::collection::vec(any::<[u8; 3]>(), 0..4))
            .prop_map(|(client, done, records)| Op::MapInfo { client, done, records }),
        1 => (b(), b()).prop_map(|(client, send_num)| Op::MapInfoNum { client, send_num }),
        1 => b().prop_map(|abi| Op::Hello { abi }),
        1 => (b(), b()).prop_map(|(seq, result)| Op::Done { seq, result }),
        1 => (b(), b(), b()).prop_map(|(seq, error, request)| Op::NlError { seq, error, request }),
        1 => prop::collection::vec(b(), 0..100).prop_map(|data| Op::KernelRaw { data }),
        2 => (b(), b(), b(), b())
            .prop_map(|(base, local, at, xor)| Op::KernelMutate { base, local, at, xor }),
        5 => (b(), b(), b(), b())
            .prop_map(|(ap, src, handle, shape)| Op::Request { ap, src, handle, shape }),
        5 => (b(), b(), b()).prop_map(|(pick, port, from)| Op::Accept { pick, port, from }),
        2 => (b(), b()).prop_map(|(pick, from)| Op::Reject { pick, from }),
        3 => (b(), b()).prop_map(|(pick, from)| Op::Ack { pick, from }),
        2 => (b(), b(), b()).prop_map(|(pick, at, xor)| Op::Echo { pick, at, xor }),
        1 => (b(), prop::collection::vec(b(), 0..70))
            .prop_map(|(src, data)| Op::PeerRaw { src, data }),
        1 => (b(), b(), any::<u64>(), any::<u16>(), any::<u16>(), b()).prop_map(
            |(ty, ips, handle, ap_port, cp_port, extra)| Op::PeerForged {
                ty, ips, handle, ap_port, cp_port, extra,
            }
        ),
        4 => (0u16..4000).prop_map(|ms| Op::Advance { ms }),
        1 => (0u16..60).prop_map(|secs| Op::AdvanceLong { secs }),
        1 => (0u16..200).prop_map(|ms| Op::Jump { ms }),
        1 => Just(Op::Tick),
        1 => Just(Op::Overrun),
        8 => (b(), any::<u16>()).prop_map(|(kind, port)| Op::Answer { kind, port }),
        1 => (b(), b(), any::<u16>())
            .prop_map(|(pick, ok, port)| Op::AnswerUnknown { pick, ok, port }),
        2 => b().prop_map(|how| Op::Restore { how }),
    ]
}

fn setup() -> impl Strategy<Value = Setup> {
    (any::<u8>(), any::<u8>(), any::<u8>()).prop_map(|(caps, mode, limits)| Setup {
        caps,
        mode,
        limits,
    })
}

fn cases() -> u32 {
    std::env::var("IWPM_CORE_SEQ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

fn play(setup: Setup, ops: &[Op]) {
    // Through the byte format, as the fuzzer would: also checks encode/decode.
    let bytes = encode(setup, ops);
    assert_eq!(decode(&bytes), (setup, ops.to_vec()));
    core_sequence(&bytes);
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_sequences_keep_every_invariant(
        setup in setup(),
        ops in prop::collection::vec(op(), 1..150),
    ) {
        play(setup, &ops);
    }
}

/// The keyed seed does what it says: the sealed REQUESTs authenticate, the echoed sealed
/// datagrams seen twice are refused as replays, and the model's oracles hold throughout
/// (a replayed sealed datagram releasing a REMOTE_INFO fails the run).
#[test]
fn the_keyed_seed_authenticates_and_refuses_replays() {
    let (_, bytes) = seeds()
        .into_iter()
        .find(|(name, _)| *name == "keyed-sealed-and-replayed")
        .unwrap();
    let (setup, ops) = decode(&bytes);
    let mut d = Driver::new(setup);
    let mut verified = 0;
    let mut replayed = 0;
    let mut wrong_source = 0;
    for op in &ops {
        d.step(op);
        let st = d.core().stats();
        verified = verified.max(st.peer_auth_verified);
        replayed = replayed.max(st.peer_auth_replayed);
        wrong_source = wrong_source.max(st.peer_auth_wrong_source);
    }
    assert!(verified >= 2, "{verified} sealed datagrams verified");
    assert!(replayed >= 2, "{replayed} replays refused");
    assert!(
        wrong_source >= 1,
        "{wrong_source} copies from another address refused"
    );
    d.finish();
}
