//! `iwpm-lab`: two emulated iWARP hosts, a real `iwpmd` for each, N connections from A to a
//! listener on B, a report. Exit status 0 when every connection was established and
//! consistent and no protocol violation was seen, 1 otherwise, 2 when the lab could not
//! be set up.
// No unwrap/expect outside tests (clippy.toml allows them there): input must never panic
// the daemon or a tool.
#![warn(clippy::unwrap_used, clippy::expect_used)]

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;
use iwpm_kernel_emu::PortMapMode;
use iwpm_lab::hold::{hold, HoldOptions};
use iwpm_lab::lab::add_v6_loopback_addresses;
use iwpm_lab::netns::{self, NetPlace};
use iwpm_lab::progress::Status;
use iwpm_lab::{
    run, Family, Lab, LabConfig, Phase, RelayConfig, Report, RunEvent, RunOptions, Topology,
    WorkloadConfig,
};

/// Exercise the real iwpmd end to end on two emulated iWARP hosts.
///
/// Host A (127.0.0.1) opens N connections to a listener on host B (127.0.0.2); each host's
/// kernel port-mapper client is emulated and talks to a real iwpmd child process, and the
/// two daemons exchange mappings over real UDP. Each daemon's peer port sits behind a
/// relay the lab controls (for --loss, --duplicate and --reorder, and to time the peer
/// exchange). Prints what
/// happened and cross-checks both hosts, both daemons and both kernels.
#[derive(Debug, Parser)]
#[command(name = "iwpm-lab", version)]
#[command(after_help = "\
IPv6: the loopback interface has only ::1, so --ipv6 runs the lab in a private network \
namespace (a user namespace too when not root) and adds fd00:6c61:62::1/::2 (hosts) and \
::11/::12 (daemons) to its own lo. --netns (root) puts each host in its own namespace, \
joined by a veth pair (198.18.0.0/24 or fd00:6c61:62::/64); the namespaces are deleted \
at exit.

REMOTE_INFO race: B's daemon answers A's REQUEST with a UDP ACCEPT and tells its own \
kernel the peer's real address with REMOTE_INFO; when the connection overtakes the \
REMOTE_INFO, B's kernel reports the peer's mapped address and keeps the entry. The \
report counts these ('arrived after their connection'); they are not mismatches, a \
REMOTE_INFO that never arrives is.

Exit status: 0 all connections established and consistent, no protocol violation; \
1 otherwise; 2 the lab could not be set up.")]
struct Cli {
    /// Connections to open from A to B [default: 1000, or 4 with --hold].
    #[arg(long)]
    connections: Option<usize>,

    /// Connections in progress at once [default: 64, or 256 with --loss, whose
    /// retransmissions make each connection take about a second].
    #[arg(long)]
    concurrency: Option<usize>,

    /// Print the report as JSON (same numbers).
    #[arg(long)]
    json: bool,

    /// Use IPv6 (in a private network namespace; see below).
    #[arg(long)]
    ipv6: bool,

    /// Put each host in its own network namespace, joined by a veth pair (root only).
    #[arg(long)]
    netns: bool,

    /// Emulate siw: FLAGS=1 (IWPM_FLAGS_NO_PORT_MAP), mapped address = local address.
    #[arg(long)]
    no_port_map: bool,

    /// Drop this percentage of the peer UDP datagrams between the daemons. Each lost ACK
    /// keeps one of B's REMOTE_INFO tokens; once they are spent (at 30 %: after several
    /// hundred connections), REMOTE_INFO waits for A's ACK, and a connection whose 3 ACKs
    /// are all lost reaches B without one: a few such mismatches and exit 1 are expected
    /// (the report then gives the expectation with its range, and how many exchanges lost
    /// every ACK, which bounds the count).
    #[arg(long, value_name = "PCT", default_value_t = 0.0)]
    loss: f64,

    /// Deliver this percentage of the peer datagrams twice.
    #[arg(long, value_name = "PCT", default_value_t = 0.0)]
    duplicate: f64,

    /// Hold back this percentage of the peer datagram copies for 1 ms up to
    /// --reorder-window-ms, so that later datagrams overtake them.
    #[arg(long, value_name = "PCT", default_value_t = 0.0)]
    reorder: f64,

