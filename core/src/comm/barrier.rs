//! Barriers on a communicator: which algorithm, its epochs, and the two entry points.
//!
//! One implementation serves both entry points: [`Communicator::barrier`]
//! (stream-ordered, capturable) and [`Communicator::barrier_host`] (blocks the
//! calling thread). Both take a ticket, so they run in issue order with the
//! communicator's other operations, and both run the same barrier plan
//! ([`crate::barrier`]) over the ranks' flag memory, with an epoch that
//! advances once per barrier on every rank. A peer's flag memory is its
//! shared-memory segment's barrier area, or over verbs the same area written
//! by RDMA (written or fetch-added, never read: see [`FlagMemory::fits`]); communicators with tcp
//! peers run the same dissemination plan with its flags turned into
//! messages through the slot rings ([`plan::build`] for
//! [`Collective::Barrier`]).
//!
//! # Default algorithm
//! [`default_barrier_algo`] picks, for ranks on one host: dissemination up to
//! the number of cores (every rank runs, so ⌈log2 N⌉ rounds of flag writes is
//! the shortest path), and the central counter when ranks outnumber cores
//! (then every extra hand-off is a context switch, and the central counter
//! has the fewest: one arrival per rank, one release). Ranks on several hosts
//! use the hierarchical algorithm. The measurements are in
//! `docs/measurements/host-shm.md`. Over
//! verbs remote areas are written, never read: the central counter runs
//! there (RDMA fetch-and-add, releases into each rank's own area) only when
//! every pair of ranks is on verbs and every device has atomics; elsewhere
//! dissemination replaces it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::barrier::{self, BarrierAlgo, BarrierMemory, BarrierPlan, Inter, WaitFor};
use crate::comm::Communicator;
use crate::comm::buffer::Binding;
use crate::comm::inner::CommInner;
use crate::comm::task::barrier_task;
use crate::host::{HostStream, JobMode};
use crate::plan::{self, Collective, Plan, PlanParams};
use crate::transport::Connection;
use crate::transport::barrier_area::{Area, BarrierArea, FlagMemory, RemoteArea};
use crate::wait::{WaitError, available_cores};
use crate::{DataType, ReduceOp};
use crate::{Error, Result};

/// The default barrier algorithm for `nranks` ranks on `nhosts` hosts, with
/// `local_ranks` sharing this host (see the module docs for the rule).
pub(super) fn default_barrier_algo(
    nranks: usize,
    nhosts: usize,
    local_ranks: usize,
) -> BarrierAlgo {
    if nhosts > 1 && nhosts < nranks {
        BarrierAlgo::Hierarchical {
            inter: Inter::Dissemination,
        }
    } else if local_ranks > available_cores() {
        BarrierAlgo::CentralCounter
    } else {
        let _ = nranks;
        BarrierAlgo::Dissemination
    }
}

/// Barrier state of a communicator.
pub(crate) struct BarrierState {
    /// Flag memory (every peer shares memory with us) or messages.
    pub mode: BarrierMode,
    /// Barriers run so far on this communicator (the same on every rank).
    pub epoch: AtomicU64,
    /// Host index of each rank, for building plans.
    pub hosts: Vec<usize>,
}

/// How barriers run.
pub(crate) enum BarrierMode {
    /// Every peer shares memory or is reached over verbs: a flag algorithm
    /// over the ranks' barrier areas.
    Flags {
        /// `areas[r]`: rank r's barrier area (ours included).
        areas: Vec<Area>,
        /// The plan in use (replaced, in issue order, by `set_barrier_algo`).
        plan: Mutex<Arc<BarrierPlan>>,
        /// Of the barriers so far, how many used the central counter.
        counter_epochs: AtomicU64,
        /// Remote counters may be fetch-added (see `fits_everyone`).
        remote_atomics: bool,
    },
    /// Some peer is reached over tcp: dissemination with zero-byte messages
    /// through the slot rings (works over any transport).
    Messages {
        /// The message plan.
        plan: Arc<Plan>,
    },
}

