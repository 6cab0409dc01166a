//! Dissemination barrier, plain and k-way.
//!
//! Dissemination (Hensgen, Finkel and Manber, "Two algorithms for barrier
//! synchronization", International Journal of Parallel Programming 17(1),
//! 1988) works for any number of ranks in `ceil(log2 n)` rounds: in round
//! `t` rank `r` signals `r + 2^t` and waits for `r - 2^t` (mod `n`). After
//! round `t` a rank has heard, directly or through others, from the `2^(t+1)`
//! ranks before it, so after the last round from everybody. Nobody is a
//! root: every rank does the same work, and each waits on flags in its own
//! area that a single peer writes.
//!
//! The k-way variant (Hoefler et al., "A survey of barrier algorithms for
//! coarse grained supercomputers", TU Chemnitz, 2005) signals `k` peers per
//! round,
//! `r + j (k+1)^t` for `j = 1..=k`, and waits for the `k` mirror peers, so
//! `ceil(log_{k+1} n)` rounds suffice; with `k = 1` it is plain
//! dissemination. When `k + 1 >= n` it degenerates into all-to-all flags
//! in one round. Offsets `j (k+1)^t` that reach `n` are dropped: after
//! round `t - 1` a rank already knows the `(k+1)^t` ranks before it, so
//! offsets up to `n - 1` complete the picture, and the rest would only
//! signal a rank (or itself) again.
//!
//! Both run over any *group* of ranks, so the hierarchical barrier
//! reuses them among host leaders. This is also the only definition of the
//! message barrier of communicators with tcp peers: its notifies and flag
//! waits run as zero-byte messages (`plan/barrier.rs`, which builds on
//! `barrier`, never the reverse).

use crate::barrier::FlagStep;

/// Steps of `rank` in a k-way dissemination barrier among `group` (which
/// contains `rank`), numbering rounds from `first_round`.
pub fn steps(group: &[usize], rank: usize, k: usize, first_round: u32) -> Vec<FlagStep> {
    let m = group.len();
    let me = group.iter().position(|&r| r == rank).unwrap_or(0);
    let mut steps = Vec::new();
    let mut span = 1usize;
    let mut round = first_round;
    while span < m {
        // Offsets j * span for j = 1..=k; those reaching m or beyond would
        // only repeat what the window [0, span) already covers.
        let offsets: Vec<usize> = (1..=k)
            .map_while(|j| j.checked_mul(span).filter(|&d| d < m))
            .collect();
        for &d in &offsets {
            steps.push(FlagStep::Notify {
                peer: group[(me + d) % m],
                round,
            });
        }
        for &d in &offsets {
            steps.push(FlagStep::WaitFlag {
                from: group[(me + m - d) % m],
                round,
            });
        }
        span = span.saturating_mul(k + 1);
        round += 1;
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::barrier::algo::brief;

    fn all(n: usize) -> Vec<usize> {
        (0..n).collect()
    }

    fn rounds(n: usize, k: usize) -> u32 {
        steps(&all(n), 0, k, 0)
            .iter()
            .filter_map(|s| s.round())
            .max()
            .map_or(0, |r| r + 1)
    }

    #[test]
    fn ceil_log_rounds() {
        for (n, want) in [(1, 0), (2, 1), (3, 2), (4, 2), (5, 3), (64, 6), (65, 7)] {
            assert_eq!(rounds(n, 1), want, "n={n}");
        }
        for (n, want) in [(2, 1), (3, 1), (4, 2), (9, 2), (10, 3), (64, 4)] {
            assert_eq!(rounds(n, 2), want, "n={n} k=2");
        }
    }

    #[test]
    fn signals_then_waits_per_round() {
        assert_eq!(
            brief(&steps(&all(5), 1, 1, 0)),
            "notify 2@0, wait 0@0, notify 3@1, wait 4@1, notify 0@2, wait 2@2"
        );
    }

    #[test]
    fn kway_drops_offsets_beyond_n() {
        // n = 3, k = 3: offsets 1, 2 (3 would be itself) -> one round.
        assert_eq!(
            brief(&steps(&all(3), 0, 3, 0)),
            "notify 1@0, notify 2@0, wait 2@0, wait 1@0"
        );
        // n = 2, k = 3: offset 1 only.
        assert_eq!(steps(&all(2), 1, 3, 0).len(), 2);
        // n = 4, k = 2: round 0 offsets 1, 2; round 1 offset 3 (6 >= 4).
        let s = steps(&all(4), 0, 2, 0);
        assert_eq!(s.len(), 6);
        assert_eq!(s[4], FlagStep::Notify { peer: 3, round: 1 });
    }

    #[test]
    fn runs_over_a_group_from_a_round() {
        let group = [0, 3, 5];
        assert_eq!(
            brief(&steps(&group, 5, 1, 1)),
            "notify 0@1, wait 3@1, notify 3@2, wait 0@2"
        );
    }
}
