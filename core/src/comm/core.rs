//! The communicator's core: its place, connections, turns, failure record,
//! progress engine and wait policy. Its fields are private: barrier,
//! point-to-point and recovery (see [`super::inner::CommInner`], which
//! composes them) reach it through the methods here, never its fields.
//!
//! `Core` holds sub-structs (connections, turns, error state, proxy
//! handle), never transport or algorithm details. Plans and groups run on
//! it through the one executor (`comm::exec`), on whichever thread runs
//! the stream (or calls a host-blocking form): shared memory is a direct
//! transport and needs no proxy on its data path.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::comm::failure::{FailureState, Learned};
use crate::comm::plan_cache::{CallKey, PlanCache};
use crate::comm::turns::Turns;
use crate::config::Config;
use crate::engine::Engine;
use crate::host::JobMode;
use crate::plan::{Plan, PlanParams, signature};
use crate::transport::fault::FaultInjector;
use crate::transport::ring::RingError;
use crate::transport::{Connection, Segment};
use crate::tuning::Selector;
use crate::wait::{WaitError, WaitPolicy};
use crate::{Error, Result};
use streamcomm_types::MismatchNote;

/// The sleep hook of waits when some peer is reached over a proxied
/// transport, verbs or tcp (see [`Core::policy`]): a waiter about to
/// sleep wakes the engine, which then arms for what the waiter no longer
/// polls itself (every verbs completion, input on every tcp socket).
fn proxy_sleep_hook(
    engine: &Engine,
    peers: &[Option<Connection>],
) -> Option<Box<dyn Fn() + Send + Sync>> {
    let proxied = peers.iter().flatten().any(Connection::proxied);
    let kick = engine.handle().kick().clone();
    proxied.then(|| Box::new(move || kick.kick()) as Box<dyn Fn() + Send + Sync>)
}

