//! The stream tasks of barriers: run by the thread executing the stream
//! ([`Progress::Inline`]), or by the progress engine while the stream waits
//! on a doorbell ([`Progress::Proxy`]). Each takes a fresh ticket when it
//! is prepared, so graph replays are new barriers in issue order.

use std::sync::Arc;

use super::Barriers;
use crate::Error;
use crate::comm::failure::Learned;
use crate::config::Progress;
use crate::host::{Doorbell, Job, JobMode, Task, WaitCmp};

/// A barrier that the progress engine runs while the stream waits on a
/// doorbell ([`Progress::Proxy`]).
pub(crate) struct ProxyBarrierTask {
    pub(crate) barriers: Arc<Barriers>,
    /// Release doorbell: fixed for the life of the task (and of any graph).
    pub(crate) release: Doorbell,
}

impl Task for ProxyBarrierTask {
    fn prepare(&self) -> Job {
        let ticket = self.barriers.core().turns().take();
        let (barriers, release) = (self.barriers.clone(), self.release.clone());
        Box::new(move |mode| {
            if mode == JobMode::Skip {
                return barriers
                    .core()
                    .run_ticketed(ticket, mode, "barrier", |_| Ok(()));
            }
            // Signal(arrive): hand the barrier to the progress engine,
            // which runs it in issue order and writes the release doorbell
            // (1 to go on, POISON on failure).
            let (weak, bell) = (Arc::downgrade(&barriers), release.clone());
            let core = barriers.core();
            let posted = core.engine().handle().post(Box::new(move || {
                let Some(barriers) = weak.upgrade() else {
                    bell.store(Doorbell::POISON);
                    return;
                };
                let _span = tracing::trace_span!("engine_barrier", ticket).entered();
                let r = barriers.run_ticketed(ticket, JobMode::Run, "barrier");
                bell.store(if r.is_ok() { 1 } else { Doorbell::POISON });
            }));
            if let Err(e) = posted {
                core.failure().fail(&e, Learned::Call);
                return Err(e);
            }
            // Wait(release == 1), then reset to 0 (the consumer resets).
            let policy = core.policy();
            let r = release.wait(WaitCmp::Eq, 1, &policy);
            match r {
                Ok(()) => {
                    release.store(0);
                    Ok(())
                }
                Err(None) => {
                    release.store(0);
                    Err(core
                        .failure()
                        .error()
                        .unwrap_or_else(|| Error::Aborted("barrier released with an error".into())))
                }
                Err(Some(w)) => Err(core.wait_error(
                    w,
                    &format!("barrier #{ticket}"),
                    "the progress engine to release the barrier".into(),
                    None,
                )),
            }
        })
    }

    fn name(&self) -> &str {
        "barrier"
    }
}

/// A barrier run by the thread executing the stream ([`Progress::Inline`]).
pub(crate) struct InlineBarrierTask {
    pub(crate) barriers: Arc<Barriers>,
}

impl Task for InlineBarrierTask {
    fn prepare(&self) -> Job {
        let ticket = self.barriers.core().turns().take();
        let barriers = self.barriers.clone();
        Box::new(move |mode| barriers.run_ticketed(ticket, mode, "barrier"))
    }

    fn name(&self) -> &str {
        "barrier"
    }
}

/// Which barrier task a stream barrier uses.
pub(crate) fn barrier_task(barriers: &Arc<Barriers>) -> Arc<dyn Task> {
    match barriers.core().config().progress {
        Progress::Inline => Arc::new(InlineBarrierTask {
            barriers: barriers.clone(),
        }),
        Progress::Proxy => Arc::new(ProxyBarrierTask {
            barriers: barriers.clone(),
            release: Doorbell::new(),
        }),
    }
}
