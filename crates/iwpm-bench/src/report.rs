//! Sizes of a run, the collected results, the targets and the text table.

use std::fmt::Write as _;

use serde::Serialize;

use crate::churn::{ChurnLevel, BATCH};
use crate::connect::{ConnectResult, RestartResult};
use crate::procfs;
use crate::table::{Align, Table};

/// Mappings held at the restart: what one kernel MAPINFO replay can carry.
pub(crate) const RESTART_MAPPINGS: usize = 200;

/// Port-mapped live mappings that fit one IP: each holds a port of the ephemeral range
/// (`ip_local_port_range`, 28,232 ports by default), less a margin for everything else.
const PORT_MAPPED_PER_IP: usize = 25_000;

/// Descriptors kept free for the daemon's own sockets below the limit.
const FD_MARGIN: u64 = 1024;

/// How big each scenario is.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Scale {
    /// `--quick`: a smoke run at reduced sizes, whose figures are not judged against the
    /// targets (they are set for the full sizes).
    pub quick: bool,
    /// Live-mapping levels of the churn.
    pub churn_levels: Vec<usize>,
    /// Churn ops per level.
    pub churn_ops: usize,
    /// Steady connects and their concurrency.
    pub connections: usize,
    /// Connections in progress at once.
    pub concurrency: usize,
    /// Burst size (all at once).
    pub burst: usize,
    /// Mappings held at the restart.
    pub restart_mappings: usize,
    /// Levels lowered to fit the descriptor limit.
    pub capped: Vec<String>,
}

impl Scale {
    /// Full or quick sizes, capped so that the daemon's sockets fit in `fd_limit`. With
    /// `no_port_map` (`--siw`) the churn's mappings hold no socket and are not capped.
    pub(crate) fn new(quick: bool, fd_limit: Option<u64>, no_port_map: bool) -> Scale {
        let cap = fd_limit.map_or(usize::MAX, |l| {
            usize::try_from(l.saturating_sub(FD_MARGIN)).unwrap_or(usize::MAX)
        });
        let mut capped = Vec::new();
        let mut fit = |what: &str, n: usize| {
            if n > cap {
                capped.push(format!(
                    "{what} {n} capped to {cap} (RLIMIT_NOFILE {}; one socket per mapping)",
                    fd_limit.unwrap_or(0)
                ));
            }
            n.min(cap)
        };
        let (levels, ops, conns, conc, burst) = if quick {
            (vec![100, 1000], 300, 500, 64, 500)
        } else {
            (vec![100, 1000, 10_000, 50_000], 2000, 20_000, 256, 10_000)
        };
        // Linux replays at most IWPM_MAPINFO_SKB_COUNT (20) datagrams of MAPINFO records
        // and aborts the replay with -ENOMEM beyond: about 230 mappings on x86-64 (the
        // emulator models that). More cannot be recovered by any daemon.
        let restart = RESTART_MAPPINGS;
        let mut range_notes = Vec::new();
        let mut churn_levels: Vec<usize> = if no_port_map {
            levels
        } else {
            let mut one_ip = |n: usize| {
                if n > PORT_MAPPED_PER_IP {
                    range_notes.push(format!(
                        "port-mapped churn level {n} capped to {PORT_MAPPED_PER_IP} \
                         (each holds a port of one IP's ephemeral range); --siw runs it"
                    ));
                }
                n.min(PORT_MAPPED_PER_IP)
            };
            levels
                .into_iter()
                .map(|n| fit("churn level", one_ip(n)))
                .collect()
        };
        churn_levels.dedup();
        let connections = fit("steady connections", conns);
        let burst = fit("burst", burst);
        capped.splice(0..0, range_notes);
        Scale {
            quick,
            churn_levels,
            churn_ops: ops,
            connections,
            concurrency: conc,
            burst,
            restart_mappings: restart,
            capped,
        }
    }
}

/// One of the "done when" targets.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Target {
    /// What is measured.
    pub name: String,
    /// The measured value.
    pub value: f64,
    /// The goal, as text.
    pub goal: String,
    /// Whether the value meets it; `None` (JSON null) when not judged: a `--quick` run's
    /// sizes are too small for goals set at the full sizes.
    pub met: Option<bool>,
}