    /// Longest hold of a reordered datagram, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 20)]
    reorder_window_ms: u64,

    /// From an exchange's Nth REQUEST on, --loss spares its datagrams, so that chance
    /// alone cannot defeat all ten attempts of one connection (0: never spare).
    #[arg(long, value_name = "N", default_value_t = 8)]
    spare_after_requests: u32,

    /// Kill host B's iwpmd with SIGKILL half-way and restart it (MAPINFO recovery).
    #[arg(long)]
    restart_daemon: bool,

    /// The daemons' UDP peer port (default: 3935 if free, else a free port).
    #[arg(long, value_name = "PORT")]
    peer_port: Option<u16>,

    /// No relays and no kernel-link taps: the daemons talk directly to each other and to
    /// the emulated kernels (no latency split; exposes the Unix kernel link's queue limits).
    #[arg(long, conflicts_with_all = ["loss", "duplicate", "reorder"])]
    direct: bool,

    /// Emulated TCP/MPA connection set-up time, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 2)]
    wire_delay_ms: u64,

    /// Seed of the relays' fault draws: the same seed gives the n-th exchange the same
    /// losses, copies and holds; the daemons' timing still varies from run to run.
    #[arg(long, default_value_t = 0x1d5eed)]
    seed: u64,

    /// Also write the connect-latency distribution as an SVG chart to FILE.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<std::path::PathBuf>,

    /// Set up the lab, open a few connections (4, or --connections) and hold them instead
    /// of running the checks: both daemons run over their emulated kernels until Ctrl-C or
    /// SIGTERM; prints each daemon's pid, control socket and a ready
    /// `/path/to/iwpmctl --socket PATH status` line (iwpmctl is built if missing).
    #[arg(long, conflicts_with_all = ["json", "plot", "restart_daemon"])]
    hold: bool,

    /// Copy the daemons' logs to stderr.
    #[arg(short, long)]
    verbose: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match real_main(&cli) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("iwpm-lab: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn real_main(cli: &Cli) -> anyhow::Result<bool> {
    let (connections, topology) = checked_shape(cli)?;
    // Before anything else: a build of the daemon (announced) must not count as set-up
    // time, and must run outside the private namespace of --ipv6 (cargo may need the
    // network to fetch the daemon's own crates, and the files it writes are ours).
    // (cargo prints its own progress while it builds: the status line starts after it)
    iwpm_lab::locate::daemon_binary(|line| eprintln!("{line}")).context("finding iwpmd")?;
    let iwpmctl = if cli.hold {
        let tool = iwpm_lab::locate::IWPMCTL;
        Some(
            iwpm_lab::locate::binary(tool, |line| eprintln!("{line}"))
                .context("finding iwpmctl")?,
        )
    } else {
        None
    };
    let status = Status::new("iwpm-lab", !cli.json);
    let family = if cli.ipv6 { Family::V6 } else { Family::V4 };
    if family == Family::V6 && topology == Topology::Current {
        // Still single-threaded: the whole process can move to a private namespace.
        netns::enter_private_namespace()
            .context("--ipv6 needs a private network namespace (root or user namespaces)")?;
        add_v6_loopback_addresses(&NetPlace::current())
            .context("adding the lab's IPv6 addresses to lo")?;
    }
    if cli.verbose {
        let _ = tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "info".into()),
            )
            .try_init();
    }
    let concurrency = cli
        .concurrency
        .unwrap_or(if cli.loss > 0.0 { 256 } else { 64 });
    let daemon_config = iwpm_lab::lab::daemon_limits_for(concurrency);
    if let (Some(text), false) = (&daemon_config, cli.json) {
        status.println(&format!(
            "iwpm-lab: concurrency {concurrency} is above the daemons' defaults; their iwpmd.conf: {}",
            text.trim().replace('\n', ", ")
        ));
    }
    let config = lab_config(cli, family, topology, daemon_config);
    let workload = WorkloadConfig {
        connections,
        concurrency,
        ..WorkloadConfig::default()
    };
    let listen_port = RunOptions::default().listen_port;
    if let Some(iwpmctl) = iwpmctl {
        drop(status);
        let opts = HoldOptions {
            workload,
            listen_port,
            iwpmctl,
        };
        return hold(config, &opts);
    }
    let t0 = Instant::now();
    status.phase("setting up: two emulated hosts, taps, relays, two iwpmd");
    let mut lab = Lab::start(config).context("setting up the lab")?;
    let setup = t0.elapsed();
    let opts = RunOptions {
        workload,
        listen_port,
        restart_daemon: cli.restart_daemon,
        ..RunOptions::default()
    };
    let report = run(&mut lab, &opts, setup, |event| match event {
        RunEvent::Phase(Phase::Connecting { total }) => status.counted("connecting", total as u64),
        RunEvent::Phase(phase) => status.phase(phase.to_string()),
        RunEvent::Connections(p) => status.advance(
            p.done as u64,
            format!(
                "{} established, {} failed, {} in flight",
                p.established, p.failed, p.in_flight
            ),
        ),
    })
    .context("running the scenario")?;
    status.finish();
    drop(lab);
    publish(cli, &report)?;
    Ok(report.ok)
}

