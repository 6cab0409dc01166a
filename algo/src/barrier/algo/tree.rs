//! K-ary tree barrier with host leaders nearest the root.
//!
//! Arrivals travel up a tree (a node signals its parent once all its children
//! have signalled it) and releases travel down it: the combining-tree
//! barrier with a separate wake-up tree of Mellor-Crummey and Scott
//! ("Algorithms for scalable synchronization on shared-memory
//! multiprocessors", ACM TOCS 9(1), 1991, §3.3 and their tree barrier),
//! with one fan-out for both directions. Every rank waits only on words in
//! its own area, each written by one rank. `2 ceil(log_k n)` hops.
//!
//! # Topology
//!
//! The tree is built over hosts in two levels, so that every edge that
//! crosses hosts is between host leaders (the lowest rank of each host) and
//! leaders sit nearest the root:
//! - the leaders form a k-ary tree in rank order, rooted at rank 0;
//! - the ranks of each host form a k-ary tree in rank order, rooted at its
//!   leader.
//!
//! A leader therefore has up to `2k` children: `k` other leaders and `k`
//! ranks of its own host. With all ranks on one host, or one rank per host,
//! this is the plain k-ary tree over ranks `0..n` in heap order. A leader
//! releases its remote children first (their subtrees are the longest).

use crate::barrier::FlagStep;

use super::hosts::{Hosts, position};

/// Parent and children of `group[index]` in the k-ary heap over `group`.
pub(super) fn kary(group: &[usize], index: usize, k: usize) -> (Option<usize>, Vec<usize>) {
    let parent = (index > 0).then(|| group[(index - 1) / k]);
    let first = index.saturating_mul(k).saturating_add(1);
    let children = (first..first.saturating_add(k))
        .take_while(|&c| c < group.len())
        .map(|c| group[c])
        .collect();
    (parent, children)
}

/// Arrive through `parent` after `children` arrived, then wait for the
/// release and release `children`, all with flags of `round`.
pub(super) fn arrive_release(
    rank: usize,
    parent: Option<usize>,
    children: &[usize],
    round: u32,
) -> Vec<FlagStep> {
    let mut steps: Vec<FlagStep> = children
        .iter()
        .map(|&from| FlagStep::WaitFlag { from, round })
        .collect();
    if let Some(peer) = parent {
        steps.push(FlagStep::Notify { peer, round });
        steps.push(FlagStep::WaitRelease { at: rank });
    }
    steps.extend(children.iter().map(|&peer| FlagStep::Release { peer }));
    steps
}

/// Steps of `rank` in the two-level k-ary tree over `hosts`.
pub(super) fn steps(rank: usize, hosts: &Hosts, k: usize) -> Vec<FlagStep> {
    let group = hosts.group(rank);
    let (local_parent, local_children) = kary(group, position(group, rank), k);
    let (parent, children) = if hosts.leader_of(rank) == rank {
        let leaders = hosts.leaders();
        let (parent, mut children) = kary(&leaders, position(&leaders, rank), k);
        children.extend(local_children);
        (parent, children)
    } else {
        (local_parent, local_children)
    };
    arrive_release(rank, parent, &children, 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::barrier::algo::brief;

    #[test]
    fn heap_parents_and_children() {
        let g: Vec<usize> = (0..10).collect();
        assert_eq!(kary(&g, 0, 3), (None, vec![1, 2, 3]));
        assert_eq!(kary(&g, 2, 3), (Some(0), vec![7, 8, 9]));
        assert_eq!(kary(&g, 3, 3), (Some(0), vec![]));
        assert_eq!(kary(&g, 4, 2), (Some(1), vec![9]));
    }

    #[test]
    fn one_host_is_the_plain_heap() {
        let hosts = Hosts::new(&[0; 7]);
        assert_eq!(
            brief(&steps(1, &hosts, 2)),
            "wait 3@0, wait 4@0, notify 0@0, wait release 1, release 3, release 4"
        );
        assert_eq!(steps(0, &hosts, 2).len(), 4);
    }

    #[test]
    fn cross_host_edges_are_between_leaders() {
        let layout = [0, 0, 0, 1, 1, 2, 2, 2, 2, 1];
        let hosts = Hosts::new(&layout);
        for rank in 0..layout.len() {
            for s in steps(rank, &hosts, 2) {
                let peer = s.peer().unwrap();
                if layout[peer] != layout[rank] {
                    assert_eq!(hosts.leader_of(rank), rank, "{rank}: {s:?}");
                    assert_eq!(hosts.leader_of(peer), peer, "{rank}: {s:?}");
                }
            }
        }
        // Leader 3 of host 1: child of 0 in the leader tree, parent of 4 and 9.
        assert_eq!(
            brief(&steps(3, &hosts, 2)),
            "wait 4@0, wait 9@0, notify 0@0, wait release 3, release 4, release 9"
        );
    }
}
