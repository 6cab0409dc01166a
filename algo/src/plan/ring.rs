//! Ring algorithms: all-reduce, all-gather and reduce-scatter.
//!
//! The ring is the bandwidth-optimal schedule for these three collectives:
//! every rank sends to `rank + 1` and receives from `rank - 1`, and each
//! element crosses `2 (n - 1)` (all-reduce) or `n - 1` links. The step
//! sequences are NCCL's (`src/device/all_reduce.h`, `all_gather.h`,
//! `reduce_scatter.h`, `runRing`): `send`, `recvReduceSend` x (n-2),
//! `recvReduceCopySend`, `recvCopySend` x (n-2), `recv`. Data is cut into
//! slot-sized pieces so long messages pipeline around the ring.
//!
//! # One breaker rank (single-slot connections only)
//!
//! A fused step (`recvReduceSend`, `recvCopySend`, ...) needs its incoming
//! slot *and* a free outgoing slot at once. After every rank's opening send,
//! a ring of `n` connections holds `n` slots in flight; with one slot per
//! connection every FIFO is full and every rank waits for room: NCCL's ring
//! deadlocks with `NCCL_STEPS = 1`. To stay deadlock-free at any depth, rank
//! 0 (the *breaker*) splits each fused step in two: receive (and reduce)
//! into its own receive buffer, then send from there. Its receive buffer is
//! one more place on the cycle, so some rank can always move. Data
//! dependencies are those of NCCL's ring, so pipelining is unchanged; the
//! price is one extra local copy per reduce-scatter hop on rank 0 only
//! (gather hops cost the same split or fused). With two or more slots per
//! connection ([`PlanParams::nsteps`](super::PlanParams)) the ring always
//! has room to move and every rank runs the fused steps: no breaker, no
//! extra copy. Reduce-scatter has no spare
//! receive space in place, so there the breaker also sends its own block
//! first (see [`reduce_scatter`]).

use super::Geometry;
use super::step::{DataStep, Region};

/// The rank that splits fused steps (see the module docs).
const BREAKER: usize = 0;

/// A fused relay step, or on the breaker its two halves: receive (and
/// reduce) into `stage`, then send `stage`.
fn relay(
    steps: &mut Vec<DataStep>,
    g: &Geometry,
    src: Option<Region>,
    stage: Region,
    finalize: bool,
) {
    let (prev, next) = (g.prev(), g.next());
    if g.breaker && g.rank == BREAKER {
        let first = match src {
            Some(src) => DataStep::recv_reduce(prev, src, stage),
            None => DataStep::recv(prev, stage),
        };
        steps.push(first.finalized_if(finalize));
        steps.push(DataStep::send(next, stage));
        return;
    }
    let fused = match (src, finalize) {
        (Some(src), true) => DataStep::recv_reduce_copy_send(prev, src, stage, next).finalized(),
        (Some(src), false) => DataStep::recv_reduce_send(prev, src, next),
        (None, _) => DataStep::recv_copy_send(prev, stage, next),
    };
    steps.push(fused);
}

