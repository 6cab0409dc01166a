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
    let (n, r, count) = (g.nranks, g.rank, g.count);
    if n == 1 || count == 0 {
        return local_copy(count, false);
    }
    let mut steps = vec![own_block(g)];
    let mut dist = 1;
    while dist < n {
        let blocks = dist.min(n - dist);
        let to = (r + n - dist) % n;
        let from = (r + dist) % n;
        let sends = cyclic_chunks(g, r, blocks);
        let recvs = cyclic_chunks(g, from, blocks);
        exchange(&mut steps, to, &sends, from, &recvs);
        dist *= 2;
    }
    steps
}

/// Recursive-doubling all-gather (`n` a power of two).
fn doubling(g: &Geometry) -> Vec<DataStep> {
    let (n, r, count) = (g.nranks, g.rank, g.count);
    if n == 1 || count == 0 {
        return local_copy(count, false);
    }
    let mut steps = vec![own_block(g)];
    let mut dist = 1;
    while dist < n {
        let peer = r ^ dist;
        let mine = (r & !(dist - 1)) * count;
        let theirs = (peer & !(dist - 1)) * count;
        let sends: Vec<_> = g.chunks(dist * count).map(|(o, l)| (mine + o, l)).collect();
        let recvs: Vec<_> = g
            .chunks(dist * count)
            .map(|(o, l)| (theirs + o, l))
            .collect();
        exchange(&mut steps, peer, &sends, peer, &recvs);
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

/// Alternates sends of `sends` to `to` and receives of `recvs` from `from`,
/// all within the output buffer.
fn exchange(
    steps: &mut Vec<DataStep>,
    to: usize,
    sends: &[(usize, usize)],
    from: usize,
    recvs: &[(usize, usize)],
) {
    for i in 0..sends.len().max(recvs.len()) {
        if let Some(&(off, len)) = sends.get(i) {
            steps.push(DataStep::send(to, Region::recv(off, len)));
        }
        if let Some(&(off, len)) = recvs.get(i) {
            steps.push(DataStep::recv(from, Region::recv(off, len)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::plan::geom;

    #[test]
    fn all_reduce_of_two_ranks_is_one_exchange() {
        let (s, d) = (Region::send(0, 3), Region::recv(0, 3));
        assert_eq!(
            all_reduce(&geom(1, 2, 3)),
            vec![
                DataStep::send(0, s),
                DataStep::recv_reduce(0, s, d).finalized()
            ]
        );
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
        assert_eq!(
            all_reduce(&geom(2, 3, 2)),
            vec![
                DataStep::send(1, s),
                DataStep::recv_reduce(1, s, d).finalized()
            ]
        );
    }

    #[test]
    fn all_reduce_finalizes_each_element_once() {
        for n in 1..=12 {
            for count in [1, 3, 17] {
                let mut seen = vec![0; count];
                for r in 0..n {
                    for s in all_reduce(&geom(r, n, count)) {
                        if s.finalize {
                            let d = s.dst.unwrap();
                            seen[d.offset..d.end()].iter_mut().for_each(|c| *c += 1);
                        }
                    }
                }
                // Every rank of the rounds (the largest power of two
                // <= n) finalizes its own copy of every element; the
                // folded ranks receive theirs finalized.
                let p = 1 << n.ilog2();
                assert!(seen.iter().all(|&c| c == p), "n={n} count={count}");
            }
        }
    }

    #[test]
    fn doubling_swaps_growing_groups() {
        let steps = all_gather(&geom(2, 4, 1));
        assert_eq!(
            steps,
            vec![
                DataStep::copy(Region::send(0, 1), Region::recv(2, 1)),
                DataStep::send(3, Region::recv(2, 1)),
                DataStep::recv(3, Region::recv(3, 1)),
                DataStep::send(0, Region::recv(2, 2)),
                DataStep::recv(0, Region::recv(0, 2)),
            ]
        );
    }

    #[test]
    fn bruck_wraps_and_sends_only_what_is_missing() {
        // 5 ranks, rank 3: rounds of 1, 2 and 1 blocks.
        let steps = all_gather(&geom(3, 5, 1));
        assert_eq!(
            steps,
            vec![
                DataStep::copy(Region::send(0, 1), Region::recv(3, 1)),
                DataStep::send(2, Region::recv(3, 1)),
                DataStep::recv(4, Region::recv(4, 1)),
                DataStep::send(1, Region::recv(3, 2)),
                DataStep::recv(0, Region::recv(0, 2)),
                DataStep::send(4, Region::recv(3, 1)),
                DataStep::recv(2, Region::recv(2, 1)),
            ]
        );
        // Wrapping blocks are cut where they wrap, then per chunk.
        assert_eq!(cyclic_chunks(&geom(0, 5, 3), 4, 2), vec![(12, 3), (0, 3)]);
        assert_eq!(cyclic_chunks(&geom(0, 5, 3), 1, 2), vec![(3, 4), (7, 2)]);
    }
}