/// The targets table (verdict, target, value, goal under the heading `goal`; a target not
/// judged says `unjudged`), then one `note:` line per note: how every report of the bench
/// ends.
pub(crate) fn render_targets(
    targets: &[Target],
    goal: &str,
    unjudged: &str,
    notes: &[String],
) -> String {
    use Align::{Left, Right};
    let mut t = Table::new(&[
        ("verdict", Left),
        ("target", Left),
        ("value", Right),
        (goal, Left),
    ]);
    for g in targets {
        t.row(vec![
            match g.met {
                Some(true) => "met",
                Some(false) => "MISS",
                None => unjudged,
            }
            .to_owned(),
            g.name.clone(),
            format!("{:.2}", g.value),
            g.goal.clone(),
        ]);
    }
    let mut s = t.render("  ");
    for n in notes {
        let _ = writeln!(s, "note: {n}");
    }
    s
}

/// The line above a `--quick` run's targets: its figures are no verdict on the goals.
pub(crate) const QUICK_TARGETS: &str = "--quick: a smoke run at a reduced scale; its figures \
are not judged against the goals, which are set for the full scale";

/// Everything one run measured.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Bench {
    /// Sizes.
    pub scale: Scale,
    /// 1-minute load average before and after (the machine may be shared).
    pub load_before: Option<f64>,
    /// After.
    pub load_after: Option<f64>,
    /// Churn levels, IPv4 then IPv6.
    pub churn: Vec<ChurnLevel>,
    /// Connect scenarios.
    pub connect: Vec<ConnectResult>,
    /// Restart recovery.
    pub restart: Option<RestartResult>,
    /// The targets.
    pub targets: Vec<Target>,
    /// Anything skipped or capped.
    pub notes: Vec<String>,
}

impl Bench {
    /// An empty result for `scale`.
    pub(crate) fn new(scale: &Scale) -> Bench {
        Bench {
            scale: scale.clone(),
            load_before: procfs::load_average(),
            load_after: None,
            churn: Vec::new(),
            connect: Vec::new(),
            restart: None,
            targets: Vec::new(),
            notes: scale.capped.clone(),
        }
    }

    /// Records the load and evaluates the targets.
    pub(crate) fn finish(&mut self) {
        self.load_after = procfs::load_average();
        let mut t = Vec::new();
        let mut callers: Vec<usize> = self.churn.iter().map(|c| c.callers).collect();
        callers.sort_unstable();
        callers.dedup();
        for family in ["ipv4", "ipv6"] {
            for &n in &callers {
                let levels: Vec<&ChurnLevel> = self
                    .churn
                    .iter()
                    .filter(|c| c.family == family && c.callers == n)
                    .collect();
                let (Some(first), Some(last)) = (levels.first(), levels.last()) else {
                    continue;
                };
                let who = if n == 1 {
                    "1 caller".to_owned()
                } else {
                    format!("{n} callers")
                };
                let flat = last.daemon_cpu_us / first.daemon_cpu_us;
                t.push(target(
                    format!(
                        "{family} churn daemon CPU/op, {} vs {} live, {who}",
                        last.live, first.live
                    ),
                    flat,
                    "<= 1.2x",
                    flat <= 1.2,
                ));
                let worst = levels.iter().map(|c| c.cpu_ratio).fold(0.0, f64::max);
                t.push(target(
                    format!("{family} churn daemon CPU/op over floor CPU/op (worst level), {who}"),
                    worst,
                    "<= 2x",
                    worst <= 2.0,
                ));
            }
        }
        if let Some(c) = self.connect.iter().find(|c| c.scenario == "steady") {
            t.push(target(
                "connects/s through two daemons".into(),
                c.conn_per_s,
                ">= 20000",
                c.conn_per_s >= 20_000.0,
            ));
        }
        // Memory does not depend on the callers: the last row of the highest level.
        if let Some(c) = self.churn.iter().rfind(|c| c.family == "ipv4") {
            t.push(target(
                format!("daemon bytes per mapping at {} live", c.live),
                c.bytes_per_mapping,
                "<= 256",
                c.bytes_per_mapping <= 256.0,
            ));
        }
        if let Some(c) = self.churn.iter().rfind(|c| c.family == "ipv4") {
            // Below 50k (a capped level) the RSS at 50k is projected from the measured
            // bytes per mapping.
            let missing = 50_000usize.saturating_sub(c.live) as f64;
            let mib = (c.rss_bytes as f64 + missing * c.bytes_per_mapping) / (1024.0 * 1024.0);
            let how = if missing > 0.0 {
                format!("projected from {} mappings", c.live)
            } else {
                "measured".to_owned()
            };
            t.push(target(
                format!("daemon RSS MiB at 50000 mappings ({how})"),
                mib,
                "<= 32",
                mib <= 32.0,
            ));
        }
        if self.scale.quick {
            for target in &mut t {
                target.met = None;
            }
        }
        self.targets = t;
    }

