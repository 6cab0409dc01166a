//! The host side of device operations: the runner stream and the graveyard.

use std::any::Any;
use std::sync::Mutex;

use crate::host::{HostStream, Job};
use crate::Result;

/// Runs the host tasks of one communicator's device operations, in the
/// order their callbacks hand them over (a host stream of its own, so a
/// callback never blocks the device driver's thread).
pub(crate) struct Runner {
    stream: HostStream,
}

impl Runner {
    /// A runner with its own worker thread.
    pub(crate) fn new() -> Result<Runner> {
        Ok(Runner {
            stream: HostStream::new()?,
        })
    }

    /// Queues `job` behind the ones handed over before.
    pub(crate) fn submit(&self, job: Job) -> Result<()> {
        self.stream.enqueue_job(job)
    }

    /// The first error a task of this runner returned, if any.
    pub(crate) fn error(&self) -> Option<crate::Error> {
        self.stream.error()
    }

    /// Waits until every task handed over so far has run.
    pub(crate) fn drain(&self) -> Result<()> {
        self.stream.synchronize()
    }
}

/// Resources of finished device operations, waiting to be dropped on an
/// application thread: releases happen on driver threads, which must not
/// call the device's API (freeing pinned memory does).
#[derive(Default)]
pub(crate) struct Graveyard {
    dead: Mutex<Vec<Box<dyn Any + Send>>>,
}

impl Graveyard {
    /// Takes `owner` to be dropped later by [`Graveyard::bury`].
    pub(crate) fn receive(&self, owner: Box<dyn Any + Send>) {
        self.dead
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(owner);
    }

    /// Drops what was received (call from an application thread).
    pub(crate) fn bury(&self) -> usize {
        let dead = std::mem::take(&mut *self.dead.lock().unwrap_or_else(|p| p.into_inner()));
        let n = dead.len();
        drop(dead);
        n
    }
}