impl BarrierState {
    /// The barrier state for a communicator whose rank `rank` reaches its
    /// peers through `peers` (`None` for itself), with `own` its own area:
    /// flags when every peer shares memory or is reached over verbs,
    /// messages otherwise. `algo` is the requested algorithm, if any.
    ///
    /// # Errors
    /// [`Error::Unavailable`] when `algo` cannot run over these peers (the
    /// central counter over verbs); as [`barrier::build`].
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn for_peers(
        rank: usize,
        size: usize,
        peers: &[Option<Connection>],
        own: BarrierArea,
        algo: Option<BarrierAlgo>,
        default: BarrierAlgo,
        slot_bytes: usize,
        hosts: Vec<usize>,
        remote_atomics: bool,
    ) -> Result<BarrierState> {
        let own = Arc::new(own);
        let areas: Option<Vec<Area>> = (0..size)
            .map(|p| match peers.get(p).and_then(|c| c.as_ref()) {
                None => Some(Area::Mapped(own.clone())),
                Some(c) => match (c.peer_segment(), remote_area(c)) {
                    (Some(seg), _) => Some(Area::Mapped(Arc::new(seg.barrier_area(size)))),
                    (None, Some(r)) => Some(Area::Remote(r)),
                    (None, None) => None,
                },
            })
            .collect();
        let Some(areas) = areas else {
            return BarrierState::messages(rank, size, slot_bytes, hosts);
        };
        let algo = match algo {
            Some(a) => a,
            None if fits_everyone(default, size, &hosts, &areas, remote_atomics)? => default,
            None => BarrierAlgo::Dissemination,
        };
        let plan = checked_plan(algo, rank, size, &hosts, &areas, remote_atomics)?;
        Ok(BarrierState::flags(areas, plan, hosts, remote_atomics))
    }

    fn flags(
        areas: Vec<Area>,
        plan: BarrierPlan,
        hosts: Vec<usize>,
        remote_atomics: bool,
    ) -> BarrierState {
        BarrierState {
            mode: BarrierMode::Flags {
                areas,
                plan: Mutex::new(Arc::new(plan)),
                counter_epochs: AtomicU64::new(0),
                remote_atomics,
            },
            epoch: AtomicU64::new(0),
            hosts,
        }
    }

    fn messages(
        rank: usize,
        size: usize,
        slot_bytes: usize,
        hosts: Vec<usize>,
    ) -> Result<BarrierState> {
        let plan = plan::build(
            Collective::Barrier,
            DataType::U8,
            ReduceOp::Sum,
            0,
            &PlanParams {
                rank,
                nranks: size,
                slot_bytes,
                nsteps: 1,
            },
        )?;
        Ok(BarrierState {
            mode: BarrierMode::Messages {
                plan: Arc::new(plan),
            },
            epoch: AtomicU64::new(0),
            hosts,
        })
    }

    /// The algorithm barriers run (dissemination, as messages, when some
    /// peer is reached over tcp).
    fn algo(&self) -> BarrierAlgo {
        match &self.mode {
            BarrierMode::Flags { plan, .. } => plan.lock().unwrap_or_else(|p| p.into_inner()).algo,
            BarrierMode::Messages { .. } => BarrierAlgo::Dissemination,
        }
    }
}

/// A verbs peer's barrier area, when the connection has one.
fn remote_area(c: &Connection) -> Option<Arc<dyn RemoteArea>> {
    #[cfg(feature = "verbs")]
    if let Some(p) = c.rdma() {
        return Some(p.clone() as Arc<dyn RemoteArea>);
    }
    let _ = c;
    None
}