    /// The text report.
    pub(crate) fn render(&self) -> String {
        use Align::{Left, Right};
        let mut s = String::new();
        let load = |l: Option<f64>| l.map_or("?".into(), |l| format!("{l:.1}"));
        let _ = writeln!(
            s,
            "iwpm-bench{} (load average {} before, {} after)\n",
            if self.scale.quick { " --quick" } else { "" },
            load(self.load_before),
            load(self.load_after)
        );
        let _ = writeln!(s, "churn (ADD+REMOVE per op)");
        let _ = writeln!(
            s,
            "  (per op: medians over batches of {BATCH} ops; x: median of each batch's ratio to \
             the floor batch after it)"
        );
        let mut t = Table::new(&[
            ("family", Left),
            ("live", Right),
            ("callers", Right),
            ("op µs", Right),
            ("floor µs", Right),
            ("wall x", Right),
            ("daemon CPU µs", Right),
            ("floor CPU µs", Right),
            ("CPU x", Right),
            ("RSS MiB", Right),
            ("B/mapping", Right),
        ]);
        for c in &self.churn {
            t.row(vec![
                c.family.clone(),
                c.live.to_string(),
                c.callers.to_string(),
                format!("{:.1}", c.op_us),
                format!("{:.1}", c.floor_us),
                format!("{:.2}", c.wall_ratio),
                format!("{:.2}", c.daemon_cpu_us),
                format!("{:.2}", c.floor_cpu_us),
                format!("{:.2}", c.cpu_ratio),
                format!("{:.1}", c.rss_bytes as f64 / 1048576.0),
                format!("{:.0}", c.bytes_per_mapping),
            ]);
        }
        s += &t.render("  ");
        let _ = writeln!(s, "\nconnects");
        let mut t = Table::new(&[
            ("scenario", Left),
            ("n", Right),
            ("conc.", Right),
            ("conn/s", Right),
            ("p50 ms", Right),
            ("p99 ms", Right),
            ("p999 ms", Right),
            ("daemon p99", Right),
            ("retrans", Right),
            ("late RI", Right),
            ("ok", Left),
        ]);
        for c in &self.connect {
            let p =
                |f: fn(&iwpm_lab::report::Percentiles) -> f64| c.latency.as_ref().map_or(0.0, f);
            t.row(vec![
                c.scenario.to_owned(),
                c.connections.to_string(),
                c.concurrency.to_string(),
                format!("{:.0}", c.conn_per_s),
                format!("{:.2}", p(|l| l.p50_ms)),
                format!("{:.2}", p(|l| l.p99_ms)),
                format!("{:.2}", p(|l| l.p999_ms)),
                format!("{:.2}", c.daemon_local.as_ref().map_or(0.0, |l| l.p99_ms)),
                c.retransmissions.to_string(),
                c.remote_info_late.to_string(),
                (if c.consistent { "yes" } else { "NO" }).to_owned(),
            ]);
        }
        s += &t.render("  ");
        if let Some(r) = &self.restart {
            let _ = writeln!(
                s,
                "\nrestart: {} mappings recovered of {} in {:.1} ms ({:.0}/s), RSS after {:.1} MiB",
                r.recovered,
                r.mappings,
                r.downtime_ms,
                r.mappings_per_s,
                r.rss_bytes as f64 / 1048576.0
            );
        }
        let _ = writeln!(s, "\ntargets");
        if self.scale.quick {
            let _ = writeln!(s, "  {QUICK_TARGETS}");
        }
        let goal = if self.scale.quick {
            "full-scale goal"
        } else {
            "goal"
        };
        s += &render_targets(&self.targets, goal, "n/a (quick)", &self.notes);
        s
    }
}

