//! Reading figures back out of the tools' text reports, for tests that check a report
//! adds up (the lab's unit tests and its end-to-end tests read the same lines).

/// The phases of a `time` line (`a 0.02 s + b 9.06 s (…) + … = 10.26 s`: what stands
/// outside parentheses) and its total, in seconds. Panics on a line of another shape: the
/// test then shows it.
pub fn phases_and_total(line: &str) -> (Vec<f64>, f64) {
    let secs = |part: &str| -> f64 {
        let part = part.split(" (").next().unwrap().trim();
        let number = part.strip_suffix(" s").unwrap().rsplit(' ').next().unwrap();
        number.parse().unwrap()
    };
    let (phases, total) = line.rsplit_once(" = ").unwrap();
    (phases.split(" + ").map(secs).collect(), secs(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_outside_parentheses_and_the_total() {
        let (phases, total) = phases_and_total(
            "time          setup 0.02 s + connecting 9.06 s + checks 1.06 s (1.01 s waiting) = 10.14 s",
        );
        assert_eq!(phases, vec![0.02, 9.06, 1.06]);
        assert_eq!(total, 10.14);
    }
}