/// The run's shape from the command line, checked before anything is built or started:
/// the fault percentages, the number of connections and where the hosts live.
fn checked_shape(cli: &Cli) -> anyhow::Result<(usize, Topology)> {
    if [cli.loss, cli.duplicate, cli.reorder]
        .iter()
        .any(|p| !(0.0..=100.0).contains(p))
    {
        bail!("--loss, --duplicate and --reorder are percentages (0 to 100)");
    }
    let connections = cli.connections.unwrap_or(if cli.hold {
        iwpm_lab::hold::DEFAULT_CONNECTIONS
    } else {
        1000
    });
    if connections == 0 || connections > iwpm_lab::lab::MAX_CONNECTIONS {
        bail!(
            "--connections must be 1 to {} (each live connection holds one emulated port)",
            iwpm_lab::lab::MAX_CONNECTIONS
        );
    }
    let topology = if cli.netns {
        if !netns::is_root() {
            bail!("--netns needs root (network namespaces and a veth pair)");
        }
        if !netns::have_ip() {
            bail!("--netns needs the `ip` command (iproute2)");
        }
        Topology::VethPair
    } else {
        Topology::Current
    };
    Ok((connections, topology))
}

/// The lab's configuration from the command line (the faults go to the relays).
fn lab_config(
    cli: &Cli,
    family: Family,
    topology: Topology,
    daemon_config: Option<String>,
) -> LabConfig {
    LabConfig {
        family,
        topology,
        mode: if cli.no_port_map {
            PortMapMode::NoPortMap
        } else {
            PortMapMode::PortMapped
        },
        peer_port: cli.peer_port,
        preferred_port: Some(iwpm_proto::consts::IWPM_PEER_PORT),
        relay: (!cli.direct).then(|| RelayConfig {
            loss: cli.loss / 100.0,
            duplicate: cli.duplicate / 100.0,
            reorder: cli.reorder / 100.0,
            reorder_window: Duration::from_millis(cli.reorder_window_ms.max(1)),
            spare_after_requests: (cli.spare_after_requests > 0)
                .then_some(cli.spare_after_requests),
            seed: cli.seed,
            ..RelayConfig::default()
        }),
        taps: !cli.direct,
        wire_delay: Duration::from_millis(cli.wire_delay_ms),
        echo_daemon_logs: cli.verbose,
        daemon_config,
        ..LabConfig::default()
    }
}

/// The report out: the latency plot if asked for, then the report as text or JSON.
fn publish(cli: &Cli, report: &Report) -> anyhow::Result<()> {
    if let Some(path) = &cli.plot {
        let s = &report.settings;
        let title = format!(
            "iwpm-lab: connect latency, {} connections (concurrency {}), loss {} %",
            report.connections.established, s.concurrency, s.loss_percent
        );
        let svg = iwpm_lab::svg::histogram(&title, &report.latency.connect_histogram);
        std::fs::write(path, svg).with_context(|| format!("writing {}", path.display()))?;
    }
    if cli.json {
        println!("{}", iwpm_lab::json::to_string_rounded(&report)?);
    } else {
        print!("{}", report.render());
    }
    Ok(())
}