/// The churn as a chart: the daemon's CPU µs per op against live mappings, one line per
/// family and number of callers, and the syscall floor of each family (one caller) dashed.
pub(crate) fn churn_svg(bench: &Bench) -> String {
    let mut series: Vec<iwpm_lab::svg::Series> = Vec::new();
    let mut add = |name: String, dashed: bool, point: (f64, f64)| match series
        .iter_mut()
        .find(|s| s.name == name)
    {
        Some(s) => s.points.push(point),
        None => series.push(iwpm_lab::svg::Series {
            name,
            points: vec![point],
            dashed,
        }),
    };
    for c in &bench.churn {
        let who = if c.callers == 1 {
            "1 caller".to_owned()
        } else {
            format!("{} callers", c.callers)
        };
        add(
            format!("{}, {who}: daemon", c.family),
            false,
            (c.live as f64, c.daemon_cpu_us),
        );
        if c.callers == 1 {
            add(
                format!("{}: syscall floor", c.family),
                true,
                (c.live as f64, c.floor_cpu_us),
            );
        }
    }
    iwpm_lab::svg::lines(
        "iwpm-bench: churn (ADD + REMOVE) against live mappings",
        "live mappings (log scale)",
        "CPU µs per op (median over batches)",
        &series,
    )
}

fn target(name: String, value: f64, goal: &str, met: bool) -> Target {
    Target {
        name,
        value,
        goal: goal.into(),
        met: Some(met),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_mapped_levels_fit_one_ip_and_the_descriptor_limit() {
        let s = Scale::new(false, Some(20_000), false);
        assert_eq!(s.churn_levels, [100, 1000, 10_000, 18_976]);
        assert_eq!(s.connections, 18_976);
        assert_eq!(s.capped.len(), 3, "{:?}", s.capped);
        assert!(s.capped[0].contains("50000 capped to 25000"));

        let roomy = Scale::new(false, Some(1 << 20), false);
        assert_eq!(roomy.churn_levels, [100, 1000, 10_000, 25_000]);
        assert_eq!(roomy.capped.len(), 1);
    }

    fn level(family: &str, live: usize, callers: usize, cpu: f64, floor: f64) -> ChurnLevel {
        ChurnLevel {
            family: family.into(),
            live,
            callers,
            ops: 300,
            op_us: 0.0,
            ops_per_s: 0.0,
            daemon_cpu_us: cpu,
            floor_us: 0.0,
            floor_cpu_us: floor,
            wall_ratio: 0.0,
            cpu_ratio: 0.0,
            daemon_cpu_us_mean: 0.0,
            floor_cpu_us_mean: 0.0,
            rss_bytes: 0,
            bytes_per_mapping: 0.0,
        }
    }

    /// `--plot`: well-formed SVG with one line per family and callers, the floor dashed,
    /// every level a point with its value.
    #[test]
    fn churn_chart_has_every_series_and_point() {
        let mut bench = Bench::new(&Scale::new(true, None, false));
        bench.churn = vec![
            level("ipv4", 100, 1, 12.0, 3.0),
            level("ipv4", 100, 8, 5.0, 3.0),
            level("ipv4", 1000, 1, 12.5, 3.1),
            level("ipv4", 1000, 8, 5.5, 3.1),
        ];
        let svg = churn_svg(&bench);
        let doc = roxmltree::Document::parse(&svg).expect("well-formed SVG");
        type Drawn = (String, Vec<(f64, f64)>, bool);
        let series: Vec<Drawn> = doc
            .descendants()
            .filter(|n| n.attribute("class") == Some("series"))
            .map(|g| {
                let points = g
                    .descendants()
                    .filter(|p| p.attribute("class") == Some("point"))
                    .map(|p| {
                        let v = |a| p.attribute(a).unwrap().parse::<f64>().unwrap();
                        (v("data-x"), v("data-y"))
                    })
                    .collect();
                let dashed = g
                    .descendants()
                    .any(|n| n.attribute("stroke-dasharray").is_some());
                (g.attribute("data-name").unwrap().to_owned(), points, dashed)
            })
            .collect();
        assert_eq!(
            series,
            [
                (
                    "ipv4, 1 caller: daemon".to_owned(),
                    vec![(100.0, 12.0), (1000.0, 12.5)],
                    false
                ),
                (
                    "ipv4: syscall floor".to_owned(),
                    vec![(100.0, 3.0), (1000.0, 3.1)],
                    true
                ),
                (
                    "ipv4, 8 callers: daemon".to_owned(),
                    vec![(100.0, 5.0), (1000.0, 5.5)],
                    false
                ),
            ]
        );
    }

    /// A run with one row of each kind and its targets judged.
    fn finished(quick: bool) -> Bench {
        let mut bench = Bench::new(&Scale::new(quick, None, false));
        let mut low = level("ipv4", 100, 1, 12.0, 3.0);
        low.cpu_ratio = 4.0;
        low.bytes_per_mapping = 200.0;
        let mut high = level("ipv4", 1000, 1, 12.5, 3.1);
        high.cpu_ratio = 4.03;
        high.bytes_per_mapping = 376.83;
        bench.churn = vec![low, high];
        bench.finish();
        bench
    }

    /// The lines of the table under `title`, header first, up to the next blank line or
    /// note.
    fn table<'a>(text: &'a str, title: &str) -> Vec<&'a str> {
        text.lines()
            .skip_while(|l| *l != title)
            .skip(1)
            .skip_while(|l| !l.contains("  target  ") && !l.contains("  family  "))
            .take_while(|l| !l.is_empty() && !l.starts_with("note:"))
            .collect()
    }

    /// Every row has a cell that ends where the header `head` ends (a right-aligned
    /// column) or starts where it starts (left-aligned).
    fn aligned(lines: &[&str], head: &str, right: bool) {
        let chars = |l: &str| l.chars().collect::<Vec<char>>();
        let h = chars(lines[0]);
        let hs = chars(head);
        let start = (0..h.len())
            .find(|&i| h[i..].starts_with(&hs))
            .unwrap_or_else(|| panic!("no {head:?} in {lines:?}"));
        let edge = if right { start + hs.len() - 1 } else { start };
        for l in &lines[1..] {
            let c = chars(l);
            let inside = c.get(edge).is_some_and(|c| *c != ' ');
            let outside = if right {
                c.get(edge + 1).is_none_or(|c| *c == ' ')
            } else {
                c[edge - 1] == ' '
            };
            assert!(
                inside && outside,
                "{head:?} misaligned in {l:?}:\n{}",
                lines.join("\n")
            );
        }
    }

    /// `--quick`: no target judged, in the text (verdict, goal header, one line saying why)
    /// and in the JSON (`met` null, `scale.quick`); the columns line up.
    #[test]
    fn quick_targets_are_not_judged() {
        let bench = finished(true);
        assert!(bench.targets.len() >= 4);
        assert!(bench.targets.iter().all(|t| t.met.is_none()));
        let text = bench.render();
        assert_eq!(text.matches(QUICK_TARGETS).count(), 1, "{text}");
        let rows = table(&text, "targets");
        assert!(rows[0].contains("full-scale goal"), "{text}");
        assert!(
            rows[1..].iter().all(|r| r.starts_with("  n/a (quick)  ")),
            "{text}"
        );
        assert!(!text.contains("MISS") && !text.contains(" met "), "{text}");
        for (head, right) in [
            ("target", false),
            ("value", true),
            ("full-scale goal", false),
        ] {
            aligned(&rows, head, right);
        }
        let churn = table(&text, "churn (ADD+REMOVE per op)");
        for head in ["live", "callers", "CPU x", "B/mapping"] {
            aligned(&churn, head, true);
        }
        let json: serde_json::Value =
            serde_json::from_str(&iwpm_lab::json::to_string_rounded(&bench).unwrap()).unwrap();
        assert_eq!(json["scale"]["quick"], true);
        assert!(json["targets"][0]["met"].is_null(), "{json}");
    }

    /// The full run keeps its verdicts: met and MISS, against "goal".
    #[test]
    fn full_run_targets_are_judged() {
        let bench = finished(false);
        let text = bench.render();
        assert!(!text.contains("--quick"), "{text}");
        let rows = table(&text, "targets");
        assert!(rows[0].ends_with("  goal"), "{text}");
        let bytes = rows
            .iter()
            .find(|r| r.contains("bytes per mapping"))
            .unwrap();
        assert!(
            bytes.starts_with("  MISS ") && bytes.ends_with("376.83  <= 256"),
            "{text}"
        );
        let flat = rows
            .iter()
            .find(|r| r.contains("1000 vs 100 live"))
            .unwrap();
        assert!(flat.starts_with("  met "), "{text}");
        for (head, right) in [("target", false), ("value", true), ("goal", false)] {
            aligned(&rows, head, right);
        }
    }

    #[test]
    fn no_port_map_levels_hold_no_socket_and_are_not_capped() {
        let s = Scale::new(false, Some(20_000), true);
        assert_eq!(s.churn_levels, [100, 1000, 10_000, 50_000]);
        // the connects are port-mapped whatever the churn does
        assert_eq!(s.connections, 18_976);
        assert_eq!(s.capped.len(), 1);
    }
}
