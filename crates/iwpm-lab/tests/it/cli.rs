//! The `iwpm-lab` binary end to end: the report, `--json` with the same numbers, the
//! options, and the exit status.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use iwpm_testkit::host::have_tool;
use iwpm_testkit::report_text::phases_and_total;

use crate::common::{iwpmd, lab_command};

/// Runs the binary with `args`, killing it after `limit`.
fn lab(args: &[&str], limit: Duration) -> Output {
    let mut child = lab_command()
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn iwpm-lab");
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("iwpm-lab {args:?} ran longer than {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

fn json(args: &[&str]) -> serde_json::Value {
    let out = lab(args, Duration::from_secs(120));
    assert!(
        out.status.success(),
        "iwpm-lab {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON report")
}

#[test]
fn json_report() {
    let r = json(&["--connections", "300", "--json"]);
    assert_eq!(r["ok"], true);
    assert_eq!(r["connections"]["attempted"], 300);
    assert_eq!(r["connections"]["established"], 300);
    assert_eq!(r["connections"]["consistent"], 300);
    assert_eq!(r["connections"]["failed"], 0);
    assert_eq!(r["mappings"]["peak_a"], 300);
    assert_eq!(r["mappings"]["peak_b"], 1);
    assert_eq!(r["mappings"]["after_teardown_a"], 0);
    assert_eq!(r["peer"]["exchanges"], 300);
    assert_eq!(r["violations"].as_array().unwrap().len(), 0);
    assert_eq!(r["mismatches"].as_array().unwrap().len(), 0);
    for part in [
        "connect",
        "daemon_local",
        "peer_exchange",
        "kernel_and_fabric",
    ] {
        assert_eq!(r["latency"][part]["count"], 300, "{part}");
    }
    let t = &r["timings"];
    let phases: f64 = ["setup_s", "connect_s", "check_s", "teardown_s", "stop_s"]
        .iter()
        .map(|p| t[p].as_f64().unwrap())
        .sum();
    // The JSON rounds each to 3 significant digits below 1 s, 3 decimals above.
    let total = t["total_s"].as_f64().unwrap();
    assert!((phases - total).abs() <= 0.01 + total * 0.005, "{t}");
}

#[test]
fn text_report() {
    let out = lab(&["--connections", "100"], Duration::from_secs(120));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    for needle in [
        "100/100 established, 0 failed",
        "held at peak: A 100",
        "violations    0",
        "mismatches    0",
        "result        OK",
        "daemon-local",
        "peer exchange",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from:\n{text}");
    }
    // Every phase is listed, and they add up to the total (each rounded to 0.01 s).
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("time          "))
        .unwrap_or_else(|| panic!("no time line in:\n{text}"));
    let (phases, total) = phases_and_total(line);
    assert_eq!(phases.len(), 5, "{line}");
    for phase in ["setup", "connecting", "checks", "teardown", "stopping"] {
        assert!(line.contains(&format!("{phase} ")), "{phase}: {line}");
    }
    let sum: f64 = phases.iter().sum();
    assert!(
        (sum - total).abs() <= 0.005 * 6.0,
        "{sum} != {total}: {line}"
    );
}

#[test]
fn no_port_map_and_loss() {
    let r = json(&[
        "--connections",
        "60",
        "--no-port-map",
        "--loss",
        "30",
        "--duplicate",
        "20",
        "--reorder",
        "20",
        "--json",
    ]);
    assert_eq!(r["ok"], true);
    assert_eq!(r["connections"]["consistent"], 60);
    assert_eq!(
        r["mappings"]["ports_held_a"], 0,
        "siw mappings reserve nothing"
    );
    assert!(r["peer"]["relay_dropped"].as_u64().unwrap() > 0);
    assert!(r["peer"]["relay_extra_copies"].as_u64().unwrap() > 0);
    assert!(r["peer"]["relay_reordered"].as_u64().unwrap() > 0);
    assert_eq!(r["settings"]["reorder_percent"], 20.0);
    // No REMOTE_INFO is owed without port mapping: the checks do not wait for any (they
    // used to wait 5 s for them).
    let waited = r["timings"]["check_wait_s"].as_f64().unwrap();
    assert!(waited < 1.0, "{}", r["timings"]);
}

#[test]
fn restart_daemon() {
    let r = json(&["--connections", "200", "--restart-daemon", "--json"]);
    assert_eq!(r["ok"], true);
    assert_eq!(r["restart"]["recovered"], 1);
    assert_eq!(r["restart"]["lost"].as_array().unwrap().len(), 0);
    assert_eq!(r["restart"]["mappings_lost"].as_array().unwrap().len(), 0);
    // How many were in flight at the kill depends on scheduling (on two busy cores the 200
    // can all be done first); that the number is reported is what this test checks, the
    // kill under load is `faults::restart_of_the_passive_daemon_mid_run`.
    assert!(r["restart"]["in_flight_at_kill"].as_u64().is_some());
}

#[test]
fn bad_arguments_exit_2() {
    let out = lab(&["--loss", "150"], Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(2));
    let out = lab(&["--reorder", "-1"], Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(2));
    let out = lab(&["--no-such-flag"], Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(2));
}

/// `--help` says, where `--loss` is described, that sustained loss fails a few connections
/// (the run then exits 1) and that the report explains it; and what `--hold` opens.
#[test]
fn help_says_what_loss_and_hold_do() {
    let out = lab(&["--help"], Duration::from_secs(30));
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    let loss = help
        .split("--loss <PCT>")
        .nth(1)
        .and_then(|s| s.split("--duplicate").next())
        .unwrap_or_else(|| panic!("no --loss in:\n{help}"));
    let loss = loss.split_whitespace().collect::<Vec<_>>().join(" ");
    for needle in [
        "REMOTE_INFO waits for A's ACK",
        "reaches B without one",
        "exit 1 are expected",
        "the report then gives the expectation with its range",
    ] {
        assert!(
            loss.contains(needle),
            "{needle:?} missing from --loss: {loss}"
        );
    }
    let hold = help.split("\n      --hold").nth(1).unwrap_or_default();
    let hold = hold.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        hold.contains("open a few connections (4, or --connections)"),
        "{hold}"
    );
    assert!(
        hold.contains("/path/to/iwpmctl --socket PATH status"),
        "{hold}"
    );
}

