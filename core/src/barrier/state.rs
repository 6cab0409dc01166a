//! A communicator's flag barriers: the algorithm, chosen once at creation,
//! the plan in use, the epochs, and running one barrier.
//!
//! # Default algorithm
//! [`default_algo`] picks, for ranks on one host: dissemination up to the
//! number of cores (every rank runs, so ⌈log2 N⌉ rounds of flag writes is
//! the shortest path), and the central counter when ranks outnumber cores
//! (then every extra hand-off is a context switch, and the central counter
//! has the fewest: one arrival per rank, one release). Ranks on several
//! hosts use the hierarchical algorithm. The measurements are in
//! `docs/measurements/host-shm.md`.
//!
//! # Where a plan fits
//! With every rank's area mapped (shared memory), every algorithm runs.
//! Over verbs, remote areas are written, never read: an algorithm runs
//! there only when every rank's plan for written-only memory
//! ([`build_for_network`]) reads its own area alone, and fetch-adds a
//! remote counter only when every pair of ranks is on verbs and every
//! device has atomics. That is decided once, alike on every rank, when a
//! plan is chosen ([`FlagBarriers::new`], [`FlagBarriers::plan_for`]); the
//! default algorithm that does not fit is replaced by dissemination, which
//! always does (its flags are written by their one writer and awaited in
//! their owner's area).
//!
//! # Epochs
//! Every barrier advances the epoch; one that uses the arrival counter
//! also advances the counter epoch, whose target then stays right when the
//! algorithm is switched between barriers ([`Epoch`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::area::{Area, FlagMemory};
use super::exec::{self, Epoch};
use super::{BarrierAlgo, BarrierPlan, Inter, build, build_for_network};
use crate::Error;
use crate::wait::{WaitPolicy, available_cores};

/// The default barrier algorithm for `nranks` ranks on `nhosts` hosts, with
/// `local_ranks` sharing this host (see the module docs for the rule).
pub(crate) fn default_algo(nranks: usize, nhosts: usize, local_ranks: usize) -> BarrierAlgo {
    if nhosts > 1 && nhosts < nranks {
        BarrierAlgo::Hierarchical {
            inter: Inter::Dissemination,
        }
    } else if local_ranks > available_cores() {
        BarrierAlgo::CentralCounter
    } else {
        BarrierAlgo::Dissemination
    }
}

/// The barriers of a communicator whose every rank's area is reached here
/// (mapped, or written over verbs).
pub(crate) struct FlagBarriers {
    /// This rank.
    rank: usize,
    /// `areas[r]`: rank r's barrier area (ours included).
    areas: Vec<Area>,
    /// Host index of each rank, for building plans.
    hosts: Vec<usize>,
    /// Remote counters may be fetch-added (see the module docs).
    remote_atomics: bool,
    /// The plan in use (replaced, in issue order, by [`FlagBarriers::install`]).
    plan: Mutex<Arc<BarrierPlan>>,
    /// Barriers run so far (the same on every rank).
    epoch: AtomicU64,
    /// Of the barriers so far, how many used the arrival counter.
    counter_epoch: AtomicU64,
}

impl FlagBarriers {
    /// The barriers of `rank` over `areas` (one per rank), running
    /// `requested` if given, else `default` where it fits, else
    /// dissemination.
    ///
    /// # Errors
    /// As [`FlagBarriers::plan_for`] for a requested algorithm;
    /// [`Error::InvalidArgument`] as [`build`].
    pub(crate) fn new(
        rank: usize,
        areas: Vec<Area>,
        hosts: Vec<usize>,
        remote_atomics: bool,
        requested: Option<BarrierAlgo>,
        default: BarrierAlgo,
    ) -> Result<FlagBarriers, Error> {
        let plan = choose(rank, &areas, &hosts, remote_atomics, requested, default)?;
        Ok(FlagBarriers {
            rank,
            areas,
            hosts,
            remote_atomics,
            plan: Mutex::new(Arc::new(plan)),
            epoch: AtomicU64::new(0),
            counter_epoch: AtomicU64::new(0),
        })
    }

    /// The algorithm barriers run.
    pub(crate) fn algo(&self) -> BarrierAlgo {
        self.current().algo
    }

