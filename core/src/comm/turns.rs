//! Issue order: operations on a communicator run in the order they were issued.
//!
//! Every rank must see the same sequence of operations on its connections, or
//! slots meant for one collective would be read by another. Each operation
//! takes a ticket when it is enqueued (or when the graph holding it is
//! launched) and runs only when the communicator is serving that ticket, even
//! if it sits on a different stream, or is a `barrier_host` call on the host.
//! This is the guarantee NCCL gives by serialising a communicator's kernels.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::wait::{Notifier, WaitError, WaitPolicy};

/// Ticket dispenser and "now serving" display.
#[derive(Debug, Default)]
pub(crate) struct Turns {
    next: AtomicU64,
    serving: AtomicU64,
    notifier: Notifier,
}

impl Turns {
    /// Takes the next ticket.
    pub(crate) fn take(&self) -> u64 {
        self.next.fetch_add(1, Ordering::AcqRel)
    }

    /// Waits until `ticket` is being served.
    ///
    /// # Errors
    /// When the wait times out or is aborted.
    pub(crate) fn wait(&self, ticket: u64, policy: &WaitPolicy<'_>) -> Result<(), WaitError> {
        self.notifier.wait_until(policy, || {
            (self.serving.load(Ordering::Acquire) == ticket).then_some(())
        })
    }

    /// True when `ticket` is being served now (never waits).
    pub(crate) fn serving(&self, ticket: u64) -> bool {
        self.serving.load(Ordering::Acquire) == ticket
    }

    /// Finishes `ticket`, letting the next one run.
    pub(crate) fn done(&self, ticket: u64) {
        self.serving.store(ticket + 1, Ordering::Release);
        self.notifier.notify();
    }
}
