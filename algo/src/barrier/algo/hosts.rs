//! Which ranks share a host, and who leads each host.
//!
//! The tree and hierarchical barriers keep cheap, same-host hand-offs inside
//! a host and let only one rank per host (its *leader*, the lowest rank on
//! it) talk across hosts.

use std::collections::HashMap;

/// Ranks grouped by host, groups ordered by their leader's rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Hosts {
    /// Index into `groups` of each rank's host.
    group_of: Vec<usize>,
    /// The ranks of each host in ascending order; the first is the leader.
    groups: Vec<Vec<usize>>,
}

impl Hosts {
    /// Groups ranks by `hosts[rank]`, an arbitrary host identifier.
    pub(crate) fn new(hosts: &[usize]) -> Hosts {
        let mut index: HashMap<usize, usize> = HashMap::new();
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut group_of = Vec::with_capacity(hosts.len());
        for (rank, host) in hosts.iter().enumerate() {
            let g = *index.entry(*host).or_insert_with(|| {
                groups.push(Vec::new());
                groups.len() - 1
            });
            groups[g].push(rank);
            group_of.push(g);
        }
        Hosts { group_of, groups }
    }

    /// Number of ranks.
    pub(crate) fn nranks(&self) -> usize {
        self.group_of.len()
    }

    /// The leader of every host, ascending.
    pub(crate) fn leaders(&self) -> Vec<usize> {
        self.groups.iter().map(|g| g[0]).collect()
    }

    /// The ranks on `rank`'s host, ascending (the leader first).
    pub(crate) fn group(&self, rank: usize) -> &[usize] {
        &self.groups[self.group_of[rank]]
    }

    /// The leader of `rank`'s host.
    pub(crate) fn leader_of(&self, rank: usize) -> usize {
        self.group(rank)[0]
    }
}

/// Index of `rank` in `group` (which must contain it).
pub(super) fn position(group: &[usize], rank: usize) -> usize {
    group.iter().position(|&r| r == rank).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_by_host_leaders_first() {
        let h = Hosts::new(&[7, 3, 7, 3, 9, 7]);
        assert_eq!(h.nranks(), 6);
        assert_eq!(h.leaders(), vec![0, 1, 4]);
        assert_eq!(h.group(5), &[0, 2, 5]);
        assert_eq!(h.group(3), &[1, 3]);
        assert_eq!(h.leader_of(3), 1);
        assert_eq!(h.leader_of(4), 4);
        assert_eq!(position(h.group(5), 5), 2);
    }
}
