//! `iwpm-bench`: the real `iwpmd` measured over the emulated kernel link (see README.md).
//!
//! Every scenario starts its own pair of daemons through `iwpm-lab`. Figures are ratios
//! measured in the same run where possible (churn against the syscall floor, CPU time
//! against CPU time), since absolute wall times drift with whatever else the machine runs.
// No unwrap/expect outside tests (clippy.toml allows them there): input must never panic
// the daemon or a tool.
#![warn(clippy::unwrap_used, clippy::expect_used)]

mod churn;
mod connect;
mod mac;
mod procfs;
mod report;
mod spoof;
mod table;

use std::process::Command;

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};
use iwpm_kernel_emu::PortMapMode;
use iwpm_lab::netns::{self, NetPlace};
use iwpm_lab::progress::Status;
use iwpm_lab::Family;

use crate::report::{Bench, Scale};

#[derive(Debug, Parser)]
#[command(
    name = "iwpm-bench",
    version,
    about = "Benchmarks of the real iwpmd over the emulated kernel link",
    after_help = "Scenarios: ADD/REMOVE churn at several live-mapping levels (IPv4, IPv6) \
against the syscall floor measured in the same run; connects through two daemons; a burst \
of simultaneous connects; restart recovery. Levels above the descriptor limit are capped \
(each port-mapped mapping holds a socket). `iwpm-bench spoof`: the core's time per peer \
datagram under a flood from spoofed sources, in this process."
)]
struct Cli {
    /// Another scenario than the daemon benchmarks (their options do not apply to it).
    #[command(subcommand)]
    scenario: Option<Scenario>,
    /// CI-sized smoke run (seconds instead of minutes): the targets, set for the full
    /// sizes, are shown but not judged.
    #[arg(long)]
    quick: bool,
    /// Print the results as JSON.
    #[arg(long)]
    json: bool,
    /// Skip the IPv6 churn (it needs a private network namespace).
    #[arg(long)]
    no_ipv6: bool,
    /// Only the churn scenario (e.g. to profile the daemon under it).
    #[arg(long)]
    churn_only: bool,
    /// Churn as siw asks (`IWPM_FLAGS_NO_PORT_MAP`: the daemon reserves no port), the case
    /// the QEMU rig measures; the floor is then still one reservation.
    #[arg(long)]
    siw: bool,
    /// Callers of the concurrent churn, 2 to 256 (each level is also churned by one
    /// caller).
    #[arg(long, default_value_t = churn::CONCURRENT_CALLERS, value_parser = callers_in_range)]
    callers: usize,
    /// Also write the churn's daemon CPU per op against live mappings (one line per family
    /// and number of callers, the syscall floor dashed) as an SVG chart to FILE.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<std::path::PathBuf>,
    /// Copy the daemons' logs to stderr.
    #[arg(long)]
    verbose: bool,
    /// Internal: run the IPv6 churn in this process and print its JSON.
    #[arg(long, hide = true)]
    internal_churn_v6: bool,
}

/// Scenarios run on their own.
#[derive(Debug, Subcommand)]
enum Scenario {
    /// The sans-IO core's handling time per peer datagram under a flood from 400 000
    /// spoofed sources (REQUESTs to open and closed ports, blind ACKs) on a virtual clock,
    /// with peak RSS growth and the cost of a MAC per datagram. No daemon is started.
    Spoof(spoof::SpoofArgs),
}

