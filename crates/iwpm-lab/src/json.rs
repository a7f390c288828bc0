//! JSON output for people and scripts: the same structures as the text reports, with
//! floats rounded to what was measured (a latency in ms to the µs, `7.977` rather than
//! `7.976782999999999`), so the JSON reads and diffs as well as the text.

use serde::Serialize;
use serde_json::Value;

/// Decimal places kept at least (milliseconds to the microsecond, seconds to the ms).
const DECIMALS: i32 = 3;
/// Significant digits kept at least, for values below 1 (0.000123 stays 0.000123).
const SIGNIFICANT: i32 = 3;

/// `x` rounded to [`DECIMALS`] decimal places, or to [`SIGNIFICANT`] significant digits
/// when that keeps more (small values do not round to 0).
pub fn round_float(x: f64) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let magnitude = x.abs().log10().floor() as i32;
    let places = DECIMALS.max(SIGNIFICANT - 1 - magnitude).min(15);
    // Through the decimal text, so the result is the double closest to the rounded
    // decimal (which serde_json then prints in its shortest form).
    format!("{x:.*}", places as usize).parse().unwrap_or(x)
}

/// Rounds every float in `value` in place (see [`round_float`]); integers stay as they are.
pub fn round_floats(value: &mut Value) {
    match value {
        Value::Number(n) if n.is_f64() => {
            if let Some(r) = n
                .as_f64()
                .map(round_float)
                .and_then(serde_json::Number::from_f64)
            {
                *n = r;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(round_floats),
        Value::Object(map) => map.values_mut().for_each(round_floats),
        _ => {}
    }
}

/// `value` as pretty-printed JSON with its floats rounded.
pub fn to_string_rounded(value: &impl Serialize) -> serde_json::Result<String> {
    let mut v = serde_json::to_value(value)?;
    round_floats(&mut v);
    serde_json::to_string_pretty(&v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_keep_three_decimals_or_three_significant_digits() {
        assert_eq!(round_float(7.976782999999999), 7.977);
        assert_eq!(round_float(1028.0330001), 1028.033);
        assert_eq!(round_float(0.000123456), 0.000123);
        assert_eq!(round_float(-2.5000004), -2.5);
        assert_eq!(round_float(0.0), 0.0);
        assert_eq!(round_float(7442.123456), 7442.123);
    }

    #[test]
    fn json_text_has_no_long_fractions_and_keeps_integers() {
        let text = to_string_rounded(&serde_json::json!({
            "p99_ms": 7.976782999999999,
            "count": 1000,
            "nested": [{"setup_s": 0.015837804}],
        }))
        .unwrap();
        assert!(text.contains("\"p99_ms\": 7.977"), "{text}");
        assert!(text.contains("\"count\": 1000"), "{text}");
        assert!(text.contains("\"setup_s\": 0.0158"), "{text}");
        assert!(!text.contains("7.9767"), "{text}");
    }
}
