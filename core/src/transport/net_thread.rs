//! The handle of a proxied transport's progress thread (the tcp network
//! thread, the verbs proxy): the eventfd that wakes it, its stop flag and
//! its abort word. Dropping the handle stops the thread and joins it, after
//! it has flushed what was staged.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use super::tcp::kick::Kick;
use crate::{Error, Result};

/// What a progress thread's loop is given: its wake-up, stop flag and abort
/// word (`1 + rank` of the failed rank, or 0).
#[derive(Debug, Clone)]
pub struct ThreadSignals {
    /// Wakes the thread (streams kick it after staging or freeing a slot).
    pub kick: Arc<Kick>,
    /// Set once the thread must flush and return.
    pub stop: Arc<AtomicBool>,
    /// Set once this communicator failed: the thread tells every peer.
    pub abort: Arc<AtomicU32>,
}

/// A running progress thread; stopped and joined on drop.
#[derive(Debug)]
pub struct NetThread {
    signals: ThreadSignals,
    thread: Option<JoinHandle<()>>,
}

impl NetThread {
    /// Spawns `body` on a thread called `name`, handing it the signals.
    ///
    /// # Errors
    /// [`Error::Os`] when the eventfd or the thread cannot be created.
    pub fn spawn(
        name: String,
        body: impl FnOnce(ThreadSignals) + Send + 'static,
    ) -> Result<NetThread> {
        let signals = ThreadSignals {
            kick: Arc::new(Kick::new()?),
            stop: Arc::new(AtomicBool::new(false)),
            abort: Arc::new(AtomicU32::new(0)),
        };
        let theirs = signals.clone();
        let what = format!("spawn {name}");
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || body(theirs))
            .map_err(|e| Error::os(what, e))?;
        Ok(NetThread {
            signals,
            thread: Some(thread),
        })
    }

    /// The thread's wake-up.
    pub fn kick(&self) -> &Arc<Kick> {
        &self.signals.kick
    }

    /// Tells the thread that this communicator failed because of
    /// `failed_rank`, so that it tells every peer (once; later calls are
    /// ignored).
    pub fn notify_abort(&self, failed_rank: usize) {
        let _ = self.signals.abort.compare_exchange(
            0,
            u32::try_from(failed_rank).map_or(u32::MAX, |r| r.saturating_add(1)),
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        self.signals.kick.signal();
    }
}

impl Drop for NetThread {
    fn drop(&mut self) {
        self.signals.stop.store(true, Ordering::Release);
        self.signals.kick.signal();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