static VERBOSE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `--verbose` was given.
pub fn verbose() -> bool {
    VERBOSE.load(std::sync::atomic::Ordering::Relaxed)
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    VERBOSE.store(cli.verbose, std::sync::atomic::Ordering::Relaxed);
    match run(&cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("iwpm-bench: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}

fn run(cli: &Cli) -> Result<()> {
    if let Some(Scenario::Spoof(args)) = &cli.scenario {
        let json = cli.json || args.json;
        let report = spoof::run(args, &Status::new("iwpm-bench spoof", !json))?;
        if json {
            println!("{}", iwpm_lab::json::to_string_rounded(&report)?);
        } else {
            print!("{}", report.render());
        }
        return Ok(());
    }
    // The daemons inherit our descriptor limit; raise it first where we may.
    procfs::raise_fd_limit(procfs::FD_WANTED);
    let scale = Scale::new(cli.quick, procfs::fd_limit(), cli.siw);
    if cli.internal_churn_v6 {
        // Still single-threaded: the process can move to a private namespace.
        netns::enter_private_namespace().context("private network namespace for IPv6")?;
        iwpm_lab::lab::add_v6_loopback_addresses(&NetPlace::current())
            .context("adding the lab's IPv6 addresses")?;
        let levels = churn::run(
            &Status::new("iwpm-bench", false),
            Family::V6,
            mode(cli),
            &scale.churn_levels,
            scale.churn_ops,
            &[1, cli.callers],
        )?;
        println!("{}", serde_json::to_string(&levels)?);
        return Ok(());
    }
    // A build of the daemon (announced) comes first, outside any namespace; the IPv6
    // churn's child is told where the result is.
    let daemon =
        iwpm_lab::locate::daemon_binary(|line| eprintln!("{line}")).context("finding iwpmd")?;
    let status = Status::new("iwpm-bench", !cli.json);
    let mut bench = Bench::new(&scale);
    bench.churn = churn::run(
        &status,
        Family::V4,
        mode(cli),
        &scale.churn_levels,
        scale.churn_ops,
        &[1, cli.callers],
    )?;
    if cli.siw {
        bench.notes.push(
            "--siw: the churn's ADDs carry NO_PORT_MAP, so the daemon reserves no port; \
             the floor is still one reservation"
                .to_owned(),
        );
    }
    if !cli.no_ipv6 {
        status.phase("churn, IPv6 (in a child process, in a private network namespace)");
        match churn_v6(cli, &daemon) {
            Ok(levels) => bench.churn.extend(levels),
            Err(e) => bench.notes.push(format!("IPv6 churn skipped: {e:#}")),
        }
    }
    if cli.churn_only {
        status.finish();
        bench.finish();
        return print_bench(cli, &bench);
    }
    bench.connect.push(connect::run(
        &status,
        "steady",
        scale.connections,
        scale.concurrency,
    )?);
    bench
        .connect
        .push(connect::run(&status, "burst", scale.burst, scale.burst)?);
    status.phase(format!(
        "restart recovery: {} mappings, SIGKILL, MAPINFO replay",
        scale.restart_mappings
    ));
    bench.restart = Some(connect::restart(scale.restart_mappings)?);
    status.finish();
    bench.notes.push(format!(
        "restart recovery at {} mappings: Linux replays at most 20 MAPINFO datagrams \
         (about 230 mappings on x86-64) and aborts larger replays with -ENOMEM",
        scale.restart_mappings
    ));
    bench.finish();
    print_bench(cli, &bench)
}

/// `--callers`: 2 to 256 (the churned addresses are the ports below the churn port).
fn callers_in_range(text: &str) -> std::result::Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if (2..=256).contains(&n) => Ok(n),
        _ => Err(format!("expected a number from 2 to 256, got {text:?}")),
    }
}

/// The devices' port mapping mode for the churn.
fn mode(cli: &Cli) -> PortMapMode {
    if cli.siw {
        PortMapMode::NoPortMap
    } else {
        PortMapMode::PortMapped
    }
}

fn print_bench(cli: &Cli, bench: &Bench) -> Result<()> {
    if let Some(path) = &cli.plot {
        std::fs::write(path, report::churn_svg(bench))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if cli.json {
        println!("{}", iwpm_lab::json::to_string_rounded(bench)?);
    } else {
        print!("{}", bench.render());
    }
    Ok(())
}

/// The IPv6 churn in a child process of ours (the namespace switch must happen while the
/// process is single-threaded).
fn churn_v6(cli: &Cli, daemon: &std::path::Path) -> Result<Vec<churn::ChurnLevel>> {
    let exe = std::env::current_exe()?;
    let mut cmd = Command::new(exe);
    cmd.env("IWPMD_BIN", daemon).arg("--internal-churn-v6");
    cmd.arg(format!("--callers={}", cli.callers));
    if cli.quick {
        cmd.arg("--quick");
    }
    if cli.siw {
        cmd.arg("--siw");
    }
    let out = cmd.output().context("running the IPv6 churn")?;
    if !out.status.success() {
        anyhow::bail!(
            "{}",
            String::from_utf8_lossy(&out.stderr)
                .trim()
                .lines()
                .last()
                .unwrap_or("failed")
        );
    }
    let text = String::from_utf8(out.stdout)?;
    let line = text.lines().last().context("no output")?;
    Ok(serde_json::from_str(line)?)
}
