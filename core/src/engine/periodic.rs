//! A source that looks at something every period: the engine's timers.

use std::time::{Duration, Instant};

use super::source::{Ctx, PollSet, Source};

/// Runs `look` every `period`, when the engine is about to sleep and between
/// the sleeps of a job that waits on the engine, until `look` returns false.
/// The clock is read only then, never while the engine moves bytes.
pub(crate) struct Periodic<F> {
    period: Duration,
    next: Instant,
    look: Option<F>,
}

impl<F: FnMut() -> bool + Send> Periodic<F> {
    /// A timer whose first look is one `period` from now.
    pub(crate) fn new(period: Duration, look: F) -> Periodic<F> {
        Periodic {
            period,
            next: Instant::now() + period,
            look: Some(look),
        }
    }

    /// Looks when due; the time to the next look (`None`: ended).
    fn when_due(&mut self) -> Option<Duration> {
        let look = self.look.as_mut()?;
        let now = Instant::now();
        if now >= self.next {
            if !look() {
                self.look = None;
                return None;
            }
            self.next = now + self.period;
        }
        Some(self.next.saturating_duration_since(now))
    }
}

impl<F: FnMut() -> bool + Send> Source for Periodic<F> {
    fn progress(&mut self, _ctx: &Ctx<'_>, _fds: &PollSet) -> bool {
        false
    }

    /// A job waits on the engine: what it waits for may be what the look
    /// is for (a peer that died).
    fn tick(&mut self, _ctx: &Ctx<'_>) {
        self.when_due();
    }

    fn arm(&mut self, _fds: &mut PollSet) -> Option<Duration> {
        self.when_due()
    }
}
