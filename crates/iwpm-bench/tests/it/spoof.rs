//! `iwpm-bench spoof` at a small size (5000 sources; a debug build in `cargo test`): the
//! report is of the documented shape and its counts add up. No timing is judged here: the
//! goals are shown by a full release run (`cargo run --release -p iwpm-bench -- spoof`).

use std::process::Command;

use serde_json::Value;

fn num(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is not a number in {v}"))
}

fn count(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} is not a count in {v}"))
}

fn spoof(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_iwpm-bench"))
        .arg("spoof")
        .args(args)
        .output()
        .expect("running iwpm-bench spoof");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "iwpm-bench spoof failed: {stderr}");
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

#[test]
fn small_flood_report_is_well_formed_and_adds_up() {
    let r = spoof(&["--sources", "5000", "--rate", "1000", "--json"]);
    assert_eq!(count(&r, "sources"), 5000);
    assert_eq!(count(&r, "datagrams"), 5000);
    assert_eq!(count(&r, "ipv4_sources") + count(&r, "ipv6_sources"), 5000);
    assert_eq!(count(&r, "rate_per_s"), 1000);
    assert_eq!(
        num(&r, "virtual_s"),
        5.0,
        "5000 datagrams at 1000 per second"
    );
    assert_eq!(r["listeners"].as_array().unwrap().len(), 4);

    // Every datagram timed once, by kind and in all; percentiles ordered.
    let lat = &r["latency"];
    assert_eq!(count(lat, "n"), 5000);
    assert_eq!(count(&r["latency_cpu"], "n"), 5000);
    assert!(count(&r, "preempted_over_1ms") <= count(lat, "over_1ms"));
    let kinds = r["kinds"].as_array().expect("kinds");
    assert_eq!(kinds.len(), 9, "{kinds:?}");
    let mut sent = 0;
    for k in kinds {
        let n = count(k, "sent");
        assert_eq!(count(&k["latency"], "n"), n, "{k}");
        assert!(n > 0, "every kind of the mix is sent: {k}");
        sent += n;
    }
    assert_eq!(sent, 5000);
    for l in kinds
        .iter()
        .map(|k| &k["latency"])
        .chain([lat, &r["latency_cpu"], &r["timers"]])
        .filter(|l| count(l, "n") > 0)
    {
        let p = |k| num(l, k);
        assert!(p("p50_us") > 0.0, "{l}");
        assert!(
            p("p50_us") <= p("p99_us") && p("p99_us") <= p("p999_us"),
            "{l}"
        );
        assert!(
            p("p999_us") <= p("max_us") && p("mean_us") <= p("max_us"),
            "{l}"
        );
        assert!(count(l, "over_1ms") <= count(l, "n"), "{l}");
    }
    let slowest = r["slowest"].as_array().expect("slowest");
    assert_eq!(slowest.len(), 8);
    assert_eq!(num(&slowest[0], "us"), num(lat, "max_us"));

    // The counts add up: what went in, what the core counted, what came out.
    let checks = r["checks"].as_array().expect("checks");
    assert!(checks.len() >= 6);
    for c in checks {
        assert_eq!(c["ok"], true, "{c}");
    }
    assert_eq!(r["counts_add_up"], true);
    let sent_of = |labels: &[&str]| -> u64 {
        kinds
            .iter()
            .filter(|k| labels.contains(&k["kind"].as_str().unwrap()))
            .map(|k| count(k, "sent"))
            .sum()
    };
    let open = sent_of(&[
        "REQUEST open IPv4 64 B",
        "REQUEST open IPv4 96 B",
        "REQUEST open IPv6 64 B",
        "REQUEST open IPv6 96 B",
    ]);
    let closed = sent_of(&["REQUEST closed IPv4", "REQUEST closed IPv6"]);
    let acks = sent_of(&[
        "blind ACK IPv4 48 B",
        "blind ACK IPv6 48 B",
        "blind ACK IPv6 96 B",
    ]);
    assert_eq!(open + closed + acks, 5000);
    let (out, core) = (&r["output"], &r["core"]);
    assert_eq!(count(core, "requests_in"), open + closed);
    assert_eq!(count(core, "acks_in"), acks);
    assert_eq!(
        count(out, "accepts"),
        open,
        "one ACCEPT per REQUEST to a listener"
    );
    assert_eq!(
        count(out, "rejects") + count(core, "rejects_suppressed"),
        closed
    );
    assert_eq!(
        count(core, "acks_unverified") + count(core, "acks_guessed"),
        acks
    );
    assert!(
        count(out, "kernel") <= open,
        "REMOTE_INFOs only for REQUESTs"
    );

    // Memory and the MAC: present and sane.
    let rss = &r["rss"];
    assert!(
        num(rss, "before_bytes") > 0.0 && num(rss, "peak_bytes") > 0.0,
        "{rss}"
    );
    assert!(num(rss, "peak_growth_bytes") < 256e6, "{rss}");
    let mac = &r["mac"];
    for k in ["seal_ns", "verify_ns", "verify_forged_ns"] {
        assert!(num(mac, k) > 0.0, "{mac}");
    }

    // Judged only in a release build of the full flood.
    let targets = r["targets"].as_array().expect("targets");
    assert_eq!(targets.len(), 2);
    for t in targets {
        assert!(t["met"].is_null() && t["value"].is_number(), "{t}");
    }
}

#[test]
fn small_flood_text_report() {
    let out = Command::new(env!("CARGO_BIN_EXE_iwpm-bench"))
        .args(["spoof", "--sources", "2000"])
        .output()
        .expect("running iwpm-bench spoof");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "flood: 2000 datagrams from 2000 spoofed sources",
        "per datagram (handle_peer_datagram + draining its actions), µs of wall time",
        "  all, CPU time ",
        "  kind ",
        "  all ",
        "counts add up: yes",
        "RSS: ",
        "MAC per datagram: seal ",
        "targets",
        "p99.9 per datagram, µs",
        "datagrams over 1 ms of CPU time",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from:\n{text}");
    }
}
