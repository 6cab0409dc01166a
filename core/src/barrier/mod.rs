//! Barrier plans: every barrier algorithm of `docs/design/barriers.md` as steps over flag
//! memory, proved by a simulator and run by one executor.
//!
//! A barrier is the simplest collective and the one whose bugs hurt most: a
//! rank that leaves early corrupts whatever the barrier protected, and a
//! reset race shows up once a week. So, as with the data plans of
//! [`crate::plan`], the algorithms here are pure functions from
//! `(algorithm, rank, size, host layout)` to a [`BarrierPlan`]: a short list
//! of [`BarrierStep`]s (fetch-add, raise a flag, wait for a flag, write or
//! wait for a release word) over a small memory model ([`BarrierMemory`]):
//! each rank owns a counter, a release word and one flag per peer, all
//! monotonic 64-bit words whose values encode the barrier's epoch
//! ([`signal_value`]), so nothing is ever reset.
//!
//! - [`build`] makes one rank's plan; [`BarrierAlgo`] names the algorithms
//!   (central counter, central flags, chain, k-ary tree, dissemination,
//!   k-way dissemination, hierarchical).
//! - [`run`] executes a plan for one epoch against any [`BarrierMemory`];
//!   the communicator implements it over the per-rank shared-memory segment.
//! - [`sim::simulate`] runs every rank's plan for many consecutive epochs in
//!   one thread, under round-robin, random and adversarial schedules, and
//!   checks that no rank leaves barrier `e` before every rank has entered it.
//! - Communicators with tcp peers have no shared flag memory: they run the
//!   dissemination plan built here as messages ([`crate::plan::build`] for
//!   [`Collective::Barrier`](crate::plan::Collective::Barrier) turns each
//!   notify into a zero-byte message and each flag wait into a wait for
//!   one), so that algorithm is written once.
//!
//! # Examples
//!
//! ```
//! use streamcomm::barrier::{build, sim, BarrierAlgo};
//!
//! let hosts = [0, 0, 0, 1, 1, 2];
//! let plans = (0..6)
//!     .map(|rank| build(BarrierAlgo::parse("hierarchical")?, rank, 6, &hosts))
//!     .collect::<Result<Vec<_>, _>>()?;
//! let config = sim::SimConfig { epochs: 5, schedule: sim::Schedule::Random { seed: 7 } };
//! sim::simulate(&plans, &config).unwrap();
//! # Ok::<(), streamcomm::Error>(())
//! ```

mod algo;
mod exec;
mod memory;
pub mod sim;
mod step;

pub use algo::{BarrierAlgo, Inter, DEFAULT_KWAY, DEFAULT_TREE_FANOUT};
pub use exec::{apply, run, wait_for};
pub use memory::{BarrierMemory, WaitFor, Word};
pub use step::{signal_value, BarrierPlan, BarrierStep, MAX_EPOCH, ROUNDS_PER_EPOCH};

use crate::Error;

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
/// use streamcomm::barrier::{build, BarrierAlgo, BarrierStep};
///
/// let plan = build(BarrierAlgo::Dissemination, 1, 3, &[0, 0, 0])?;
/// assert_eq!(plan.steps[0], BarrierStep::Notify { peer: 2, round: 0 });
/// assert!(build(BarrierAlgo::Chain, 0, 1, &[0])?.steps.is_empty());
/// # Ok::<(), streamcomm::Error>(())
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
/// use streamcomm::barrier::{build_for_network, BarrierAlgo, BarrierStep};
///
/// let plan = build_for_network(BarrierAlgo::CentralCounter, 2, 3, &[0, 1, 2])?;
/// assert_eq!(plan.steps[1], BarrierStep::WaitRelease { at: 2 });
/// # Ok::<(), streamcomm::Error>(())
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
    steps_of: fn(BarrierAlgo, usize, &algo::Hosts) -> Vec<BarrierStep>,
) -> Result<BarrierPlan, Error> {
    let name = algo.name();
    if nranks == 0 {
        return Err(Error::invalid(format!(
            "barrier {name}: nranks is 0 (a communicator has at least one rank)"
        )));
    }
    if rank >= nranks {
        return Err(Error::invalid(format!(
            "barrier {name}: rank {rank} is out of range for {nranks} ranks"
        )));
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn err(algo: BarrierAlgo, rank: usize, nranks: usize, hosts: &[usize]) -> String {
        match build(algo, rank, nranks, hosts) {
            Err(Error::InvalidArgument(msg)) => msg,
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }

    #[test]
    fn rejects_bad_arguments_naming_the_value() {
        let d = BarrierAlgo::Dissemination;
        assert!(err(d, 0, 0, &[]).contains("nranks is 0"));
        assert!(err(d, 4, 4, &[0; 4]).contains("rank 4"));
        assert!(err(d, 0, 4, &[0; 3]).contains("hosts has 3 entries for 4"));
        let msg = err(BarrierAlgo::Tree { fanout: 1 }, 0, 4, &[0; 4]);
        assert!(msg.contains("fanout 1"), "{msg}");
        let msg = err(BarrierAlgo::KWayDissemination { k: 0 }, 0, 4, &[0; 4]);
        assert!(msg.contains("k 0"), "{msg}");
        let h = BarrierAlgo::Hierarchical {
            inter: Inter::Tree { fanout: 0 },
        };
        assert!(err(h, 0, 2, &[0, 1]).contains("fanout 0"));
    }

    #[test]
    fn one_rank_has_no_steps() {
        for algo in BarrierAlgo::ALL {
            let plan = build(*algo, 0, 1, &[5]).unwrap();
            assert!(plan.steps.is_empty(), "{algo}");
            assert_eq!((plan.rank, plan.nranks, plan.algo), (0, 1, *algo));
        }
    }

    #[test]
    fn flat_algorithms_ignore_hosts() {
        for algo in [
            BarrierAlgo::CentralCounter,
            BarrierAlgo::CentralFlags,
            BarrierAlgo::Chain,
            BarrierAlgo::Dissemination,
            BarrierAlgo::KWayDissemination { k: 3 },
        ] {
            for rank in 0..6 {
                let a = build(algo, rank, 6, &[0; 6]).unwrap();
                let b = build(algo, rank, 6, &[0, 1, 2, 0, 1, 2]).unwrap();
                assert_eq!(a, b, "{algo} rank {rank}");
            }
        }
    }

    #[test]
    fn rounds_fit_an_epoch() {
        let hosts: Vec<usize> = (0..64).collect();
        for algo in BarrierAlgo::ALL {
            for rank in 0..64 {
                let plan = build(*algo, rank, 64, &hosts).unwrap();
                for s in &plan.steps {
                    assert!(u64::from(s.round().unwrap_or(0)) < ROUNDS_PER_EPOCH);
                }
            }
        }
    }
}
