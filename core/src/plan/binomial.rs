//! Binomial-tree broadcast.
//!
//! A chain (`chain.rs`) needs `n - 1` hops before the last rank sees the
//! first byte; a binomial tree needs `ceil(log2 n)`. Ranks are numbered
//! relative to the root (`v = (rank - root) mod n`); rank `v > 0` receives
//! from `v - lowbit(v)` and forwards to `v + 2^j` for every `2^j < lowbit(v)`
//! (the root to every `2^j < n`), farthest child first, because it heads the
//! deepest subtree (MPICH's `MPIR_Bcast_intra_binomial`). Data is cut into
//! slot-sized chunks and each chunk is forwarded as soon as it arrives, so a
//! long message pipelines down the tree. A tree has no cycle, so the schedule
//! cannot deadlock whatever the number of slots.
//!
//! Binomial *reduce* is not offered: an inner rank would have to combine
//! several children's partial results with its own input, and a non-root
//! rank of `reduce` owns no receive buffer to hold the partial sum (steps
//! only combine one incoming slot with one local region). Reduce stays a
//! pipelined chain until plans get a scratch buffer.

use super::ring::local_copy;
use super::step::{Region, Step};
use super::Geometry;

/// The children of relative rank `v` in a binomial tree of `n` ranks,
/// farthest (largest subtree) first.
pub(super) fn children(v: usize, n: usize) -> Vec<usize> {
    let limit = if v == 0 {
        n.next_power_of_two()
    } else {
        v & v.wrapping_neg()
    };
    let mut out = Vec::new();
    let mut mask = limit >> 1;
    while mask > 0 {
        if v + mask < n {
            out.push(v + mask);
        }
        mask >>= 1;
    }
    out
}

/// The parent of relative rank `v > 0`: `v` without its lowest set bit.
pub(super) fn parent(v: usize) -> usize {
    v & (v - 1)
}

/// Binomial broadcast from `root`: per chunk, receive it (the root copies its
/// input instead) and forward it to every child.
pub(super) fn broadcast(g: &Geometry, root: usize) -> Vec<Step> {
    let n = g.nranks;
    if n == 1 {
        return local_copy(g.count, false);
    }
    let v = (g.rank + n - root) % n;
    let real = |rel: usize| (rel + root) % n;
    let kids: Vec<usize> = children(v, n).into_iter().map(real).collect();
    let mut steps = Vec::new();
    for (off, len) in g.chunks(g.count) {
        let dst = Region::recv(off, len);
        let first = match (v, kids.first()) {
            (0, Some(&k)) => Step::copy_send(Region::send(off, len), dst, k),
            (0, None) => Step::copy(Region::send(off, len), dst),
            (_, Some(&k)) => Step::recv_copy_send(real(parent(v)), dst, k),
            (_, None) => Step::recv(real(parent(v)), dst),
        };
        steps.push(first);
        for &k in kids.iter().skip(1) {
            steps.push(Step::send(k, dst));
        }
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geom(rank: usize, nranks: usize, count: usize) -> Geometry {
        Geometry {
            rank,
            nranks,
            count,
            chunk: 4,
            breaker: true,
        }
    }

    #[test]
    fn tree_shape() {
        assert_eq!(children(0, 8), vec![4, 2, 1]);
        assert_eq!(children(4, 8), vec![6, 5]);
        assert_eq!(children(6, 8), vec![7]);
        assert_eq!(children(0, 6), vec![4, 2, 1]);
        assert_eq!(children(4, 6), vec![5]);
        assert_eq!(children(0, 5), vec![4, 2, 1]);
        assert!(children(4, 5).is_empty());
        assert_eq!(parent(6), 4);
        assert_eq!(parent(5), 4);
        assert_eq!(parent(4), 0);
        // Every non-root appears exactly once as somebody's child.
        for n in 1..=70 {
            let mut seen = vec![0; n];
            for v in 0..n {
                for c in children(v, n) {
                    assert_eq!(parent(c), v);
                    seen[c] += 1;
                }
            }
            assert!(seen.iter().skip(1).all(|&s| s == 1), "n={n}");
        }
    }

    #[test]
    fn roles() {
        // Root 1 of 4: relative 0 -> real 1, children rel 2, 1 -> real 3, 2.
        let c = Region::recv(0, 3);
        assert_eq!(
            broadcast(&geom(1, 4, 3), 1),
            vec![Step::copy_send(Region::send(0, 3), c, 3), Step::send(2, c)]
        );
        // Real 3 is relative 2: parent rel 0 (real 1), child rel 3 (real 0).
        assert_eq!(
            broadcast(&geom(3, 4, 3), 1),
            vec![Step::recv_copy_send(1, c, 0)]
        );
        assert_eq!(broadcast(&geom(0, 4, 3), 1), vec![Step::recv(3, c)]);
        assert_eq!(broadcast(&geom(0, 4, 9), 1).len(), 3);
        assert!(broadcast(&geom(0, 4, 0), 1).is_empty());
    }
}