/// Step 11: a run whose daemon runs out of descriptors names that as the cause (first
/// mismatch, a `cause` line, the daemon's own warning), instead of only the rejections it
/// leads to. The lab runs under `prlimit --nofile=256` (and, as root, without
/// CAP_SYS_RESOURCE, with which the daemon would raise its limit), so A's daemon, which
/// holds a socket per connection, runs out after about 240 connections.
#[test]
fn descriptor_exhaustion_is_named_as_the_cause() {
    if !have_tool("prlimit") || !have_tool("setpriv") {
        iwpm_testkit::host::say_skipped(
            "descriptor_exhaustion_is_named_as_the_cause",
            "prlimit and setpriv (util-linux) are needed",
        );
        return;
    }
    let out = Command::new("prlimit")
        .args(["--nofile=256:256", "--", "setpriv"])
        .args([
            "--inh-caps=-sys_resource",
            "--bounding-set=-sys_resource",
            "--",
        ])
        .arg(env!("CARGO_BIN_EXE_iwpm-lab"))
        .args(["--connections", "400", "--json"])
        .env("IWPMD_BIN", iwpmd())
        .stdin(Stdio::null())
        .output()
        .expect("running iwpm-lab under prlimit");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    let shortage = &r["shortages"][0];
    assert_eq!(shortage["host"], "A", "{r}");
    assert_eq!(shortage["resource"], "FileDescriptors", "{r}");
    assert!(shortage["refused"].as_u64().unwrap() > 0, "{r}");
    let logged = shortage["logged"].as_str().unwrap_or_default();
    assert!(logged.contains("RLIMIT_NOFILE limit of 256"), "{r}");
    let mismatches = r["mismatches"].as_array().unwrap();
    let first = mismatches[0].as_str().unwrap();
    assert!(
        first.starts_with("host A: iwpmd ran out of file descriptors"),
        "{first}"
    );
    assert!(
        mismatches.iter().any(|m| m
            .as_str()
            .is_some_and(|m| m.contains("connections failed (first: #")
                && m.contains("rejected: no listener at"))),
        "{mismatches:?}"
    );
}

