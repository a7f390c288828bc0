//! The scale table: one MPI-style all-to-all job on N hosts (every host listens, every
//! host connects to `fanout` others, or all of them), no faults, and what it cost per
//! host: messages (UDP, netlink, emulated TCP/MPA), wall time, and (measured by the
//! binary in a child process) peak memory.
//!
//! Per-step invariant checks are off here unless asked for (`--checked`: they walk a
//! host's mappings after each event that changed its table); the peer checks at
//! establishment and the quiescence checks always run.

use std::time::{Duration, Instant};

use crate::plan::{Item, Scenario, What, JOB_PORT};
use crate::rng::Rng;
use crate::world::World;
use crate::Violation;

/// One row of the table.
#[derive(Clone, Debug)]
pub struct Row {
    /// Hosts.
    pub hosts: usize,
    /// Connects planned.
    pub connects: u64,
    /// Established with the true peer on both sides.
    pub established: u64,
    /// UDP datagrams sent per host.
    pub udp_per_host: f64,
    /// Netlink datagrams (both ways) per host.
    pub netlink_per_host: f64,
    /// All messages (UDP + netlink + wire) per host.
    pub messages_per_host: f64,
    /// Wall time of the run.
    pub wall: Duration,
    /// Virtual time simulated.
    pub virtual_time: Duration,
    /// The first violation, if any.
    pub violation: Option<Violation>,
    /// Events processed.
    pub steps: u64,
}

/// The all-to-all job: `fanout` peers per host (`None`: every other host), connects spread
/// over 5 s and each closed 3 s after it started.
pub fn scenario(hosts: usize, fanout: Option<usize>, seed: u64) -> Scenario {
    let mut r = Rng::new(seed, 3);
    let fanout = fanout
        .unwrap_or(hosts.saturating_sub(1))
        .min(hosts.saturating_sub(1));
    let mut items = Vec::with_capacity(hosts * (2 * fanout + 2));
    for h in 0..hosts {
        items.push(Item {
            at: Duration::from_millis(100),
            what: What::Listen {
                host: h,
                port: JOB_PORT,
            },
        });
    }
    let mut id = 0u32;
    for from in 0..hosts {
        for k in 1..=fanout {
            id += 1;
            let at = Duration::from_millis(500) + Duration::from_micros(r.below(5_000_000));
            items.push(Item {
                at,
                what: What::Connect {
                    id,
                    from,
                    to: (from + k) % hosts,
                    port: JOB_PORT,
                },
            });
            items.push(Item {
                at: at + Duration::from_secs(3),
                what: What::Close { id },
            });
        }
    }
    for h in 0..hosts {
        items.push(Item {
            at: Duration::from_secs(12),
            what: What::Unlisten {
                host: h,
                port: JOB_PORT,
            },
        });
    }
    items.sort_by_key(|i| i.at);
    Scenario {
        seed,
        hosts,
        ranks: 1,
        port_mapped: vec![true; hosts],
        items,
        families: Default::default(),
        auth: Default::default(),
    }
}

/// Runs one row.
pub fn measure(hosts: usize, fanout: Option<usize>, seed: u64, checked: bool) -> Row {
    let started = Instant::now();
    let mut world = World::new(scenario(hosts, fanout, seed));
    world.check_every_step = checked;
    let (violations, _known, stats) = world.run();
    let wall = started.elapsed();
    let n = hosts.max(1) as f64;
    Row {
        hosts,
        connects: stats.connects,
        established: stats.established,
        udp_per_host: stats.udp as f64 / n,
        netlink_per_host: stats.netlink as f64 / n,
        messages_per_host: (stats.udp + stats.netlink + stats.wire) as f64 / n,
        wall,
        virtual_time: stats.virtual_time,
        violation: violations.into_iter().next(),
        steps: stats.steps,
    }
}
