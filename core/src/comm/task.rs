//! Stream tasks for communicator operations.
//!
//! Enqueueing a collective builds its plan once and wraps it in a [`Task`].
//! Each time the task is prepared (enqueue, or every launch of a graph that
//! captured it) it takes a fresh ticket on the communicator, so replays are
//! new collectives in issue order; the plan and buffers are what capture bakes
//! in, the connection counters advance on the transport side (`docs/design/architecture.md`).

use std::sync::Arc;

use crate::Error;
use crate::comm::buffer::Binding;
use crate::comm::failure::Learned;
use crate::comm::inner::CommInner;
use crate::config::Progress;
use crate::host::{Doorbell, Job, JobMode, Task, WaitCmp};
use crate::plan::Plan;

/// A collective, p2p operation or inline barrier on a stream.
pub(crate) struct PlanTask {
    pub comm: Arc<CommInner>,
    pub plan: Arc<Plan>,
    pub binding: Binding,
}

impl Task for PlanTask {
    fn prepare(&self) -> Job {
        let ticket = self.comm.core.turns().take();
        let (comm, plan, binding) = (self.comm.clone(), self.plan.clone(), self.binding.clone());
        Job::new(move |mode| {
            let name = format_args!("{} #{ticket}", plan.collective.name());
            comm.core
                .run_ticketed(ticket, mode, name, |c| c.run_plan(&plan, &binding, ticket))
        })
    }

    fn name(&self) -> &str {
        self.plan.collective.name()
    }
}

/// A barrier that the progress engine runs while the stream waits on a
/// doorbell ([`Progress::Proxy`]).
pub(crate) struct ProxyBarrierTask {
    pub comm: Arc<CommInner>,
    /// Release doorbell: fixed for the life of the task (and of any graph).
    pub release: Doorbell,
}

impl Task for ProxyBarrierTask {
    fn prepare(&self) -> Job {
        let ticket = self.comm.core.turns().take();
        let (comm, release) = (self.comm.clone(), self.release.clone());
        Job::new(move |mode| {
            if mode == JobMode::Skip {
                return comm.core.run_ticketed(ticket, mode, "barrier", |_| Ok(()));
            }
            // Signal(arrive): hand the barrier to the progress engine,
            // which runs it in issue order and writes the release doorbell
            // (1 to go on, POISON on failure).
            let (weak, bell) = (Arc::downgrade(&comm), release.clone());
            let posted = comm.core.engine().handle().post(Box::new(move || {
                let Some(comm) = weak.upgrade() else {
                    bell.store(Doorbell::POISON);
                    return;
                };
                let _span = tracing::trace_span!("engine_barrier", ticket).entered();
                let r = comm
                    .core
                    .run_ticketed(ticket, JobMode::Run, "barrier", |_| {
                        comm.barrier.run(&comm.core, ticket)
                    });
                bell.store(if r.is_ok() { 1 } else { Doorbell::POISON });
            }));
            if let Err(e) = posted {
                comm.core.failure().fail(&e, Learned::Call);
                return Err(e);
            }
            // Wait(release == 1), then reset to 0 (the consumer resets).
            let policy = comm.core.policy();
            let r = release.wait(WaitCmp::Eq, 1, &policy);
            match r {
                Ok(()) => {
                    release.store(0);
                    Ok(())
                }
                Err(None) => {
                    release.store(0);
                    Err(comm
                        .core
                        .failure()
                        .error()
                        .unwrap_or_else(|| Error::Aborted("barrier released with an error".into())))
                }
                Err(Some(w)) => Err(comm.core.wait_error(
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
    pub comm: Arc<CommInner>,
}

impl Task for InlineBarrierTask {
    fn prepare(&self) -> Job {
        let ticket = self.comm.core.turns().take();
        let comm = self.comm.clone();
        Job::new(move |mode| {
            comm.core.run_ticketed(ticket, mode, "barrier", |_| {
                comm.barrier.run(&comm.core, ticket)
            })
        })
    }

    fn name(&self) -> &str {
        "barrier"
    }
}

/// Which barrier task a stream barrier uses.
pub(crate) fn barrier_task(comm: &Arc<CommInner>) -> Arc<dyn Task> {
    match comm.core.config().progress {
        Progress::Inline => Arc::new(InlineBarrierTask { comm: comm.clone() }),
        Progress::Proxy => Arc::new(ProxyBarrierTask {
            comm: comm.clone(),
            release: Doorbell::new(),
        }),
    }
}