    /// This rank's plan of `algo`, refused when some rank's plan cannot run
    /// over these areas.
    ///
    /// # Errors
    /// [`Error::Unavailable`] when `algo` does not fit (see the module
    /// docs); [`Error::InvalidArgument`] as [`build`].
    pub(crate) fn plan_for(&self, algo: BarrierAlgo) -> Result<BarrierPlan, Error> {
        choose(
            self.rank,
            &self.areas,
            &self.hosts,
            self.remote_atomics,
            Some(algo),
            algo,
        )
    }

    /// Makes `plan` the one later barriers run (call in issue order).
    pub(crate) fn install(&self, plan: BarrierPlan) {
        *self.plan.lock().unwrap_or_else(|p| p.into_inner()) = Arc::new(plan);
    }

    /// Runs the next barrier (call in issue order, once per barrier, on
    /// every rank), waiting under `policy`.
    ///
    /// # Errors
    /// A wait's timeout or abort; what a store or load met (a network
    /// error, a rank beyond the areas).
    pub(crate) fn run(&self, policy: WaitPolicy<'_>) -> Result<(), Error> {
        let plan = self.current();
        let number = self.epoch.fetch_add(1, Ordering::Relaxed) + 1;
        let counter = if plan.uses_counter() {
            self.counter_epoch.fetch_add(1, Ordering::Relaxed) + 1
        } else {
            self.counter_epoch.load(Ordering::Relaxed)
        };
        let mem = FlagMemory::new(&self.areas, policy);
        let _span =
            tracing::trace_span!("barrier", epoch = number, algo = plan.algo.name()).entered();
        exec::run(&plan, Epoch { number, counter }, &mem)?;
        match mem.take_failure() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn current(&self) -> Arc<BarrierPlan> {
        self.plan.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// `rank`'s plan over `areas`: `requested` where it fits (an error where
/// it does not), else `default` where it fits, else dissemination. Builds
/// every rank's plan at most once, and only with a network between ranks.
fn choose(
    rank: usize,
    areas: &[Area],
    hosts: &[usize],
    remote_atomics: bool,
    requested: Option<BarrierAlgo>,
    default: BarrierAlgo,
) -> Result<BarrierPlan, Error> {
    let size = areas.len();
    let algo = requested.unwrap_or(default);
    if areas.iter().all(|a| matches!(a, Area::Mapped(_))) {
        return build(algo, rank, size, hosts);
    }
    if fits_everyone(algo, size, hosts, remote_atomics)? {
        return build_for_network(algo, rank, size, hosts);
    }
    if requested.is_none() {
        return build_for_network(BarrierAlgo::Dissemination, rank, size, hosts);
    }
    Err(Error::Unavailable(format!(
        "barrier algorithm {algo}: some ranks are reached over verbs, whose flag memory can only be written, and this algorithm reads another rank's words{}",
        if algo == BarrierAlgo::CentralCounter {
            " (the central counter needs every pair of ranks on verbs and every device with RDMA atomics)"
        } else {
            ""
        }
    )))
}

/// Whether every rank's plan of `algo` for written-only memory reads its
/// own area alone (and fetch-adds a remote counter only with
/// `remote_atomics`).
///
/// Decided alike on every rank: with a network between some ranks (links
/// are symmetric: then every rank has one), each rank is taken to read its
/// own area alone, whatever its plan, since a rank's own plan could fit
/// where a peer's does not. `remote_atomics` (every pair of ranks talks
/// over verbs and every device executes atomics: the same on every rank,
/// from the endpoints) lets a plan fetch-add a remote counter.
fn fits_everyone(
    algo: BarrierAlgo,
    size: usize,
    hosts: &[usize],
    remote_atomics: bool,
) -> Result<bool, Error> {
    for r in 0..size {
        let plan = build_for_network(algo, r, size, hosts)?;
        if !FlagMemory::fits(&plan.steps, |q| q == r, remote_atomics) {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dissemination_fits_every_network() {
        for n in 1..=17 {
            let hosts: Vec<usize> = (0..n).collect();
            for remote_atomics in [false, true] {
                assert!(
                    fits_everyone(BarrierAlgo::Dissemination, n, &hosts, remote_atomics).unwrap(),
                    "n={n}"
                );
            }
        }
    }

    #[test]
    fn the_central_counter_fits_a_network_only_with_remote_atomics() {
        let hosts: Vec<usize> = (0..4).collect();
        let fits = |atomics| fits_everyone(BarrierAlgo::CentralCounter, 4, &hosts, atomics);
        assert!(!fits(false).unwrap());
        assert!(fits(true).unwrap());
    }
}
