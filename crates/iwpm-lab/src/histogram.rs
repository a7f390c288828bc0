//! The distribution of connect latencies in log-scale buckets, as text for the report and
//! as data for `--plot`. Percentiles hide its shape; the shape is what tells a run's
//! story: without loss one hump of a few ms, with loss a staircase of humps one peer
//! retransmission interval (1 s) apart, each the connections that needed one more REQUEST.
//!
//! Buckets follow the R10 preferred numbers (10 per decade: 1, 1.25, 1.6, 2, 2.5, 3.15, 4,
//! 5, 6.3, 8 times a power of ten), so 1 s, 2 s, 3 s and 4 s land in different buckets
//! with empty ones between, and the edges read as round numbers.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

/// Bucket edges within one decade.
const R10: [f64; 10] = [1.0, 1.25, 1.6, 2.0, 2.5, 3.15, 4.0, 5.0, 6.3, 8.0];
/// Smallest edge: 1 µs (anything below lands in the first bucket).
const MIN_DECADE: i32 = -3;
/// Characters of the longest bar.
const BAR_WIDTH: usize = 40;

/// One bucket: `count` samples in `[lo_ms, hi_ms)`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Bucket {
    /// Lower edge, ms (included).
    pub lo_ms: f64,
    /// Upper edge, ms (excluded).
    pub hi_ms: f64,
    /// Samples in it.
    pub count: usize,
}

/// The index of the bucket `ms` falls in (decade × 10 + step, from [`MIN_DECADE`]).
fn index_of(ms: f64) -> i32 {
    if ms.is_nan() || ms <= 10f64.powi(MIN_DECADE) {
        return 0;
    }
    let decade = ms.log10().floor() as i32;
    let mantissa = ms / 10f64.powi(decade);
    // Rounding can put the mantissa a hair below 1 or at 10.
    let (decade, mantissa) = if mantissa >= 10.0 {
        (decade + 1, mantissa / 10.0)
    } else if mantissa < 1.0 {
        (decade - 1, mantissa * 10.0)
    } else {
        (decade, mantissa)
    };
    let step = R10.iter().rposition(|&e| e <= mantissa).unwrap_or(0) as i32;
    ((decade - MIN_DECADE) * 10 + step).max(0)
}

/// The lower edge of bucket `index`, ms.
fn edge(index: i32) -> f64 {
    let decade = index.div_euclid(10) + MIN_DECADE;
    R10[index.rem_euclid(10) as usize] * 10f64.powi(decade)
}

/// Buckets from the first to the last non-empty one (empty ones between included, so the
/// gaps of a staircase show); empty for no samples.
pub fn buckets(samples: &[Duration]) -> Vec<Bucket> {
    let idx: Vec<i32> = samples
        .iter()
        .map(|d| index_of(d.as_secs_f64() * 1e3))
        .collect();
    let (Some(&lo), Some(&hi)) = (idx.iter().min(), idx.iter().max()) else {
        return Vec::new();
    };
    let mut counts = vec![0usize; (hi - lo + 1) as usize];
    for i in idx {
        counts[(i - lo) as usize] += 1;
    }
    counts
        .into_iter()
        .enumerate()
        .map(|(k, count)| {
            let i = lo + k as i32;
            Bucket {
                lo_ms: round_edge(edge(i)),
                hi_ms: round_edge(edge(i + 1)),
                count,
            }
        })
        .collect()
}

/// An edge without the binary noise of `R10 × 10^k` (`0.0315`, not `0.031499999`).
fn round_edge(ms: f64) -> f64 {
    format!("{ms:.6e}").parse().unwrap_or(ms)
}

/// `ms` as people write it: `0.4 ms`, `3.15 ms`, `250 ms`, `1.25 s`.
pub fn duration_label(ms: f64) -> String {
    let trim = |v: f64| {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    };
    if ms >= 1000.0 {
        format!("{} s", trim(ms / 1000.0))
    } else {
        format!("{} ms", trim(ms))
    }
}

