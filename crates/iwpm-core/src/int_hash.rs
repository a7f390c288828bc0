//! A one-multiplication hasher for small integer keys that only the kernel or the daemon
//! chooses (ports of the mapping table, sequence numbers of kernel requests, mapping and
//! reservation ids). std's SipHash resists keys
//! chosen to collide, which these are not, and costs more than the rest of such a
//! look-up. Never use it for keys a peer or a local user controls.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// Fibonacci hashing: the multiplication spreads the key into the high bits (hashbrown's
/// tag) and keeps distinct low bits distinct (its bucket index).
#[derive(Debug, Default)]
pub(crate) struct IntHasher(u64);

const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

impl Hasher for IntHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(GOLDEN);
        }
    }

    fn write_u16(&mut self, n: u16) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(GOLDEN);
    }
}

/// A map keyed by kernel-chosen integers.
pub(crate) type IntMap<K, V> = HashMap<K, V, BuildHasherDefault<IntHasher>>;
/// A set of kernel-chosen integers.
pub(crate) type IntSet<K> = HashSet<K, BuildHasherDefault<IntHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_keys_spread_over_buckets() {
        let mut low = std::collections::HashSet::new();
        for port in 40_000u16..41_024 {
            let mut h = IntHasher::default();
            h.write_u16(port);
            low.insert(h.finish() & 1023);
        }
        assert_eq!(
            low.len(),
            1024,
            "1024 consecutive ports, 1024 distinct buckets"
        );
    }
}