/// The error of asking for a connection to `peer` that this rank does not
/// have (itself, or a rank out of range).
#[cold]
pub(crate) fn no_connection(peer: usize) -> Error {
    Error::InvalidUsage(format!("no connection to rank {peer}"))
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

/// The state every part of a communicator shares: see the module docs.
pub(crate) struct Core {
    rank: usize,
    size: usize,
    config: Config,
    topology: Topology,
    /// The progress engine (declared before `peers`: it is stopped, after
    /// flushing what the streams staged, before the connections go).
    engine: Engine,
    /// What a waiter calls before it sleeps when some peer is reached over
    /// verbs or tcp: it wakes the engine, which then asks the CQs for an
    /// event at every completion (see `transport::verbs::source`) and polls
    /// the sockets for input (see `transport::tcp::source`).
    proxy_sleep: Option<Box<dyn Fn() + Send + Sync>>,
    /// `peers[p]` connects to rank `p` (`None` for ourselves).
    peers: Vec<Option<Connection>>,
    /// Our segment: inbound rings and the failure word peers raise.
    segment: Arc<Segment>,
    turns: Turns,
    spin: u32,
    /// Who failed, how, and who learned it: the one failure record.
    failure: Arc<FailureState>,
    /// Chooses each collective's algorithm (override or cost model).
    selector: Selector,
    /// The plans of recent calls, for the next call of the same shape.
    plans: PlanCache,
}

/// What [`Core::new`] is made of: everything creation made.
pub(crate) struct CoreParts {
    pub(crate) rank: usize,
    pub(crate) size: usize,
    pub(crate) config: Config,
    pub(crate) topology: Topology,
    pub(crate) engine: Engine,
    pub(crate) peers: Vec<Option<Connection>>,
    pub(crate) failure: Arc<FailureState>,
    pub(crate) segment: Arc<Segment>,
    pub(crate) spin: u32,
    pub(crate) faults: FaultInjector,
}

impl Core {
    pub(crate) fn new(parts: CoreParts) -> Core {
        let CoreParts {
            rank,
            size,
            config,
            topology,
            engine,
            mut peers,
            failure,
            segment,
            spin,
            faults,
        } = parts;
        let selector = Selector::new(&config, &topology.link_hosts);
        // Fault rules go where every slot passes: each connection's seam.
        faults.arm(&mut peers, &segment, config.timeout);
        Core {
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
            failure,
            selector,
            plans: PlanCache::default(),
        }
    }

    /// This rank.
    pub(crate) fn rank(&self) -> usize {
        self.rank
    }

    /// Ranks in the communicator.
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// This rank and the communicator's size, for a call that needs both.
    pub(crate) fn place(&self) -> (usize, usize) {
        (self.rank, self.size)
    }

    /// The configuration it was made with.
    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    /// Where its ranks live.
    pub(crate) fn topology(&self) -> &Topology {
        &self.topology
    }

    /// Its progress engine.
    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Every rank's connection, by rank (`None` for this rank).
    pub(crate) fn peers(&self) -> &[Option<Connection>] {
        &self.peers
    }

    /// This rank's segment.
    pub(crate) fn segment(&self) -> &Arc<Segment> {
        &self.segment
    }

    /// The issue order of its operations.
    pub(crate) fn turns(&self) -> &Turns {
        &self.turns
    }

    /// Spins before a wait yields.
    pub(crate) fn spin(&self) -> u32 {
        self.spin
    }

    /// The one failure record.
    pub(crate) fn failure(&self) -> &Arc<FailureState> {
        &self.failure
    }

    /// The algorithm chooser.
    pub(crate) fn selector(&self) -> &Selector {
        &self.selector
    }

    /// The wait policy for every wait of this communicator.
    pub(crate) fn policy(&self) -> WaitPolicy<'_> {
        let p = WaitPolicy::new(self.spin, self.config.timeout).with_abort(self.failure.word());
        match &self.proxy_sleep {
            Some(hook) => p.with_on_sleep(&**hook),
            None => p,
        }
    }

    /// The plan of one collective call, built for this rank (algorithm
    /// chosen by the selector) or kept from the last call of the same
    /// shape.
    ///
    /// # Errors
    /// As [`crate::plan::build_with`].
    pub(crate) fn plan(&self, shape: CallKey) -> Result<Arc<Plan>> {
        self.plans.get(shape, || {
            let CallKey {
                collective,
                dtype,
                op,
                count,
            } = shape;
            let algo = self.selector.choose(collective, count, dtype.size());
            crate::plan::build_with(collective, dtype, op, count, &self.plan_params(), algo)
        })
    }

    /// What this rank's plans are built for: its place and its rings.
    pub(crate) fn plan_params(&self) -> PlanParams {
        PlanParams {
            rank: self.rank,
            nranks: self.size,
            slot_bytes: self.config.slot_bytes(),
            nsteps: self.config.nsteps,
        }
    }

    /// The error of a slot from `peer` signed `theirs` where this rank's call
    /// is signed `ours`: the record is told to every rank at once, then the
    /// culprit is named from every record known (see `comm::mismatch`).
    pub(crate) fn mismatch(&self, what: &str, peer: usize, theirs: u64, ours: u64) -> Error {
        let note = MismatchNote {
            suspect: peer,
            suspect_sig: theirs,
            witness: self.rank,
            witness_sig: ours,
        };
        self.failure.mismatched(note);
        self.mismatch_error(what, Some(ours))
            .unwrap_or_else(|| signature::mismatch_error(what, self.rank, note, Some(ours), false))
    }

    /// Runs `f` in issue order under `ticket`, recording any failure.
    /// `what` names the call in an error (formatted only then).
    #[inline]
    pub(crate) fn run_ticketed(
        &self,
        ticket: u64,
        mode: JobMode,
        what: impl std::fmt::Display,
        f: impl FnOnce(&Core) -> Result<()>,
    ) -> Result<()> {
        let policy = self.policy();
        if let Err(w) = self.turns.wait(ticket, &policy) {
            let e = self.wait_error(
                w,
                &what.to_string(),
                "its turn on the communicator (an earlier operation has not finished)".into(),
                None,
            );
            self.failure.fail(&e, Learned::Call);
            return Err(e);
        }
        if crate::host::stream::on_worker_thread() {
            self.topology.core_binding.apply_here();
        }
        let result = match (mode, self.failure.error()) {
            (JobMode::Skip, _) => Ok(()),
            (JobMode::Run, Some(e)) => Err(e),
            (JobMode::Run, None) => f(self),
        };
        if let Err(e) = &result {
            self.failure.fail(e, Learned::Call);
        }
        self.turns.done(ticket);
        result
    }

    /// The connection to `peer`.
    ///
    /// # Errors
    /// [`Error::InvalidUsage`] for this rank itself or a rank out of range.
    pub(crate) fn connection(&self, peer: usize) -> Result<&Connection> {
        self.peers
            .get(peer)
            .and_then(|c| c.as_ref())
            .ok_or_else(|| no_connection(peer))
    }

    /// The error of a failed slot operation on `c` in the call `what`
    /// (signed `ours`, if a collective), which waited for `waiting_for`.
    pub(crate) fn ring_error(
        &self,
        e: RingError,
        what: &str,
        c: &Connection,
        waiting_for: &str,
        ours: Option<u64>,
    ) -> Error {
        match e {
            RingError::Wait(w) => self.wait_error_in_call(
                w,
                what,
                format!(
                    "{waiting_for} from rank {} over {}",
                    c.peer(),
                    c.transport()
                ),
                Some(c.peer()),
                ours,
            ),
            e => c.slot_error(e, what),
        }
    }

    /// Turns a failed wait into the error a user should see. A timeout
    /// waiting for `peer` is recorded as this communicator's failure
    /// blaming `peer`, so that the ranks it aborts name the rank that did
    /// not come, not the one that waited for it.
    pub(crate) fn wait_error(
        &self,
        w: WaitError,
        what: &str,
        waiting_for: String,
        peer: Option<usize>,
    ) -> Error {
        self.wait_error_in_call(w, what, waiting_for, peer, None)
    }

    /// [`Core::wait_error`] of a wait in a call signed `ours`: when
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
            WaitError::Timeout(d) => {
                let e = Error::Timeout {
                    op: what.to_string(),
                    what: waiting_for,
                    waited_ms: d.as_millis() as u64,
                };
                // A timeout waiting for a peer blames that peer in the
                // failure every other rank is told (the first record wins,
                // so the caller's own record of `e` changes nothing).
                if let Some(p) = peer {
                    self.failure.fail_blaming(&e, p, Learned::Call);
                }
                e
            }
            WaitError::Aborted => {
                let stored = self.failure.error();
                if let Some(e) = stored.as_ref().filter(|e| !matches!(e, Error::Mismatch(_))) {
                    return e.clone();
                }
                if let Some(e) = self.mismatch_error(what, ours) {
                    return e;
                }
                if let Some(e) = stored {
                    return e;
                }
                match self.failure.raised_by() {
                    Some(r) if r == self.rank => Error::Aborted(format!(
                        "{what}: the communicator was aborted, naming this rank as the one at fault (e.g. a call that did not match its peers', or peers that timed out waiting for it)"
                    )),
                    Some(r) => Error::RemoteFailed {
                        peer: r,
                        op: what.to_string(),
                        cause: "the communicator was aborted naming it as the rank at fault (it \
                                failed, or a peer timed out waiting for it)"
                            .into(),
                    },
                    None => {
                        Error::Aborted(format!("{what} (waiting for {waiting_for}, peer {peer:?})"))
                    }
                }
            }
        }
    }

    /// The communicator's failure, if it failed, or if a peer raised its
    /// failure word (recorded then): [`crate::Communicator::async_error`].
    pub(crate) fn async_error(&self) -> Option<Error> {
        let failure = self.failure();
        if let Some(e) = failure.error() {
            return Some(e);
        }
        if !failure.raised() {
            return None;
        }
        let e = self.wait_error(
            crate::wait::WaitError::Aborted,
            "communicator",
            "nothing (the rank was idle)".into(),
            None,
        );
        failure.fail(&e, Learned::FailureWord);
        failure.error()
    }
}

/// True when `peer` shares memory with this rank and left cleanly.
pub(crate) fn departed(comm: &Core, peer: usize) -> bool {
    comm.connection(peer)
        .ok()
        .and_then(|c| c.peer_segment())
        .is_some_and(|s| s.header().departed.load(Ordering::Acquire) == 1)
}
