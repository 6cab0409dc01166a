//! Waking the progress engine when a stream or a caller gives it work.
//!
//! The engine thread sleeps in `poll(2)`; streams wake it by writing an
//! eventfd, but only when it is actually asleep (a flag set before it
//! re-checks for work and sleeps), so a busy connection costs no syscall per slot.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering, fence};

use crate::{Error, Result};

/// An eventfd plus "the engine thread is asleep" flag.
#[derive(Debug)]
pub(crate) struct Kick {
    fd: OwnedFd,
    sleeping: AtomicBool,
}

impl Kick {
    /// A new, unsignalled kick.
    ///
    /// # Errors
    /// [`Error::Os`] when eventfd fails.
    pub(crate) fn new() -> Result<Kick> {
        // SAFETY: plain syscall; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(Error::os("eventfd", std::io::Error::last_os_error()));
        }
        Ok(Kick {
            // SAFETY: fd is a fresh descriptor we own.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            sleeping: AtomicBool::new(false),
        })
    }

    /// Wakes the engine thread if it sleeps (call after publishing work).
    pub(crate) fn kick(&self) {
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::Relaxed) {
            self.signal();
        }
    }

    /// Wakes the engine thread unconditionally.
    pub(crate) fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writing 8 bytes from a valid u64 to our eventfd.
        unsafe {
            libc::write(
                self.fd.as_raw_fd(),
                &one as *const u64 as *const libc::c_void,
                8,
            )
        };
    }

    /// Engine thread: about to sleep (then re-check for work, then poll).
    pub(crate) fn set_sleeping(&self, sleeping: bool) {
        self.sleeping.store(sleeping, Ordering::SeqCst);
    }

    /// Engine thread: clears pending signals.
    pub(crate) fn drain(&self) {
        let mut v: u64 = 0;
        // SAFETY: reading 8 bytes into a valid u64 from our non-blocking eventfd.
        unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                &mut v as *mut u64 as *mut libc::c_void,
                8,
            )
        };
    }

    /// The descriptor to poll.
    pub(crate) fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }
}
