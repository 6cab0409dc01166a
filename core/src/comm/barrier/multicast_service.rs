//! The multicast barrier as a source of the progress engine: between
//! barriers it answers the questions of peers that lost this rank's last
//! arrival (`barrier::multicast`), sleeping on the group's completion
//! channel; while a barrier runs, that barrier's thread answers, and the
//! engine looks again a few milliseconds later. A closing communicator
//! multicasts its last arrival once more and keeps answering until the
//! group has been quiet for [`LINGER`]: a peer may still wait for the
//! arrival of its last barrier, and without it would wait for its timeout.

use std::sync::Arc;
use std::time::{Duration, Instant};

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
    quiet: Quiet,
}

/// Since when the barrier's activity count has stood still, as this thread
/// sees it: the clock is read here, off the barrier's path. Seen late, a
/// change only makes the quiet look shorter, so the linger errs long.
struct Quiet {
    seen: u64,
    since: Instant,
}

impl Quiet {
    /// How long `activity` has stood still, observed at `now`.
    fn observe(&mut self, activity: u64, now: Instant) -> Duration {
        if activity != self.seen {
            (self.seen, self.since) = (activity, now);
        }
        now.saturating_duration_since(self.since)
    }
}

impl MulticastService {
    /// The service of `barrier`.
    pub(crate) fn new(barrier: Arc<MulticastBarrier>) -> MulticastService {
        MulticastService {
            quiet: Quiet {
                seen: barrier.activity(),
                since: Instant::now(),
            },
            barrier,
            broken: false,
            parted: false,
        }
    }

    fn quiet_for(&mut self) -> Duration {
        self.quiet.observe(self.barrier.activity(), Instant::now())
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
        self.broken || self.quiet_for() >= LINGER
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
                let quiet = self.quiet_for();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quiet_restarts_whenever_the_activity_moves() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut q = Quiet { seen: 3, since: t0 };
        assert_eq!(q.observe(3, at(40)), Duration::from_millis(40));
        assert_eq!(q.observe(3, at(LINGER.as_millis() as u64)), LINGER);
        // A barrier ended or a datagram came: quiet again from now.
        assert_eq!(q.observe(4, at(120)), Duration::ZERO);
        assert_eq!(q.observe(4, at(150)), Duration::from_millis(30));
    }
}
