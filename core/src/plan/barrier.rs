//! Dissemination barrier as a plan.
//!
//! The dissemination barrier (Hensgen, Finkel and Manber, 1988) works for any
//! number of ranks in `ceil(log2 n)` rounds: in round `k` rank `r` signals
//! `r + 2^k` and waits for `r - 2^k`. After the last round every rank has
//! heard, directly or transitively, from every other one. Each round uses a
//! different distance, so no directed connection carries two signals and one
//! slot per connection suffices. The proxy-side barriers of `docs/design/barriers.md` offer
//! more algorithms; this one is the plan every backend can run as steps.

use super::step::Step;
use super::Geometry;

/// Steps of the dissemination barrier for `g.rank`; none for a single rank.
pub(super) fn dissemination(g: &Geometry) -> Vec<Step> {
    let (n, r) = (g.nranks, g.rank);
    let mut steps = Vec::new();
    let mut distance = 1;
    while distance < n {
        steps.push(Step::signal((r + distance) % n));
        steps.push(Step::wait((r + n - distance) % n));
        distance *= 2;
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rounds(n: usize) -> usize {
        dissemination(&Geometry {
            rank: 0,
            nranks: n,
            count: 0,
            chunk: 1,
            breaker: true,
        })
        .len()
            / 2
    }

    #[test]
    fn ceil_log2_rounds() {
        assert_eq!(rounds(1), 0);
        assert_eq!(rounds(2), 1);
        assert_eq!(rounds(3), 2);
        assert_eq!(rounds(4), 2);
        assert_eq!(rounds(5), 3);
        assert_eq!(rounds(64), 6);
        assert_eq!(rounds(65), 7);
    }

    #[test]
    fn signals_then_waits() {
        let steps = dissemination(&Geometry {
            rank: 1,
            nranks: 5,
            count: 0,
            chunk: 1,
            breaker: true,
        });
        assert_eq!(
            steps,
            vec![
                Step::signal(2),
                Step::wait(0),
                Step::signal(3),
                Step::wait(4),
                Step::signal(0),
                Step::wait(2),
            ]
        );
    }
}
