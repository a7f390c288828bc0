//! Cost of one restart state file write at several table sizes, without IO: the snapshot
//! the event loop takes (`Core::saved_mappings_into`) is a plain copy; what the writer
//! thread spends is the text encoding measured here (IPv4 and IPv6 addresses), and the
//! checked decode a restart pays once. Prints ns per mapping (best of 5 rounds).
//! `cargo bench -p iwpm-core --bench state_file`; instructions per mapping:
//! `IWPM_BENCH_MAPPINGS=10000 valgrind --tool=callgrind <bench binary>`.
//!
//! No bench framework, as for `table.rs`: a plain `harness = false` main.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Instant;

use iwpm_core::state_file::{SavedMapping, StateFile};

const ROUNDS: usize = 5;

fn file(n: usize, v6: bool) -> StateFile {
    let mappings = (0..n)
        .map(|i| {
            let ip: IpAddr = if v6 {
                Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, (i >> 16) as u16, i as u16).into()
            } else {
                Ipv4Addr::new(10, (i >> 16) as u8, (i >> 8) as u8, i as u8).into()
            };
            let local = SocketAddr::new(ip, 4000 + (i % 20000) as u16);
            let mapped = SocketAddr::new(ip, 32768 + (i % 28000) as u16);
            // NO_PORT_MAP (siw) maps an endpoint to itself
            let no_port_map = i % 2 == 0;
            SavedMapping {
                owner: 2,
                refcount: 1 + (i % 3) as u32,
                no_port_map,
                connector: i % 5 == 0,
                local,
                mapped: if no_port_map { local } else { mapped },
            }
        })
        .collect();
    StateFile {
        host: "node17".into(),
        boot_id: "4f1c5a7e-2b1d-4c8e-9d3a-6b0f2e1a9c77".into(),
        mappings,
    }
}

fn best_ns_per_mapping(n: usize, rounds: usize, mut f: impl FnMut()) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..rounds {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed().as_nanos() as f64 / n as f64);
    }
    best
}

fn main() {
    // IWPM_BENCH_MAPPINGS=N: only that size, one round (e.g. under callgrind)
    let only: Option<usize> = std::env::var("IWPM_BENCH_MAPPINGS")
        .ok()
        .and_then(|v| v.parse().ok());
    let (sizes, rounds) = match only {
        Some(n) => (vec![n], 1),
        None => (vec![1_000, 10_000, 50_000], ROUNDS),
    };
    println!("mappings   family   encode ns/mapping   decode ns/mapping   bytes/mapping");
    for v6 in [false, true] {
        for &n in &sizes {
            let f = file(n, v6);
            let mut bytes = Vec::new();
            let enc = best_ns_per_mapping(n, rounds, || bytes = black_box(f.encode()));
            let dec = best_ns_per_mapping(n, rounds, || {
                let back = StateFile::decode(black_box(&bytes)).expect("round trip");
                assert_eq!(back.mappings.len(), n);
            });
            assert_eq!(StateFile::decode(&bytes).unwrap(), f, "round trip");
            println!(
                "{n:>8}   {:<6} {enc:>19.0} {dec:>19.0} {:>15.1}",
                if v6 { "IPv6" } else { "IPv4" },
                bytes.len() as f64 / n as f64
            );
        }
    }
}
