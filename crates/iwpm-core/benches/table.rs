//! Core cost of one ADD + REMOVE at several numbers of live mappings, without IO: the
//! daemon's share of the churn that `iwpm-bench` measures end to end. Prints ns per op
//! (best of 5 rounds, each 20000 ops) and the ratio to the smallest level, which should
//! stay near 1 (hash-indexed tables). `cargo bench -p iwpm-core --bench table`.
//!
//! No bench framework: a plain `harness = false` main keeps CI's compile time unchanged.

#[path = "../tests/common/mod.rs"]
#[allow(unreachable_pub)]
mod common;

use std::hint::black_box;
use std::time::Instant;

use iwpm_proto::consts::{NLM_F_REQUEST, RDMA_NL_IWCM};
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

fn manage(local: &str) -> ManageMappingRequest {
    ManageMappingRequest {
        echo_seq: 0,
        addr: common::sa(local),
        flags: None,
        unknown: vec![],
    }
}

fn main() {
    let mut base = None;
    println!("live mappings   ns per ADD+REMOVE   vs first level");
    for live in [100usize, 1_000, 10_000, 50_000] {
        let mut h = common::Host::booted();
        for i in 0..live {
            let ip = format!("10.{}.{}.{}", (i >> 16) & 255, (i >> 8) & 255, i & 255);
            h.add(&format!("{ip}:4000"), None);
        }
        h.kernel_in.clear();
        let add = datagram(1_000_000, &KernelMsg::AddMapping(manage("192.0.2.1:7000")));
        let remove = datagram(
            1_000_001,
            &KernelMsg::RemoveMapping(manage("192.0.2.1:7000")),
        );
        let mut best = f64::MAX;
        for _ in 0..ROUNDS {
            let t = Instant::now();
            for _ in 0..OPS {
                h.core
                    .handle_kernel_datagram(h.now, black_box(&add), &mut h.ports);
                while let Some(a) = h.core.poll_action() {
                    black_box(a);
                }
                h.core
                    .handle_kernel_datagram(h.now, black_box(&remove), &mut h.ports);
                while let Some(a) = h.core.poll_action() {
                    black_box(a);
                }
            }
            best = best.min(t.elapsed().as_nanos() as f64 / OPS as f64);
        }
        let first = *base.get_or_insert(best);
        println!("{live:>13} {best:>19.0} {:>16.2}", best / first);
    }
}
