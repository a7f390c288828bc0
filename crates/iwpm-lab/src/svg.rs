//! `--plot FILE.svg`: the lab's connect-latency distribution and the bench's churn against
//! live mappings, as small standalone SVG files.
//!
//! Written by hand rather than with a plotting crate: two chart kinds (bars on a log axis,
//! lines on a log axis) need a few dozen elements each, while plotters, the well-kept
//! choice, lays out its axis labels with font metrics: without its `ttf` feature (and
//! font-kit, freetype or fontconfig underneath) it cannot size text, with it the lab would
//! depend on system font libraries to draw two charts. Here text is plain `<text>` the
//! viewer lays out, every value is escaped, and each data point carries its numbers
//! (`data-*` attributes and a `<title>` tooltip), so a test or a script can read the data
//! back from the file.

use std::fmt::Write as _;

use crate::histogram::{duration_label, Bucket};

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 420.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;
/// Line colours, one per series (repeated beyond).
const COLOURS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
];

/// `text` safe inside an element or an attribute value.
pub fn escape(text: &str) -> String {
    let mut o = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&apos;"),
            c => o.push(c),
        }
    }
    o
}

/// A log10 axis from `lo` to `hi` (both > 0) onto pixels `p0..p1`.
#[derive(Clone, Copy, Debug)]
struct LogAxis {
    lo: f64,
    hi: f64,
    p0: f64,
    p1: f64,
}

impl LogAxis {
    fn new(lo: f64, hi: f64, p0: f64, p1: f64) -> LogAxis {
        let lo = lo.max(f64::MIN_POSITIVE);
        let hi = if hi > lo { hi } else { lo * 10.0 };
        LogAxis { lo, hi, p0, p1 }
    }

    fn at(&self, v: f64) -> f64 {
        let t = (v.max(self.lo).log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10());
        self.p0 + t * (self.p1 - self.p0)
    }

    /// Powers of ten (and 2× and 5× when there are few) within the axis.
    fn ticks(&self) -> Vec<f64> {
        let (a, b) = (
            self.lo.log10().floor() as i32,
            self.hi.log10().ceil() as i32,
        );
        let steps: &[f64] = if b - a <= 3 { &[1.0, 2.0, 5.0] } else { &[1.0] };
        (a..=b)
            .flat_map(|d| steps.iter().map(move |s| s * 10f64.powi(d)))
            .filter(|&v| v >= self.lo * 0.999 && v <= self.hi * 1.001)
            .collect()
    }
}

/// The frame: background, title, axis labels, plot area border.
fn frame(o: &mut String, title: &str, x_label: &str, y_label: &str) {
    let _ = write!(
        o,
        r##"<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">
<title>{t}</title>
<rect width="100%" height="100%" fill="white"/>
<text x="{cx}" y="22" text-anchor="middle" font-size="15">{t}</text>
<text x="{cx}" y="{xl}" text-anchor="middle">{x}</text>
<text transform="translate(18 {cy}) rotate(-90)" text-anchor="middle">{y}</text>
<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>
"##,
        t = escape(title),
        x = escape(x_label),
        y = escape(y_label),
        cx = LEFT + (WIDTH - LEFT - RIGHT) / 2.0,
        cy = TOP + (HEIGHT - TOP - BOTTOM) / 2.0,
        xl = HEIGHT - 14.0,
        pw = WIDTH - LEFT - RIGHT,
        ph = HEIGHT - TOP - BOTTOM,
    );
}

fn x_ticks(o: &mut String, axis: &LogAxis, label: impl Fn(f64) -> String) {
    let y = HEIGHT - BOTTOM;
    for v in axis.ticks() {
        let x = axis.at(v);
        let _ = writeln!(
            o,
            r##"<line x1="{x:.1}" y1="{y}" x2="{x:.1}" y2="{:.1}" stroke="#444"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            y + 5.0,
            y + 19.0,
            escape(&label(v))
        );
    }
}

fn y_ticks(o: &mut String, ticks: &[(f64, String)]) {
    for (y, text) in ticks {
        let _ = writeln!(
            o,
            r##"<line x1="{:.1}" y1="{y:.1}" x2="{LEFT}" y2="{y:.1}" stroke="#444"/><line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            LEFT - 5.0,
            WIDTH - RIGHT,
            LEFT - 8.0,
            y + 4.0,
            escape(text)
        );
    }
}

