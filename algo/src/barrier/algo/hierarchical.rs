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
    use crate::barrier::algo::brief;

    /// `rank`'s steps, in brief, on hosts of 3, 2 and 1 ranks.
    fn on_three_hosts(rank: usize, inter: Inter) -> String {
        brief(&steps(rank, &Hosts::new(&[0, 0, 0, 1, 1, 2]), inter))
    }

    #[test]
    fn members_signal_their_leader() {
        assert_eq!(
            on_three_hosts(4, Inter::Dissemination),
            "notify 3@0, wait release 4"
        );
    }

    #[test]
    fn leaders_gather_disseminate_release() {
        assert_eq!(
            on_three_hosts(3, Inter::Dissemination),
            "wait 4@0, notify 5@1, wait 0@1, notify 0@2, wait 5@2, release 4"
        );
    }

    #[test]
    fn leaders_tree() {
        assert_eq!(
            on_three_hosts(0, Inter::Tree { fanout: 2 }),
            "wait 1@0, wait 2@0, wait 3@1, wait 5@1, release 3, release 5, release 1, release 2"
        );
    }
}
