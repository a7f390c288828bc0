//! The simulator's pseudo-random numbers: SplitMix64, written out here.
//!
//! Why not a crate: a seed must reproduce the same run for as long as the regression seeds
//! in `tests/` are kept. A hand-written generator has one fixed stream that no dependency
//! upgrade can change (rand's `StdRng` documents that its algorithm may change between
//! versions), needs no feature flags, and SplitMix64 passes BigCrush, which is far more
//! than picking fault times needs. Not for secrets: nothing here is.

/// SplitMix64 (Steele, Lea, Flood 2014): a 64-bit counter through a mixing function.
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
}

/// The SplitMix64 finaliser: a bijective mix of one 64-bit word (also used to derive
/// independent streams and to hash small tuples).
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Rng {
    /// The stream for `seed`; `stream` separates independent uses of one seed.
    pub fn new(seed: u64, stream: u64) -> Self {
        Rng {
            state: mix(seed ^ mix(stream.wrapping_add(0x9e37_79b9_7f4a_7c15))),
        }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.state)
    }

    /// Uniform in `0..n` (0 when `n` is 0); the tiny modulo bias does not matter here.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo) + 1)
    }

    /// True with probability `per_mille / 1000`.
    pub fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_is_fixed() {
        // SplitMix64's published first outputs for state 0 (mix of the golden-ratio steps).
        let mut r = Rng { state: 0 };
        assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next_u64(), 0x6e78_9e6a_a1b9_65f4);
    }

    #[test]
    fn below_stays_below() {
        let mut r = Rng::new(7, 0);
        assert!((0..1000).all(|_| r.below(3) < 3));
        assert_eq!(r.below(0), 0);
    }
}
