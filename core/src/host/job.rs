//! What a host stream queues: jobs made from reusable task templates.
//!
//! A [`Task`] is what the program enqueues (a user function, a doorbell
//! write, a collective). Enqueueing calls [`Task::prepare`], which may claim
//! resources that must be taken in issue order (a collective's ticket on its
//! communicator) and returns a one-shot [`Job`]. A captured graph keeps the
//! tasks and prepares them again at every launch, which is what makes a replay
//! a fresh collective rather than a copy of the old one.

use std::sync::Arc;

use crate::Result;

/// Whether a job runs, or is dropped because its stream already failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum JobMode {
    /// Execute the job.
    Run,
    /// The stream is in an error state: release what the job holds
    /// (e.g. its turn on a communicator) without doing the work.
    Skip,
}

/// A one-shot unit of stream work: run it with [`JobMode::Run`], or with
/// [`JobMode::Skip`] to release what it holds without doing the work.
pub(crate) type Job = Box<dyn FnOnce(JobMode) -> Result<()> + Send>;

/// A reusable description of stream work.
pub(crate) trait Task: Send + Sync + 'static {
    /// Called when the task is enqueued (directly or by a graph launch).
    fn prepare(&self) -> Job;

    /// A short name for errors and tracing.
    fn name(&self) -> &str;
}

/// A task that runs a closure each time.
pub(crate) struct FnTask<F> {
    pub(crate) name: &'static str,
    pub(crate) f: Arc<F>,
}

impl<F> Task for FnTask<F>
where
    F: Fn() -> Result<()> + Send + Sync + 'static,
{
    fn prepare(&self) -> Job {
        let f = self.f.clone();
        Box::new(move |mode| match mode {
            JobMode::Run => f(),
            JobMode::Skip => Ok(()),
        })
    }

    fn name(&self) -> &str {
        self.name
    }
}
