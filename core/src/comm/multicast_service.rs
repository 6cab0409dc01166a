//! The multicast barrier as a source of the progress engine: between
//! barriers it answers the questions of peers that lost this rank's last
//! arrival (`barrier::multicast`), sleeping on the group's completion
//! channel; while a barrier runs, that barrier's thread answers, and the
//! engine looks again a few milliseconds later. A closing communicator
//! multicasts its last arrival once more and keeps answering until the
//! group has been quiet for [`LINGER`]: a peer may still wait for the
//! arrival of its last barrier, and without it would wait for its timeout.

use std::sync::Arc;
use std::time::Duration;

use crate::barrier::multicast::{LINGER, MulticastBarrier};
use crate::engine::{Ctx, PollSet, Source};

/// Answers for one communicator's multicast barrier.
pub(crate) struct MulticastService {
    barrier: Arc<MulticastBarrier>,
    /// The datagrams failed: nothing more is answered (the next barrier
    /// meets the same error and reports it).
    broken: bool,
    /// The parting re-send went out.
    parted: bool,
}

impl MulticastService {
    /// The service of `barrier`.
    pub(crate) fn new(barrier: Arc<MulticastBarrier>) -> MulticastService {
        MulticastService {
            barrier,
            broken: false,
            parted: false,
        }
    }

    fn stop(&mut self, e: &crate::Error) {
        tracing::warn!(error = %e, "multicast barrier: no longer answering between barriers");
        self.broken = true;
    }
}

impl Source for MulticastService {
    fn flushed(&mut self) -> bool {
        if !self.parted && !self.broken {
            self.parted = true;
            if let Err(e) = self.barrier.part() {
                self.stop(&e);
            }
        }
        self.broken || self.barrier.quiet_for() >= LINGER
    }

    fn progress(&mut self, _ctx: &Ctx<'_>, _fds: &PollSet) -> bool {
        if self.broken {
            return false;
        }
        match self.barrier.service() {
            Ok(moved) => moved,
            Err(e) => {
                self.stop(&e);
                false
            }
        }
    }

    fn arm(&mut self, fds: &mut PollSet) -> Option<Duration> {
        if self.broken {
            return None;
        }
        match self.barrier.arm() {
            Ok(Ok(fd)) => {
                fds.add(fd, libc::POLLIN);
                // Wake once more when the linger ends, so a closing
                // communicator sees `flushed` without waiting out the
                // engine's idle sleep.
                let quiet = self.barrier.quiet_for();
                (quiet < LINGER).then(|| LINGER - quiet)
            }
            Ok(Err(wait)) => Some(wait),
            Err(e) => {
                self.stop(&e);
                None
            }
        }
    }
}
