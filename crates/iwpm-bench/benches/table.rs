//! Core cost of one ADD + REMOVE at several numbers of live mappings, without IO: the
//! daemon's share of the churn that `iwpm-bench` measures end to end. Port-mapped (a fake
//! reservation) and NO_PORT_MAP (siw's path, as on the rig). Prints ns per op (best of 5
//! rounds, each 20000 ops) and the ratio to the smallest level, which should stay near 1
//! (hash-indexed tables). `cargo bench -p iwpm-bench --bench table`; instructions per op:
//! `IWPM_BENCH_OPS=2000 IWPM_BENCH_LIVE=100 valgrind --tool=callgrind <bench binary>`.
//!
//! No bench framework: a plain `harness = false` main keeps CI's compile time unchanged.
//! Here and not in `iwpm-core` because it drives the core through the test kit's harness,
//! which the core's own builds do not reach for.

use iwpm_testkit::core_host as common;

use std::hint::black_box;
use std::time::Instant;

use iwpm_proto::consts::{IWPM_FLAGS_NO_PORT_MAP, NLM_F_REQUEST, RDMA_NL_IWCM};
use iwpm_proto::netlink::{encode_kernel_msg, Envelope, KernelMsg, ManageMappingRequest};

const OPS: usize = 20_000;
const ROUNDS: usize = 5;

fn datagram(seq: u32, msg: &KernelMsg) -> Vec<u8> {
    let env = Envelope {
        client: RDMA_NL_IWCM,
        flags: NLM_F_REQUEST,
        seq,
        pid: 0,
    };
    let mut b = Vec::new();
    encode_kernel_msg(&env, msg, &mut b);
    b
}

fn manage(local: &str, flags: Option<u32>) -> ManageMappingRequest {
    ManageMappingRequest {
        echo_seq: 0,
        addr: common::sa(local),
        flags,
        unknown: vec![],
    }
}

/// OPS ADD + REMOVE pairs, each with its own header seq (a repeated seq would be dropped
/// by the reply-once rule, which is not the path being measured).
fn ops(ops: usize, flags: Option<u32>) -> Vec<(Vec<u8>, Vec<u8>)> {
    (0..ops)
        .map(|i| {
            let seq = 1_000_000 + 2 * i as u32;
            let m = manage("192.0.2.1:7000", flags);
            (
                datagram(seq, &KernelMsg::AddMapping(m.clone())),
                datagram(
                    seq + 1,
                    &KernelMsg::RemoveMapping(manage("192.0.2.1:7000", None)),
                ),
            )
        })
        .collect()
}

fn main() {
    // IWPM_BENCH_OPS=N for a short run (e.g. under `valgrind --tool=callgrind`)
    let n_ops: usize = std::env::var("IWPM_BENCH_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(OPS);
    let rounds = if n_ops < OPS { 1 } else { ROUNDS };
    // IWPM_BENCH_LIVE=N: only that level
    let levels: Vec<usize> = match std::env::var("IWPM_BENCH_LIVE")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        Some(n) => vec![n],
        None => vec![100, 1_000, 10_000, 50_000],
    };
    println!("live mappings   mode          ns per ADD+REMOVE   vs first level");
    for (mode, flags) in [
        ("port-mapped", Some(0)),
        ("no-port-map", Some(IWPM_FLAGS_NO_PORT_MAP)),
    ] {
        let mut base = None;
        for &live in &levels {
            let mut h = common::CoreHarness::booted();
            for i in 0..live {
                let ip = format!("10.{}.{}.{}", (i >> 16) & 255, (i >> 8) & 255, i & 255);
                h.add(&format!("{ip}:4000"), flags);
            }
            h.kernel_in.clear();
            let batch = ops(n_ops, flags);
            assert_eq!(h.core().stats().mappings, live as u64, "setup ADDs failed");
            let mut best = f64::MAX;
            for _ in 0..rounds {
                let t = Instant::now();
                for (add, remove) in &batch {
                    let receipt = h.host.handle_kernel_datagram(h.now, black_box(add));
                    black_box(&receipt);
                    while let Some(a) = h.host.poll_action() {
                        black_box(a);
                    }
                    let receipt = h.host.handle_kernel_datagram(h.now, black_box(remove));
                    black_box(&receipt);
                    while let Some(a) = h.host.poll_action() {
                        black_box(a);
                    }
                }
                best = best.min(t.elapsed().as_nanos() as f64 / n_ops as f64);
                assert_eq!(
                    h.core().stats().mappings,
                    live as u64,
                    "ADD/REMOVE did not pair"
                );
                // the next round's seqs must be new again
                h.now += std::time::Duration::from_secs(60);
            }
            let first = *base.get_or_insert(best);
            println!(
                "{live:>13}   {mode:<12} {best:>19.0} {:>16.2}",
                best / first
            );
        }
    }
}
