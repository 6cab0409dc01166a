//! Chain barrier: arrival down a line of ranks, release back up it.
//!
//! Rank 0 signals rank 1, which, once it has arrived too, signals rank 2, and
//! so on; when rank `n - 1` has heard from `n - 2` everybody has arrived.
//! The release then travels *back down the chain* (`n - 1` releases `n - 2`,
//! which releases `n - 3`, ... down to 0), not around a ring, so every hop
//! is between neighbours and each word has a single writer. `2 (n - 1)`
//! sequential hops: the simplest barrier and the slowest one, kept as a
//! baseline (the linear barrier of Hoefler et al., "A survey of barrier
//! algorithms for coarse grained supercomputers", 2005).

use crate::barrier::FlagStep;

/// Steps of `rank` out of `n >= 2`.
pub(super) fn steps(rank: usize, n: usize) -> Vec<FlagStep> {
    let mut steps = Vec::with_capacity(4);
    if rank > 0 {
        steps.push(FlagStep::WaitFlag {
            from: rank - 1,
            round: 0,
        });
    }
    if rank + 1 < n {
        steps.push(FlagStep::Notify {
            peer: rank + 1,
            round: 0,
        });
        steps.push(FlagStep::WaitRelease { at: rank });
    }
    if rank > 0 {
        steps.push(FlagStep::Release { peer: rank - 1 });
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::barrier::algo::brief;

    #[test]
    fn ends_and_middle() {
        assert_eq!(brief(&steps(0, 3)), "notify 1@0, wait release 0");
        assert_eq!(
            brief(&steps(1, 3)),
            "wait 0@0, notify 2@0, wait release 1, release 0"
        );
        assert_eq!(brief(&steps(2, 3)), "wait 1@0, release 1");
    }
}
