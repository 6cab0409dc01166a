//! Rabenseifner's all-reduce: recursive halving, then recursive doubling.
//!
//! A reduce-scatter by recursive halving followed by an all-gather by
//! recursive doubling (Rabenseifner, "Optimization of Collective Reduction
//! Operations", ICCS 2004; MPICH's `MPIR_Allreduce_intra_reduce_scatter_allgather`).
//! Each rank sends and receives about `2 (n-1)/n` of the data, as in the
//! ring, but in `2 log2 n` rounds instead of `2 (n - 1)`: the better choice
//! for mid-sized messages on many ranks.
//!
//! Halving needs a power of two `p <= n`. The `rem = n - p` extra ranks are
//! folded in first: among ranks `0 .. 2 rem`, each even rank sends its input
//! to the odd rank above it and sits out; the odd one reduces the pair. The
//! `p` remaining ranks (virtual ranks `0 .. p`) halve: in round `mask = p/2,
//! p/4, .., 1` a rank keeps the lower half of its current range when its
//! `mask` bit is clear, the upper half otherwise, sends the other half to
//! `v xor mask` and reduces what that partner sends into its own half. After
//! the last round, which finalises, virtual rank `v` owns piece `v` of the
//! result, and doubling (masks `1 .. p/2`) swaps pieces back until every rank
//! holds everything. Finally each odd folding rank sends the result to the
//! even rank below it.
//!
//! Partners always hold the same range, so both cut it at the same middle;
//! sends and receives alternate chunk by chunk, so one slot per connection
//! is enough. Partial sums live in the receive buffer; the input is read only
//! in the first round (or the fold), so in-place calls work unchanged.

use super::Geometry;
use super::ring::local_copy;
use super::step::{DataStep, Region};

/// Rabenseifner all-reduce for any number of ranks.
pub(super) fn all_reduce(g: &Geometry) -> Vec<DataStep> {
    let count = g.count;
    let (mut steps, fold) = match fold_in(g) {
        Fold::Out(steps) => return steps,
        Fold::In { steps, fold } => (steps, fold),
    };
    let (p, v, real) = (fold.p, fold.v, |v| fold.real(v));
    // Where this rank's running values are: its input until the first
    // reduction into the receive buffer.
    let mut in_recv = fold.folded;
    let (mut lo, mut hi) = (0, count);
    let mut mask = p / 2;
    // Reduce-scatter by recursive halving.
    while mask > 0 {
        let peer = real(v ^ mask);
        let mid = lo + (hi - lo) / 2;
        let (keep, give) = if v & mask == 0 {
            ((lo, mid), (mid, hi))
        } else {
            ((mid, hi), (lo, mid))
        };
        let src = |off, len| running(in_recv, off, len);
        let sends: Vec<DataStep> = g
            .chunks(give.1 - give.0)
            .map(|(o, l)| DataStep::send(peer, src(give.0 + o, l)))
            .collect();
        let last = mask == 1;
        let recvs: Vec<DataStep> = g
            .chunks(keep.1 - keep.0)
            .map(|(o, l)| {
                let at = keep.0 + o;
                DataStep::recv_reduce(peer, src(at, l), Region::recv(at, l)).finalized_if(last)
            })
            .collect();
        interleave(&mut steps, sends, recvs);
        (lo, hi) = keep;
        in_recv = true;
        mask /= 2;
    }
    // All-gather by recursive doubling: swap owned ranges with the partner.
    // The ranges of round `mask` are those of the halving round `mask`.
    let mut ranges = Vec::new();
    let (mut l, mut h) = (0, count);
    let mut m = p / 2;
    while m > 0 {
        let mid = l + (h - l) / 2;
        let (keep, give) = if v & m == 0 {
            ((l, mid), (mid, h))
        } else {
            ((mid, h), (l, mid))
        };
        ranges.push((keep, give));
        (l, h) = keep;
        m /= 2;
    }
    let mut mask = 1;
    for &(keep, give) in ranges.iter().rev() {
        let peer = real(v ^ mask);
        let sends = g
            .chunks(keep.1 - keep.0)
            .map(|(o, len)| DataStep::send(peer, Region::recv(keep.0 + o, len)))
            .collect();
        let recvs = g
            .chunks(give.1 - give.0)
            .map(|(o, len)| DataStep::recv(peer, Region::recv(give.0 + o, len)))
            .collect();
        interleave(&mut steps, sends, recvs);
        mask *= 2;
    }
    fold.out(g, &mut steps);
    steps
}

/// Where a rank stands after [`fold_in`].
pub(super) enum Fold {
    /// A rank with no rounds to run (one rank, no elements, or an even rank
    /// below `2 rem`, which sends its input up and gets the result back):
    /// its whole plan.
    Out(Vec<DataStep>),
    /// A rank that takes part in the power-of-two rounds: the steps so far
    /// (an odd folding rank's reduction of its neighbour's input).
    In { steps: Vec<DataStep>, fold: Folded },
}

