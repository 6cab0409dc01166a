//! The progress engine: the one background thread of a communicator.
//!
//! NCCL runs one proxy thread per device that serves every transport; tokio's
//! I/O driver is one loop that owns the event sources while callers hold a
//! cloneable handle. The engine is both: an [`Engine`] per communicator owns
//! a driver thread, and everything that needs work done off the callers'
//! threads reaches it through an [`EngineHandle`]:
//!
//! - **Sources** ([`Source`]), handed over once at creation: the tcp
//!   connections (sockets to and from the slot rings), the verbs connections
//!   (completions, credits, heartbeats), the watch over peer processes that
//!   share our memory. Each moves what it can without blocking, and says
//!   what it waits for (descriptors to poll, a longest sleep).
//! - **Jobs**, posted at any time ([`EngineHandle::post`]), run in the
//!   order posted: barriers run off the stream (`STREAMCOMM_PROGRESS=proxy`),
//!   the host side of the CUDA backend's operations.
//! - Sources attached later ([`EngineHandle::attach`]): the CUDA direct
//!   path's watch over its peers.
//!
//! The loop: run posted jobs; let every source move what it can; while
//! anything moved, go round again. Once nothing moves, announce the sleep
//! ([`Kick::set_sleeping`]), let the sources arm what wakes them, look once
//! more (so nothing that came before the arming is missed) and sleep in
//! `poll(2)` on the kick and the sources' descriptors, for at most the
//! shortest sleep any source allows. Callers keep their own fast path where
//! they have one (a stream moves its own tcp bytes, polls its own verbs
//! completions: see the transports); the engine is for the work nobody is
//! waiting on, and it is the one place failures of proxied transports are
//! reported ([`FailureSink`]).
//!
//! The thread starts with the first work: a communicator whose peers are
//! all threads of its own process, reached over shared memory, starts none
//! until a job comes.
//!
//! A job may wait (for a peer's flag, for data). While it waits, its waits
//! keep the engine's own work going between their sleeps
//! ([`Source::tick`], through [`crate::wait`]'s slice hook): the watch
//! still notices a dead peer, verbs completions are still reaped, and
//! streams waiting on tcp move their own bytes.

mod driver;
mod kick;
mod periodic;
mod source;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{JoinHandle, ThreadId};

pub(crate) use kick::Kick;
pub(crate) use periodic::Periodic;
pub(crate) use source::{Ctx, FailureSink, PollSet, Source};

use crate::{Error, Result};
use streamcomm_types::MismatchNote;

/// Work run once on the engine thread.
pub(crate) type EngineJob = Box<dyn FnOnce() + Send>;

/// What callers hand the engine after it started.
enum Work {
    /// Run once, in the order posted.
    Job(EngineJob),
    /// Drive from now on.
    Attach(Box<dyn Source>),
}

/// The thread, or what it will be started with.
enum Thread {
    /// Nothing to do yet: started by the first job or attached source.
    Pending {
        rank: usize,
        sources: Vec<Box<dyn Source>>,
        sink: Arc<dyn FailureSink>,
    },
    Running(ThreadId, JoinHandle<()>),
    /// Stopped, or never given what to start with.
    None,
}

/// What the driver thread and every handle share.
struct Shared {
    kick: Arc<Kick>,
    /// Set once the engine must flush its sources and return.
    stop: AtomicBool,
    /// Whose failure aborted the communicator (and the mismatch record).
    abort: AbortWord,
    work: Mutex<VecDeque<Work>>,
    thread: Mutex<Thread>,
}

/// A communicator's way to the engine: wake it, hand it a job or a source,
/// tell it of an abort. Cheap to clone.
#[derive(Clone)]
pub(crate) struct EngineHandle {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for EngineHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EngineHandle")
    }
}

impl EngineHandle {
    /// The engine's wake-up, for streams that stage work a source moves.
    pub(crate) fn kick(&self) -> &Arc<Kick> {
        &self.shared.kick
    }

    /// Runs `job` on the engine thread after the jobs posted before it
    /// (starting the thread if it waited for work).
    ///
    /// # Errors
    /// [`Error::Os`] when the thread cannot be started; [`Error::Aborted`]
    /// when the engine was stopped or never given its sources.
    pub(crate) fn post(&self, job: EngineJob) -> Result<()> {
        self.hand(Work::Job(job))
    }

    /// Drives `source` from now on, beside the sources given at start.
    ///
    /// # Errors
    /// As [`EngineHandle::post`].
    pub(crate) fn attach(&self, source: Box<dyn Source>) -> Result<()> {
        self.hand(Work::Attach(source))
    }

    fn hand(&self, work: Work) -> Result<()> {
        self.shared
            .work
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(work);
        self.shared.ensure_running()?;
        self.shared.kick.signal();
        Ok(())
    }

