//! The communicator's shared state and the code that executes plans on it.
//!
//! `CommInner` holds sub-structs (connections, turns, error state, proxy
//! handle), never transport or algorithm details. Executing a plan is a loop
//! over its steps: wait for the input slot and the output credit, lock the
//! buffers for the duration of one step, apply it, publish. The thread doing
//! this is whoever runs the stream (or calls `barrier_host`): shared memory is
//! a direct transport and needs no proxy on its data path.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use crate::comm::barrier::BarrierState;
use crate::comm::buffer::Binding;
use crate::comm::p2p::P2pState;
use crate::comm::plan_cache::PlanCache;
use crate::comm::recovery::RecoveryPoint;
use crate::comm::turns::Turns;
use crate::config::Config;
use crate::engine::{Engine, FailureSink};
use crate::error::MismatchNote;
use crate::host::JobMode;
use crate::plan::{Buffers, Collective, Plan, PlanParams, Step, apply_step, signature};
use crate::transport::fault::FaultInjector;
use crate::transport::ring::RingError;
use crate::transport::{Connection, Segment, raise_failure, record_mismatch};
use crate::tuning::Selector;
use crate::wait::{WaitError, WaitPolicy};
use crate::{DataType, Error, ReduceOp, Result};

/// The sleep hook of waits when some peer is reached over a proxied
/// transport, verbs or tcp (see [`CommInner::policy`]): a waiter about to
/// sleep wakes the engine, which then arms for what the waiter no longer
/// polls itself (every verbs completion, input on every tcp socket).
fn proxy_sleep_hook(
    engine: &Engine,
    peers: &[Option<Connection>],
) -> Option<Box<dyn Fn() + Send + Sync>> {
    let proxied = peers
        .iter()
        .flatten()
        .any(|c| c.kind() != crate::config::Transport::Shm);
    let kick = engine.handle().kick().clone();
    proxied.then(|| Box::new(move || kick.kick()) as Box<dyn Fn() + Send + Sync>)
}

/// Where this communicator's ranks live.
#[derive(Clone, Debug)]
pub(crate) struct Topology {
    /// Host identity of every rank (after `STREAMCOMM_HOSTS_OVERRIDE`).
    pub hosts: Vec<String>,
    /// Host identity of every rank as the links see it: the real one (the
    /// override pretends for the barriers' topology only; the links
    /// between ranks of one machine stay shared memory), which the cost
    /// model prices.
    pub link_hosts: Vec<String>,
    /// Number of distinct hosts.
    pub nhosts: usize,
    /// Each rank's tcp listening address, if any.
    pub tcp_addrs: Vec<Option<std::net::SocketAddr>>,
    /// Ranks sharing this rank's host.
    pub local_ranks: usize,
    /// The core this rank's stream threads run on, if bound.
    pub core_binding: super::affinity::CoreBinding,
}

/// State shared by the communicator handle, its stream tasks and its
/// progress engine.
pub(crate) struct CommInner {
    pub rank: usize,
    pub size: usize,
    pub config: Config,
    pub topology: Topology,
    /// The progress engine (declared before `peers`: it is stopped, after
    /// flushing what the streams staged, before the connections go).
    pub engine: Engine,
    /// What a waiter calls before it sleeps when some peer is reached over
    /// verbs or tcp: it wakes the engine, which then asks the CQs for an
    /// event at every completion (see `transport::verbs::source`) and polls
    /// the sockets for input (see `transport::tcp::source`).
    proxy_sleep: Option<Box<dyn Fn() + Send + Sync>>,
    /// `peers[p]` connects to rank `p` (`None` for ourselves).
    pub peers: Vec<Option<Connection>>,
    /// Barrier algorithm, epochs and flag areas (declared, so dropped,
    /// before the segment whose memory our own area is).
    pub barrier: BarrierState,
    /// Our segment: inbound rings and the failure word peers raise.
    pub segment: Arc<Segment>,
    pub turns: Turns,
    pub spin: u32,
    error: Arc<Mutex<Option<Error>>>,
    /// Chooses each collective's algorithm (override or cost model).
    pub selector: Selector,
    /// The plans of recent calls, for the next call of the same shape.
    pub plans: PlanCache,
    /// Point-to-point rendezvous numbering and byte counters.
    pub p2p: P2pState,
    /// Fault-injection hooks on every slot published or consumed (an empty
    /// type unless built with `fault-injection`).
    faults: FaultInjector,
    /// Where the survivors meet to shrink this communicator.
    pub recovery: RecoveryPoint,
}

