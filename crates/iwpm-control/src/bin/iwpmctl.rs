//! `iwpmctl`: asks a running `iwpmd` over its control socket. Human tables by default,
//! `--json` for scripts (the reply object exactly as the daemon sent it, see
//! `docs/control.md`).
// No unwrap/expect outside tests (clippy.toml allows them there): input must never panic
// the daemon or a tool.
#![warn(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write as _;
use std::net::{IpAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use iwpm_control::client::Client;
use iwpm_control::{metrics, render, Command, Reply, DEFAULT_SOCKET};

/// Control and inspect a running iwpmd (iWARP port mapper).
#[derive(Debug, Parser)]
#[command(name = "iwpmctl", version)]
#[command(
    after_help = "Exit status: 0 success; 1 error (daemon not running, permission \
denied, refused request); 2 usage; 3 `probe` found the peer blocked."
)]
struct Cli {
    /// The daemon's control socket.
    #[arg(long, value_name = "PATH", default_value = DEFAULT_SOCKET, global = true)]
    socket: PathBuf,

    /// Print the daemon's reply as JSON (one object) instead of a table.
    #[arg(short = 'j', long, global = true)]
    json: bool,

    /// Give up waiting for the daemon after this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = 10.0, global = true)]
    timeout: f64,

    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Version, pid, iwpm ABI, kernel handshake, uptime, kernel clients and counters.
    Status,
    /// The mapping table: local and mapped address, owner, refcount, role, flags, age.
    List,
    /// Peer exchanges in flight and recently finished, and per-peer tallies with how each
    /// peer authenticates.
    Peers,
    /// The fleet keys: id, whether it signs or is accept-only, and how many datagrams each
    /// signed and verified (never the keys themselves).
    Keys,
    /// The counters in the text format of node_exporter's textfile collector.
    Metrics {
        /// Check the daemon's text against the OpenMetrics format before printing it.
        #[arg(long)]
        check: bool,
        /// Print the daemon's OpenMetrics text as it is (`# EOF`-terminated, with `info`
        /// and `_total` families), which the textfile collector does not read.
        #[arg(long)]
        openmetrics: bool,
    },
    /// The SIGUSR1 dump's text, on stdout.
    Dump,
    /// Show the log filter, or set it (e.g. `debug`, `info,iwpm_core=trace`).
    LogLevel {
        /// New `RUST_LOG`-style directives.
        filter: Option<String>,
    },
    /// Check that the port mapper on HOST answers on its UDP port (3935): it is asked
    /// about a port it cannot have and must REJECT; nothing is left on HOST.
    Probe {
        /// Peer host name or address.
        host: String,
        /// How long to wait for the answer, in milliseconds.
        #[arg(long, value_name = "MS", default_value_t = 1500)]
        wait_ms: u32,
    },
}

fn resolve(host: &str) -> anyhow::Result<IpAddr> {
    if let Ok(ip) = host.parse() {
        return Ok(ip);
    }
    (host, 0)
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve {host}"))?
        .next()
        .map(|a| a.ip())
        .with_context(|| format!("{host} has no address"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("iwpmctl: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn run(cli: &Cli) -> anyhow::Result<ExitCode> {
    let mut timeout = Duration::from_secs_f64(cli.timeout.clamp(0.001, 3600.0));
    let command = match &cli.command {
        Cmd::Status => Command::Status,
        Cmd::List => Command::List,
        Cmd::Peers => Command::Peers,
        Cmd::Keys => Command::Keys,
        Cmd::Metrics { .. } => Command::Metrics,
        Cmd::Dump => Command::Dump,
        Cmd::LogLevel { filter } => Command::LogLevel {
            set: filter.clone(),
        },
        Cmd::Probe { host, wait_ms } => {
            timeout += Duration::from_millis(u64::from(*wait_ms));
            Command::Probe {
                host: resolve(host)?,
                timeout_ms: Some(*wait_ms),
            }
        }
    };
    let mut client = Client::connect(&cli.socket)?;
    let reply = client.call(command, timeout)?;
    if let (Cmd::Metrics { check: true, .. }, Reply::Metrics(m)) = (&cli.command, &reply) {
        metrics::parse(&m.text).context("the daemon's metrics are not valid OpenMetrics")?;
    }
    let text = if cli.json {
        let mut j = serde_json::to_string_pretty(&reply)?;
        j.push('\n');
        j
    } else if let (
        Cmd::Metrics {
            openmetrics: false, ..
        },
        Reply::Metrics(m),
    ) = (&cli.command, &reply)
    {
        metrics::textfile(&m.text)
    } else {
        render::render(&reply)
    };
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        // The reader stopped early (`iwpmctl list | head`): what it wanted, it has.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        other => other.context("cannot write to stdout")?,
    }
    Ok(match reply {
        Reply::Probe(p) if !p.reachable => ExitCode::from(3),
        _ => ExitCode::SUCCESS,
    })
}
