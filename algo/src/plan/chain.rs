//! Pipelined chains: broadcast and reduce.
//!
//! A rooted collective moves each element along a line of ranks: broadcast
//! from the root outwards (root, root+1, ..., root-1), reduce inwards
//! (root+1, ..., root-1, root). With the data cut into slot-sized chunks,
//! every link of the chain is busy at once after `n - 1` chunks, so a long
//! message costs about one link's time, not `n - 1` of them (NCCL's ring
//! broadcast and reduce, `src/device/broadcast.h`, `reduce.h`). A chain has no
//! cycle, so it cannot deadlock whatever the number of slots.

use super::Geometry;
use super::ring::local_copy;
use super::step::{DataStep, Region};

/// Chain broadcast from `root`: the root copies its input into its own
/// output and sends it on; middle ranks receive, keep and forward; the last
/// rank (`root - 1`) only receives.
pub(super) fn broadcast(g: &Geometry, root: usize) -> Vec<DataStep> {
    let n = g.nranks;
    if n == 1 {
        return local_copy(g.count, false);
    }
    let (next, prev) = (g.next(), g.prev());
    // Position along the chain: 0 is the root, n - 1 the last receiver.
    let pos = (g.rank + n - root) % n;
    g.chunks(g.count)
        .map(|(off, len)| {
            let dst = Region::recv(off, len);
            if pos == 0 {
                DataStep::copy_send(Region::send(off, len), dst, next)
            } else if pos == n - 1 {
                DataStep::recv(prev, dst)
            } else {
                DataStep::recv_copy_send(prev, dst, next)
            }
        })
        .collect()
}

/// Chain reduce to `root`: rank `root + 1` starts, middle ranks add their
/// input and forward, the root adds its own input last and finalises.
pub(super) fn reduce(g: &Geometry, root: usize) -> Vec<DataStep> {
    let n = g.nranks;
    if n == 1 {
        return local_copy(g.count, true);
    }
    let (next, prev) = (g.next(), g.prev());
    // Position along the chain: 0 is root + 1, n - 1 is the root.
    let pos = (g.rank + 2 * n - root - 1) % n;
    g.chunks(g.count)
        .map(|(off, len)| {
            let src = Region::send(off, len);
            if pos == 0 {
                DataStep::send(next, src)
            } else if pos == n - 1 {
                DataStep::recv_reduce(prev, src, Region::recv(off, len)).finalized()
            } else {
                DataStep::recv_reduce_send(prev, src, next)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::plan::geom;

    #[test]
    fn broadcast_roles_along_the_chain() {
        // Root 2 of 4: chain 2 -> 3 -> 0 -> 1.
        let c = Region::recv(0, 3);
        assert_eq!(
            broadcast(&geom(2, 4, 3), 2),
            vec![DataStep::copy_send(Region::send(0, 3), c, 3)]
        );
        assert_eq!(
            broadcast(&geom(0, 4, 3), 2),
            vec![DataStep::recv_copy_send(3, c, 1)]
        );
        assert_eq!(broadcast(&geom(1, 4, 3), 2), vec![DataStep::recv(0, c)]);
        assert_eq!(broadcast(&geom(1, 4, 9), 2).len(), 3);
    }

    #[test]
    fn reduce_ends_at_the_root_and_finalizes_there() {
        // Root 0 of 3: chain 1 -> 2 -> 0.
        let s = Region::send(0, 2);
        assert_eq!(reduce(&geom(1, 3, 2), 0), vec![DataStep::send(2, s)]);
        assert_eq!(
            reduce(&geom(2, 3, 2), 0),
            vec![DataStep::recv_reduce_send(1, s, 0)]
        );
        assert_eq!(
            reduce(&geom(0, 3, 2), 0),
            vec![DataStep::recv_reduce(2, s, Region::recv(0, 2)).finalized()]
        );
        assert!(reduce(&geom(0, 3, 0), 0).is_empty());
    }
}
