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
//! # The multicast barrier
//! `multicast` runs no flag plan: where its group was joined at creation
//! (`comm/create/multicast.rs`), [`FlagBarriers::set_multicast`] hands it
//! over, and [`Running::Multicast`] runs it instead of a plan. Where it
//! was not joined, asking for it is refused with the reason.
//!
//! # Epochs
//! Every barrier advances the epoch; one that uses the arrival counter
//! also advances the counter epoch, whose target then stays right when the
//! algorithm is switched between barriers ([`Epoch`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::area::{Area, FlagMemory};
use super::exec::{self, Epoch};
use super::multicast::MulticastBarrier;
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

/// What barriers run: a flag plan, or the multicast barrier.
#[derive(Clone, Debug)]
pub(crate) enum Running {
    /// This rank's plan of a flag algorithm.
    Flags(Arc<BarrierPlan>),
    /// The multicast barrier ([`FlagBarriers::set_multicast`]).
    Multicast(Arc<MulticastBarrier>),
}

impl Running {
    fn algo(&self) -> BarrierAlgo {
        match self {
            Running::Flags(plan) => plan.algo,
            Running::Multicast(_) => BarrierAlgo::Multicast,
        }
    }
}

/// Whether the multicast barrier can run, and if not, why.
enum MulticastGroup {
    Joined(Arc<MulticastBarrier>),
    Absent(String),
}

/// The barriers of a communicator whose every rank's area is reached here
/// (mapped, or written over verbs): the flag algorithms, and the multicast
/// barrier where its group was joined.
pub(crate) struct FlagBarriers {
    /// This rank.
    rank: usize,
    /// `areas[r]`: rank r's barrier area (ours included).
    areas: Vec<Area>,
    /// Host index of each rank, for building plans.
    hosts: Vec<usize>,
    /// Remote counters may be fetch-added (see the module docs).
    remote_atomics: bool,
    /// What runs (replaced, in issue order, by [`FlagBarriers::install`]).
    running: Mutex<Running>,
    /// The multicast barrier, or why there is none.
    multicast: MulticastGroup,
    /// Why the default selection did not get the algorithm it preferred.
    fallback: Option<String>,
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
            running: Mutex::new(Running::Flags(Arc::new(plan))),
            multicast: MulticastGroup::Absent(
                "the multicast group is joined at creation only when the barrier algorithm asks for it (STREAMCOMM_BARRIER_ALGO=multicast) or the default selection prefers it".into(),
            ),
            fallback: None,
            epoch: AtomicU64::new(0),
            counter_epoch: AtomicU64::new(0),
        })
    }

    /// Settles the multicast barrier at creation, where it was wanted:
    /// `Ok` hands over the joined group, which runs from now on; `Err` is
    /// why it is not there (for later requests, and as
    /// [`FlagBarriers::fallback`]: the flag algorithm keeps running).
    pub(crate) fn set_multicast(&mut self, group: Result<Arc<MulticastBarrier>, String>) {
        match group {
            Ok(b) => {
                *self.running.get_mut().unwrap_or_else(|p| p.into_inner()) =
                    Running::Multicast(b.clone());
                self.multicast = MulticastGroup::Joined(b);
            }
            Err(why) => {
                self.fallback = Some(format!(
                    "multicast preferred, {} runs instead: {why}",
                    self.algo()
                ));
                self.multicast = MulticastGroup::Absent(why);
            }
        }
    }

    /// Why the default selection did not get the algorithm it preferred.
    pub(crate) fn fallback(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    /// The multicast barrier, where its group was joined.
    pub(crate) fn multicast(&self) -> Option<&Arc<MulticastBarrier>> {
        match &self.multicast {
            MulticastGroup::Joined(b) => Some(b),
            MulticastGroup::Absent(_) => None,
        }
    }

    /// The algorithm barriers run.
    pub(crate) fn algo(&self) -> BarrierAlgo {
        self.current().algo()
    }

    /// What running `algo` takes on this rank, refused when some rank's
    /// plan cannot run over these areas, or multicast is not there.
    ///
    /// # Errors
    /// [`Error::Unavailable`] when `algo` does not fit (see the module
    /// docs) or, for `multicast`, with the reason its group is absent;
    /// [`Error::InvalidArgument`] as [`build`].
    pub(crate) fn running_for(&self, algo: BarrierAlgo) -> Result<Running, Error> {
        if algo == BarrierAlgo::Multicast {
            return match &self.multicast {
                MulticastGroup::Joined(b) => Ok(Running::Multicast(b.clone())),
                MulticastGroup::Absent(why) => Err(Error::Unavailable(format!(
                    "barrier algorithm multicast: {why}"
                ))),
            };
        }
        let plan = choose(
            self.rank,
            &self.areas,
            &self.hosts,
            self.remote_atomics,
            Some(algo),
            algo,
        )?;
        Ok(Running::Flags(Arc::new(plan)))
    }

    /// Makes `running` what later barriers run (call in issue order).
    pub(crate) fn install(&self, running: Running) {
        *self.running.lock().unwrap_or_else(|p| p.into_inner()) = running;
    }

    /// Runs the next barrier (call in issue order, once per barrier, on
    /// every rank), waiting under `policy`.
    ///
    /// # Errors
    /// A wait's timeout or abort; what a store or load met (a network
    /// error, a rank beyond the areas).
    #[inline]
    pub(crate) fn run(&self, policy: WaitPolicy<'_>) -> Result<(), Error> {
        let plan = match self.current() {
            Running::Flags(plan) => plan,
            Running::Multicast(m) => return m.run(&policy),
        };
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

    fn current(&self) -> Running {
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
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
