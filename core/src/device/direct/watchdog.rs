//! Errors instead of hangs on the direct path.
//!
//! A device stream waiting on a peer's flag word waits for ever if the peer
//! is gone: the driver's stream waits have no timeout. So while the direct
//! path is in use a watchdog thread checks, every period, that every peer
//! process of the host is alive and that the communicator has not failed
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

/// True while process `pid` of this host exists (`kill(pid, 0)`), whatever
/// the rank.
pub(crate) fn process_alive(_rank: usize, pid: u32) -> bool {
    if pid == std::process::id() {
        return true;
    }
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks that the process exists; no signal is sent.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

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

#[cfg(test)]
mod tests {
    use super::process_alive;

    #[test]
    fn a_process_is_alive_until_it_has_exited() {
        assert!(process_alive(0, std::process::id()));
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        assert!(process_alive(1, child.id()));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!process_alive(1, child.id()));
        assert!(!process_alive(1, u32::MAX));
    }
}
