//! All-gather in `ceil(log2 n)` rounds (recursive doubling and Bruck), and
//! the small all-reduce by recursive doubling.
//!
//! The ring all-gather takes `n - 1` rounds, so small messages pay `n - 1`
//! latencies. Recursive doubling (Thakur, Rabenseifner and Gropp, "Optimization
//! of Collective Communication Operations in MPICH", 2005) takes `log2 n`:
//! in round `k` rank `r` swaps everything it holds, the aligned group of
//! `2^k` blocks around it, with rank `r xor 2^k`, so the data held doubles
//! each round. It needs a power of two. Bruck's algorithm (Bruck et al.,
//! "Efficient algorithms for all-to-all communications in multiport
//! message-passing systems", 1997) works for any `n`: in round `k` rank `r`
//! sends the blocks `r .. r + 2^k` (mod `n`) it holds to `r - 2^k` and receives
//! blocks `r + 2^k ..` from `r + 2^k`, the last round sending only what is
//! still missing. Blocks are written straight to their place in the output
//! (indexed by rank), so Bruck's final rotation is not needed.
//!
//! Every round is a permutation (each rank sends to one peer and receives
//! from one), and within a round sends and receives alternate chunk by chunk,
//! so the exchange never waits for more than one free slot per connection
//! (as `pairwise.rs` does). Both ends cut a round's data at the same places
//! (the blocks' absolute positions), so chunk lengths always match.
//!
//! The all-reduce by recursive doubling (MPICH's short-message
//! all-reduce) swaps the whole vector in each of `log2 p` rounds and
//! reduces what arrives: each rank moves `log2 p` times the data, where
//! the ring and Rabenseifner's move about twice it, but a 2-rank call is
//! one exchange where they take two. The `n - p` extra ranks fold in first
//! and get the result back, as in Rabenseifner's (`halving_doubling.rs`).
//! Partners reduce in opposite orders (`a op b`, `b op a`); every operator
//! is commutative, so every rank ends with the same bits.

use super::Geometry;
use super::halving_doubling::{Fold, fold_in, interleave, running};
use super::ring::local_copy;
use super::step::{DataStep, Region};

/// Recursive-doubling all-reduce for any number of ranks: `log2 p` rounds
/// of whole-vector exchanges after folding the extra ranks in.
pub(super) fn all_reduce(g: &Geometry) -> Vec<DataStep> {
    let count = g.count;
    let (mut steps, fold) = match fold_in(g) {
        Fold::Out(steps) => return steps,
        Fold::In { steps, fold } => (steps, fold),
    };
    // The running values: the input until the first reduction into the
    // receive buffer. Each chunk is sent before the same chunk is reduced
    // over, so the send reads it unchanged.
    let mut in_recv = fold.folded;
    let mut mask = 1;
    while mask < fold.p {
        let peer = fold.real(fold.v ^ mask);
        let src = |off, len| running(in_recv, off, len);
        let last = mask * 2 == fold.p;
        let sends = g
            .chunks(count)
            .map(|(o, l)| DataStep::send(peer, src(o, l)))
            .collect();
        let recvs = g
            .chunks(count)
            .map(|(o, l)| {
                DataStep::recv_reduce(peer, src(o, l), Region::recv(o, l)).finalized_if(last)
            })
            .collect();
        interleave(&mut steps, sends, recvs);
        in_recv = true;
        mask *= 2;
    }
    fold.out(g, &mut steps);
    steps
}

/// Recursive-doubling all-gather; Bruck's when `n` is not a power of two.
pub(super) fn all_gather(g: &Geometry) -> Vec<DataStep> {
    if g.nranks.is_power_of_two() {
        doubling(g)
    } else {
        bruck(g)
    }
}

/// Bruck all-gather, for any number of ranks.
pub(super) fn bruck(g: &Geometry) -> Vec<DataStep> {
    let (n, r) = (g.nranks, g.rank);
    gather_in_rounds(g, |dist| {
        let blocks = dist.min(n - dist);
        let from = (r + dist) % n;
        Round {
            to: (r + n - dist) % n,
            sends: cyclic_chunks(g, r, blocks),
            from,
            recvs: cyclic_chunks(g, from, blocks),
        }
    })
}

/// Recursive-doubling all-gather (`n` a power of two).
fn doubling(g: &Geometry) -> Vec<DataStep> {
    let (r, count) = (g.rank, g.count);
    gather_in_rounds(g, |dist| {
        let peer = r ^ dist;
        let group = |rank: usize| {
            let start = (rank & !(dist - 1)) * count;
            g.chunks(dist * count)
                .map(|(o, l)| (start + o, l))
                .collect()
        };
        Round {
            to: peer,
            sends: group(r),
            from: peer,
            recvs: group(peer),
        }
    })
}

/// One round of an all-gather: the output chunks `(offset, len)` sent to
/// `to` and those received from `from`.
struct Round {
    to: usize,
    sends: Vec<(usize, usize)>,
    from: usize,
    recvs: Vec<(usize, usize)>,
}

