//! OpenMetrics text for node_exporter's textfile collector (`iwpmctl metrics >
//! /var/lib/node_exporter/textfile/iwpmd.prom`), rendered from a [`StatusReport`], and a
//! strict checker of the subset of the format we emit.
//!
//! Names: `iwpmd_build_info` (info: version, ABI, handshake), `iwpmd_uptime_seconds`,
//! `iwpmd_kernel_clients`, `iwpmd_mappings`, `iwpmd_ports_held`, `iwpmd_exchanges`,
//! `iwpmd_control_clients`, then every core counter as `iwpmd_core_<name>` and every IO
//! counter as `iwpmd_io_<name>`, with its declared help text: counters (samples end in
//! `_total`) unless the report lists them among its gauges. A counter whose figure one of
//! the gauges above already carries (the core's `mappings`, the IO `ports_held`) is
//! declared without [`Surface::Metrics`] and left out, so each figure has one name. The
//! exposition ends with `# EOF`.
//!
//! node_exporter's textfile collector does not read OpenMetrics: it reads the Prometheus
//! text format (0.0.4), which has no `info` type, names a counter's family with its
//! `_total` sample, and knows no `# UNIT` or `# EOF` (an `info` line made it reject the
//! whole file). [`textfile`] turns our OpenMetrics text into that format; `iwpmctl
//! metrics` prints it, `iwpmctl metrics --openmetrics` the daemon's text as it is.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use iwpm_report::{Counter, Surface};

use crate::proto::StatusReport;
use crate::IoCounter;

/// Renders the report as OpenMetrics text.
pub fn render(status: &StatusReport) -> String {
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str| {
        let _ = writeln!(out, "# TYPE {name} {kind}");
        let _ = writeln!(out, "# HELP {name} {help}");
        out.len()
    };
    family(
        "iwpmd_build",
        "info",
        "iwpmd version and kernel link state.",
    );
    let _ = writeln!(
        out,
        "iwpmd_build_info{{version=\"{}\",abi=\"{}\",handshake=\"{}\"}} 1",
        escape(&status.version),
        status.abi,
        escape(&status.handshake)
    );
    let _ = writeln!(out, "# TYPE iwpmd_uptime_seconds gauge");
    let _ = writeln!(out, "# UNIT iwpmd_uptime_seconds seconds");
    let _ = writeln!(
        out,
        "# HELP iwpmd_uptime_seconds Time since the daemon started."
    );
    let _ = writeln!(out, "iwpmd_uptime_seconds {:.3}", status.uptime_secs);
    let gauges: [(&str, &str, u64); 5] = [
        (
            "iwpmd_kernel_clients",
            "Registered kernel clients.",
            status.clients.len() as u64,
        ),
        ("iwpmd_mappings", "Mappings held.", status.mappings),
        (
            "iwpmd_ports_held",
            "TCP ports held for mappings.",
            status.ports_held,
        ),
        (
            "iwpmd_exchanges",
            "Peer exchanges in flight.",
            status.exchanges,
        ),
        (
            "iwpmd_control_clients",
            "Connected control clients.",
            status.control_clients,
        ),
    ];
    for (name, help, value) in gauges {
        gauge(&mut out, name, help, value);
    }
    let is_gauge = |n: &str| status.gauges.iter().any(|g| g == n);
    for (prefix, declared, counters) in [
        (
            "iwpmd_core_",
            core_counter as Declared,
            &status.core_counters,
        ),
        ("iwpmd_io_", io_counter, &status.io_counters),
    ] {
        for (name, value) in counters {
            if !valid_name(name) {
                continue;
            }
            // A name this build does not know (a newer daemon's) is published as it is.
            let help = match declared(name) {
                Some((_, false)) => continue,
                Some((help, true)) => help.to_owned(),
                None => format!("iwpmd counter {name}."),
            };
            let full = format!("{prefix}{name}");
            if is_gauge(name) {
                gauge(&mut out, &full, &help, *value);
            } else {
                let _ = writeln!(out, "# TYPE {full} counter");
                let _ = writeln!(out, "# HELP {full} {help}");
                let _ = writeln!(out, "{full}_total {value}");
            }
        }
    }
    out.push_str("# EOF\n");
    out
}

