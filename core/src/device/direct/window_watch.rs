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
//! A peer that is alive and never arrives is not caught here (the stream's
//! wait has no clock of its own yet): it is caught when it leaves.
//! On the first failure it fails the communicator (peers learn it too) and
//! from then on keeps raising every flag word of this rank's window, so
//! every wait already enqueued (or captured in a graph) passes within a
//! period: the stream drains, the data it wrote is not to be trusted, and
//! the error is kept ([`crate::Communicator::async_error`]) and returned by
//! every later call, as on the staged path.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use super::window::Windows;
use crate::comm::failure::Learned;
use crate::comm::inner::CommInner;
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
    comm: Weak<CommInner>,
    windows: Arc<Windows>,
    alive: Liveness,
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
            comm: Arc::downgrade(&comm.inner),
            windows,
            alive,
        })));
        let theirs = watch.clone();
        let timer = Periodic::new(period, move || {
            let watch = theirs.lock().unwrap_or_else(|p| p.into_inner());
            let Some(w) = watch.as_ref() else {
                return false;
            };
            let Some(inner) = w.comm.upgrade() else {
                return false;
            };
            look(&Communicator { inner }, w);
            true
        });
        comm.inner.engine.handle().attach(Box::new(timer))?;
        Ok(WindowWatch { watch })
    }
}

impl Drop for WindowWatch {
    fn drop(&mut self) {
        let watch = self.watch.lock().unwrap_or_else(|p| p.into_inner()).take();
        // One last look before the watch stops: a failure (or a dead peer)
        // seen since its last period raises the abort word now, so that
        // the windows' drop drains this rank's streams instead of waiting
        // for them for ever.
        if let Some(w) = &watch
            && let Some(inner) = w.comm.upgrade()
        {
            look(&Communicator { inner }, w);
        }
        drop(watch);
    }
}

/// One look: a dead peer fails the communicator; once it failed, every
/// flag word of this rank's window is raised, so every wait enqueued
/// passes.
fn look(comm: &Communicator, w: &Watch) {
    let windows = &w.windows;
    if comm.async_error().is_none() {
        let dead =
            (0..windows.size()).find(|&p| p != windows.rank() && !(w.alive)(p, windows.pids()[p]));
        // A peer that left cleanly is no failure in itself (it may exit
        // while this rank finishes), but it is when this rank's stream
        // waits for a word it will never raise.
        let process_alive = |p: usize| super::window::process_alive(windows.pids()[p]);
        let error = match (dead, windows.awaiting_departed(&process_alive)) {
            (Some(peer), _) => Error::RemoteFailed {
                peer,
                op: "a direct-path device operation".into(),
                cause: format!("process {} exited", windows.pids()[peer]),
            },
            (None, Some(peer)) => Error::RemoteFailed {
                peer,
                op: "a direct-path device operation".into(),
                cause: format!(
                    "it left (closed its communicator or exited) while rank {} waited for it",
                    windows.rank()
                ),
            },
            (None, None) => return,
        };
        comm.inner.failure.fail(&error, Learned::PeerWatch);
    }
    windows.abort_and_release();
}
