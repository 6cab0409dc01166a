//! Building barrier plans: every barrier algorithm of `docs/design/barriers.md` as steps over flag
//! memory, proved by a simulator and run by one executor.
//!
//! A barrier is the simplest collective and the one whose bugs hurt most: a
//! rank that leaves early corrupts whatever the barrier protected, and a
//! reset race shows up once a week. So, as with the data plans of
//! `plan`, the algorithms here are pure functions from
//! `(algorithm, rank, size, host layout)` to a [`BarrierPlan`]: a short list
//! of [`FlagStep`]s (fetch-add, raise a flag, wait for a flag, write or
//! wait for a release word) over a small memory model
//! ([`BarrierMemory`](super::BarrierMemory)):
//! each rank owns a counter, a release word and one flag per peer, all
//! monotonic 64-bit words whose values encode the barrier's epoch
//! (`signal_value`), so nothing is ever reset.
//!
//! - [`build`] makes one rank's plan; [`BarrierAlgo`] names the algorithms
//!   (central counter, central flags, chain, k-ary tree, dissemination,
//!   k-way dissemination, hierarchical).
//! - [`run`](super::run) executes a plan for one epoch against any `BarrierMemory`;
//!   the communicator implements it over the per-rank shared-memory segment.
//! - the flag simulator (`barrier/simulate/`) runs every rank's plan for many consecutive epochs in
//!   one thread, under round-robin, random and adversarial schedules, and
//!   checks that no rank leaves barrier `e` before every rank has entered it.
//!
//! # Examples
//!
//! ```
//! use streamcomm_types::BarrierAlgo;
//! use streamcomm_algo::barrier::{build, simulate, Schedule, FlagSimConfig};
//!
//! let hosts = [0, 0, 0, 1, 1, 2];
//! let plans = (0..6)
//!     .map(|rank| build(BarrierAlgo::parse("hierarchical")?, rank, 6, &hosts))
//!     .collect::<Result<Vec<_>, _>>()?;
//! let config = FlagSimConfig { epochs: 5, schedule: Schedule::Random { seed: 7 } };
//! simulate(&plans, &config).unwrap();
//! # Ok::<(), streamcomm_types::Error>(())
//! ```

use super::FlagStep;
use super::algo;
use super::{BarrierAlgo, BarrierPlan};
use crate::Error;
use crate::check::rank_in_range;

/// Builds `rank`'s barrier plan for `algo` among `nranks` ranks.
///
/// `hosts[r]` identifies the host of rank `r` (any numbering: ranks with
/// equal values share a host). Only the tree and hierarchical algorithms
/// use it; the others still check its length. One rank needs no steps.
///
/// # Errors
///
/// [`Error::InvalidArgument`] naming the value when `nranks` is 0, `rank` is
/// not below `nranks`, `hosts.len() != nranks`, a tree fan-out is below 2 or
/// a k-way `k` below 1.
///
/// # Examples
///
/// ```
/// use streamcomm_types::BarrierAlgo;
/// use streamcomm_algo::barrier::{build, FlagStep};
///
/// let plan = build(BarrierAlgo::Dissemination, 1, 3, &[0, 0, 0])?;
/// assert_eq!(plan.steps[0], FlagStep::Notify { peer: 2, round: 0 });
/// assert!(build(BarrierAlgo::Chain, 0, 1, &[0])?.steps.is_empty());
/// # Ok::<(), streamcomm_types::Error>(())
/// ```
pub fn build(
    algo: BarrierAlgo,
    rank: usize,
    nranks: usize,
    hosts: &[usize],
) -> Result<BarrierPlan, Error> {
    build_with(algo, rank, nranks, hosts, algo::steps)
}

/// As [`build`], for flag memory that other ranks can only write (RDMA over
/// a network): every algorithm's plan is [`build`]'s, except the central
/// counter's, whose root releases each rank in that rank's own area instead
/// of raising one word everybody reads.
///
/// # Errors
/// As [`build`].
///
/// # Examples
///
/// ```
/// use streamcomm_types::BarrierAlgo;
/// use streamcomm_algo::barrier::{build_for_network, FlagStep};
///
/// let plan = build_for_network(BarrierAlgo::CentralCounter, 2, 3, &[0, 1, 2])?;
/// assert_eq!(plan.steps[1], FlagStep::WaitRelease { at: 2 });
/// # Ok::<(), streamcomm_types::Error>(())
/// ```
pub fn build_for_network(
    algo: BarrierAlgo,
    rank: usize,
    nranks: usize,
    hosts: &[usize],
) -> Result<BarrierPlan, Error> {
    build_with(algo, rank, nranks, hosts, algo::steps_for_network)
}

fn build_with(
    algo: BarrierAlgo,
    rank: usize,
    nranks: usize,
    hosts: &[usize],
    steps_of: fn(BarrierAlgo, usize, &algo::Hosts) -> Vec<FlagStep>,
) -> Result<BarrierPlan, Error> {
    let name = algo.name();
    if algo == BarrierAlgo::Multicast {
        return Err(Error::invalid(
            "barrier multicast runs over datagrams, not flag memory: it has no flag plan",
        ));
    }
    rank_in_range(&format!("barrier {name}"), rank, nranks)?;
    if hosts.len() != nranks {
        return Err(Error::invalid(format!(
            "barrier {name}: hosts has {} entries for {nranks} ranks",
            hosts.len()
        )));
    }
    algo.validate()?;
    let steps = if nranks == 1 {
        Vec::new()
    } else {
        steps_of(algo, rank, &algo::Hosts::new(hosts))
    };
    Ok(BarrierPlan {
        algo,
        rank,
        nranks,
        steps,
    })
}