/// The OpenMetrics text [`render`] makes, in the Prometheus text format node_exporter's
/// textfile collector reads: an `info` family becomes a gauge named with its `_info`
/// sample, a counter family is named with its `_total` sample, `# UNIT` and `# EOF` go;
/// samples are unchanged. Metadata of a family whose type is not one of ours is kept as
/// `untyped`.
pub fn textfile(openmetrics: &str) -> String {
    let kinds: HashMap<&str, &str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.split_once(' '))
        .collect();
    let sample_name = |family: &str| match kinds.get(family).copied() {
        Some("counter") => format!("{family}_total"),
        Some("info") => format!("{family}_info"),
        _ => family.to_owned(),
    };
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some((family, kind)) = line.strip_prefix("# TYPE ").and_then(|r| r.split_once(' ')) {
            let kind = match kind {
                "counter" => "counter",
                "gauge" | "info" => "gauge",
                _ => "untyped",
            };
            let _ = writeln!(out, "# TYPE {} {kind}", sample_name(family));
        } else if let Some((family, help)) =
            line.strip_prefix("# HELP ").and_then(|r| r.split_once(' '))
        {
            let _ = writeln!(out, "# HELP {} {help}", sample_name(family));
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// A counter's help text and whether it shows in the metrics (`None`: an unknown name).
type Declared = fn(&str) -> Option<(&'static str, bool)>;

fn core_counter(name: &str) -> Option<(&'static str, bool)> {
    let c: Counter = name.parse().ok()?;
    Some((c.help(), c.shows_in(Surface::Metrics)))
}

fn io_counter(name: &str) -> Option<(&'static str, bool)> {
    let c = IoCounter::from_name(name)?;
    Some((c.help(), c.shows_in(Surface::Metrics)))
}

fn gauge(out: &mut String, name: &str, help: &str, value: u64) {
    let _ = writeln!(out, "# TYPE {name} gauge");
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "{name} {value}");
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// A violation of the OpenMetrics text format, with its 1-based line.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {what}")]
pub struct FormatError {
    /// Line number.
    pub line: usize,
    /// What is wrong.
    pub what: String,
}

/// One parsed sample.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// Its family.
    pub family: String,
    /// The family's type.
    pub kind: String,
    /// The sample name (with suffix).
    pub name: String,
    /// Labels in order.
    pub labels: Vec<(String, String)>,
    /// The value.
    pub value: f64,
}

/// Parses OpenMetrics text strictly for the features we use (TYPE, HELP, UNIT metadata;
/// counter, gauge, info and unknown families; labels; no timestamps or exemplars): every
/// line must be well formed, metadata must precede a family's samples, families must not
/// repeat or interleave, sample names must carry their type's suffix, counters and info
/// values must be valid, and the text must end with `# EOF` and a newline.
pub fn parse(text: &str) -> Result<Vec<Sample>, FormatError> {
    let err = |line: usize, what: &str| FormatError {
        line,
        what: what.to_owned(),
    };
    let Some(body) = text
        .strip_suffix("# EOF\n")
        .or_else(|| text.strip_suffix("# EOF"))
    else {
        return Err(err(text.lines().count(), "does not end with `# EOF`"));
    };
    let mut samples = Vec::new();
    let mut seen: HashSet<String> = HashSet::new();
    let mut current: Option<(String, String, bool)> = None; // (family, type, had samples)
    for (i, line) in body.split('\n').enumerate() {
        let n = i + 1;
        if line.is_empty() {
            if i + 1 == body.split('\n').count() {
                continue; // the newline before `# EOF`
            }
            return Err(err(n, "empty line"));
        }
        if let Some(meta) = line.strip_prefix("# ") {
            let mut parts = meta.splitn(3, ' ');
            let (Some(keyword), Some(name)) = (parts.next(), parts.next()) else {
                return Err(err(n, "malformed metadata line"));
            };
            let rest = parts.next();
            if !valid_name(name) {
                return Err(err(n, "invalid metric family name"));
            }
            let same = current.as_ref().is_some_and(|(f, _, _)| f == name);
            if !same {
                if !seen.insert(name.to_owned()) {
                    return Err(err(n, "metric family repeated or interleaved"));
                }
                current = Some((name.to_owned(), "unknown".to_owned(), false));
            } else if current.as_ref().is_some_and(|(_, _, s)| *s) {
                return Err(err(n, "metadata after the family's samples"));
            }
            match (keyword, rest) {
                ("TYPE", Some(t)) => {
                    let known = [
                        "counter",
                        "gauge",
                        "info",
                        "unknown",
                        "stateset",
                        "histogram",
                        "gaugehistogram",
                        "summary",
                    ];
                    if !known.contains(&t) {
                        return Err(err(n, "unknown metric type"));
                    }
                    if t == "counter" && name.ends_with("_total") {
                        return Err(err(n, "counter family name must not end in _total"));
                    }
                    if let Some(c) = current.as_mut() {
                        c.1 = t.to_owned();
                    }
                }
                ("HELP", Some(_)) => {}
                ("UNIT", Some(u)) => {
                    if !name.ends_with(&format!("_{u}")) {
                        return Err(err(n, "unit is not the family name's suffix"));
                    }
                }
                _ => return Err(err(n, "unknown or incomplete metadata")),
            }
            continue;
        }
        if line.starts_with('#') {
            return Err(err(n, "comment lines are not allowed"));
        }
        let sample = parse_sample(line).map_err(|w| err(n, w))?;
        let (family, kind) = match current.as_mut() {
            Some((f, k, had)) if sample_belongs(&sample.0, f, k) => {
                *had = true;
                (f.clone(), k.clone())
            }
            _ => {
                // A sample without metadata starts an `unknown` family of its own name.
                if !seen.insert(sample.0.clone()) {
                    return Err(err(n, "sample outside its family"));
                }
                current = Some((sample.0.clone(), "unknown".into(), true));
                (sample.0.clone(), "unknown".into())
            }
        };
        let value = sample.2;
        if kind == "counter" && (value.is_nan() || value < 0.0) {
            return Err(err(n, "counter value must be a non-negative number"));
        }
        if kind == "info" && value != 1.0 {
            return Err(err(n, "info value must be 1"));
        }
        samples.push(Sample {
            family,
            kind,
            name: sample.0,
            labels: sample.1,
            value,
        });
    }
    Ok(samples)
}

fn sample_belongs(sample: &str, family: &str, kind: &str) -> bool {
    match kind {
        "counter" => sample == format!("{family}_total") || sample == format!("{family}_created"),
        "info" => sample == format!("{family}_info"),
        "gauge" | "unknown" => sample == family,
        _ => sample.starts_with(family),
    }
}

type Parsed = (String, Vec<(String, String)>, f64);

fn parse_sample(line: &str) -> Result<Parsed, &'static str> {
    let name_end = line.find(['{', ' ']).ok_or("sample without a value")?;
    let name = &line[..name_end];
    if !valid_name(name) {
        return Err("invalid sample name");
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(r) = rest.strip_prefix('{') {
        rest = r;
        loop {
            if let Some(r) = rest.strip_prefix('}') {
                rest = r;
                break;
            }
            let eq = rest.find('=').ok_or("label without `=`")?;
            let lname = &rest[..eq];
            if !valid_name(lname) || lname.contains(':') {
                return Err("invalid label name");
            }
            rest = rest[eq + 1..]
                .strip_prefix('"')
                .ok_or("label value not quoted")?;
            let mut value = String::new();
            let mut chars = rest.char_indices();
            let end = loop {
                match chars.next() {
                    Some((_, '\\')) => match chars.next() {
                        Some((_, 'n')) => value.push('\n'),
                        Some((_, c @ ('\\' | '"'))) => value.push(c),
                        _ => return Err("bad escape in label value"),
                    },
                    Some((i, '"')) => break i,
                    Some((_, c)) => value.push(c),
                    None => return Err("unterminated label value"),
                }
            };
            labels.push((lname.to_owned(), value));
            rest = &rest[end + 1..];
            if let Some(r) = rest.strip_prefix(',') {
                rest = r;
            } else if !rest.starts_with('}') {
                return Err("expected `,` or `}` after a label");
            }
        }
    }
    let value = rest
        .strip_prefix(' ')
        .ok_or("expected one space before the value")?;
    if value.contains(' ') {
        return Err("timestamps and exemplars are not expected");
    }
    let v = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        v => v.parse::<f64>().map_err(|_| "value is not a number")?,
    };
    Ok((name.to_owned(), labels, v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checker_rejects_what_it_should() {
        assert!(parse("a 1\n# EOF\n").is_ok());
        assert!(parse("a 1\n").is_err(), "no EOF");
        assert!(
            parse("# TYPE a counter\na 1\n# EOF\n").is_err(),
            "counter without _total"
        );
        assert!(parse("# TYPE a counter\na_total -1\n# EOF\n").is_err());
        assert!(parse("# TYPE a_total counter\na_total_total 1\n# EOF\n").is_err());
        assert!(parse("# TYPE a gauge\na 1\n# TYPE b gauge\nb 1\na 2\n# EOF\n").is_err());
        assert!(parse("# TYPE a gauge\na{x=\"1} 1\n# EOF\n").is_err());
        assert!(parse("# TYPE a gauge\na 1 2 3\n# EOF\n").is_err());
        assert!(parse("# TYPE a gauge\n\na 1\n# EOF\n").is_err());
        assert!(parse("# TYPE a_seconds gauge\n# UNIT a_seconds bytes\n# EOF\n").is_err());
        assert!(parse("# TYPE i info\ni_info{v=\"x\"} 2\n# EOF\n").is_err());
        let s = parse("# TYPE i info\ni_info{v=\"a\\\"b\",w=\"\"} 1\n# EOF\n").unwrap();
        assert_eq!(s[0].labels[0].1, "a\"b");
    }
}
