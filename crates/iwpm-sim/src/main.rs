//! `iwpm-sim`: run seeds, sweep, shrink, or print the scale table. See the crate README.
// No unwrap/expect outside tests (clippy.toml allows them there): input must never panic
// the daemon or a tool.
#![warn(clippy::unwrap_used, clippy::expect_used)]

use std::process::ExitCode;
use std::time::{Duration, Instant};

use iwpm_sim::plan::{Profile, Scenario};
use iwpm_sim::{run, scale, shrink};

const USAGE: &str = "usage:
  iwpm-sim --seed S [--profile sweep|attack|fleet|burst] [--keep I,J,..] [--print]
  iwpm-sim --sweep [--from S] [--count N] [--seconds T] [--profile sweep|attack|fleet|burst]
  iwpm-sim --scale [--hosts 10,100,1000] [--fanout K] [--checked]
A failing seed is shrunk and printed with the --seed/--keep line that replays it.";

struct Args {
    seed: Option<u64>,
    profile: Profile,
    keep: Option<Vec<usize>>,
    print: bool,
    sweep: bool,
    from: u64,
    count: Option<u64>,
    seconds: Option<f64>,
    scale: bool,
    scale_one: Option<usize>,
    hosts: Vec<usize>,
    fanout: Option<usize>,
    checked: bool,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        seed: None,
        profile: Profile::Sweep,
        keep: None,
        print: false,
        sweep: false,
        from: 0,
        count: None,
        seconds: None,
        scale: false,
        scale_one: None,
        hosts: vec![10, 100, 1000],
        fanout: None,
        checked: false,
    };
    let mut it = std::env::args().skip(1);
    let num = |v: Option<String>, what: &str| -> Result<u64, String> {
        v.ok_or(format!("{what} needs a value"))?
            .parse()
            .map_err(|e| format!("{what}: {e}"))
    };
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--seed" => a.seed = Some(num(it.next(), "--seed")?),
            "--profile" => {
                let name = it.next().unwrap_or_default();
                a.profile = Profile::from_name(&name).ok_or(format!("unknown profile {name:?}"))?;
            }
            "--keep" => {
                let v = it.next().ok_or("--keep needs a list")?;
                a.keep = Some(
                    v.split(',')
                        .filter(|s| !s.is_empty())
                        .map(|s| s.parse().map_err(|e| format!("--keep: {e}")))
                        .collect::<Result<_, _>>()?,
                );
            }
            "--print" => a.print = true,
            "--sweep" => a.sweep = true,
            "--from" => a.from = num(it.next(), "--from")?,
            "--count" => a.count = Some(num(it.next(), "--count")?),
            "--seconds" => {
                a.seconds = Some(
                    it.next()
                        .ok_or("--seconds needs a value")?
                        .parse()
                        .map_err(|e| format!("--seconds: {e}"))?,
                )
            }
            "--scale" => a.scale = true,
            "--scale-one" => a.scale_one = Some(num(it.next(), "--scale-one")? as usize),
            "--hosts" => {
                let v = it.next().ok_or("--hosts needs a list")?;
                a.hosts = v
                    .split(',')
                    .map(|s| s.parse().map_err(|e| format!("--hosts: {e}")))
                    .collect::<Result<_, _>>()?;
            }
            "--fanout" => a.fanout = Some(num(it.next(), "--fanout")? as usize),
            "--checked" => a.checked = true,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(a)
}

/// Runs one seed; on failure shrinks it and prints the reproduction. True if it passed.
fn one(
    seed: u64,
    profile: Profile,
    keep: Option<&[usize]>,
    print: bool,
    total: &mut iwpm_sim::RunStats,
) -> (bool, bool) {
    let full = Scenario::generate(seed, profile);
    let scenario = keep.map_or_else(|| full.clone(), |k| full.keep(k));
    if print {
        print!("{scenario}");
    }
    let out = run(&scenario);
    *total += &out.stats;
    let known = !out.known.is_empty();
    for k in &out.known {
        println!("seed {seed}: {k}");
    }
    let Some(v) = out.violations.first() else {
        if print {
            println!(
                "seed {seed}: ok ({} of {} connects established, {} steps, digest {:016x})",
                out.stats.established, out.stats.connects, out.stats.steps, out.stats.digest
            );
        }
        return (true, known);
    };
    println!("seed {seed} ({}): VIOLATION {v}", profile.name());
    let s = shrink::shrink(&scenario, v.kind, 400);
    let keep: Vec<usize> = match keep {
        Some(k) => s.keep.iter().map(|i| k[*i]).collect(),
        None => s.keep.clone(),
    };
    let again = run(&s.scenario);
    print!(
        "shortest schedule ({} runs to shrink):\n{}",
        s.runs, s.scenario
    );
    if let Some(v2) = again.violations.first() {
        println!("  -> {v2}");
    }
    let list: Vec<String> = keep.iter().map(|i| i.to_string()).collect();
    println!(
        "replay: iwpm-sim --seed {seed} --profile {} --keep {}",
        profile.name(),
        list.join(",")
    );
    (false, known)
}

