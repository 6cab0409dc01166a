//! Binomial-tree broadcast and reduce.
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
//! Reduce runs the same tree upwards: per chunk, a rank combines its input
//! with its children's partial results, nearest child (smallest subtree,
//! ready first) to farthest, and sends the sum to its parent; the root
//! finalises. A rank with two or more children keeps the running sum in its
//! receive region, which on a non-root rank is working memory the runtime
//! supplies ([`Plan::work_count`](super::Plan)); with one child the sum goes
//! straight from the incoming slot to the outgoing one.

use super::Geometry;
use super::ring::local_copy;
use super::step::{DataStep, Region};

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
pub(super) fn broadcast(g: &Geometry, root: usize) -> Vec<DataStep> {
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
            (0, Some(&k)) => DataStep::copy_send(Region::send(off, len), dst, k),
            (0, None) => DataStep::copy(Region::send(off, len), dst),
            (_, Some(&k)) => DataStep::recv_copy_send(real(parent(v)), dst, k),
            (_, None) => DataStep::recv(real(parent(v)), dst),
        };
        steps.push(first);
        for &k in kids.iter().skip(1) {
            steps.push(DataStep::send(k, dst));
        }
    }
    steps
}

/// Binomial reduce to `root`, and whether a non-root rank's steps use its
/// receive region as working memory.
pub(super) fn reduce(g: &Geometry, root: usize) -> (Vec<DataStep>, bool) {
    let n = g.nranks;
    if n == 1 {
        return (local_copy(g.count, true), false);
    }
    let v = (g.rank + n - root) % n;
    let real = |rel: usize| (rel + root) % n;
    // Nearest child first: its subtree is the smallest, so it is ready first.
    let kids: Vec<usize> = children(v, n).into_iter().rev().map(real).collect();
    let up = (v != 0).then(|| real(parent(v)));
    let mut steps = Vec::new();
    for (off, len) in g.chunks(g.count) {
        let (src, acc) = (Region::send(off, len), Region::recv(off, len));
        match (kids.as_slice(), up) {
            ([], Some(p)) => steps.push(DataStep::send(p, src)),
            ([], None) => unreachable!("n > 1: the root has a child"),
            ([k], Some(p)) => steps.push(DataStep::recv_reduce_send(*k, src, p)),
            ([first, middle @ .., last], _) => {
                steps.push(DataStep::recv_reduce(*first, src, acc));
                for &k in middle {
                    steps.push(DataStep::recv_reduce(k, acc, acc));
                }
                steps.push(match up {
                    Some(p) => DataStep::recv_reduce_send(*last, acc, p),
                    None => DataStep::recv_reduce(*last, acc, acc).finalized(),
                });
            }
            ([k], None) => steps.push(DataStep::recv_reduce(*k, src, acc).finalized()),
        }
    }
    (steps, up.is_some() && kids.len() >= 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::plan::geom;

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
    fn reduce_roles() {
        // Root 0 of 4: relative = real. 0 has children 2 (far) and 1 (near),
        // 2 has child 3, 1 and 3 are leaves.
        let (src, acc) = (Region::send(0, 3), Region::recv(0, 3));
        assert_eq!(
            reduce(&geom(0, 4, 3), 0),
            (
                vec![
                    DataStep::recv_reduce(1, src, acc),
                    DataStep::recv_reduce(2, acc, acc).finalized()
                ],
                false
            )
        );
        assert_eq!(
            reduce(&geom(2, 4, 3), 0),
            (vec![DataStep::recv_reduce_send(3, src, 0)], false)
        );
        assert_eq!(
            reduce(&geom(3, 4, 3), 0),
            (vec![DataStep::send(2, src)], false)
        );
        // Of 8, relative 4 has children 6 and 5: it needs working memory.
        let (steps, work) = reduce(&geom(4, 8, 3), 0);
        assert!(work);
        assert_eq!(
            steps,
            vec![
                DataStep::recv_reduce(5, src, acc),
                DataStep::recv_reduce_send(6, acc, 0)
            ]
        );
        assert_eq!(reduce(&geom(0, 1, 3), 0).0, local_copy(3, true));
    }

    #[test]
    fn roles() {
        // Root 1 of 4: relative 0 -> real 1, children rel 2, 1 -> real 3, 2.
        let c = Region::recv(0, 3);
        assert_eq!(
            broadcast(&geom(1, 4, 3), 1),
            vec![
                DataStep::copy_send(Region::send(0, 3), c, 3),
                DataStep::send(2, c)
            ]
        );
        // Real 3 is relative 2: parent rel 0 (real 1), child rel 3 (real 0).
        assert_eq!(
            broadcast(&geom(3, 4, 3), 1),
            vec![DataStep::recv_copy_send(1, c, 0)]
        );
        assert_eq!(broadcast(&geom(0, 4, 3), 1), vec![DataStep::recv(3, c)]);
        assert_eq!(broadcast(&geom(0, 4, 9), 1).len(), 3);
        assert!(broadcast(&geom(0, 4, 0), 1).is_empty());
    }
}
