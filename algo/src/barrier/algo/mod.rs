//! The barrier algorithms of `docs/design/barriers.md`, one file each.
//!
//! Each file only emits one rank's [`FlagStep`]s (the dissemination
//! barrier's are also the message barrier's, `plan/barrier.rs`);
//! [`BarrierAlgo`] (in `streamcomm-types`) names them (`STREAMCOMM_BARRIER_ALGO`, the
//! benchmark's `--algo`) and
//! [`super::build()`] validates arguments and dispatches here. Flat algorithms
//! ignore the host layout; the tree orders ranks host leaders first and the
//! hierarchical barrier is built from it.

mod central_counter;
mod central_flags;
mod chain;
pub mod dissemination;
mod hierarchical;
mod hosts;
mod tree;

pub(super) use hosts::Hosts;
pub(crate) use streamcomm_types::{BarrierAlgo, Inter};

use super::FlagStep;

/// The steps of `algo` for `rank` where other ranks' words can only be
/// written (over a network): as [`steps`], but the central counter releases
/// each rank in its own area.
pub(super) fn steps_for_network(algo: BarrierAlgo, rank: usize, hosts: &Hosts) -> Vec<FlagStep> {
    match algo {
        BarrierAlgo::CentralCounter => central_counter::steps_own_releases(rank, hosts.nranks()),
        _ => steps(algo, rank, hosts),
    }
}

/// The flag algorithms of [`BarrierAlgo::ALL`] (all but `multicast`).
#[cfg(test)]
pub fn flag_algos() -> impl Iterator<Item = BarrierAlgo> {
    BarrierAlgo::ALL
        .iter()
        .copied()
        .filter(|a| *a != BarrierAlgo::Multicast)
}

/// Test shorthand of a plan's steps, to compare with the listing a test
/// expects: `notify 2@1` (peer and round), `wait 0@1` (the flag's writer
/// and round), `release 3`, `wait release 3` (whose release word), `add 0`
/// (the counter's root), `wait count 4` (arrivals per epoch).
#[cfg(test)]
fn brief(steps: &[FlagStep]) -> String {
    let word = |s: &FlagStep| match *s {
        FlagStep::Notify { peer, round } => format!("notify {peer}@{round}"),
        FlagStep::WaitFlag { from, round } => format!("wait {from}@{round}"),
        FlagStep::Release { peer } => format!("release {peer}"),
        FlagStep::WaitRelease { at } => format!("wait release {at}"),
        FlagStep::FetchAdd { root } => format!("add {root}"),
        FlagStep::WaitCounter { count_per_epoch } => format!("wait count {count_per_epoch}"),
    };
    steps.iter().map(word).collect::<Vec<_>>().join(", ")
}

/// The steps of `algo` for `rank` (validated arguments, at least 2 ranks).
pub(super) fn steps(algo: BarrierAlgo, rank: usize, hosts: &Hosts) -> Vec<FlagStep> {
    let n = hosts.nranks();
    match algo {
        BarrierAlgo::CentralCounter => central_counter::steps(rank, n),
        BarrierAlgo::CentralFlags => central_flags::steps(rank, n),
        BarrierAlgo::Chain => chain::steps(rank, n),
        BarrierAlgo::Tree { fanout } => tree::steps(rank, hosts, fanout),
        BarrierAlgo::Dissemination => {
            let all: Vec<usize> = (0..n).collect();
            dissemination::steps(&all, rank, 1, 0)
        }
        BarrierAlgo::KWayDissemination { k } => {
            let all: Vec<usize> = (0..n).collect();
            dissemination::steps(&all, rank, k, 0)
        }
        BarrierAlgo::Hierarchical { inter } => hierarchical::steps(rank, hosts, inter),
        // Runs over datagrams (`super::multicast`): `build` refuses it.
        BarrierAlgo::Multicast => Vec::new(),
    }
}