/// Whether every rank's plan of `algo` can run where areas are reached
/// like ours.
///
/// Decided alike on every rank: with all areas mapped, anything goes; with
/// a network between some ranks (links are symmetric: then every rank has
/// one), each rank is taken to read its own area alone, whatever its plan,
/// since a rank's own plan could fit where a peer's does not, and plans are
/// built for written-only memory ([`barrier::build_for_network`]).
/// `remote_atomics` (every pair of ranks talks over verbs and every device
/// executes atomics: the same on every rank, from the endpoints) lets a plan
/// fetch-add a remote counter.
fn fits_everyone(
    algo: BarrierAlgo,
    size: usize,
    hosts: &[usize],
    areas: &[Area],
    remote_atomics: bool,
) -> Result<bool> {
    if all_mapped(areas) {
        return Ok(true);
    }
    for r in 0..size {
        let plan = barrier::build_for_network(algo, r, size, hosts)?;
        if !FlagMemory::fits(&plan.steps, |q| q == r, remote_atomics) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// True when every rank's area is mapped here (no network between ranks).
fn all_mapped(areas: &[Area]) -> bool {
    areas.iter().all(|a| matches!(a, Area::Mapped(_)))
}

/// This rank's plan of `algo`, refused when some rank's plan cannot run
/// over these areas.
fn checked_plan(
    algo: BarrierAlgo,
    rank: usize,
    size: usize,
    hosts: &[usize],
    areas: &[Area],
    remote_atomics: bool,
) -> Result<BarrierPlan> {
    if all_mapped(areas) {
        return barrier::build(algo, rank, size, hosts);
    }
    if !fits_everyone(algo, size, hosts, areas, remote_atomics)? {
        return Err(Error::Unavailable(format!(
            "barrier algorithm {algo}: some ranks are reached over verbs, whose flag memory can only be written, and this algorithm reads another rank's words{}",
            if algo == BarrierAlgo::CentralCounter {
                " (the central counter needs every pair of ranks on verbs and every device with RDMA atomics)"
            } else {
                ""
            }
        )));
    }
    barrier::build_for_network(algo, rank, size, hosts)
}

/// Presents the central counter as if every earlier barrier had used it, so
/// that switching algorithms between barriers keeps the counter's target
/// (`epoch × (n − 1)`) right. Only the root reads its counter.
struct CounterView<'a> {
    inner: &'a FlagMemory<'a>,
    /// `(epoch − 1 − earlier central-counter barriers) × (n − 1)`.
    bias: u64,
}

impl BarrierMemory for CounterView<'_> {
    fn fetch_add_counter(&self, owner: usize, v: u64) {
        self.inner.fetch_add_counter(owner, v)
    }
    fn store_flag(&self, owner: usize, src: usize, v: u64) {
        self.inner.store_flag(owner, src, v)
    }
    fn store_release(&self, owner: usize, v: u64) {
        self.inner.store_release(owner, v)
    }
    fn load_counter(&self, owner: usize) -> u64 {
        self.inner.load_counter(owner) + self.bias
    }
    fn load_flag(&self, owner: usize, src: usize) -> u64 {
        self.inner.load_flag(owner, src)
    }
    fn load_release(&self, owner: usize) -> u64 {
        self.inner.load_release(owner)
    }
    fn wait(&self, on: &WaitFor, ready: &dyn Fn() -> bool) -> Result<()> {
        self.inner.wait(on, ready)
    }
}

impl CommInner {
    /// Runs one barrier (call under a ticket).
    pub(crate) fn run_barrier(&self, ticket: u64) -> Result<()> {
        let state = &self.barrier;
        let epoch = state.epoch.fetch_add(1, Ordering::Relaxed) + 1;
        let (areas, plan, counter_epochs) = match &state.mode {
            BarrierMode::Messages { plan } => {
                let binding = Binding::Separate {
                    send: None,
                    recv: None,
                };
                return self.run_plan(plan, &binding, ticket);
            }
            BarrierMode::Flags {
                areas,
                plan,
                counter_epochs,
                ..
            } => (
                areas,
                plan.lock().unwrap_or_else(|p| p.into_inner()).clone(),
                counter_epochs,
            ),
        };
        let earlier_counter = if plan.uses_counter() {
            counter_epochs.fetch_add(1, Ordering::Relaxed)
        } else {
            counter_epochs.load(Ordering::Relaxed)
        };
        let mem = FlagMemory::new(areas, self.policy());
        let view = CounterView {
            inner: &mem,
            bias: (epoch - 1 - earlier_counter) * (self.size as u64 - 1),
        };
        let _span = tracing::trace_span!("barrier", epoch, algo = plan.algo.name()).entered();
        barrier::run(&plan, epoch, &view).map_err(|e| match e {
            Error::Aborted(what) => self.wait_error(
                WaitError::Aborted,
                &format!("barrier #{ticket}"),
                what,
                None,
            ),
            other => other,
        })
    }
}

