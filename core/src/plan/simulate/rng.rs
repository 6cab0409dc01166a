//! What both simulators share: the generator that picks ranks in random
//! schedules, and the list formatting of their reports.

use std::fmt;

/// SplitMix64 (Steele, Lea and Flood, 2014): a tiny, good-enough generator
/// for picking ranks reproducibly.
pub(super) struct SplitMix(pub(super) u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in `0..bound` (`bound > 0`; the modulo bias is irrelevant here).
    pub(super) fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound as u64) as usize
    }
}

/// `items` joined by `"; "`.
pub(super) fn list<T: fmt::Display>(items: &[T]) -> String {
    items
        .iter()
        .map(T::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_reproducibly_within_bounds() {
        let seed = streamcomm_testkit::seed();
        let (mut a, mut b) = (SplitMix(seed), SplitMix(seed));
        for bound in 1..100 {
            let x = a.below(bound);
            assert!(x < bound, "seed {seed}: {x} >= {bound}");
            assert_eq!(x, b.below(bound), "seed {seed}");
        }
        assert_eq!(list(&[1, 2, 3]), "1; 2; 3");
    }
}
