//! Double binary tree all-reduce (NCCL's tree algorithm).
//!
//! A ring all-reduce needs `2 (n - 1)` hops before the last rank finishes;
//! a binary tree needs about `2 log2 n`: reduce up to the root, broadcast
//! back down, each chunk forwarded as soon as it is ready so long messages
//! pipeline. One binary tree leaves half the ranks (the leaves) sending
//! only half as much as the inner ranks, so, like NCCL (Sanders, Speck and
//! Träff, "Two-tree algorithms for full bandwidth broadcast, reduction and
//! scan", 2009; NCCL 2.4's double binary tree), the data is split in two
//! halves, each reduced and broadcast on its own tree, and the second tree
//! is the first with every rank shifted by one position, which turns most
//! leaves of one tree into inner ranks of the other.
//!
//! Each tree here is the balanced in-order tree over positions `0 .. n`:
//! the root of positions `lo .. hi` is `(lo + hi) / 2`, its children the
//! roots of the two sides. A rank runs the reduce phase of both trees chunk
//! by chunk (tree A's chunk, then tree B's), then the broadcast phase the
//! same way. Within one tree the phases flow one way (up, then down), and
//! all connections between two ranks carry their chunks in the same order on
//! both ends; the simulator checks the interleaving never deadlocks, even
//! with one slot per connection.
//!
//! An inner rank with two children needs a place for the partial sum of the
//! first child and its input: its own receive buffer, which the broadcast
//! later overwrites with the result.

use super::Geometry;
use super::ring::local_copy;
use super::step::{DataStep, Region};

/// A rank's neighbours in one tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Links {
    /// The parent's position (`None` for the root).
    pub parent: Option<usize>,
    /// The children's positions (0, 1 or 2).
    pub children: Vec<usize>,
}

/// The neighbours of position `pos` in the balanced in-order tree of `n`.
pub(super) fn links(pos: usize, n: usize) -> Links {
    let (mut lo, mut hi, mut parent) = (0, n, None);
    loop {
        let mid = (lo + hi) / 2;
        if pos == mid {
            let children = [(lo, mid), (mid + 1, hi)]
                .into_iter()
                .filter(|(a, b)| a < b)
                .map(|(a, b)| (a + b) / 2)
                .collect();
            return Links { parent, children };
        }
        parent = Some(mid);
        if pos < mid {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
}

/// One tree's role for this rank, in real ranks.
struct Role {
    parent: Option<usize>,
    children: Vec<usize>,
}

impl Role {
    /// Tree `shift`: rank `r` sits at position `(r + shift) % n`.
    fn new(rank: usize, n: usize, shift: usize) -> Role {
        let to_rank = |pos: usize| (pos + n - shift) % n;
        let l = links((rank + shift) % n, n);
        Role {
            parent: l.parent.map(to_rank),
            children: l.children.into_iter().map(to_rank).collect(),
        }
    }

    /// The reduce-phase steps for elements `off .. off + len`.
    fn up(&self, off: usize, len: usize, steps: &mut Vec<DataStep>) {
        let (s, d) = (Region::send(off, len), Region::recv(off, len));
        let c = &self.children;
        match (self.parent, c.len()) {
            (None, 0) => steps.push(DataStep::copy(s, d).finalized()),
            (None, 1) => steps.push(DataStep::recv_reduce(c[0], s, d).finalized()),
            (None, _) => {
                steps.push(DataStep::recv_reduce(c[0], s, d));
                steps.push(DataStep::recv_reduce(c[1], d, d).finalized());
            }
            (Some(p), 0) => steps.push(DataStep::send(p, s)),
            (Some(p), 1) => steps.push(DataStep::recv_reduce_send(c[0], s, p)),
            (Some(p), _) => {
                steps.push(DataStep::recv_reduce(c[0], s, d));
                steps.push(DataStep::recv_reduce_send(c[1], d, p));
            }
        }
    }

    /// The broadcast-phase steps for elements `off .. off + len`.
    fn down(&self, off: usize, len: usize, steps: &mut Vec<DataStep>) {
        let d = Region::recv(off, len);
        let mut kids = self.children.iter();
        if let Some(p) = self.parent {
            steps.push(match kids.next() {
                Some(&k) => DataStep::recv_copy_send(p, d, k),
                None => DataStep::recv(p, d),
            });
        }
        steps.extend(kids.map(|&k| DataStep::send(k, d)));
    }
}

/// Double binary tree all-reduce: the first half of the elements on tree A,
/// the second on tree B (A shifted by one position).
pub(super) fn all_reduce(g: &Geometry) -> Vec<DataStep> {
    let (n, r, count) = (g.nranks, g.rank, g.count);
    if n == 1 {
        return local_copy(count, true);
    }
    let half = count.div_ceil(2);
    let trees = [
        (Role::new(r, n, 0), 0, half),
        (Role::new(r, n, 1), half, count - half),
    ];
    let pieces: Vec<Vec<(usize, usize)>> = trees
        .iter()
        .map(|&(_, base, len)| g.chunks(len).map(|(o, l)| (base + o, l)).collect())
        .collect();
    let rounds = pieces.iter().map(Vec::len).max().unwrap_or(0);
    let mut steps = Vec::new();
    for phase_up in [true, false] {
        for j in 0..rounds {
            for (t, (role, _, _)) in trees.iter().enumerate() {
                if let Some(&(off, len)) = pieces[t].get(j) {
                    if phase_up {
                        role.up(off, len, &mut steps);
                    } else {
                        role.down(off, len, &mut steps);
                    }
                }
            }
        }
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_tree_shape() {
        // 7 positions: 3 at the root, 1 and 5 below, leaves 0, 2, 4, 6.
        assert_eq!(
            links(3, 7),
            Links {
                parent: None,
                children: vec![1, 5]
            }
        );
        assert_eq!(
            links(5, 7),
            Links {
                parent: Some(3),
                children: vec![4, 6]
            }
        );
        assert_eq!(
            links(6, 7),
            Links {
                parent: Some(5),
                children: vec![]
            }
        );
        // Every position but the root has exactly one parent that lists it,
        // and the depth is logarithmic.
        for n in 1..=100 {
            let mut depth_max = 0;
            for pos in 0..n {
                let l = links(pos, n);
                if let Some(p) = l.parent {
                    assert!(links(p, n).children.contains(&pos), "n={n} pos={pos}");
                }
                let (mut depth, mut at) = (0, pos);
                while let Some(p) = links(at, n).parent {
                    depth += 1;
                    at = p;
                }
                depth_max = depth_max.max(depth);
            }
            assert!(1usize << depth_max <= n, "n={n} depth {depth_max}");
        }
    }

    #[test]
    fn two_trees_split_the_data() {
        let g = Geometry {
            rank: 0,
            nranks: 3,
            count: 2,
            chunk: 4,
            breaker: false,
        };
        // Tree A: positions = ranks, root 1, leaves 0 and 2. Tree B: rank r
        // at position r + 1, so rank 0 is its root, with children 2 and 1.
        assert_eq!(
            all_reduce(&g),
            vec![
                DataStep::send(1, Region::send(0, 1)),
                DataStep::recv_reduce(2, Region::send(1, 1), Region::recv(1, 1)),
                DataStep::recv_reduce(1, Region::recv(1, 1), Region::recv(1, 1)).finalized(),
                DataStep::recv(1, Region::recv(0, 1)),
                DataStep::send(2, Region::recv(1, 1)),
                DataStep::send(1, Region::recv(1, 1)),
            ]
        );
    }
}
