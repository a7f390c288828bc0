//! ADD/REMOVE churn at a number of live mappings, against the syscall floor.
//!
//! Host A's emulated kernel holds `live` listeners (each a daemon mapping and, port-mapped,
//! a reserved TCP port). One churn op is `rdma_listen` + `rdma_destroy_id` on one more
//! address: an ADD_MAPPING answered by the daemon (which reserves a port) and a
//! REMOVE_MAPPING (which frees it). The floor op is what the daemon cannot avoid for it:
//! `socket` + `bind(IP, port 0)` + `getsockname` + `close`, done by the bench in the same
//! kernel state (the daemon's `live` ports held). Batches of both alternate, so load from
//! other processes hits both alike. Two measures: wall time per op, and CPU time per op
//! (all the daemon's threads vs the bench thread doing the floor), which a shared machine
//! disturbs much less. Each figure per op is the median over the level's batches, and each
//! ratio the median of every churn batch's ratio to the floor batch right after it: a burst
//! of load from elsewhere then moves a batch or two, not the figure. (The means over all
//! ops are kept in the JSON as well.)
//!
//! Each level is churned by one caller (every op waits for the previous one: a ping-pong
//! of datagrams, two wake-ups of the daemon per op) and by several callers at once, each on
//! its own address (as many processes listening at the same time), where the daemon finds
//! several requests per wake-up.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use iwpm_kernel_emu::{AcceptMode, Listener, PortMapMode};
use iwpm_lab::progress::Status;
use iwpm_lab::{Family, Lab, LabConfig};
use serde::{Deserialize, Serialize};
use socket2::{Domain, Protocol, Socket, Type};

use crate::procfs;

/// First port of the live listeners (emulated addresses: any port works).
const LIVE_BASE_PORT: u32 = 1024;
/// The churned listener's port.
const CHURN_PORT: u16 = 65500;
/// Ops per batch; batches of churn and floor alternate.
pub(crate) const BATCH: usize = 100;
/// Callers of the concurrent churn (`--callers` changes it).
pub(crate) const CONCURRENT_CALLERS: usize = 8;

/// One churn level.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct ChurnLevel {
    /// `ipv4` or `ipv6`.
    pub family: String,
    /// Live mappings held while churning.
    pub live: usize,
    /// Threads churning at once, each on its own address (1: one op after the other).
    pub callers: usize,
    /// Churn ops (ADD + REMOVE each).
    pub ops: usize,
    /// Churn: wall µs per op (median over batches, as every per-op figure here).
    pub op_us: f64,
    /// Churn ops per second.
    pub ops_per_s: f64,
    /// Daemon event-loop CPU µs per op.
    pub daemon_cpu_us: f64,
    /// Floor: wall µs per op.
    pub floor_us: f64,
    /// Floor: CPU µs per op of the bench thread.
    pub floor_cpu_us: f64,
    /// Median over batches of the churn batch's wall time over its floor batch's.
    pub wall_ratio: f64,
    /// Median over batches of the churn batch's daemon CPU over its floor batch's CPU.
    pub cpu_ratio: f64,
    /// Daemon CPU µs per op over all the level's ops (the mean; `daemon_cpu_us` is the
    /// median over batches).
    pub daemon_cpu_us_mean: f64,
    /// Floor CPU µs per op over all the level's ops (the mean).
    pub floor_cpu_us_mean: f64,
    /// Daemon RSS with `live` mappings, bytes.
    pub rss_bytes: u64,
    /// (RSS now − RSS with no mapping) / live.
    pub bytes_per_mapping: f64,
}

/// Runs the levels in increasing order on one pair of daemons; each level once per entry
/// of `callers`.
pub(crate) fn run(
    status: &Status,
    family: Family,
    mode: PortMapMode,
    levels: &[usize],
    ops: usize,
    callers: &[usize],
) -> Result<Vec<ChurnLevel>> {
    let lab = Lab::start(LabConfig {
        family,
        mode,
        relay: None,
        taps: false,
        echo_daemon_logs: crate::verbose(),
        ..LabConfig::default()
    })
    .context("starting the lab")?;
    let side = &lab.a;
    let pid = side.daemon.as_ref().context("no daemon")?.pid();
    let ip = side.addrs.public;
    std::thread::sleep(Duration::from_millis(200));
    let rss0 = procfs::rss_bytes(pid).unwrap_or(0);
    let mut live: Vec<Listener> = Vec::new();
    let mut out = Vec::new();
    let fam = family_name(family);
    for &level in levels {
        status.counted(
            &format!("churn {fam}: adding live listeners up to {level}"),
            level as u64,
        );
        while live.len() < level {
            if live.len() % 100 == 0 {
                status.advance(live.len() as u64, "");
            }
            let port = u16::try_from(LIVE_BASE_PORT + live.len() as u32)
                .context("too many live listeners for one IP")?;
            let l = side
                .host
                .listen(SocketAddr::new(ip, port), AcceptMode::Manual, None)
                .map_err(|e| anyhow::anyhow!("listener {} of {level}: {e}", live.len() + 1))?;
            if l.info.mapping != iwpm_kernel_emu::MapOutcome::Mapped {
                bail!(
                    "listener {} not mapped: {:?}",
                    live.len() + 1,
                    l.info.mapping
                );
            }
            live.push(l);
        }
        std::thread::sleep(Duration::from_millis(100));
        let rss = procfs::rss_bytes(pid).unwrap_or(0);
        for &n in callers {
            status.counted(
                &format!("churn {fam}: {level} live, {n} caller(s), ops"),
                ops as u64,
            );
            let mut level_out = measure(&lab, pid, family, ip, ops, n, status)?;
            level_out.live = level;
            level_out.rss_bytes = rss;
            level_out.bytes_per_mapping = rss.saturating_sub(rss0) as f64 / level.max(1) as f64;
            out.push(level_out);
        }
    }
    for l in live {
        let _ = l.id.destroy();
    }
    Ok(out)
}

