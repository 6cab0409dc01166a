//! What the engine drives: the [`Source`] trait, the descriptors a source
//! sleeps on ([`PollSet`]) and where it reports failures ([`Ctx`]).

use std::time::Duration;

use super::AbortWord;
use crate::Error;
use streamcomm_types::MismatchNote;

/// Something the engine thread drives: a transport's connections, a watch.
///
/// Every method is called on the engine thread and must not block (a
/// bounded flush in [`Source::close`] excepted).
pub(crate) trait Source: Send {
    /// Moves what can move now; true if anything did (the engine then goes
    /// round again before it sleeps). After a sleep, the descriptors this
    /// source armed carry what `poll(2)` reported ([`PollSet::revents`]).
    fn progress(&mut self, ctx: &Ctx<'_>, fds: &PollSet) -> bool;

    /// A job on the engine thread is waiting: do what cannot wait for it
    /// (called between the wait's sleeps, a few milliseconds apart; by
    /// default, [`Source::progress`] with nothing polled).
    fn tick(&mut self, ctx: &Ctx<'_>) {
        self.progress(ctx, &PollSet::default());
    }

    /// The engine is about to sleep: adds the descriptors that wake this
    /// source to `fds` and returns the longest it may sleep (`None`: as
    /// long as it likes).
    fn arm(&mut self, fds: &mut PollSet) -> Option<Duration>;

    /// The communicator failed because of rank `failed` (ranks' calls
    /// differed as `note` says, if given): tell the peers (called at every
    /// round from then on, until it returns true).
    fn abort(&mut self, _failed: usize, _note: Option<MismatchNote>) -> bool {
        true
    }

    /// The communicator is closing: true once everything staged went out
    /// (the engine waits a bounded time for it).
    fn flushed(&mut self) -> bool {
        true
    }

    /// The last call: say goodbye to the peers (bounded).
    fn close(&mut self) {}
}

/// Where a source reports a failure: records the communicator's first
/// error and releases every wait of it.
pub(crate) trait FailureSink: Send + Sync {
    /// Records `error` (if it is the first) and releases every wait.
    fn fail(&self, error: Error);
}

/// What a source is told while it moves: whether the engine is stopping,
/// and where failures go.
pub(crate) struct Ctx<'a> {
    pub(crate) stopping: bool,
    pub(crate) abort: &'a AbortWord,
    pub(crate) sink: &'a dyn FailureSink,
}

impl Ctx<'_> {
    /// Reports `error`, met on the connection to `peer`: the peers will be
    /// told who is at fault (the rank the error blames, else `peer`; for a
    /// peer's mismatch record, by this rank's own failing operation), and
    /// the communicator fails. While stopping, errors are dropped (peers
    /// that left first close their sockets).
    pub(crate) fn fail(&self, error: Error, peer: usize) {
        if self.stopping {
            return;
        }
        // A peer's mismatch record (its abort notice) reached every peer
        // from it directly: the abort notice of this rank goes out when its
        // own operation fails, with its own call compared (see
        // `comm::inner::CommInner::fail`).
        if !matches!(error, Error::Mismatch(_)) {
            self.abort.raise(error.culprit().unwrap_or(peer), None);
        }
        self.sink.fail(error);
    }
}

/// The descriptors the engine sleeps on, each owned by the source that
/// armed it.
#[derive(Default)]
pub(crate) struct PollSet {
    fds: Vec<libc::pollfd>,
    /// Index of the first descriptor of the source being armed or moved.
    base: usize,
}

impl PollSet {
    /// Adds `fd`, to be woken for `events` (`POLLIN`, `POLLOUT`).
    pub(crate) fn add(&mut self, fd: i32, events: libc::c_short) {
        self.fds.push(libc::pollfd {
            fd,
            events,
            revents: 0,
        });
    }

    /// What `poll(2)` reported for the `i`-th descriptor the current source
    /// armed (0 before any sleep, or after a round that moved).
    pub(crate) fn revents(&self, i: usize) -> libc::c_short {
        self.base
            .checked_add(i)
            .and_then(|k| self.fds.get(k))
            .map_or(0, |f| f.revents)
    }

    /// Starts a new arming (the kick's descriptor first).
    pub(crate) fn clear(&mut self, kick_fd: i32) {
        self.fds.clear();
        self.base = 0;
        self.add(kick_fd, libc::POLLIN);
    }

    /// Forgets what the last sleep reported (after a round that moved, the
    /// descriptors are stale until the next arming).
    pub(crate) fn forget(&mut self) {
        for f in &mut self.fds {
            f.revents = 0;
        }
    }

    /// Marks where the next source's descriptors start.
    pub(crate) fn begin(&mut self, base: usize) {
        self.base = base;
    }

    /// The events the `i`-th descriptor armed so far waits for.
    #[cfg(test)]
    pub(crate) fn events(&self, i: usize) -> libc::c_short {
        self.fds[i].events
    }

    /// Number of descriptors armed so far.
    pub(crate) fn len(&self) -> usize {
        self.fds.len()
    }

    /// Sleeps in `poll(2)` for at most `timeout`; true if the kick fired.
    pub(crate) fn sleep(&mut self, timeout: Duration) -> bool {
        let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: `fds` is a valid, initialised array of pollfd for the
        // duration of the call; poll writes only their `revents`.
        unsafe { libc::poll(self.fds.as_mut_ptr(), self.fds.len() as libc::nfds_t, ms) };
        self.fds.first().is_some_and(|f| f.revents != 0)
    }
}