/// Step 11: JSON floats carry no binary noise (`7.976782999999999`): at most six digits
/// after the point (three, or three significant ones below 1).
#[test]
fn json_floats_are_rounded() {
    let out = lab(&["--connections", "50", "--json"], Duration::from_secs(120));
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let long = text
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter_map(|n| n.split_once('.'))
        .find(|(_, frac)| frac.len() > 6);
    assert_eq!(long, None, "{text}");
}

/// Runs the binary with `args` on a pseudo-terminal (util-linux `script`); everything it
/// wrote to the terminal.
fn lab_on_a_terminal(args: &str) -> String {
    let out = Command::new("script")
        .args(["-qec"])
        .arg(format!("{} {args}", env!("CARGO_BIN_EXE_iwpm-lab")))
        .arg("/dev/null")
        .env("IWPMD_BIN", iwpmd())
        .stdin(Stdio::null())
        .output()
        .expect("running script");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Step 11: a long run shows where it is on a terminal (a status line redrawn at least once
/// a second, with the phase and a bar of the connections), and nothing of the kind when
/// stderr is a pipe or with `--json`.
#[test]
fn progress_is_shown_on_a_terminal_only() {
    if !have_tool("script") {
        iwpm_testkit::host::say_skipped(
            "progress_is_shown_on_a_terminal_only",
            "script (util-linux) is needed for a pseudo-terminal",
        );
        return;
    }
    let tty = lab_on_a_terminal("--connections 200 --loss 30");
    for needle in [
        "iwpm-lab [",
        "connecting",
        "/200",
        "checking both hosts",
        "latency (ms)",
    ] {
        assert!(tty.contains(needle), "{needle:?} missing from:\n{tty}");
    }
    let json = lab_on_a_terminal("--connections 50 --json");
    assert!(!json.contains("iwpm-lab ["), "{json}");
    assert!(json.contains("\"ok\""), "{json}");
    let piped = lab(&["--connections", "50"], Duration::from_secs(120));
    let stderr = String::from_utf8_lossy(&piped.stderr);
    assert!(!stderr.contains("iwpm-lab ["), "{stderr}");
}

/// Step 11: the report shows the connect-latency distribution (a text histogram: under loss
/// the 1 s retransmission steps), and `--plot` writes it as a well-formed SVG whose bars
/// are the JSON's non-empty buckets.
#[test]
fn latency_histogram_and_plot() {
    let dir = std::env::temp_dir().join(format!("iwpm-lab-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg_path = dir.join("latency.svg");
    let plot = svg_path.to_str().unwrap();
    let r = json(&[
        "--connections",
        "150",
        "--loss",
        "30",
        "--json",
        "--plot",
        plot,
    ]);
    let buckets = r["latency"]["connect_histogram"].as_array().unwrap();
    let nonempty: Vec<(f64, u64)> = buckets
        .iter()
        .map(|b| (b["lo_ms"].as_f64().unwrap(), b["count"].as_u64().unwrap()))
        .filter(|&(_, n)| n > 0)
        .collect();
    let total: u64 = nonempty.iter().map(|b| b.1).sum();
    assert_eq!(total, r["connections"]["established"].as_u64().unwrap());
    // 30 % loss: some connections needed a retransmission, 1 s later.
    assert!(nonempty.iter().any(|&(lo, _)| lo >= 1000.0), "{buckets:?}");

    let svg = std::fs::read_to_string(&svg_path).unwrap();
    let doc = roxmltree::Document::parse(&svg).expect("well-formed SVG");
    let bars: Vec<(f64, u64)> = doc
        .descendants()
        .filter(|n| n.attribute("class") == Some("bar"))
        .map(|b| {
            (
                b.attribute("data-lo-ms").unwrap().parse().unwrap(),
                b.attribute("data-count").unwrap().parse().unwrap(),
            )
        })
        .collect();
    assert_eq!(bars, nonempty);
    let _ = std::fs::remove_dir_all(&dir);

    let out = lab(&["--connections", "100"], Duration::from_secs(120));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("connect latency distribution (log-scale buckets"),
        "{text}"
    );
    assert!(text.contains("(100.0 % up to here)"), "{text}");
}