/// Alternating batches of churn and floor ops.
fn measure(
    lab: &Lab,
    pid: u32,
    family: Family,
    ip: IpAddr,
    ops: usize,
    callers: usize,
    status: &Status,
) -> Result<ChurnLevel> {
    let addr = SocketAddr::new(ip, CHURN_PORT);
    // The daemon reserves the churned listener's port on its IP; so does the floor.
    let floor_addr = SocketAddr::new(ip, 0);
    let mut batches: Vec<Batch> = Vec::new();
    let mut done = 0;
    while done < ops {
        let n = BATCH.min(ops - done);
        let cpu0 = procfs::cpu_ns(pid).unwrap_or(0);
        let t0 = Instant::now();
        churn_ops(lab, addr, n, callers)?;
        let churn_wall = t0.elapsed();
        let daemon_cpu = procfs::cpu_ns(pid).unwrap_or(0).saturating_sub(cpu0);
        let own0 = procfs::own_thread_cpu_ns().unwrap_or(0);
        let t1 = Instant::now();
        for _ in 0..n {
            floor_op(floor_addr)?;
        }
        let floor_wall = t1.elapsed();
        let floor_cpu = procfs::own_thread_cpu_ns()
            .unwrap_or(0)
            .saturating_sub(own0);
        let per_op = |us: f64| us / n as f64;
        batches.push(Batch {
            op_us: per_op(churn_wall.as_secs_f64() * 1e6),
            floor_us: per_op(floor_wall.as_secs_f64() * 1e6),
            daemon_cpu_us: per_op(daemon_cpu as f64 / 1e3),
            floor_cpu_us: per_op(floor_cpu as f64 / 1e3),
            ops: n,
        });
        done += n;
        status.advance(done as u64, "");
    }
    let median_of = |f: &dyn Fn(&Batch) -> f64| median(batches.iter().map(f).collect());
    let mean_of = |f: &dyn Fn(&Batch) -> f64| {
        batches.iter().map(|b| f(b) * b.ops as f64).sum::<f64>() / ops.max(1) as f64
    };
    let op_us = median_of(&|b| b.op_us);
    Ok(ChurnLevel {
        family: family_name(family).to_owned(),
        live: 0,
        callers,
        ops,
        op_us,
        ops_per_s: if op_us > 0.0 { 1e6 / op_us } else { 0.0 },
        daemon_cpu_us: median_of(&|b| b.daemon_cpu_us),
        floor_us: median_of(&|b| b.floor_us),
        floor_cpu_us: median_of(&|b| b.floor_cpu_us),
        wall_ratio: median_of(&|b| ratio(b.op_us, b.floor_us)),
        cpu_ratio: median_of(&|b| ratio(b.daemon_cpu_us, b.floor_cpu_us)),
        daemon_cpu_us_mean: mean_of(&|b| b.daemon_cpu_us),
        floor_cpu_us_mean: mean_of(&|b| b.floor_cpu_us),
        rss_bytes: 0,
        bytes_per_mapping: 0.0,
    })
}

/// One batch of churn ops and the floor batch after it, per op.
struct Batch {
    op_us: f64,
    floor_us: f64,
    daemon_cpu_us: f64,
    floor_cpu_us: f64,
    ops: usize,
}

/// The median (the mean of the middle two for an even count; 0 for none).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// `n` churn ops (`rdma_listen` + `rdma_destroy_id`) by `callers` threads at once, each
/// on its own port of `addr`'s IP, below `addr`'s (one caller: all on `addr`, one after
/// the other).
fn churn_ops(lab: &Lab, addr: SocketAddr, n: usize, callers: usize) -> Result<()> {
    let one = |at: SocketAddr, count: usize| -> Result<()> {
        for _ in 0..count {
            let l = lab
                .a
                .host
                .listen(at, AcceptMode::Manual, None)
                .map_err(|e| anyhow::anyhow!("churn listen: {e}"))?;
            l.id.destroy()
                .map_err(|e| anyhow::anyhow!("churn destroy: {e}"))?;
        }
        Ok(())
    };
    if callers <= 1 {
        return one(addr, n);
    }
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..callers)
            .map(|k| {
                let at = SocketAddr::new(addr.ip(), addr.port() - k as u16);
                let count = n / callers + usize::from(k < n % callers);
                scope.spawn(move || one(at, count))
            })
            .collect();
        workers.into_iter().try_for_each(|w| {
            w.join()
                .map_err(|_| anyhow::anyhow!("churn caller panicked"))?
        })
    })
}

/// `a / b`, 0 when `b` is 0 (JSON has no infinity).
fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

/// What one reservation costs the kernel at least, as the C daemon does it: a TCP socket
/// bound to port 0 of the mapping's IP.
fn floor_op(at: SocketAddr) -> Result<()> {
    let s = Socket::new(Domain::for_address(at), Type::STREAM, Some(Protocol::TCP))?;
    s.bind(&at.into())?;
    let _ = s.local_addr()?;
    drop(s);
    Ok(())
}

/// `ipv4` / `ipv6`.
pub(crate) fn family_name(f: Family) -> &'static str {
    match f {
        Family::V4 => "ipv4",
        Family::V6 => "ipv6",
    }
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn median_of_odd_even_and_empty_counts() {
        assert_eq!(
            median(vec![3.0, 1.0, 200.0]),
            3.0,
            "one outlier does not move it"
        );
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(Vec::new()), 0.0);
    }
}
