//! The order in which both simulators let ranks act: [`Schedule`], and the
//! seeded generator its random choices come from.

/// The order in which the simulator lets ranks act (one step of a message
/// plan, or one action of a flag plan: entering a barrier or one step).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Schedule {
    /// Passes over the ranks in rank order; each rank that can act takes one
    /// action per pass.
    #[default]
    RoundRobin,
    /// Each action is taken by a rank picked at random among those that can
    /// act (deterministic for a given seed): explores interleavings that
    /// round-robin never produces, such as one rank racing ahead.
    Random {
        /// Seed of the pseudo-random sequence.
        seed: u64,
    },
    /// As `Random`, but `rank` enters the call (its first step), or each
    /// barrier of a flag plan, only when no other rank can act: every other
    /// rank runs as far as it can before the last arrival, so any rank that
    /// would leave early does.
    Laggard {
        /// The rank that always arrives last.
        rank: usize,
        /// Seed of the pseudo-random sequence.
        seed: u64,
    },
}

/// A simulation whose ranks a [`Schedule`] lets act, one at a time.
pub(crate) trait Acting {
    /// What a failed action reports.
    type Error;

    /// Whether rank `r` can take its next action now.
    fn can_act(&self, r: usize) -> bool;

    /// Takes rank `r`'s next action (which it [can](Acting::can_act)).
    fn act(&mut self, r: usize) -> Result<(), Self::Error>;
}

/// [`Schedule::RoundRobin`]: passes over the `n` ranks of `sim` in rank
/// order, each rank that can act taking one action a pass, until a pass
/// moves none.
pub(crate) fn round_robin<S: Acting>(sim: &mut S, n: usize) -> Result<(), S::Error> {
    loop {
        let mut progressed = false;
        for r in 0..n {
            if sim.can_act(r) {
                sim.act(r)?;
                progressed = true;
            }
        }
        if !progressed {
            return Ok(());
        }
    }
}

impl Schedule {
    /// The seed and the held-back rank of a random schedule; `None` for
    /// round-robin.
    pub fn random(self) -> Option<(u64, Option<usize>)> {
        match self {
            Schedule::RoundRobin => None,
            Schedule::Random { seed } => Some((seed, None)),
            Schedule::Laggard { rank, seed } => Some((seed, Some(rank))),
        }
    }

    /// A setup error for a laggard that is not one of `n` ranks.
    pub fn check(self, n: usize) -> Result<(), String> {
        match self {
            Schedule::Laggard { rank, .. } if rank >= n => {
                Err(format!("laggard rank {rank} is out of range for {n} ranks"))
            }
            _ => Ok(()),
        }
    }
}

/// SplitMix64 (Steele, Lea and Flood, 2014): a tiny, good-enough generator
/// for picking ranks reproducibly.
pub struct SplitMix(pub u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in `0..bound` (`bound > 0`; the modulo bias is irrelevant here).
    pub fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound as u64) as usize
    }

    /// Picks one of `len` (> 0) ready ranks, uniformly among all but the
    /// one at `held` (a laggard about to enter), which is picked only when
    /// it is the only one.
    pub fn pick(&mut self, len: usize, held: Option<usize>) -> usize {
        match held {
            Some(p) if len > 1 => {
                let i = self.below(len - 1);
                if i >= p { i + 1 } else { i }
            }
            _ => self.below(len),
        }
    }
}

/// `items` joined by `"; "` (the lists of the simulators' reports).
pub fn list<T: std::fmt::Display>(items: &[T]) -> String {
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
    }

    #[test]
    fn a_held_rank_is_picked_only_alone() {
        let seed = streamcomm_testkit::seed();
        let mut rng = SplitMix(seed);
        for len in 2..20 {
            for held in 0..len {
                for _ in 0..50 {
                    let i = rng.pick(len, Some(held));
                    assert!(
                        i < len && i != held,
                        "seed {seed}: len {len} held {held} -> {i}"
                    );
                }
            }
        }
        assert_eq!(rng.pick(1, Some(0)), 0);
    }

    #[test]
    fn laggard_must_be_a_rank() {
        let lag = Schedule::Laggard { rank: 3, seed: 0 };
        assert!(lag.check(3).unwrap_err().contains("laggard rank 3"));
        assert!(lag.check(4).is_ok());
        assert_eq!(lag.random(), Some((0, Some(3))));
        assert_eq!(Schedule::RoundRobin.random(), None);
    }
}