impl CommInner {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        rank: usize,
        size: usize,
        config: Config,
        topology: Topology,
        engine: Engine,
        peers: Vec<Option<Connection>>,
        error: Arc<Mutex<Option<Error>>>,
        segment: Arc<Segment>,
        spin: u32,
        barrier: BarrierState,
        faults: FaultInjector,
        recovery: RecoveryPoint,
    ) -> CommInner {
        let selector = Selector::new(&config, &topology.link_hosts);
        CommInner {
            rank,
            size,
            config,
            topology,
            proxy_sleep: proxy_sleep_hook(&engine, &peers),
            engine,
            peers,
            segment,
            turns: Turns::default(),
            spin,
            error,
            barrier,
            selector,
            plans: PlanCache::default(),
            p2p: P2pState::new(size),
            faults,
            recovery,
        }
    }

    /// The wait policy for every wait of this communicator.
    pub(crate) fn policy(&self) -> WaitPolicy<'_> {
        let p = WaitPolicy::new(self.spin, self.config.timeout)
            .with_abort(&self.segment.header().failed_by);
        match &self.proxy_sleep {
            Some(hook) => p.with_on_sleep(&**hook),
            None => p,
        }
    }

    /// The plan of one collective call, built for this rank (or kept
    /// from the last call of the same shape).
    ///
    /// # Errors
    /// As [`crate::plan::build_with`].
    pub(crate) fn plan(
        &self,
        collective: Collective,
        dtype: DataType,
        op: ReduceOp,
        count: usize,
    ) -> Result<Arc<Plan>> {
        let params = PlanParams {
            rank: self.rank,
            nranks: self.size,
            slot_bytes: self.config.slot_bytes(),
            nsteps: self.config.nsteps,
        };
        self.plans
            .plan(&self.selector, &params, collective, dtype, op, count)
    }

    /// True once this communicator's failure word is raised: by this
    /// rank's failure (after its error is stored), a peer's, or an abort.
    /// One load, where [`CommInner::error`] takes a lock: for fast paths,
    /// which then leave the error to the full path.
    #[inline]
    pub(crate) fn failure_raised(&self) -> bool {
        self.segment.header().failed_by.load(Ordering::Acquire) != 0
    }

    /// The stored error, if the communicator has failed.
    pub(crate) fn error(&self) -> Option<Error> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Stores the first error and tells every peer, so that their waits end
    /// now instead of at their timeout.
    pub(crate) fn fail(&self, e: &Error) {
        {
            let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
            if slot.is_none() {
                tracing::warn!(rank = self.rank, error = %e, "communicator failed");
                *slot = Some(e.clone());
            }
        }
        // Peers are told who is at fault, not who noticed.
        self.tell(e.culprit().unwrap_or(self.rank), note_to_tell(e));
    }

    /// Tells every peer (and this rank's own waits) that `culprit` made the
    /// communicator fail, with the mismatch record `note` (written before
    /// the failure words are raised, so that a rank woken by one finds it).
    fn tell(&self, culprit: usize, note: Option<MismatchNote>) {
        let peers = || self.peers.iter().flatten().filter_map(|c| c.peer_segment());
        if let Some(note) = note {
            record_mismatch(self.segment.header(), note);
            for seg in peers() {
                record_mismatch(seg.header(), note);
            }
        }
        raise_failure(self.segment.header(), culprit);
        for seg in peers() {
            raise_failure(seg.header(), culprit);
        }
        self.engine.handle().notify_abort(culprit, note);
    }

    /// The error of a slot from `peer` signed `theirs` where this rank's call
    /// is signed `ours`: the record is told to every rank at once, then the
    /// culprit is named from every record known (see `comm::mismatch`).
    fn mismatch(&self, what: &str, peer: usize, theirs: u64, ours: u64) -> Error {
        let note = MismatchNote {
            suspect: peer,
            suspect_sig: theirs,
            witness: self.rank,
            witness_sig: ours,
        };
        self.tell(peer, Some(note));
        self.mismatch_error(what, Some(ours))
            .unwrap_or_else(|| signature::mismatch_error(what, self.rank, note, Some(ours), false))
    }

    /// Runs `f` in issue order under `ticket`, recording any failure.
    /// `what` names the call in an error (formatted only then).
    pub(crate) fn run_ticketed(
        &self,
        ticket: u64,
        mode: JobMode,
        what: impl std::fmt::Display,
        f: impl FnOnce(&CommInner) -> Result<()>,
    ) -> Result<()> {
        let policy = self.policy();
        if let Err(w) = self.turns.wait(ticket, &policy) {
            let e = self.wait_error(
                w,
                &what.to_string(),
                "its turn on the communicator (an earlier operation has not finished)".into(),
                None,
            );
            self.fail(&e);
            return Err(e);
        }
        if crate::host::stream::on_worker_thread() {
            self.topology.core_binding.apply_here();
        }
        let result = match (mode, self.error()) {
            (JobMode::Skip, _) => Ok(()),
            (JobMode::Run, Some(e)) => Err(e),
            (JobMode::Run, None) => f(self),
        };
        if let Err(e) = &result {
            self.fail(e);
        }
        self.turns.done(ticket);
        result
    }

    /// Executes every step of `plan` on `binding`.
    pub(crate) fn run_plan(&self, plan: &Plan, binding: &Binding, seq: u64) -> Result<()> {
        let _span = tracing::trace_span!("plan", op = plan.collective.name(), seq).entered();
        // Working memory lives for the whole plan (see `Plan::work_count`).
        let mut work = Binding::work_buffer(plan);
        let sig = signature::of(plan);
        for step in &plan.steps {
            self.run_step(step, seq, sig, |slot_in, slot_out| {
                if step.src.is_none() && step.dst.is_none() {
                    let mut none = Buffers::Separate {
                        send: &[],
                        recv: &mut [],
                    };
                    apply_step(plan, step, &mut none, slot_in, slot_out)
                } else {
                    binding.with_buffers(plan, &mut work, |bufs| {
                        apply_step(plan, step, bufs, slot_in, slot_out)
                    })
                }
            })?;
        }
        Ok(())
    }

    /// Executes every step of `plan` on the caller's own memory, `bufs`:
    /// the host-blocking collectives' path, with no buffer handle, lock or
    /// working memory between the call and its slices (`plan` must need
    /// none: [`Plan::work_count`] is for calls without a receive buffer).
    pub(crate) fn run_plan_on(&self, plan: &Plan, bufs: &mut Buffers<'_>, seq: u64) -> Result<()> {
        self.run_plan_signed(plan, signature::of(plan), bufs, seq)
    }

    /// [`CommInner::run_plan_on`] with the slots signed `sig` instead of
    /// the plan's own signature: for a call built from another's plan (the
    /// split's exchange is an all-gather), so that a peer making that other
    /// call is told apart.
    pub(crate) fn run_plan_signed(
        &self,
        plan: &Plan,
        sig: u64,
        bufs: &mut Buffers<'_>,
        seq: u64,
    ) -> Result<()> {
        let _span = tracing::trace_span!("plan", op = plan.collective.name(), seq).entered();
        for step in &plan.steps {
            self.run_step(step, seq, sig, |slot_in, slot_out| {
                apply_step(plan, step, bufs, slot_in, slot_out)
            })?;
        }
        Ok(())
    }

    /// The connection to `peer`.
    ///
    /// # Errors
    /// [`Error::InvalidUsage`] for this rank itself or a rank out of range.
    pub(crate) fn connection(&self, peer: usize) -> Result<&Connection> {
        self.peers
            .get(peer)
            .and_then(|c| c.as_ref())
            .ok_or_else(|| Error::InvalidUsage(format!("no connection to rank {peer}")))
    }

    /// Runs one step of a call signed `sig`: waits for its input slot and
    /// output credit, has `apply` combine them with the call's memory, and
    /// publishes.
    fn run_step(
        &self,
        step: &Step,
        seq: u64,
        sig: u64,
        apply: impl FnOnce(Option<&[u8]>, Option<&mut [u8]>) -> Result<usize>,
    ) -> Result<()> {
        let policy = self.policy();
        let what = || format!("{} #{seq}", signature::call(sig).op);
        let slot_in = match step.recv_from {
            Some(p) => {
                let c = self.connection(p)?;
                self.faults.before_recv(p, c, &policy)?;
                let slot = c.acquire_recv(&policy).map_err(|e| {
                    self.ring_error(e, &what(), p, c.transport(), "data", Some(sig))
                })?;
                let theirs = c.recv.head_sig();
                if theirs != sig {
                    return Err(self.mismatch(&what(), p, theirs, sig));
                }
                Some(slot)
            }
            None => None,
        };
        let slot_out = match step.send_to {
            Some(p) => {
                let c = self.connection(p)?;
                Some(c.acquire_send(&policy).map_err(|e| {
                    self.ring_error(
                        e,
                        &what(),
                        p,
                        c.transport(),
                        "a free slot (credit)",
                        Some(sig),
                    )
                })?)
            }
            None => None,
        };
        let written = apply(slot_in, slot_out)?;
        if let Some(p) = step.send_to {
            let c = self.connection(p)?;
            self.faults.commit_send(p, c, written, sig, &policy, |e| {
                self.ring_error(
                    e,
                    &what(),
                    p,
                    c.transport(),
                    "a free slot (credit)",
                    Some(sig),
                )
            })?;
            c.after_step();
        }
        if let Some(p) = step.recv_from {
            let c = self.connection(p)?;
            c.recv.release_recv();
            c.after_step();
        }
        Ok(())
    }

    fn ring_error(
        &self,
        e: RingError,
        what: &str,
        peer: usize,
        transport: &'static str,
        waiting_for: &str,
        ours: Option<u64>,
    ) -> Error {
        match e {
            RingError::Wait(w) => self.wait_error_in_call(
                w,
                what,
                format!("{waiting_for} from rank {peer} over {transport}"),
                Some(peer),
                ours,
            ),
            RingError::BadLength(len) => Error::Transport {
                transport,
                peer,
                cause: format!("slot header claims {len} bytes (corrupted ring)"),
            },
            RingError::OutOfOrder { expected, got } => Error::Transport {
                transport,
                peer,
                cause: format!(
                    "{what}: slot {got} arrived where slot {expected} was due ({})",
                    if got > expected {
                        "a slot was lost"
                    } else {
                        "a slot came twice"
                    }
                ),
            },
        }
    }

    /// Turns a failed wait into the error a user should see.
    pub(crate) fn wait_error(
        &self,
        w: WaitError,
        what: &str,
        waiting_for: String,
        peer: Option<usize>,
    ) -> Error {
        self.wait_error_in_call(w, what, waiting_for, peer, None)
    }

    /// [`CommInner::wait_error`] of a wait in a call signed `ours`: when
    /// ranks' calls differed, the error names the culprit's call, its
    /// witness's, and this one.
    pub(crate) fn wait_error_in_call(
        &self,
        w: WaitError,
        what: &str,
        waiting_for: String,
        peer: Option<usize>,
        ours: Option<u64>,
    ) -> Error {
        match w {
            WaitError::Timeout(d) => Error::Timeout {
                op: what.to_string(),
                what: waiting_for,
                waited_ms: d.as_millis() as u64,
            },
            WaitError::Aborted => {
                let stored = self.error();
                if let Some(e) = stored.as_ref().filter(|e| !matches!(e, Error::Mismatch(_))) {
                    return e.clone();
                }
                if let Some(e) = self.mismatch_error(what, ours) {
                    return e;
                }
                if let Some(e) = stored {
                    return e;
                }
                let by = self.segment.header().failed_by.load(Ordering::Acquire);
                match by.checked_sub(1) {
                    Some(r) if r as usize == self.rank => Error::Aborted(format!(
                        "{what}: the communicator was aborted, naming this rank as the one at fault (e.g. a call that did not match its peers')"
                    )),
                    Some(r) => Error::RemoteFailed {
                        peer: r as usize,
                        op: what.to_string(),
                        cause: "it failed, and the communicator was aborted".into(),
                    },
                    None => {
                        Error::Aborted(format!("{what} (waiting for {waiting_for}, peer {peer:?})"))
                    }
                }
            }
        }
    }
}

