//! The multicast barrier as a source of the progress engine: between
//! barriers it answers the questions of peers that lost this rank's last
//! arrival (`barrier::multicast`), sleeping on the group's completion
//! channel; while a barrier runs, that barrier's thread answers, and the
//! engine looks again a few milliseconds later.

use std::sync::Arc;
use std::time::Duration;

use crate::barrier::multicast::MulticastBarrier;
use crate::engine::{Ctx, PollSet, Source};

/// Answers for one communicator's multicast barrier.
pub(crate) struct MulticastService {
    barrier: Arc<MulticastBarrier>,
    /// The datagrams failed: nothing more is answered (the next barrier
    /// meets the same error and reports it).
    broken: bool,
}

impl MulticastService {
    /// The service of `barrier`.
    pub(crate) fn new(barrier: Arc<MulticastBarrier>) -> MulticastService {
        MulticastService {
            barrier,
            broken: false,
        }
    }

    fn stop(&mut self, e: &crate::Error) {
        tracing::warn!(error = %e, "multicast barrier: no longer answering between barriers");
        self.broken = true;
    }
}

impl Source for MulticastService {
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
                None
            }
            Ok(Err(wait)) => Some(wait),
            Err(e) => {
                self.stop(&e);
                None
            }
        }
    }
}
