//! Barriers on a communicator: which algorithm, its epochs, and the two entry points.
//!
//! One implementation serves both entry points: [`Communicator::barrier`]
//! (stream-ordered, capturable) and [`Communicator::barrier_host`] (blocks the
//! calling thread). Both take a ticket, so they run in issue order with the
//! communicator's other operations, and both run the same barrier plan
//! ([`crate::barrier`]) over the flag memory of the ranks' shared-memory
//! segments, with an epoch that advances once per barrier on every rank.
//!
//! # Default algorithm
//! [`default_barrier_algo`] picks, for ranks on one host: dissemination up to
//! the number of cores (every rank runs, so ⌈log2 N⌉ rounds of flag writes is
//! the shortest path), and the central counter when ranks outnumber cores
//! (then every extra hand-off is a context switch, and the central counter
//! has the fewest: one arrival per rank, one release). Ranks on several hosts
//! use the hierarchical algorithm. The README has the measurements.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::barrier::{self, BarrierAlgo, BarrierMemory, BarrierPlan, BarrierStep, Inter, WaitFor};
use crate::comm::buffer::Binding;
use crate::comm::inner::CommInner;
use crate::comm::task::barrier_task;
use crate::comm::Communicator;
use crate::host::{HostStream, JobMode};
use crate::plan::{self, Collective, Plan, PlanParams};
use crate::transport::barrier_area::{BarrierArea, ShmBarrierMemory};
use crate::wait::{available_cores, WaitError};
use crate::{DataType, ReduceOp};
use crate::{Error, Result};

/// The default barrier algorithm for `nranks` ranks on `nhosts` hosts, with
/// `local_ranks` sharing this host (see the module docs for the rule).
pub fn default_barrier_algo(nranks: usize, nhosts: usize, local_ranks: usize) -> BarrierAlgo {
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
    /// Every peer shares memory: a flag algorithm over the segments' areas.
    Flags {
        /// `areas[r]`: rank r's barrier area (ours included).
        areas: Vec<BarrierArea>,
        /// The plan in use (replaced, in issue order, by `set_barrier_algo`).
        plan: Mutex<Arc<BarrierPlan>>,
        /// Of the barriers so far, how many used the central counter.
        counter_epochs: AtomicU64,
    },
    /// Some peer is reached over tcp: dissemination with zero-byte messages
    /// through the slot rings (works over any transport).
    Messages {
        /// The message plan.
        plan: Arc<Plan>,
    },
}

impl BarrierState {
    pub(crate) fn flags(
        areas: Vec<BarrierArea>,
        plan: BarrierPlan,
        hosts: Vec<usize>,
    ) -> BarrierState {
        BarrierState {
            mode: BarrierMode::Flags {
                areas,
                plan: Mutex::new(Arc::new(plan)),
                counter_epochs: AtomicU64::new(0),
            },
            epoch: AtomicU64::new(0),
            hosts,
        }
    }

    pub(crate) fn messages(
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

    fn algo_name(&self) -> String {
        match &self.mode {
            BarrierMode::Flags { plan, .. } => plan
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .algo
                .to_string(),
            BarrierMode::Messages { .. } => "dissemination (messages)".to_string(),
        }
    }
}

/// Presents the central counter as if every earlier barrier had used it, so
/// that switching algorithms between barriers keeps the counter's target
/// (`epoch × (n − 1)`) right. Only the root reads its counter.
struct CounterView<'a> {
    inner: &'a ShmBarrierMemory<'a>,
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
            } => (
                areas,
                plan.lock().unwrap_or_else(|p| p.into_inner()).clone(),
                counter_epochs,
            ),
        };
        let uses_counter = plan.steps.iter().any(|s| {
            matches!(
                s,
                BarrierStep::FetchAdd { .. } | BarrierStep::WaitCounter { .. }
            )
        });
        let earlier_counter = if uses_counter {
            counter_epochs.fetch_add(1, Ordering::Relaxed)
        } else {
            counter_epochs.load(Ordering::Relaxed)
        };
        let mem = ShmBarrierMemory {
            areas,
            policy: self.policy(),
        };
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
    /// # Errors
    /// The stored error if the communicator has failed.
    pub fn barrier(&self, stream: &HostStream) -> Result<()> {
        if let Some(e) = self.inner.error() {
            return Err(e);
        }
        stream.enqueue(barrier_task(&self.inner))
    }

    /// Blocks the calling thread until every rank has called `barrier_host`
    /// (in issue order with this communicator's stream operations). The
    /// calling thread runs the algorithm itself: no thread hand-off.
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

    /// The barrier algorithm in use, by name (`dissemination (messages)`
    /// when some peer is reached over tcp).
    pub fn barrier_algo(&self) -> String {
        self.inner.barrier.algo_name()
    }

    /// Switches the barrier algorithm for barriers issued after this call.
    ///
    /// Collective: every rank must call it at the same point of its sequence
    /// of operations. It waits for earlier operations to finish (it takes its
    /// turn like a barrier), so it is ordered with them.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an unusable algorithm (e.g. fan-out 1);
    /// [`Error::Unavailable`] when some peer is reached over tcp (flag
    /// algorithms need shared memory; such communicators use message
    /// dissemination).
    pub fn set_barrier_algo(&self, algo: BarrierAlgo) -> Result<()> {
        let inner = &self.inner;
        let BarrierMode::Flags { plan: current, .. } = &inner.barrier.mode else {
            return Err(Error::Unavailable(format!(
                "barrier algorithm {algo}: some peers are reached over tcp, where barriers use message dissemination"
            )));
        };
        let plan = barrier::build(algo, inner.rank, inner.size, &inner.barrier.hosts)?;
        let ticket = inner.turns.take();
        inner.run_ticketed(ticket, JobMode::Run, "set_barrier_algo", |_| {
            *current.lock().unwrap_or_else(|p| p.into_inner()) = Arc::new(plan);
            Ok(())
        })
    }
}
