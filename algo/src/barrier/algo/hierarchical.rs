//! Hierarchical barrier: shared memory inside a host, another barrier between
//! host leaders.
//!
//! The two-level scheme MPI implementations use on clusters of multi-core
//! nodes (shared memory for the cheap hops, the network only between one
//! rank per node):
//! 1. every rank of a host signals its host leader (the lowest rank of the
//!    host) with a flag in the leader's area (round 0);
//! 2. the leaders run a dissemination barrier (`dissemination.rs`)
//!    or a k-ary arrival/release tree ([`super::tree`]) among themselves
//!    (rounds from 1, so no flag value is shared with step 1);
//! 3. each leader writes the release word of every other rank of its host.
//!
//! Only leaders cross hosts, so the expensive inter-host hand-offs are
//! `ceil(log2 hosts)` (or a tree's depth) instead of `log2 n`. With one
//! host this is the central-flags barrier; with one rank per host it is the
//! inter-host algorithm alone.

use crate::barrier::FlagStep;

use super::Inter;
use super::dissemination;
use super::hosts::{Hosts, position};
use super::tree::{arrive_release, kary};

/// Round of the intra-host gather; inter-leader rounds follow it.
const GATHER_ROUND: u32 = 0;

/// Steps of `rank` in the hierarchical barrier over `hosts`.
pub(super) fn steps(rank: usize, hosts: &Hosts, inter: Inter) -> Vec<FlagStep> {
    let leader = hosts.leader_of(rank);
    if rank != leader {
        return vec![
            FlagStep::Notify {
                peer: leader,
                round: GATHER_ROUND,
            },
            FlagStep::WaitRelease { at: rank },
        ];
    }
    let members = &hosts.group(rank)[1..];
    let mut steps: Vec<FlagStep> = members
        .iter()
        .map(|&from| FlagStep::WaitFlag {
            from,
            round: GATHER_ROUND,
        })
        .collect();
    let leaders = hosts.leaders();
    let first = GATHER_ROUND + 1;
    match inter {
        Inter::Dissemination => steps.extend(dissemination::steps(&leaders, rank, 1, first)),
        Inter::Tree { fanout } => {
            let (parent, children) = kary(&leaders, position(&leaders, rank), fanout);
            steps.extend(arrive_release(rank, parent, &children, first));
        }
    }
    steps.extend(members.iter().map(|&peer| FlagStep::Release { peer }));
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_signal_their_leader() {
        let hosts = Hosts::new(&[0, 0, 0, 1, 1, 2]);
        assert_eq!(
            steps(4, &hosts, Inter::Dissemination),
            vec![
                FlagStep::Notify { peer: 3, round: 0 },
                FlagStep::WaitRelease { at: 4 }
            ]
        );
    }

    #[test]
    fn leaders_gather_disseminate_release() {
        let hosts = Hosts::new(&[0, 0, 0, 1, 1, 2]);
        assert_eq!(
            steps(3, &hosts, Inter::Dissemination),
            vec![
                FlagStep::WaitFlag { from: 4, round: 0 },
                FlagStep::Notify { peer: 5, round: 1 },
                FlagStep::WaitFlag { from: 0, round: 1 },
                FlagStep::Notify { peer: 0, round: 2 },
                FlagStep::WaitFlag { from: 5, round: 2 },
                FlagStep::Release { peer: 4 },
            ]
        );
    }

    #[test]
    fn leaders_tree() {
        let hosts = Hosts::new(&[0, 0, 0, 1, 1, 2]);
        assert_eq!(
            steps(0, &hosts, Inter::Tree { fanout: 2 }),
            vec![
                FlagStep::WaitFlag { from: 1, round: 0 },
                FlagStep::WaitFlag { from: 2, round: 0 },
                FlagStep::WaitFlag { from: 3, round: 1 },
                FlagStep::WaitFlag { from: 5, round: 1 },
                FlagStep::Release { peer: 3 },
                FlagStep::Release { peer: 5 },
                FlagStep::Release { peer: 1 },
                FlagStep::Release { peer: 2 },
            ]
        );
    }
}