/// The power-of-two rounds' view of the ranks, after the fold.
#[derive(Clone, Copy)]
pub(super) struct Folded {
    /// The largest power of two `<= n`: the ranks of the rounds.
    pub p: usize,
    /// Ranks folded away (`n - p`).
    rem: usize,
    /// This rank's virtual rank among the `p`.
    pub v: usize,
    /// True when this rank reduced a neighbour's input into its receive
    /// buffer (its running values are there, not in its input).
    pub folded: bool,
    rank: usize,
}

impl Folded {
    /// The real rank of virtual rank `v`.
    pub(super) fn real(&self, v: usize) -> usize {
        if v < self.rem {
            2 * v + 1
        } else {
            v + self.rem
        }
    }

    /// Appends the hand-back of the result to the folded even rank below,
    /// for a rank that folded one in.
    pub(super) fn out(&self, g: &Geometry, steps: &mut Vec<DataStep>) {
        if self.folded {
            for (off, len) in g.chunks(g.count) {
                steps.push(DataStep::send(self.rank - 1, Region::recv(off, len)));
            }
        }
    }
}

/// The start of a power-of-two all-reduce: the whole plan where there are
/// no rounds (one rank: a copy; no elements: nothing), else the fold of the
/// `rem = n - p` extra ranks into their odd neighbours: among ranks
/// `0 .. 2 rem`, each even rank sends its input to the odd rank above it
/// and waits for the result; the odd one reduces the pair into its receive
/// buffer.
pub(super) fn fold_in(g: &Geometry) -> Fold {
    let (n, r, count) = (g.nranks, g.rank, g.count);
    if n == 1 {
        return Fold::Out(local_copy(count, true));
    }
    if count == 0 {
        return Fold::Out(Vec::new());
    }
    let p = 1 << n.ilog2();
    let rem = n - p;
    let mut steps = Vec::new();
    let folded = r < 2 * rem;
    if folded && r % 2 == 0 {
        for (off, len) in g.chunks(count) {
            steps.push(DataStep::send(r + 1, Region::send(off, len)));
        }
        for (off, len) in g.chunks(count) {
            steps.push(DataStep::recv(r + 1, Region::recv(off, len)));
        }
        return Fold::Out(steps);
    }
    if folded {
        for (off, len) in g.chunks(count) {
            let (s, d) = (Region::send(off, len), Region::recv(off, len));
            steps.push(DataStep::recv_reduce(r - 1, s, d));
        }
    }
    let v = if folded { r / 2 } else { r - rem };
    Fold::In {
        steps,
        fold: Folded {
            p,
            rem,
            v,
            folded,
            rank: r,
        },
    }
}

/// A region of a rank's running values: its input until they were first
/// reduced into the receive buffer (`in_recv`).
pub(super) fn running(in_recv: bool, off: usize, len: usize) -> Region {
    if in_recv {
        Region::recv(off, len)
    } else {
        Region::send(off, len)
    }
}

/// Appends `a[0], b[0], a[1], b[1], ...`, then what is left of the longer.
pub(super) fn interleave(steps: &mut Vec<DataStep>, a: Vec<DataStep>, b: Vec<DataStep>) {
    let (mut a, mut b) = (a.into_iter(), b.into_iter());
    loop {
        match (a.next(), b.next()) {
            (None, None) => break,
            (x, y) => steps.extend(x.into_iter().chain(y)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::plan::geom;
    use crate::plan::test_support::assert_finalized_times;

    #[test]
    fn four_ranks_halve_then_double() {
        // Rank 1 of 4, 4 elements: keeps [0,2) then [1,2); gathers back.
        let s = |o, l| Region::send(o, l);
        let d = |o, l| Region::recv(o, l);
        assert_eq!(
            all_reduce(&geom(1, 4, 4)),
            vec![
                DataStep::send(3, s(2, 2)),
                DataStep::recv_reduce(3, s(0, 2), d(0, 2)),
                DataStep::send(0, d(0, 1)),
                DataStep::recv_reduce(0, d(1, 1), d(1, 1)).finalized(),
                DataStep::send(0, d(1, 1)),
                DataStep::recv(0, d(0, 1)),
                DataStep::send(3, d(0, 2)),
                DataStep::recv(3, d(2, 2)),
            ]
        );
    }

    #[test]
    fn extra_ranks_fold_into_odd_neighbours() {
        // 3 ranks: rank 0 folds into rank 1, which halves with rank 2.
        let steps = all_reduce(&geom(0, 3, 2));
        assert_eq!(
            steps,
            vec![
                DataStep::send(1, Region::send(0, 2)),
                DataStep::recv(1, Region::recv(0, 2))
            ]
        );
        let steps = all_reduce(&geom(1, 3, 2));
        assert_eq!(
            steps[0],
            DataStep::recv_reduce(0, Region::send(0, 2), Region::recv(0, 2))
        );
        assert_eq!(steps[1], DataStep::send(2, Region::recv(1, 1)));
        assert_eq!(
            *steps.last().unwrap(),
            DataStep::send(0, Region::recv(0, 2))
        );
    }

    #[test]
    fn finalizes_each_element_once() {
        assert_finalized_times(all_reduce, 1..=12, &[1, 3, 17], |_| 1);
    }
}