/// The latency distribution: one bar per non-empty bucket on a log time axis; heights on
/// a log count axis, so a bucket of 3 connections next to one of 3000 still shows (a
/// retransmission staircase is mostly such small buckets).
pub fn histogram(title: &str, buckets: &[Bucket]) -> String {
    let mut o = String::new();
    frame(
        &mut o,
        title,
        "connect latency (log scale)",
        "connections (log scale)",
    );
    let (lo, hi) = match (buckets.first(), buckets.last()) {
        (Some(a), Some(b)) => (a.lo_ms, b.hi_ms),
        _ => (1.0, 10.0),
    };
    let x = LogAxis::new(lo, hi, LEFT, WIDTH - RIGHT);
    let max = buckets.iter().map(|b| b.count).max().unwrap_or(1).max(1) as f64;
    // Height ∝ log10(1 + count): 0 for none, full for the fullest bucket.
    let base = HEIGHT - BOTTOM;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let height = |n: f64| (1.0 + n).log10() / (1.0 + max).log10() * plot_h;
    let mut ticks = Vec::new();
    let mut t = 1.0;
    while t <= max {
        ticks.push((base - height(t), format!("{t}")));
        t *= 10.0;
    }
    y_ticks(&mut o, &ticks);
    x_ticks(&mut o, &x, duration_label);
    for b in buckets.iter().filter(|b| b.count > 0) {
        let (x0, x1) = (x.at(b.lo_ms), x.at(b.hi_ms));
        let h = height(b.count as f64);
        let _ = writeln!(
            o,
            r##"<rect class="bar" data-lo-ms="{}" data-hi-ms="{}" data-count="{}" x="{x0:.1}" y="{:.1}" width="{:.1}" height="{h:.1}" fill="#1f77b4" stroke="white"><title>{} - {}: {} connections</title></rect>"##,
            b.lo_ms,
            b.hi_ms,
            b.count,
            base - h,
            (x1 - x0).max(1.0),
            escape(&duration_label(b.lo_ms)),
            escape(&duration_label(b.hi_ms)),
            b.count
        );
    }
    o.push_str("</svg>\n");
    o
}

/// One line of a [`lines`] chart.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// (x, y) points, x > 0.
    pub points: Vec<(f64, f64)>,
    /// Drawn dashed (a reference, e.g. the syscall floor).
    pub dashed: bool,
}

/// Lines over a log x axis (e.g. live mappings) and a linear y axis from 0, with a legend.
pub fn lines(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    let mut o = String::new();
    frame(&mut o, title, x_label, y_label);
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let (lo, hi) = xs.fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(v), b.max(v)));
    let (lo, hi) = if lo <= hi { (lo, hi) } else { (1.0, 10.0) };
    let x = LogAxis::new(lo / 1.5, hi * 1.5, LEFT, WIDTH - RIGHT);
    let y_max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0, f64::max);
    let y_top = nice_ceiling(y_max);
    let base = HEIGHT - BOTTOM;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let y_at = |v: f64| base - v / y_top * plot_h;
    let ticks: Vec<(f64, String)> = (0..=5)
        .map(|i| {
            let v = y_top * f64::from(i) / 5.0;
            (y_at(v), trim_number(v))
        })
        .collect();
    y_ticks(&mut o, &ticks);
    x_ticks(&mut o, &x, trim_number);
    for (k, s) in series.iter().enumerate() {
        let colour = COLOURS[k % COLOURS.len()];
        let dash = if s.dashed {
            r#" stroke-dasharray="6 4""#
        } else {
            ""
        };
        let points: Vec<String> = s
            .points
            .iter()
            .map(|&(px, py)| format!("{:.1},{:.1}", x.at(px), y_at(py)))
            .collect();
        let _ = writeln!(
            o,
            r#"<g class="series" data-name="{}"><polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>"#,
            escape(&s.name),
            points.join(" ")
        );
        for &(px, py) in &s.points {
            let _ = writeln!(
                o,
                r#"<circle class="point" data-x="{px}" data-y="{py}" cx="{:.1}" cy="{:.1}" r="3" fill="{colour}"><title>{}: {} at {}</title></circle>"#,
                x.at(px),
                y_at(py),
                escape(&s.name),
                trim_number(py),
                trim_number(px)
            );
        }
        let ly = TOP + 16.0 + 16.0 * k as f64;
        let _ = writeln!(
            o,
            r#"<line x1="{:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{colour}" stroke-width="2"{dash}/><text x="{:.1}" y="{:.1}">{}</text></g>"#,
            LEFT + 10.0,
            LEFT + 34.0,
            LEFT + 40.0,
            ly + 4.0,
            escape(&s.name)
        );
    }
    o.push_str("</svg>\n");
    o
}

