//! How the daemon and its tools write a number of things, so that its log lines and
//! `iwpmctl`'s tables say it alike.

/// `n` and the noun in the number it takes: `1 mapping`, `0 mappings`, `2 entries`.
pub fn count(n: impl Into<u64>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::count;

    #[test]
    fn one_takes_the_singular_and_every_other_number_the_plural() {
        assert_eq!(count(1u32, "mapping", "mappings"), "1 mapping");
        assert_eq!(count(0u32, "mapping", "mappings"), "0 mappings");
        assert_eq!(count(2u64, "entry", "entries"), "2 entries");
    }
}
