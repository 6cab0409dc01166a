//! Central counter barrier: the textbook centralised barrier.
//!
//! Every non-root rank atomically increments a counter on the root and then
//! spins on one release word; the root waits for the counter to reach
//! `epoch * (n - 1)` and writes the release word (Mellor-Crummey and Scott,
//! "Algorithms for scalable synchronization on shared-memory
//! multiprocessors", ACM TOCS 9(1), 1991, §3.3 "centralized barrier"). The
//! counter is never reset: it counts every arrival of every barrier, which
//! replaces MCS's sense reversal. Two hops of latency, but `n - 1` ranks
//! contend on one cache line and all read the same release word.
//!
//! The root is rank 0.

use crate::barrier::FlagStep;

const ROOT: usize = 0;

/// Steps of `rank` out of `n >= 2`.
pub(super) fn steps(rank: usize, n: usize) -> Vec<FlagStep> {
    if rank == ROOT {
        vec![
            FlagStep::WaitCounter {
                count_per_epoch: (n - 1) as u64,
            },
            FlagStep::Release { peer: ROOT },
        ]
    } else {
        vec![
            FlagStep::FetchAdd { root: ROOT },
            FlagStep::WaitRelease { at: ROOT },
        ]
    }
}

/// The same barrier where other ranks' words can only be written, never
/// read (over a network): the root releases every rank in that rank's own
/// area instead of raising one word that everybody polls.
pub(crate) fn steps_own_releases(rank: usize, n: usize) -> Vec<FlagStep> {
    if rank == ROOT {
        let mut steps = vec![FlagStep::WaitCounter {
            count_per_epoch: (n - 1) as u64,
        }];
        steps.extend(
            (0..n)
                .filter(|&p| p != ROOT)
                .map(|peer| FlagStep::Release { peer }),
        );
        steps
    } else {
        vec![
            FlagStep::FetchAdd { root: ROOT },
            FlagStep::WaitRelease { at: rank },
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::barrier::algo::brief;

    #[test]
    fn root_counts_others_add() {
        assert_eq!(brief(&steps(0, 5)), "wait count 4, release 0");
        assert_eq!(brief(&steps(3, 5)), "add 0, wait release 0");
        assert_eq!(
            brief(&steps_own_releases(0, 3)),
            "wait count 2, release 1, release 2"
        );
        assert_eq!(brief(&steps_own_releases(2, 3)), "add 0, wait release 2");
    }
}
