//! Errors instead of hangs on the direct path.
//!
//! A device stream waiting on a peer's flag word waits for ever if the peer
//! is gone: the driver's stream waits have no timeout. So while the direct
//! path is in use the communicator's progress engine checks (a source
//! attached to it), every period, that no peer
//! process of the host is gone (without having dropped its communicator
//! cleanly: the shared-memory watchdog's rule), that this rank's stream does
//! not wait for a peer that has left, cleanly or not (the window's awaited
//! word names the peer a wait is for), and that the communicator has not failed
//! (a peer's failure reaches it through the communicator's failure word).
//!
//! **A peer that is alive and never arrives.** A stream wait has no clock,
//! so the watch keeps one: when it finds the stream in a wait (the awaited
//! word names a peer whose slot is not raised) it marks the awaited word
//! and notes the time. The stream rewrites that word before its next wait
//! and after the round, which clears the mark; a mark still there a
//! timeout later (`STREAMCOMM_TIMEOUT`) means the stream has waited for
//! that peer all along, and the communicator fails with
//! [`crate::Error::Timeout`] naming it. The clock starts when the watch first
//! sees the wait, at most one period after the stream reached it.
//!
//! On the first failure it fails the communicator (peers learn it too) and
//! raises the release half of every flag slot of this rank's window, so
//! every wait already enqueued (or captured in a graph, or enqueued later)
//! passes at once: the stream drains, the data it wrote is not to be
//! trusted, and the error is kept ([`crate::Communicator::async_error`])
//! and returned by every later call, as on the staged path.

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use super::steps::WindowLayout;
use super::window::{AwaitedWait, Windows};
use crate::comm::core::Core;
use crate::comm::failure::Learned;
use crate::engine::Periodic;
use crate::{Communicator, Error, Result};

/// How often the watch looks.
pub(crate) const WATCH_PERIOD: Duration = Duration::from_millis(100);

/// Tells whether a peer (its rank, its process id) is alive.
pub(crate) type Liveness = Box<dyn Fn(usize, u32) -> bool + Send>;

/// The watch, while the direct path is in use; ended on drop (what it holds
/// is dropped by the thread dropping this, not by the engine).
pub(crate) struct WindowWatch {
    watch: Arc<Mutex<Option<Watch>>>,
}

/// What the engine's timer looks at.
struct Watch {
    comm: Weak<Core>,
    windows: Arc<Windows>,
    alive: Liveness,
    /// The wait the watch marked, and when it first saw it.
    marked: Option<(AwaitedWait, Instant)>,
    /// How long a wait may last.
    timeout: Duration,
}

impl WindowWatch {
    /// Starts watching `windows`' peers for `comm`, every `period`, on its
    /// progress engine.
    ///
    /// # Errors
    /// As [`crate::engine::EngineHandle::attach`].
    pub(crate) fn start(
        comm: &Communicator,
        windows: Arc<Windows>,
        alive: Liveness,
        period: Duration,
    ) -> Result<WindowWatch> {
        let watch = Arc::new(Mutex::new(Some(Watch {
            comm: Arc::downgrade(&comm.inner.core),
            windows,
            alive,
            marked: None,
            timeout: comm.config().timeout,
        })));
        let theirs = watch.clone();
        let timer = Periodic::new(period, move || {
            let mut watch = theirs.lock().unwrap_or_else(|p| p.into_inner());
            let Some(w) = watch.as_mut() else {
                return false;
            };
            let Some(core) = w.comm.upgrade() else {
                return false;
            };
            look(&core, w);
            true
        });
        comm.inner.core.engine().handle().attach(Box::new(timer))?;
        Ok(WindowWatch { watch })
    }
}

impl Drop for WindowWatch {
    fn drop(&mut self) {
        let mut watch = self.watch.lock().unwrap_or_else(|p| p.into_inner()).take();
        // One last look before the watch stops: a failure (or a dead peer)
        // seen since its last period raises the abort word now, so that
        // the windows' drop drains this rank's streams instead of waiting
        // for them for ever.
        if let Some(w) = &mut watch
            && let Some(core) = w.comm.upgrade()
        {
            look(&core, w);
        }
        drop(watch);
    }
}

/// One look: a dead peer, one that left while this rank's stream waits for
/// it, or a wait longer than the timeout fails the communicator; once it
/// failed, every flag slot of this rank's window is released, so every wait
/// enqueued passes.
fn look(core: &Core, w: &mut Watch) {
    if core.async_error().is_none() {
        let Some((error, culprit)) = trouble(w) else {
            return;
        };
        core.failure()
            .fail_blaming(&error, culprit, Learned::PeerWatch);
    }
    w.windows.abort_and_release();
}

/// What is wrong, if anything, and the rank at fault.
fn trouble(w: &mut Watch) -> Option<(Error, usize)> {
    let windows = &w.windows;
    let op = || "a direct-path device operation".to_string();
    let gone = |peer: usize, cause: String| {
        let error = Error::RemoteFailed {
            peer,
            op: op(),
            cause,
        };
        Some((error, peer))
    };
    let is_dead = |p: usize| p != windows.rank() && !(w.alive)(p, windows.pids()[p]);
    // The peer this rank's stream waits for first, when it is one of the
    // dead: the one that holds this rank up (others may have died since).
    let waited_for = windows.current_wait().map(|wait| wait.from);
    let dead = waited_for
        .filter(|&p| is_dead(p))
        .or_else(|| (0..windows.size()).find(|&p| is_dead(p)));
    if let Some(peer) = dead {
        return gone(peer, format!("process {} exited", windows.pids()[peer]));
    }
    // A peer that left cleanly is no failure in itself (it may exit while
    // this rank finishes), but it is when this rank's stream waits for a
    // word it will never raise.
    let process_alive = |p: usize| super::window::process_alive(windows.pids()[p]);
    if let Some(peer) = windows.awaiting_departed(&process_alive) {
        let cause = format!(
            "it left (closed its communicator or exited) while rank {} waited for it",
            windows.rank()
        );
        return gone(peer, cause);
    }
    let Some(wait) = windows.current_wait() else {
        w.marked = None;
        return None;
    };
    match w.marked {
        Some((marked, since))
            if wait.seen && marked.from == wait.from && marked.round == wait.round =>
        {
            let waited = since.elapsed();
            let error = || Error::Timeout {
                op: op(),
                what: format!(
                    "rank {} to reach the same call (its {} flag; it is alive but has not \
                     arrived)",
                    wait.from,
                    wait.round.name()
                ),
                waited_ms: waited.as_millis() as u64,
            };
            (waited >= w.timeout).then(|| (error(), wait.from))
        }
        _ => {
            // A wait not seen before (or the stream moved on and came back
            // to the same one, which cleared the mark): its clock starts now.
            w.marked = windows.mark_seen(&wait).then(|| (wait, Instant::now()));
            None
        }
    }
}