fn sweep(a: &Args) -> bool {
    let started = Instant::now();
    let limit = a.seconds.map(Duration::from_secs_f64);
    let mut seed = a.from;
    let (mut ran, mut failed, mut known) = (0u64, 0u64, 0u64);
    let mut total = iwpm_sim::RunStats::default();
    loop {
        if a.count.is_some_and(|c| ran >= c) || limit.is_some_and(|l| started.elapsed() >= l) {
            break;
        }
        if a.count.is_none() && limit.is_none() && ran >= 1000 {
            break;
        }
        let (ok, hit_known) = one(seed, a.profile, None, false, &mut total);
        failed += u64::from(!ok);
        known += u64::from(hit_known);
        ran += 1;
        seed += 1;
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{ran} seeds ({}..{}) in {secs:.1} s ({:.0} seeds/s), {failed} failing, {known} hit a known open finding",
        a.from,
        seed,
        ran as f64 / secs.max(1e-9)
    );
    println!(
        "  {} connects, {} established; {} daemon restarts, {} truncated replays; passive REMOTE_INFO look-ups {} found / {} missed; {} hostile datagrams",
        total.connects,
        total.established,
        total.restarts,
        total.replays_truncated,
        total.remote_info_found,
        total.remote_info_missed,
        total.hostile
    );
    println!(
        "  rdma-core-like peer: {} connects reached their listener, {} found their REMOTE_INFO; ledger: {} REMOTE_INFOs for peer REQUESTs, {} verified ACKs",
        total.rdma_peer_connects,
        total.rdma_peer_found,
        total.remote_info_for_peers,
        total.verified_acks
    );
    failed == 0
}

/// Peak resident memory of this process (Linux), in kB.
fn peak_rss_kb() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn scale_one(hosts: usize, fanout: Option<usize>, checked: bool) {
    let row = scale::measure(hosts, fanout, 1, checked);
    let rss = peak_rss_kb().unwrap_or(0);
    // One line, parsed by the parent.
    println!(
        "ROW {} {} {} {:.1} {:.1} {:.1} {:.3} {:.1} {} {} {}",
        row.hosts,
        row.connects,
        row.established,
        row.messages_per_host,
        row.udp_per_host,
        row.netlink_per_host,
        row.wall.as_secs_f64(),
        row.virtual_time.as_secs_f64(),
        rss,
        row.violation
            .map_or_else(|| "-".into(), |v| v.to_string().replace(' ', "_")),
        row.steps
    );
}

fn scale_table(a: &Args) -> bool {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("iwpm-sim: cannot find my own binary: {e}");
            return false;
        }
    };
    println!("| hosts | connects | established | events | messages/host | UDP/host | netlink/host | wall | time/host | peak RSS | RSS/host | violation |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    let mut ok = true;
    for &n in &a.hosts {
        let mut cmd = std::process::Command::new(&exe);
        cmd.arg("--scale-one").arg(n.to_string());
        if let Some(f) = a.fanout {
            cmd.arg("--fanout").arg(f.to_string());
        }
        if a.checked {
            cmd.arg("--checked");
        }
        let out = match cmd.output() {
            Ok(o) => o,
            Err(e) => {
                eprintln!("iwpm-sim: cannot run {}: {e}", exe.display());
                return false;
            }
        };
        let text = String::from_utf8_lossy(&out.stdout);
        let Some(line) = text.lines().find(|l| l.starts_with("ROW ")) else {
            eprintln!(
                "iwpm-sim: the N={n} run printed no result: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            ok = false;
            continue;
        };
        let f: Vec<&str> = line.split_whitespace().collect();
        let field = |i: usize| f.get(i).copied().unwrap_or("?");
        let wall: f64 = field(7).parse().unwrap_or(0.0);
        let rss: f64 = field(9).parse().unwrap_or(0.0);
        let nn = n.max(1) as f64;
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {:.2} s | {:.2} ms | {:.0} MB | {:.1} kB | {} |",
            field(1),
            field(2),
            field(3),
            field(11),
            field(4),
            field(5),
            field(6),
            wall,
            wall * 1e3 / nn,
            rss / 1024.0,
            rss / nn,
            field(10)
        );
        ok &= field(10) == "-";
    }
    ok
}

fn main() -> ExitCode {
    let a = match parse() {
        Ok(a) => a,
        // --help: the usage on stdout, success
        Err(e) if e.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("iwpm-sim: {e}");
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let ok = if let Some(n) = a.scale_one {
        scale_one(n, a.fanout, a.checked);
        true
    } else if a.scale {
        scale_table(&a)
    } else if a.sweep {
        sweep(&a)
    } else if let Some(seed) = a.seed {
        one(
            seed,
            a.profile,
            a.keep.as_deref(),
            a.print,
            &mut iwpm_sim::RunStats::default(),
        )
        .0
    } else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