impl Communicator {
    /// Stream-ordered barrier: work enqueued after it, on any rank, starts
    /// only once every rank's stream has reached its barrier.
    ///
    /// # Stream semantics
    /// Enqueued, not complete, on return.
    ///
    /// # Graph capture
    /// Capturable; each replay is a new barrier (a fresh epoch). With
    /// [`Progress::Proxy`](crate::config::Progress) the stream waits on a
    /// fixed release doorbell that the proxy rings.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// # streamcomm::testing::on_two_ranks(|comm, stream| {
    /// // On each of two ranks (`comm.rank()` is 0 or 1):
    /// comm.barrier(&stream)?; // enqueued
    /// stream.synchronize()?; // both ranks' streams have reached it
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// The stored error if the communicator has failed.
    pub fn barrier(&self, stream: &HostStream) -> Result<()> {
        self.inner.failure.check()?;
        stream.enqueue(barrier_task(&self.inner))
    }

    /// Blocks the calling thread until every rank has called `barrier_host`
    /// (in issue order with this communicator's stream operations). The
    /// calling thread runs the algorithm itself: no thread hand-off.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// # streamcomm::testing::on_two_ranks(|comm, stream| {
    /// // On each of two ranks (`comm.rank()` is 0 or 1):
    /// comm.barrier_host()?; // returns once both ranks have called it
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Timeout`] / [`Error::RemoteFailed`] / [`Error::Aborted`].
    pub fn barrier_host(&self) -> Result<()> {
        let ticket = self.inner.turns.take();
        self.inner
            .run_ticketed(ticket, JobMode::Run, "barrier_host", |c| {
                c.run_barrier(ticket)
            })
    }

    /// The barrier algorithm in use. `Display` gives its name with its
    /// parameters (`tree:4`), which `STREAMCOMM_BARRIER_ALGO` takes.
    ///
    /// When some peer is reached over tcp, barriers run
    /// [`BarrierAlgo::Dissemination`] with its flags sent as messages
    /// through the slot rings ([`Communicator::transport_to`] tells which
    /// peers), and [`Communicator::set_barrier_algo`] is refused.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    /// use streamcomm::barrier::BarrierAlgo;
    /// let comm = Communicator::init(&UniqueId::new()?, 0, 1)?;
    /// let algo: BarrierAlgo = comm.barrier_algo();
    /// println!("barriers run {algo}"); // e.g. `dissemination`
    /// assert!(BarrierAlgo::parse(&algo.to_string()).is_ok());
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn barrier_algo(&self) -> BarrierAlgo {
        self.inner.barrier.algo()
    }

    /// Switches the barrier algorithm for barriers issued after this call.
    ///
    /// Collective: every rank must call it at the same point of its sequence
    /// of operations. It waits for earlier operations to finish (it takes its
    /// turn like a barrier), so it is ordered with them.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// # streamcomm::testing::on_two_ranks(|comm, stream| {
    /// // On each of two ranks (`comm.rank()` is 0 or 1):
    /// use streamcomm::barrier::BarrierAlgo;
    /// comm.set_barrier_algo(BarrierAlgo::CentralFlags)?; // on every rank, at the same point
    /// assert_eq!(comm.barrier_algo(), BarrierAlgo::CentralFlags);
    /// comm.barrier_host()?;
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an unusable algorithm (e.g. fan-out 1);
    /// [`Error::Unavailable`] when some peer is reached over tcp (flag
    /// algorithms need shared memory or verbs; such communicators use
    /// message dissemination), or for the central counter when some peer is
    /// reached over verbs (its words would have to be read remotely).
    pub fn set_barrier_algo(&self, algo: BarrierAlgo) -> Result<()> {
        let inner = &self.inner;
        let BarrierMode::Flags {
            plan: current,
            areas,
            remote_atomics,
            ..
        } = &inner.barrier.mode
        else {
            return Err(Error::Unavailable(format!(
                "barrier algorithm {algo}: some peers are reached over tcp, where barriers use message dissemination"
            )));
        };
        let plan = checked_plan(
            algo,
            inner.rank,
            inner.size,
            &inner.barrier.hosts,
            areas,
            *remote_atomics,
        )?;
        let ticket = inner.turns.take();
        inner.run_ticketed(ticket, JobMode::Run, "set_barrier_algo", |_| {
            *current.lock().unwrap_or_else(|p| p.into_inner()) = Arc::new(plan);
            Ok(())
        })
    }
}