impl Drop for CommInner {
    fn drop(&mut self) {
        // Leaving cleanly: peers still finishing their last operation must
        // not take this process's exit for a crash (their watchdogs check).
        if !std::thread::panicking() && self.error().is_none() {
            self.segment.header().departed.store(1, Ordering::Release);
        }
    }
}

/// True when `peer` shares memory with this rank and left cleanly.
pub(crate) fn departed(comm: &CommInner, peer: usize) -> bool {
    comm.connection(peer)
        .ok()
        .and_then(|c| c.peer_segment())
        .is_some_and(|s| s.header().departed.load(Ordering::Acquire) == 1)
}

/// Where the progress engine reports a failure: the communicator's error
/// slot and the failure words of every segment this rank can reach.
pub(crate) struct CommFailure {
    pub rank: usize,
    pub error: Arc<Mutex<Option<Error>>>,
    pub segments: Vec<Arc<Segment>>,
}

impl CommFailure {
    /// The sink of `rank`, whose failures raise the failure word of its own
    /// `segment` and of every peer's segment in `peers`.
    pub(crate) fn new(rank: usize, segment: &Arc<Segment>, peers: &[Option<Connection>]) -> Self {
        let mut segments = vec![segment.clone()];
        segments.extend(
            peers
                .iter()
                .flatten()
                .filter_map(|c| c.peer_segment().cloned()),
        );
        CommFailure {
            rank,
            error: Arc::new(Mutex::new(None)),
            segments,
        }
    }
}