    /// Tells the engine that this communicator failed because of
    /// `failed_rank`, so that its sources tell every peer (once; later calls
    /// are ignored), with the mismatch record `note` when calls differed.
    pub(crate) fn notify_abort(&self, failed_rank: usize, note: Option<MismatchNote>) {
        self.shared.abort.raise(failed_rank, note);
        self.shared.kick.signal();
    }
}

/// Which rank's failure aborted the communicator, and the mismatch record
/// (two ranks' differing calls) that its peers are told with it.
#[derive(Default)]
pub(crate) struct AbortWord {
    /// `1 + rank` of the rank at fault, or 0.
    code: AtomicU32,
    note: Mutex<Option<MismatchNote>>,
}

impl AbortWord {
    /// Records that `failed` made the communicator fail (the first call
    /// wins; a record comes along when no rank was recorded yet).
    pub(crate) fn raise(&self, failed: usize, note: Option<MismatchNote>) {
        if let Some(note) = note {
            let mut slot = self.note.lock().unwrap_or_else(|p| p.into_inner());
            if slot.is_none() && self.code.load(Ordering::Acquire) == 0 {
                *slot = Some(note);
            }
        }
        let code = u32::try_from(failed).map_or(u32::MAX, |r| r.saturating_add(1));
        let _ = self
            .code
            .compare_exchange(0, code, Ordering::AcqRel, Ordering::Acquire);
    }

    /// The rank at fault and the record, once raised.
    pub(crate) fn get(&self) -> Option<(usize, Option<MismatchNote>)> {
        let code = self.code.load(Ordering::Acquire);
        let failed = code.checked_sub(1)? as usize;
        Some((failed, *self.note.lock().unwrap_or_else(|p| p.into_inner())))
    }
}

impl Shared {
    /// Starts the thread if it waits for work.
    fn ensure_running(self: &Arc<Shared>) -> Result<()> {
        let mut thread = self.thread.lock().unwrap_or_else(|p| p.into_inner());
        match std::mem::replace(&mut *thread, Thread::None) {
            Thread::Pending {
                rank,
                sources,
                sink,
            } => {
                let shared = self.clone();
                let spawned = std::thread::Builder::new()
                    .name(format!("streamcomm-engine-{rank}"))
                    .spawn(move || driver::run(shared, sources, sink))
                    .map_err(|e| Error::os("spawn the progress engine thread", e))?;
                *thread = Thread::Running(spawned.thread().id(), spawned);
                Ok(())
            }
            Thread::None => Err(Error::Aborted(
                "the communicator's progress engine has stopped".into(),
            )),
            running => {
                *thread = running;
                Ok(())
            }
        }
    }
}

/// The engine of one communicator: its handle and its thread, which is
/// stopped (after flushing what its sources staged) and joined on drop.
pub(crate) struct Engine {
    handle: EngineHandle,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Engine")
    }
}

impl Engine {
    /// An engine with no thread yet.
    ///
    /// # Errors
    /// [`Error::Os`] when the eventfd cannot be created.
    pub(crate) fn new() -> Result<Engine> {
        Ok(Engine {
            handle: EngineHandle {
                shared: Arc::new(Shared {
                    kick: Arc::new(Kick::new()?),
                    stop: AtomicBool::new(false),
                    abort: AbortWord::default(),
                    work: Mutex::new(VecDeque::new()),
                    thread: Mutex::new(Thread::None),
                }),
            },
        })
    }

    /// The handle callers keep.
    pub(crate) fn handle(&self) -> &EngineHandle {
        &self.handle
    }

    /// Gives the engine its sources, which report failures to `sink`, and
    /// starts the thread `streamcomm-engine-{rank}` now if there are any,
    /// else at the first job or attached source. Called once.
    ///
    /// # Errors
    /// [`Error::Os`] when the thread cannot be started.
    pub(crate) fn start(
        &self,
        rank: usize,
        sources: Vec<Box<dyn Source>>,
        sink: Arc<dyn FailureSink>,
    ) -> Result<()> {
        let now = !sources.is_empty();
        let shared = &self.handle.shared;
        *shared.thread.lock().unwrap_or_else(|p| p.into_inner()) = Thread::Pending {
            rank,
            sources,
            sink,
        };
        if now {
            shared.ensure_running()?;
        }
        Ok(())
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let shared = &self.handle.shared;
        shared.stop.store(true, Ordering::Release);
        shared.kick.signal();
        let thread = std::mem::replace(
            &mut *shared.thread.lock().unwrap_or_else(|p| p.into_inner()),
            Thread::None,
        );
        if let Thread::Running(id, thread) = thread {
            // Dropped by one of its own jobs (which held the last handle of
            // the communicator): the loop sees `stop` when the job returns.
            // Its sources own the memory they touch, so it may outlive us.
            if id != std::thread::current().id() {
                let _ = thread.join();
            }
        }
    }
}

#[cfg(test)]
mod tests;
