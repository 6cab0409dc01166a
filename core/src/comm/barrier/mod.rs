//! Barriers on a communicator: its two entry points, and the choice between
//! flags and messages.
//!
//! One implementation serves both entry points: [`Communicator::barrier`]
//! (stream-ordered, capturable) and [`Communicator::barrier_host`] (blocks the
//! calling thread). Both take a ticket, so they run in issue order with the
//! communicator's other operations, and both run the barrier of
//! [`crate::barrier`]: where every peer's barrier area is reached (its
//! shared-memory segment, or over verbs the same area written by RDMA), a
//! flag algorithm over the ranks' flag memory ([`FlagBarriers`], which
//! chooses the algorithm and runs it); communicators with tcp peers run
//! the dissemination barrier with its flags turned into messages through
//! the slot rings ([`plan::build`] for [`Collective::Barrier`]).

mod multicast_service;
mod task;

use std::sync::Arc;

use crate::barrier::area::{Area, BarrierArea};
use crate::barrier::{BarrierAlgo, FlagBarriers};
use crate::comm::Communicator;
use crate::comm::buffer::Binding;
use crate::comm::core::Core;
use crate::comm::exec;
use crate::host::{HostStream, JobMode};
use crate::plan::{self, Collective, Plan, PlanParams};
use crate::transport::Connection;
use crate::wait::WaitError;
use crate::{DataType, ReduceOp};
use crate::{Error, Result};
pub(crate) use multicast_service::MulticastService;
pub(crate) use task::barrier_task;

/// How a communicator's barriers run.
pub(crate) enum BarrierState {
    /// Every peer shares memory or is reached over verbs: a flag algorithm
    /// over the ranks' barrier areas.
    Flags(FlagBarriers),
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
    /// messages otherwise. `algo` is the requested algorithm, if any,
    /// `default` the one to run where it fits.
    ///
    /// # Errors
    /// As [`FlagBarriers::new`] (an algorithm that cannot run over these
    /// peers, bad arguments).
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
                Some(c) => match (c.peer_segment(), c.remote_area()) {
                    (Some(seg), _) => Some(Area::Mapped(Arc::new(seg.barrier_area(size)))),
                    (None, Some(r)) => Some(Area::Remote(r)),
                    (None, None) => None,
                },
            })
            .collect();
        match areas {
            Some(areas) => Ok(BarrierState::Flags(FlagBarriers::new(
                rank,
                areas,
                hosts,
                remote_atomics,
                algo,
                default,
            )?)),
            None => BarrierState::messages(rank, size, slot_bytes),
        }
    }

    fn messages(rank: usize, size: usize, slot_bytes: usize) -> Result<BarrierState> {
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
        Ok(BarrierState::Messages {
            plan: Arc::new(plan),
        })
    }

    /// The algorithm barriers run (dissemination, as messages, when some
    /// peer is reached over tcp).
    fn algo(&self) -> BarrierAlgo {
        match self {
            BarrierState::Flags(flags) => flags.algo(),
            BarrierState::Messages { .. } => BarrierAlgo::Dissemination,
        }
    }
}

/// The barrier part of a communicator: how its barriers run, over its
/// core (declared first, so dropped before the core whose segment holds
/// this rank's flag area).
pub(crate) struct Barriers {
    state: BarrierState,
    core: Arc<Core>,
}

impl Barriers {
    pub(crate) fn new(state: BarrierState, core: Arc<Core>) -> Barriers {
        Barriers { state, core }
    }

    /// The core the barriers run on.
    pub(crate) fn core(&self) -> &Arc<Core> {
        &self.core
    }

    /// The multicast barrier's counters (barriers, questions asked,
    /// arrivals re-sent), where its group was joined.
    pub(crate) fn multicast_stats(&self) -> Option<[u64; 3]> {
        let BarrierState::Flags(flags) = &self.state else {
            return None;
        };
        let s = flags.multicast()?.stats();
        Some([s.barriers, s.questions, s.resends])
    }

    /// Runs one barrier (call under a ticket). Inlined, with the flag
    /// interpreter, into each caller: the host-blocking barrier's
    /// instruction count is gated (`benches/icount-ceilings.txt`).
    #[inline]
    pub(crate) fn run(&self, ticket: u64) -> Result<()> {
        let core = &self.core;
        let flags = match &self.state {
            BarrierState::Flags(flags) => flags,
            BarrierState::Messages { plan } => {
                let binding = Binding::Separate {
                    send: None,
                    recv: None,
                };
                return exec::run_plan(core, plan, &binding, ticket);
            }
        };
        flags.run(core.policy()).map_err(|e| match e {
            Error::Aborted(what) => core.wait_error(
                WaitError::Aborted,
                &format!("barrier #{ticket}"),
                what,
                None,
            ),
            other => other,
        })
    }

    /// Runs one barrier in its turn, `ticket`.
    #[inline]
    pub(crate) fn run_ticketed(&self, ticket: u64, mode: JobMode, what: &str) -> Result<()> {
        self.core
            .run_ticketed(ticket, mode, what, |_| self.run(ticket))
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
        self.inner.core.failure().check()?;
        stream.enqueue(barrier_task(&self.inner.barrier))
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
        let ticket = self.inner.core.turns().take();
        self.inner
            .barrier
            .run_ticketed(ticket, JobMode::Run, "barrier_host")
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
        self.inner.barrier.state.algo()
    }

    /// Why barriers do not run the algorithm the default selection
    /// preferred, if they do not: the default prefers
    /// [`BarrierAlgo::Multicast`] for communicators of at least 4 ranks,
    /// one per host, every pair on verbs, and falls back to its flag
    /// algorithm where the multicast group cannot be joined or carries
    /// nothing (the reason names the rank that found it). `None` when the
    /// preferred algorithm runs, or nothing was preferred.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{bootstrap::UniqueId, Communicator};
    /// let comm = Communicator::init(&UniqueId::new()?, 0, 1)?;
    /// // One rank on one host: nothing to prefer, nothing fell back.
    /// assert_eq!(comm.barrier_fallback(), None);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn barrier_fallback(&self) -> Option<&str> {
        match &self.inner.barrier.state {
            BarrierState::Flags(flags) => flags.fallback(),
            BarrierState::Messages { .. } => None,
        }
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
    /// message dissemination), for the central counter when some peer is
    /// reached over verbs (its words would have to be read remotely), or
    /// for [`BarrierAlgo::Multicast`] when the communicator did not join a
    /// multicast group at creation (it joins one when
    /// `STREAMCOMM_BARRIER_ALGO=multicast` or the default prefers it), with
    /// the reason.
    pub fn set_barrier_algo(&self, algo: BarrierAlgo) -> Result<()> {
        let inner = &self.inner;
        let BarrierState::Flags(flags) = &inner.barrier.state else {
            return Err(Error::Unavailable(format!(
                "barrier algorithm {algo}: some peers are reached over tcp, where barriers use message dissemination"
            )));
        };
        let running = flags.running_for(algo)?;
        let ticket = inner.core.turns().take();
        inner
            .core
            .run_ticketed(ticket, JobMode::Run, "set_barrier_algo", |_| {
                flags.install(running);
                Ok(())
            })
    }
}