impl FailureSink for CommFailure {
    fn fail(&self, error: Error) {
        let culprit = error.culprit().unwrap_or(self.rank);
        if let Some(note) = error.mismatch_note() {
            // A peer's record (over tcp): every wait woken builds its own
            // error from the records, with its own call.
            for seg in &self.segments {
                record_mismatch(seg.header(), note);
            }
            for seg in &self.segments {
                raise_failure(seg.header(), culprit);
            }
            return;
        }
        {
            let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
            if slot.is_none() {
                tracing::warn!(rank = self.rank, error = %error, "communicator failed");
                *slot = Some(error);
            }
        }
        for seg in &self.segments {
            raise_failure(seg.header(), culprit);
        }
    }
}

/// The mismatch record this rank tells its peers for `e`: its own call
/// compared with the culprit's when it made one that differs (a third call
/// for the two ranks of the record it was woken by, which over tcp hear no
/// other), else the record `e` tells.
fn note_to_tell(e: &Error) -> Option<MismatchNote> {
    let note = e.mismatch_note()?;
    if let Error::Mismatch(m) = e {
        if let Some(ours) = m.ours.as_ref() {
            let outside = m.rank != m.culprit && m.rank != m.witness;
            if outside && ours.sig != m.culprit_call.sig {
                return Some(MismatchNote {
                    suspect: m.culprit,
                    suspect_sig: m.culprit_call.sig,
                    witness: m.rank,
                    witness_sig: ours.sig,
                });
            }
        }
    }
    Some(note)
}
