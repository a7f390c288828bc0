//! The sweep's summary accounts for every connect not established and every missed
//! look-up: the counters add up per seed, and the printed numbers add up.

use iwpm_sim::plan::Profile;
use iwpm_sim::run_seed;

/// Per seed, the reasons cover the whole gap (a passing seed leaves nothing open).
#[test]
fn reasons_add_up_per_seed() {
    let mut gaps = 0;
    for (profile, seeds) in [(Profile::Sweep, 0..150), (Profile::Fleet, 0..4)] {
        for seed in seeds {
            let out = run_seed(seed, profile);
            assert!(
                out.violations.is_empty(),
                "seed {seed}: {:?}",
                out.violations
            );
            let (s, g) = (&out.stats, &out.stats.gaps);
            assert_eq!(
                s.connects,
                s.established + g.not_established(),
                "seed {seed}: {g:?}"
            );
            assert_eq!(s.remote_info_missed, g.misses(), "seed {seed}: {g:?}");
            assert_eq!(g.failed_unexplained + g.miss_unexplained, 0, "seed {seed}");
            gaps += g.not_established() + g.misses();
        }
    }
    assert!(
        gaps > 0,
        "no gap in these seeds: the test would prove nothing"
    );
}

/// The integers of `text` outside parentheses, and per parenthesis the sum of those in it
/// (checked against the number right before it).
fn numbers(text: &str) -> Vec<u64> {
    let (mut top, mut inner, mut depth) = (Vec::new(), 0u64, 0);
    for w in text.split_whitespace() {
        depth += w.matches('(').count();
        let digits: String = w.chars().filter(char::is_ascii_digit).collect();
        if let Ok(n) = digits.parse::<u64>() {
            if depth == 0 {
                top.push(n);
            } else {
                inner += n;
            }
        }
        if w.contains(')') {
            depth -= w.matches(')').count();
            if inner > 0 {
                assert_eq!(top.last(), Some(&inner), "a breakdown must add up: {text}");
            }
            inner = 0;
        }
    }
    top
}

/// The sentence of `text` that starts with `start`, up to its full stop.
fn sentence<'a>(text: &'a str, start: &str) -> &'a str {
    let from = text
        .find(start)
        .unwrap_or_else(|| panic!("no {start:?} in {text}"));
    let rest = &text[from + start.len()..];
    &rest[..rest.find(". ").unwrap_or(rest.len())]
}

#[test]
fn printed_summary_adds_up() {
    for profile in ["sweep", "fleet"] {
        let count = if profile == "sweep" { "150" } else { "4" };
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_iwpm-sim"))
            .args(["--sweep", "--count", count, "--profile", profile])
            .output()
            .expect("run iwpm-sim");
        assert!(out.status.success(), "{out:?}");
        let printed = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(printed.lines().all(|l| l.len() <= 88), "{printed}");
        // The first line is the seed count and speed; the summary follows.
        let body: Vec<&str> = printed.lines().skip(1).collect();
        let text = body
            .join(" ")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");

        let head = numbers(&text[..text.find(" connects established.").unwrap()]);
        let &[est, all] = &head[..] else {
            panic!("{text}")
        };
        let other = numbers(sentence(&text, "The other "));
        assert_eq!(other[0], all - est, "{text}");
        assert_eq!(other[1..].iter().sum::<u64>(), other[0], "{text}");
        assert!(text.contains(", as the checks allow."), "{text}");

        let look = numbers(sentence(&text, "Passive REMOTE_INFO look-ups: "));
        let missed = look[1];
        let misses = numbers(sentence(&text, "Of the misses "));
        assert_eq!(misses.iter().sum::<u64>(), missed, "{text}");
        assert!(text.contains(", as expected."), "{text}");
    }
}