/// Ring all-reduce: a reduce-scatter followed by an all-gather, per loop.
///
/// Each loop iteration covers up to `nranks * chunk` elements, cut into
/// `nranks` equal blocks (the last ones may be short or empty). Block `b` is
/// reduced along the ring starting at rank `b + 1` and is fully reduced (and
/// finalised) on rank `b`, which starts its all-gather. Empty blocks are
/// skipped by every rank alike, so small messages cost no empty transfers.
/// The breaker stages partial sums in its receive buffer, which the gather
/// phase overwrites with the final values.
pub(super) fn all_reduce(g: &Geometry) -> Vec<DataStep> {
    let (n, r, count) = (g.nranks, g.rank, g.count);
    if n == 1 {
        return local_copy(count, true);
    }
    let (next, prev) = (g.next(), g.prev());
    let mut steps = Vec::new();
    let mut base = 0;
    while base < count {
        let remaining = count - base;
        let block_len = g.chunk.min(remaining.div_ceil(n));
        let covered = remaining.min(n * block_len);
        // Block `b` of this iteration as (send region, recv region); None
        // when the block is empty.
        let block = |b: usize| {
            let start = (b * block_len).min(covered);
            let end = ((b + 1) * block_len).min(covered);
            let len = end - start;
            (len > 0).then(|| {
                (
                    Region::send(base + start, len),
                    Region::recv(base + start, len),
                )
            })
        };
        // Reduce-scatter phase.
        if let Some((s, _)) = block((r + n - 1) % n) {
            steps.push(DataStep::send(next, s));
        }
        for j in 2..n {
            if let Some((s, d)) = block((r + n - j) % n) {
                relay(&mut steps, g, Some(s), d, false);
            }
        }
        if let Some((s, d)) = block(r) {
            relay(&mut steps, g, Some(s), d, true);
        }
        // All-gather phase.
        for j in 1..n - 1 {
            if let Some((_, d)) = block((r + n - j) % n) {
                relay(&mut steps, g, None, d, false);
            }
        }
        if let Some((_, d)) = block((r + 1) % n) {
            steps.push(DataStep::recv(prev, d));
        }
        base += covered;
    }
    steps
}

/// Ring all-gather: rank `r`'s input travels the ring into block `r` of
/// every output, piece by piece.
pub(super) fn all_gather(g: &Geometry) -> Vec<DataStep> {
    let (n, r, count) = (g.nranks, g.rank, g.count);
    let (next, prev) = (g.next(), g.prev());
    per_chunk(g, false, |steps, off, len| {
        let at = |b: usize| Region::recv(b * count + off, len);
        steps.push(DataStep::copy_send(Region::send(off, len), at(r), next));
        for j in 1..n - 1 {
            relay(steps, g, None, at((r + n - j) % n), false);
        }
        steps.push(DataStep::recv(prev, at((r + 1) % n)));
    })
}

/// Ring reduce-scatter: block `b` of every input is reduced along the ring
/// starting at rank `b + 1` and lands, finalised, in rank `b`'s output.
///
/// With three ranks or more the breaker needs its receive chunk as staging
/// space, but in place that chunk *is* its own input block, still needed at
/// the end of the normal schedule. So the breaker's own block takes one
/// extra hop instead: the breaker sends it first, rank `1` reduces it into
/// the ring instead of starting it, rank `n - 1` completes (and finalises)
/// it, and the breaker receives the result last. That costs one more slot
/// per chunk on the link `0 -> 1` (`n` instead of `n - 1`).
pub(super) fn reduce_scatter(g: &Geometry) -> Vec<DataStep> {
    let (n, r, count) = (g.nranks, g.rank, g.count);
    let (next, prev) = (g.next(), g.prev());
    // With two ranks there is no relay step, hence no cycle to break.
    let broken = g.breaker && n >= 3;
    per_chunk(g, true, |steps, off, len| {
        let block = |b: usize| Region::send(b * count + off, len);
        let out = Region::recv(off, len);
        let first = (r + n - 1) % n;
        if broken && r == BREAKER {
            steps.push(DataStep::send(next, block(r)));
            steps.push(DataStep::send(next, block(first)));
        } else if broken && r == (BREAKER + 1) % n {
            steps.push(DataStep::recv_reduce_send(prev, block(BREAKER), next));
        } else {
            steps.push(DataStep::send(next, block(first)));
        }
        for j in 2..n {
            let b = (r + n - j) % n;
            if broken && b == BREAKER && next == BREAKER {
                // Rank n - 1's last relay completes the breaker's block.
                steps.push(DataStep::recv_reduce_send(prev, block(b), next).finalized());
            } else {
                relay(steps, g, Some(block(b)), out, false);
            }
        }
        if broken && r == BREAKER {
            steps.push(DataStep::recv(prev, out));
        } else {
            steps.push(DataStep::recv_reduce(prev, block(r), out).finalized());
        }
    })
}

