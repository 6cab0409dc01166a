//! Central flags barrier: one arrival flag per rank at the root.
//!
//! The centralised barrier of Mellor-Crummey and Scott ("Algorithms for
//! scalable synchronization on shared-memory multiprocessors", ACM TOCS
//! 9(1), 1991, §3.3) with its shared counter replaced by one flag per rank,
//! so no atomic read-modify-write is needed (only plain stores, which is all
//! some memories offer): each rank writes its own arrival flag in the root's area,
//! the root waits for all of them and then writes each rank's release word
//! in that rank's own area, so every waiter spins on a word nobody else
//! reads. No contended cache line, but the root does `2 (n - 1)` writes and
//! reads in sequence.
//!
//! The root is rank 0.

use crate::barrier::FlagStep;

const ROOT: usize = 0;

/// Steps of `rank` out of `n >= 2`.
pub(super) fn steps(rank: usize, n: usize) -> Vec<FlagStep> {
    if rank != ROOT {
        return vec![
            FlagStep::Notify {
                peer: ROOT,
                round: 0,
            },
            FlagStep::WaitRelease { at: rank },
        ];
    }
    let others = (0..n).filter(|&r| r != ROOT);
    let arrivals = others
        .clone()
        .map(|from| FlagStep::WaitFlag { from, round: 0 });
    let releases = others.map(|peer| FlagStep::Release { peer });
    arrivals.chain(releases).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::barrier::algo::brief;

    #[test]
    fn root_waits_all_then_releases_each() {
        assert_eq!(
            brief(&steps(0, 3)),
            "wait 1@0, wait 2@0, release 1, release 2"
        );
        assert_eq!(brief(&steps(2, 3)), "notify 0@0, wait release 2");
    }

    #[test]
    fn no_read_modify_write() {
        for r in 0..9 {
            assert!(
                steps(r, 9)
                    .iter()
                    .all(|s| !matches!(s, FlagStep::FetchAdd { .. }))
            );
        }
    }
}
