//! Connects through two daemons (the lab's full path: emulated kernels, taps, relays,
//! UDP between the daemons), a burst of simultaneous connects, and restart recovery.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use iwpm_kernel_emu::AcceptMode;
use iwpm_lab::progress::Status;
use iwpm_lab::report::Percentiles;
use iwpm_lab::{Lab, LabConfig, Phase, RunEvent, RunOptions, WorkloadConfig};
use serde::Serialize;

/// One connect scenario.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct ConnectResult {
    /// `steady` or `burst`.
    pub scenario: &'static str,
    /// Connections opened.
    pub connections: usize,
    /// In progress at once.
    pub concurrency: usize,
    /// Established.
    pub established: usize,
    /// Established per second of the connect phase.
    pub conn_per_s: f64,
    /// Connect latency (`rdma_create_id` to ESTABLISHED).
    pub latency: Option<Percentiles>,
    /// The daemons' own share (A's QUERY round trip minus the peer exchange).
    pub daemon_local: Option<Percentiles>,
    /// Peer retransmissions (0 without loss unless something stalled for 1 s).
    pub retransmissions: u64,
    /// REMOTE_INFOs that reached B's kernel after their connection.
    pub remote_info_late: usize,
    /// The lab's own checks all passed.
    pub consistent: bool,
}

/// Opens `connections` from A to B, `concurrency` at a time.
pub(crate) fn run(
    status: &Status,
    scenario: &'static str,
    connections: usize,
    concurrency: usize,
) -> Result<ConnectResult> {
    status.phase(format!("connects ({scenario}): setting up the lab"));
    let t0 = Instant::now();
    let mut lab = Lab::start(LabConfig {
        daemon_config: iwpm_lab::lab::daemon_limits_for(concurrency),
        ..LabConfig::default()
    })
    .context("starting the lab")?;
    let opts = RunOptions {
        workload: WorkloadConfig {
            connections,
            concurrency,
            ..WorkloadConfig::default()
        },
        ..RunOptions::default()
    };
    let report = iwpm_lab::run(&mut lab, &opts, t0.elapsed(), |event| match event {
        RunEvent::Phase(Phase::Connecting { total }) => {
            status.counted(&format!("connects ({scenario})"), total as u64);
        }
        RunEvent::Phase(phase) => status.phase(format!("connects ({scenario}): {phase}")),
        RunEvent::Connections(p) => status.advance(p.done as u64, format!("{} failed", p.failed)),
    })
    .context("running")?;
    Ok(ConnectResult {
        scenario,
        connections,
        concurrency,
        established: report.connections.established,
        conn_per_s: report.timings.connections_per_s,
        latency: report.latency.connect,
        daemon_local: report.latency.daemon_local,
        retransmissions: report.peer.retransmissions,
        remote_info_late: report.connections.remote_info_late,
        consistent: report.ok,
    })
}

/// Restart recovery.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct RestartResult {
    /// Mappings held when the daemon was killed.
    pub mappings: usize,
    /// SIGKILL to the MAPINFO replay acknowledged by the new daemon, ms.
    pub downtime_ms: f64,
    /// Mappings the new daemon holds again.
    pub recovered: usize,
    /// Recovered per second of downtime.
    pub mappings_per_s: f64,
    /// New daemon's RSS after recovery, bytes.
    pub rss_bytes: u64,
}

/// A's daemon holds `mappings` listeners, is killed with SIGKILL and restarted (the tap
/// stays: it closes the dead daemon's link, as a dead netlink port is).
pub(crate) fn restart(mappings: usize) -> Result<RestartResult> {
    let mut lab = Lab::start(LabConfig {
        relay: None,
        echo_daemon_logs: crate::verbose(),
        ..LabConfig::default()
    })
    .context("starting the lab")?;
    let ip = lab.a.addrs.public;
    let mut live = Vec::with_capacity(mappings);
    for i in 0..mappings {
        let port = u16::try_from(1024 + i).context("too many mappings for one IP")?;
        let l = lab
            .a
            .host
            .listen((ip, port).into(), AcceptMode::Manual, None)
            .map_err(|e| anyhow::anyhow!("listener {i}: {e}"))?;
        live.push(l);
    }
    let outcome = lab
        .a
        .restart_daemon(Duration::ZERO)
        .context("restarting the daemon")?;
    let pid = lab.a.daemon.as_ref().map_or(0, |d| d.pid());
    let rss = crate::procfs::rss_bytes(pid).unwrap_or(0);
    for l in live {
        let _ = l.id.destroy();
    }
    Ok(RestartResult {
        mappings,
        downtime_ms: outcome.downtime_ms,
        recovered: outcome.recovered,
        mappings_per_s: outcome.recovered as f64 / (outcome.downtime_ms / 1e3).max(1e-9),
        rss_bytes: rss,
    })
}