/// A ring collective of `chunk_steps(steps, offset, len)` for each
/// slot-sized piece of the count; on a single rank, the local copy
/// (finalised when the collective `reduces`).
fn per_chunk(
    g: &Geometry,
    reduces: bool,
    mut chunk_steps: impl FnMut(&mut Vec<DataStep>, usize, usize),
) -> Vec<DataStep> {
    if g.nranks == 1 {
        return local_copy(g.count, reduces);
    }
    let mut steps = Vec::new();
    for (off, len) in g.chunks(g.count) {
        chunk_steps(&mut steps, off, len);
    }
    steps
}

/// The single-rank case: one local copy of `count` elements (no slot, so no
/// chunking), finalised when the collective reduces.
pub(super) fn local_copy(count: usize, finalize: bool) -> Vec<DataStep> {
    if count == 0 {
        return Vec::new();
    }
    let step = DataStep::copy(Region::send(0, count), Region::recv(0, count));
    vec![step.finalized_if(finalize)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::test_support::assert_finalized_times;

    fn geom(rank: usize, nranks: usize, count: usize, chunk: usize) -> Geometry {
        Geometry {
            rank,
            nranks,
            count,
            chunk,
            breaker: true,
        }
    }

    #[test]
    fn all_reduce_follows_nccl_primitives() {
        // 4 ranks, one block each: send, rrs, rrs, rrcs, rcs, rcs, recv.
        let steps = all_reduce(&geom(1, 4, 4, 8));
        assert_eq!(steps.len(), 7);
        assert_eq!(steps[0], DataStep::send(2, Region::send(0, 1)));
        assert_eq!(
            steps[3],
            DataStep::recv_reduce_copy_send(0, Region::send(1, 1), Region::recv(1, 1), 2)
                .finalized()
        );
        assert_eq!(steps[6], DataStep::recv(0, Region::recv(2, 1)));
    }

    #[test]
    fn all_reduce_finalizes_every_element_once_per_rank_block() {
        assert_finalized_times(all_reduce, 1..=9, &[1, 7, 40, 101], |_| 1);
    }

    #[test]
    fn small_all_reduce_skips_empty_blocks() {
        // One element on 64 ranks: only block 0 exists, and it makes
        // 2 * 63 hops, i.e. 2 * 63 + 1 steps in all, plus one because its
        // owner, the breaker, splits its reduce-copy-send.
        let total: usize = (0..64).map(|r| all_reduce(&geom(r, 64, 1, 4)).len()).sum();
        assert_eq!(total, 2 * 63 + 2);
    }

    #[test]
    fn the_breaker_splits_relays() {
        let steps = all_gather(&geom(0, 3, 2, 4));
        assert_eq!(
            steps,
            vec![
                DataStep::copy_send(Region::send(0, 2), Region::recv(0, 2), 1),
                DataStep::recv(2, Region::recv(4, 2)),
                DataStep::send(1, Region::recv(4, 2)),
                DataStep::recv(2, Region::recv(2, 2)),
            ]
        );
        // Reduce-scatter: the breaker sends its own block first and gets it
        // back complete from rank n - 1, which finalises it.
        let steps = reduce_scatter(&geom(0, 3, 2, 4));
        assert_eq!(steps[0], DataStep::send(1, Region::send(0, 2)));
        assert_eq!(steps[1], DataStep::send(1, Region::send(4, 2)));
        assert_eq!(steps[4], DataStep::recv(2, Region::recv(0, 2)));
        assert_eq!(
            reduce_scatter(&geom(1, 3, 2, 4))[0],
            DataStep::recv_reduce_send(0, Region::send(0, 2), 2)
        );
        assert_eq!(
            reduce_scatter(&geom(2, 3, 2, 4))[1],
            DataStep::recv_reduce_send(1, Region::send(0, 2), 0).finalized()
        );
    }

    #[test]
    fn gather_and_scatter_step_counts() {
        let g = geom(2, 5, 10, 4);
        assert_eq!(all_gather(&g).len(), 3 * 5);
        assert_eq!(reduce_scatter(&g).len(), 3 * 5);
        assert_eq!(all_gather(&geom(0, 1, 10, 4)).len(), 1);
        assert!(reduce_scatter(&geom(0, 3, 0, 4)).is_empty());
    }
}