/// The smallest 1, 2 or 5 × 10^k at or above `v` (1 for nothing).
fn nice_ceiling(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let p = 10f64.powi(v.log10().floor() as i32);
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|&c| c >= v)
        .unwrap_or(10.0 * p)
}

/// `v` with at most 3 decimals and no trailing zeros (`1000`, `2.5`, `0.125`).
fn trim_number(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses `svg` (well-formed XML or a panic) and returns its elements with `class`.
    fn classed<'a>(doc: &'a roxmltree::Document<'a>, class: &str) -> Vec<roxmltree::Node<'a, 'a>> {
        doc.descendants()
            .filter(|n| n.attribute("class") == Some(class))
            .collect()
    }

    #[test]
    fn histogram_is_well_formed_and_carries_every_bucket() {
        let buckets = [
            Bucket {
                lo_ms: 6.3,
                hi_ms: 8.0,
                count: 900,
            },
            Bucket {
                lo_ms: 8.0,
                hi_ms: 10.0,
                count: 0,
            },
            Bucket {
                lo_ms: 1000.0,
                hi_ms: 1250.0,
                count: 90,
            },
            Bucket {
                lo_ms: 2000.0,
                hi_ms: 2500.0,
                count: 10,
            },
        ];
        let svg = histogram("iwpm-lab <1000 connections> & loss", &buckets);
        let doc = roxmltree::Document::parse(&svg).expect("well-formed SVG");
        assert_eq!(doc.root_element().tag_name().name(), "svg");
        let bars = classed(&doc, "bar");
        let data: Vec<(f64, usize)> = bars
            .iter()
            .map(|b| {
                (
                    b.attribute("data-lo-ms").unwrap().parse().unwrap(),
                    b.attribute("data-count").unwrap().parse().unwrap(),
                )
            })
            .collect();
        assert_eq!(data, [(6.3, 900), (1000.0, 90), (2000.0, 10)]);
        // Taller bars for more connections, every one visible.
        let h: Vec<f64> = bars
            .iter()
            .map(|b| b.attribute("height").unwrap().parse().unwrap())
            .collect();
        assert!(h[0] > h[1] && h[1] > h[2] && h[2] > 10.0, "{h:?}");
        assert!(svg.contains("&lt;1000 connections&gt; &amp; loss"));
    }

    #[test]
    fn lines_are_well_formed_and_carry_every_point() {
        let series = [
            Series {
                name: "ipv4, 1 caller".into(),
                points: vec![(100.0, 12.5), (1000.0, 13.0), (10000.0, 14.0)],
                dashed: false,
            },
            Series {
                name: "floor".into(),
                points: vec![(100.0, 3.0), (1000.0, 3.1), (10000.0, 3.2)],
                dashed: true,
            },
        ];
        let svg = lines("churn", "live mappings", "CPU µs per op", &series);
        let doc = roxmltree::Document::parse(&svg).expect("well-formed SVG");
        let groups = classed(&doc, "series");
        let names: Vec<&str> = groups
            .iter()
            .map(|g| g.attribute("data-name").unwrap())
            .collect();
        assert_eq!(names, ["ipv4, 1 caller", "floor"]);
        let points: Vec<(f64, f64)> = classed(&doc, "point")
            .iter()
            .map(|p| {
                (
                    p.attribute("data-x").unwrap().parse().unwrap(),
                    p.attribute("data-y").unwrap().parse().unwrap(),
                )
            })
            .collect();
        assert_eq!(points.len(), 6);
        assert_eq!(points[2], (10000.0, 14.0));
        assert_eq!(nice_ceiling(14.0), 20.0);
        assert_eq!(nice_ceiling(0.0), 1.0);
    }
}
