//! `iwpm-bench --quick --json` runs end to end against the real daemon and prints a report
//! of the documented shape with sane values (timing is not judged: the machine may be
//! shared).

use std::process::Command;

use iwpm_testkit::workspace::built_binary;
use serde_json::Value;

fn num(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is not a number in {v}"))
}

#[test]
fn quick_json_report_has_every_scenario() {
    // The daemon this run built: the bench would otherwise look for one, and build a
    // missing or stale one with cargo.
    let out = Command::new(env!("CARGO_BIN_EXE_iwpm-bench"))
        .args(["--quick", "--json", "--no-ipv6"])
        .env("IWPMD_BIN", built_binary("iwpmd", "iwpmd"))
        .output()
        .expect("running iwpm-bench");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "iwpm-bench failed: {stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");

    let churn = report["churn"].as_array().expect("churn array");
    let rows: Vec<(u64, u64)> = churn
        .iter()
        .map(|c| (c["live"].as_u64().unwrap(), c["callers"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        rows,
        vec![(100, 1), (100, 8), (1000, 1), (1000, 8)],
        "quick levels, one caller then eight"
    );
    for c in churn {
        assert_eq!(c["family"], "ipv4");
        assert_eq!(c["ops"].as_u64(), Some(300));
        for key in [
            "op_us",
            "floor_us",
            "daemon_cpu_us",
            "floor_cpu_us",
            "daemon_cpu_us_mean",
            "floor_cpu_us_mean",
            "cpu_ratio",
            "wall_ratio",
        ] {
            assert!(num(c, key) > 0.0, "{key} must be positive: {c}");
        }
        // The daemon does at least the floor's syscalls per op, and a live mapping costs
        // the daemon some memory but not megabytes.
        assert!(num(c, "op_us") > num(c, "floor_us") * 0.5, "{c}");
        assert!(
            num(c, "rss_bytes") > 1e6 && num(c, "rss_bytes") < 512e6,
            "{c}"
        );
        assert!(num(c, "bytes_per_mapping") < 64.0 * 1024.0, "{c}");
    }

    let connect = report["connect"].as_array().expect("connect array");
    let names: Vec<&str> = connect
        .iter()
        .map(|c| c["scenario"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["steady", "burst"]);
    for c in connect {
        assert_eq!(c["established"], c["connections"], "every connection: {c}");
        assert_eq!(c["consistent"], true, "{c}");
        assert_eq!(c["remote_info_late"].as_u64(), Some(0), "{c}");
        let lat = &c["latency"];
        assert!(num(lat, "p50_ms") <= num(lat, "p99_ms"));
        assert!(num(lat, "p99_ms") <= num(lat, "p999_ms"));
        assert!(num(lat, "p999_ms") <= num(lat, "max_ms"));
        assert!(num(c, "conn_per_s") > 0.0);
    }

    let restart = &report["restart"];
    assert_eq!(restart["recovered"], restart["mappings"], "{restart}");
    assert!(num(restart, "downtime_ms") > 0.0);

    let targets = report["targets"].as_array().expect("targets");
    assert!(targets.len() >= 4, "{targets:?}");
    // A smoke run: judged against no goal (they are set for the full scale).
    assert_eq!(report["scale"]["quick"], true);
    for t in targets {
        assert!(t["met"].is_null() && t["value"].is_number(), "{t}");
    }
    assert!(report["load_before"].is_number());
}
