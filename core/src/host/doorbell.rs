//! Doorbells: 32-bit words that streams wait on and write.
//!
//! The graph-replay rule (`docs/design/architecture.md`) is why doorbells take fixed values:
//! a captured wait for `== 1` followed by a write of `0` behaves the same on
//! every replay. Anything that counts lives on the proxy or transport side.
//! A doorbell set to [`Doorbell::POISON`] releases every waiter with an error,
//! so no stream waits forever on a communicator that has failed.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::wait::{Notifier, WaitError, WaitPolicy};

/// How a stream wait compares the doorbell with its value (CUDA's
/// `CU_STREAM_WAIT_VALUE_EQ` / `_GEQ`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitCmp {
    /// Wait until the word equals the value.
    Eq,
    /// Wait until the word is at least the value (unsigned compare).
    Geq,
}

#[derive(Debug, Default)]
struct Inner {
    value: AtomicU32,
    notifier: Notifier,
}

/// A 32-bit word shared by streams, the proxy and the host.
#[derive(Clone, Debug, Default)]
pub struct Doorbell {
    inner: Arc<Inner>,
}

impl Doorbell {
    /// The value that means "the producer failed": every wait on a poisoned
    /// doorbell ends with an error.
    pub const POISON: u32 = u32::MAX;

    /// A doorbell holding 0.
    ///
    /// # Examples
    /// ```
    /// let bell = streamcomm::host::Doorbell::new();
    /// assert_eq!(bell.load(), 0);
    /// ```
    pub fn new() -> Doorbell {
        Doorbell::default()
    }

    /// Current value.
    ///
    /// # Examples
    /// ```
    /// use streamcomm::host::{Doorbell, HostStream};
    /// let (bell, stream) = (Doorbell::new(), HostStream::new()?);
    /// stream.write_value32(&bell, 7)?;
    /// stream.synchronize()?;
    /// assert_eq!(bell.load(), 7);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn load(&self) -> u32 {
        self.inner.value.load(Ordering::Acquire)
    }

    /// Stores `value` and wakes waiters.
    ///
    /// # Examples
    /// ```
    /// use streamcomm::host::{Doorbell, HostStream, WaitCmp};
    /// let (bell, stream) = (Doorbell::new(), HostStream::new()?);
    /// stream.wait_value32(&bell, 1, WaitCmp::Eq)?; // the stream waits for the host
    /// bell.store(1);
    /// stream.synchronize()?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn store(&self, value: u32) {
        self.inner.value.store(value, Ordering::Release);
        self.inner.notifier.notify();
    }

    /// Waits until the comparison holds; a [`Doorbell::POISON`] value ends the
    /// wait with `Err(None)`, a timeout or abort with `Err(Some(_))`.
    pub(crate) fn wait(
        &self,
        cmp: WaitCmp,
        value: u32,
        policy: &WaitPolicy<'_>,
    ) -> Result<(), Option<WaitError>> {
        let r = self.inner.notifier.wait_until(policy, || {
            let v = self.inner.value.load(Ordering::Acquire);
            if v == Doorbell::POISON {
                return Some(false);
            }
            let ok = match cmp {
                WaitCmp::Eq => v == value,
                WaitCmp::Geq => v >= value,
            };
            ok.then_some(true)
        });
        match r {
            Ok(true) => Ok(()),
            Ok(false) => Err(None),
            Err(e) => Err(Some(e)),
        }
    }
}
