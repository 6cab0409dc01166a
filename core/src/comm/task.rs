//! Stream tasks for communicator operations.
//!
//! Enqueueing a collective builds its plan once and wraps it in a [`Task`].
//! Each time the task is prepared (enqueue, or every launch of a graph that
//! captured it) it takes a fresh ticket on the communicator, so replays are
//! new collectives in issue order; the plan and buffers are what capture bakes
//! in, the connection counters advance on the transport side (`docs/design/architecture.md`).

use std::sync::Arc;

use crate::Result;
use crate::comm::buffer::Binding;
use crate::comm::core::Core;
use crate::comm::exec;
use crate::comm::plan_cache::CallKey;
use crate::host::{Job, Task};
use crate::plan::Plan;

/// A collective on a stream.
pub(crate) struct PlanTask {
    pub comm: Arc<Core>,
    pub plan: Arc<Plan>,
    pub binding: Binding,
}

impl PlanTask {
    /// The stream task of the call `shape` on `core` with the buffers
    /// `binding`: refused once the communicator has failed; its plan the
    /// one kept from the last call of the same shape (built on a miss),
    /// the buffers checked against it. What every face's door enqueues
    /// (the host stream's) or runs on staging buffers (the device
    /// backend's, through `comm::submit`).
    ///
    /// # Errors
    /// The stored error of a failed communicator; the plan's (a count
    /// the plans refuse); the buffers' check ([`Binding::check`]).
    pub(crate) fn for_call(
        core: &Arc<Core>,
        shape: CallKey,
        binding: Binding,
    ) -> Result<Arc<dyn Task>> {
        core.failure().check()?;
        let plan = core.plan(shape)?;
        binding.check(&plan)?;
        Ok(Arc::new(PlanTask {
            comm: core.clone(),
            plan,
            binding,
        }))
    }
}

impl Task for PlanTask {
    fn prepare(&self) -> Job {
        let ticket = self.comm.turns().take();
        let (comm, plan, binding) = (self.comm.clone(), self.plan.clone(), self.binding.clone());
        Box::new(move |mode| {
            let name = format_args!("{} #{ticket}", plan.collective.name());
            comm.run_ticketed(ticket, mode, name, |c| {
                exec::run_plan(c, &plan, &binding, ticket)
            })
        })
    }

    fn name(&self) -> &str {
        self.plan.collective.name()
    }
}
