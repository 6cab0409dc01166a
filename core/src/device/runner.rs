//! The host side of device operations: the runner of their host tasks.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::engine::EngineHandle;
use crate::host::{Job, JobMode};
use crate::wait::{Notifier, WaitPolicy};
use crate::{Error, Result};

/// Runs the host tasks of one communicator's device operations on its
/// progress engine, in the order their callbacks hand them over (so a
/// callback never blocks the device driver's thread). After the first
/// failure, later tasks are skipped (they release their turn on the
/// communicator without doing the work), as on a host stream.
pub(crate) struct Runner {
    engine: EngineHandle,
    state: Arc<RunState>,
    /// Longest [`Runner::drain`].
    timeout: Duration,
}

/// What the runner's jobs report.
#[derive(Default)]
struct RunState {
    error: Mutex<Option<Error>>,
    submitted: AtomicU64,
    done: AtomicU64,
    finished: Notifier,
}

impl Runner {
    /// A runner on `engine`, whose [`Runner::drain`] gives up after `timeout`.
    pub(crate) fn new(engine: EngineHandle, timeout: Duration) -> Runner {
        Runner {
            engine,
            state: Arc::new(RunState::default()),
            timeout,
        }
    }

    /// Queues `job` behind the ones handed over before.
    ///
    /// # Errors
    /// As [`EngineHandle::post`].
    pub(crate) fn submit(&self, job: Job) -> Result<()> {
        let state = self.state.clone();
        state.submitted.fetch_add(1, Ordering::AcqRel);
        let posted = self.engine.post(Box::new(move || {
            let failed = state.error().is_some();
            let mode = if failed { JobMode::Skip } else { JobMode::Run };
            let result = std::panic::catch_unwind(AssertUnwindSafe(|| job(mode)))
                .unwrap_or_else(|p| Err(Error::UserTask(crate::host::stream::panic_message(&p))));
            if let Err(e) = result {
                state
                    .error
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_or_insert(e);
            }
            state.done.fetch_add(1, Ordering::AcqRel);
            state.finished.notify();
        }));
        if posted.is_err() {
            self.state.done.fetch_add(1, Ordering::AcqRel);
        }
        posted
    }

    /// The first error a task of this runner returned, if any.
    pub(crate) fn error(&self) -> Option<Error> {
        self.state.error()
    }

    /// Waits until every task handed over so far has run.
    ///
    /// # Errors
    /// The first task error; [`Error::Timeout`] when the tasks did not run
    /// within the timeout.
    pub(crate) fn drain(&self) -> Result<()> {
        let target = self.state.submitted.load(Ordering::Acquire);
        let policy = WaitPolicy::new(0, self.timeout);
        let state = &self.state;
        state
            .finished
            .wait_until(&policy, || {
                (state.done.load(Ordering::Acquire) >= target).then_some(())
            })
            .map_err(|_| Error::Timeout {
                op: "closing the CUDA backend".into(),
                what: "the host tasks of its device operations".into(),
                waited_ms: self.timeout.as_millis() as u64,
            })?;
        self.error().map_or(Ok(()), Err)
    }
}

impl RunState {
    fn error(&self) -> Option<Error> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}