/// The text histogram: one line per bucket, a bar scaled to the fullest bucket (at least
/// one `#` for any sample, so a single slow connection shows), the count and the share
/// of samples up to the bucket's upper edge; more than two empty buckets in a row are one
/// line.
pub fn render(buckets: &[Bucket]) -> String {
    let mut o = String::new();
    let total: usize = buckets.iter().map(|b| b.count).sum();
    let max = buckets.iter().map(|b| b.count).max().unwrap_or(0);
    if total == 0 {
        return o;
    }
    let mut cumulative = 0;
    let mut k = 0;
    while k < buckets.len() {
        let b = &buckets[k];
        // A run of more than two empty buckets is one line (a gap, not a wall of bars).
        let empty = buckets[k..].iter().take_while(|b| b.count == 0).count();
        if empty > 2 {
            let range = format!(
                "{} - {}",
                duration_label(b.lo_ms),
                duration_label(buckets[k + empty - 1].hi_ms)
            );
            let _ = writeln!(o, "  {range:>21} :  ({empty} empty buckets)");
            k += empty;
            continue;
        }
        k += 1;
        cumulative += b.count;
        let len = (b.count * BAR_WIDTH).div_ceil(max);
        let range = format!("{} - {}", duration_label(b.lo_ms), duration_label(b.hi_ms));
        let tail = if b.count > 0 {
            format!(
                " {} ({:.1} % up to here)",
                b.count,
                cumulative as f64 * 100.0 / total as f64
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            o,
            "  {range:>21} |{:<width$}{tail}",
            "#".repeat(len),
            width = BAR_WIDTH
        );
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: f64) -> Duration {
        Duration::from_secs_f64(v / 1e3)
    }

    #[test]
    fn buckets_are_r10_edges() {
        assert_eq!(edge(index_of(1.0)), 1.0);
        assert_eq!(round_edge(edge(index_of(3.2))), 3.15);
        assert_eq!(round_edge(edge(index_of(1999.0))), 1600.0);
        assert_eq!(round_edge(edge(index_of(2000.0))), 2000.0);
        assert_eq!(round_edge(edge(index_of(0.0315))), 0.0315);
        assert_eq!(index_of(0.0), 0);
    }

    /// A retransmission staircase: humps at 7 ms, 1 s and 2 s with empty buckets between,
    /// each visible, however few samples it has.
    #[test]
    fn a_staircase_shows_every_step() {
        let mut samples = vec![ms(7.0); 900];
        samples.extend(vec![ms(1007.0); 90]);
        samples.extend(vec![ms(2007.0); 10]);
        let b = buckets(&samples);
        assert_eq!(b.first().unwrap().lo_ms, 6.3);
        assert_eq!(b.last().unwrap().lo_ms, 2000.0);
        assert_eq!(b.iter().map(|b| b.count).sum::<usize>(), 1000);
        let nonempty: Vec<(f64, usize)> = b
            .iter()
            .filter(|b| b.count > 0)
            .map(|b| (b.lo_ms, b.count))
            .collect();
        assert_eq!(nonempty, [(6.3, 900), (1000.0, 90), (2000.0, 10)]);
        let text = render(&b);
        let line = |lo: &str| {
            text.lines()
                .find(|l| l.trim_start().starts_with(lo))
                .unwrap_or_else(|| panic!("no {lo} line in\n{text}"))
                .to_owned()
        };
        let bar_and_tail = |lo: &str| {
            let l = line(lo);
            let hashes = l.matches('#').count();
            (
                hashes,
                l.split_once('|')
                    .unwrap()
                    .1
                    .trim_start_matches(['#', ' '])
                    .to_owned(),
            )
        };
        assert_eq!(
            bar_and_tail("6.3 ms - 8 ms"),
            (40, "900 (90.0 % up to here)".into())
        );
        assert_eq!(
            bar_and_tail("1 s - 1.25 s"),
            (4, "90 (99.0 % up to here)".into())
        );
        assert_eq!(
            bar_and_tail("2 s - 2.5 s"),
            (1, "10 (100.0 % up to here)".into())
        );
        assert!(!line("1.25 s - 1.6 s").contains('#'), "{text}");
        // The 8 ms - 1 s gap (21 buckets) is one line, the 1.25 s - 2 s one (2) is two.
        assert!(
            line("8 ms - 1 s").ends_with(":  (21 empty buckets)"),
            "{text}"
        );
        assert_eq!(text.lines().count(), b.len() - 20, "{text}");
    }

    #[test]
    fn labels_read_as_people_write_them() {
        assert_eq!(duration_label(3.15), "3.15 ms");
        assert_eq!(duration_label(250.0), "250 ms");
        assert_eq!(duration_label(1250.0), "1.25 s");
        assert_eq!(duration_label(0.4), "0.4 ms");
        assert!(buckets(&[]).is_empty());
        assert_eq!(render(&[]), "");
    }
}
