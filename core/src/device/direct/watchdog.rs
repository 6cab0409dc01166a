//! Errors instead of hangs on the direct path.
//!
//! A device stream waiting on a peer's flag word waits for ever if the peer
//! is gone: the driver's stream waits have no timeout. So while the direct
//! path is in use a watchdog thread checks, every period, that no peer
//! process of the host is gone (without having dropped its communicator
//! cleanly: the shared-memory watchdog's rule) and that the communicator has not failed
//! (a peer's failure reaches it through the communicator's failure word).
//! On the first failure it fails the communicator (peers learn it too) and
//! from then on keeps raising every flag word of this rank's window, so
//! every wait already enqueued (or captured in a graph) passes within a
//! period: the stream drains, the data it wrote is not to be trusted, and
//! the error is kept ([`crate::Communicator::async_error`]) and returned by
//! every later call, as on the staged path.

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::window::Windows;
use crate::device::DevAddr;
use crate::{Communicator, Error, Result};

/// How often the watchdog looks.
pub(crate) const WATCH_PERIOD: Duration = Duration::from_millis(100);

/// Tells whether a peer (its rank, its process id) is alive.
pub(crate) type Liveness = Box<dyn Fn(usize, u32) -> bool + Send>;
/// Raises flag words of this rank's window from the host.
pub(crate) type Rescue = Box<dyn Fn(&[DevAddr]) + Send>;

/// The watchdog thread; stopped and joined on drop.
pub(crate) struct Watchdog {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Watchdog {
    /// Starts watching `windows`' peers for `comm`.
    pub(crate) fn start(
        comm: &Communicator,
        windows: Arc<Windows>,
        alive: Liveness,
        rescue: Rescue,
        period: Duration,
    ) -> Result<Watchdog> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let (comm, flag) = (comm.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name(format!("streamcomm-watchdog-{}", comm.rank()))
            .spawn(move || watch(&comm, &windows, &*alive, &*rescue, period, &flag))
            .map_err(|e| Error::os("spawning the direct-path watchdog", e))?;
        Ok(Watchdog {
            stop,
            thread: Some(thread),
        })
    }
}

fn watch(
    comm: &Communicator,
    windows: &Windows,
    alive: &dyn Fn(usize, u32) -> bool,
    rescue: &dyn Fn(&[DevAddr]),
    period: Duration,
    stop: &(Mutex<bool>, Condvar),
) {
    let own = windows.own_flags();
    let mut stopped = stop.0.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        stopped = stop
            .1
            .wait_timeout(stopped, period)
            .unwrap_or_else(|p| p.into_inner())
            .0;
        if *stopped {
            return;
        }
        if comm.async_error().is_none() {
            let dead =
                (0..windows.size()).find(|&p| p != windows.rank() && !alive(p, windows.pids()[p]));
            let Some(peer) = dead else { continue };
            comm.inner.fail(&Error::RemoteFailed {
                peer,
                op: "a direct-path device operation".into(),
                cause: format!("process {} exited", windows.pids()[peer]),
            });
        }
        rescue(&own);
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        *self.stop.0.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.stop.1.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