/// An all-gather that copies this rank's own block, then runs `round(dist)`
/// for each distance 1, 2, 4, ... below `n`, alternating the round's sends
/// and receives, all within the output buffer.
fn gather_in_rounds(g: &Geometry, round: impl Fn(usize) -> Round) -> Vec<DataStep> {
    if g.nranks == 1 || g.count == 0 {
        return local_copy(g.count, false);
    }
    let mut steps = vec![own_block(g)];
    let mut dist = 1;
    while dist < g.nranks {
        let Round {
            to,
            sends,
            from,
            recvs,
        } = round(dist);
        for i in 0..sends.len().max(recvs.len()) {
            if let Some(&(off, len)) = sends.get(i) {
                steps.push(DataStep::send(to, Region::recv(off, len)));
            }
            if let Some(&(off, len)) = recvs.get(i) {
                steps.push(DataStep::recv(from, Region::recv(off, len)));
            }
        }
        dist *= 2;
    }
    steps
}

/// Copies this rank's input into its own block of the output.
fn own_block(g: &Geometry) -> DataStep {
    DataStep::copy(
        Region::send(0, g.count),
        Region::recv(g.rank * g.count, g.count),
    )
}

/// `(offset, len)` chunks of the output covering blocks `first ..
/// first + blocks` (mod `n`): cut where the range wraps and at every `chunk`
/// elements, the same way on every rank.
fn cyclic_chunks(g: &Geometry, first: usize, blocks: usize) -> Vec<(usize, usize)> {
    let (n, count) = (g.nranks, g.count);
    let end = first + blocks;
    let mut pieces = vec![(first * count, (end.min(n) - first) * count)];
    if end > n {
        pieces.push((0, (end - n) * count));
    }
    pieces
        .into_iter()
        .flat_map(|(start, len)| g.chunks(len).map(move |(o, l)| (start + o, l)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::plan::geom;
    use crate::plan::test_support::assert_finalized_times;

    /// One whole-vector exchange of `count` elements with `peer`, finalized.
    fn one_exchange(peer: usize, count: usize) -> Vec<DataStep> {
        let (s, d) = (Region::send(0, count), Region::recv(0, count));
        vec![
            DataStep::send(peer, s),
            DataStep::recv_reduce(peer, s, d).finalized(),
        ]
    }

    #[test]
    fn all_reduce_of_two_ranks_is_one_exchange() {
        assert_eq!(all_reduce(&geom(1, 2, 3)), one_exchange(0, 3));
    }

    #[test]
    fn all_reduce_folds_extra_ranks_then_swaps_whole_vectors() {
        // 3 ranks: rank 0 folds into rank 1, which swaps with rank 2.
        let (s, d) = (Region::send(0, 2), Region::recv(0, 2));
        assert_eq!(
            all_reduce(&geom(0, 3, 2)),
            vec![DataStep::send(1, s), DataStep::recv(1, d)]
        );
        assert_eq!(
            all_reduce(&geom(1, 3, 2)),
            vec![
                DataStep::recv_reduce(0, s, d),
                DataStep::send(2, d),
                DataStep::recv_reduce(2, d, d).finalized(),
                DataStep::send(0, d),
            ]
        );
        assert_eq!(all_reduce(&geom(2, 3, 2)), one_exchange(1, 2));
    }

    #[test]
    fn all_reduce_finalizes_each_element_once() {
        // Every rank of the rounds (the largest power of two <= n)
        // finalizes its own copy of every element; the folded ranks
        // receive theirs finalized.
        assert_finalized_times(all_reduce, 1..=12, &[1, 3, 17], |n| 1 << n.ilog2());
    }

    /// An all-gather of one element a rank as the tests expect it: rank
    /// `rank` copies its input into its block, then runs each exchange
    /// `(to, sent, from, received)` of output regions `(offset, len)`.
    fn gather(rank: usize, exchanges: &[Exchange]) -> Vec<DataStep> {
        let mut steps = vec![DataStep::copy(Region::send(0, 1), Region::recv(rank, 1))];
        for &(to, (so, sl), from, (ro, rl)) in exchanges {
            steps.push(DataStep::send(to, Region::recv(so, sl)));
            steps.push(DataStep::recv(from, Region::recv(ro, rl)));
        }
        steps
    }

    /// `(to, (offset, len) sent, from, (offset, len) received)`.
    type Exchange = (usize, (usize, usize), usize, (usize, usize));

    #[test]
    fn doubling_swaps_growing_groups() {
        let want = gather(2, &[(3, (2, 1), 3, (3, 1)), (0, (2, 2), 0, (0, 2))]);
        assert_eq!(all_gather(&geom(2, 4, 1)), want);
    }

    #[test]
    fn bruck_wraps_and_sends_only_what_is_missing() {
        // 5 ranks, rank 3: rounds of 1, 2 and 1 blocks.
        let rounds = [
            (2, (3, 1), 4, (4, 1)),
            (1, (3, 2), 0, (0, 2)),
            (4, (3, 1), 2, (2, 1)),
        ];
        assert_eq!(all_gather(&geom(3, 5, 1)), gather(3, &rounds));
        // Wrapping blocks are cut where they wrap, then per chunk.
        assert_eq!(cyclic_chunks(&geom(0, 5, 3), 4, 2), vec![(12, 3), (0, 3)]);
        assert_eq!(cyclic_chunks(&geom(0, 5, 3), 1, 2), vec![(3, 4), (7, 2)]);
    }
}
