//! `HostEvent`: a marker in a stream that other streams and the host can wait for.
//!
//! Each [`HostEvent::record`] gives the event a new generation; the marker
//! task completes that generation when the stream reaches it. Waiting (on the
//! host or on another stream) targets the generation recorded last at the time
//! of the call, as with `cudaEventRecord` / `cudaStreamWaitEvent`.
//!
//! # Graph capture
//! Recording or waiting on an event while a stream is capturing is refused
//! with [`Error::InvalidUsage`]: a replayed graph would re-complete a fixed,
//! stale generation. Order captured work with doorbells instead.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::host::job::FnTask;
use crate::host::stream::HostStream;
use crate::wait::{Notifier, WaitError, WaitPolicy};
use crate::{Error, Result};

#[derive(Debug, Default)]
struct Inner {
    recorded: AtomicU64,
    completed: AtomicU64,
    notifier: Notifier,
}

/// A stream marker (CUDA event without timing).
///
/// # Examples
/// ```
/// use streamcomm::host::{HostEvent, HostStream};
/// let (a, b) = (HostStream::new().unwrap(), HostStream::new().unwrap());
/// let ev = HostEvent::new();
/// a.host_fn(|| std::thread::sleep(std::time::Duration::from_millis(5))).unwrap();
/// ev.record(&a).unwrap();
/// b.wait(&ev).unwrap(); // b's later work starts after a's sleep
/// ev.synchronize().unwrap();
/// assert!(ev.query());
/// ```
#[derive(Clone, Debug, Default)]
pub struct HostEvent {
    inner: Arc<Inner>,
}

impl HostEvent {
    /// An event that has never been recorded (queries as complete).
    ///
    /// # Examples
    /// ```
    /// let ev = streamcomm::host::HostEvent::new();
    /// assert!(ev.query());
    /// ```
    pub fn new() -> HostEvent {
        HostEvent::default()
    }

    /// Records the event at the current end of `stream`.
    ///
    /// # Examples
    /// ```
    /// use streamcomm::host::{HostEvent, HostStream};
    /// let stream = HostStream::new()?;
    /// let ev = HostEvent::new();
    /// stream.host_fn(|| std::thread::sleep(std::time::Duration::from_millis(5)))?;
    /// ev.record(&stream)?;
    /// ev.synchronize()?; // the sleep has run
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidUsage`] while `stream` is capturing.
    pub fn record(&self, stream: &HostStream) -> Result<()> {
        refuse_capture(stream, "HostEvent::record")?;
        let generation = self.inner.recorded.fetch_add(1, Ordering::AcqRel) + 1;
        let inner = self.inner.clone();
        stream.enqueue(Arc::new(FnTask {
            name: "event_record",
            f: Arc::new(move || {
                inner.completed.fetch_max(generation, Ordering::AcqRel);
                inner.notifier.notify();
                Ok(())
            }),
        }))?;
        // Someone other than the stream's own `synchronize` will wait for
        // this point: the worker runs the queue now, even on a stream its
        // callers drain themselves.
        stream.wake_worker();
        Ok(())
    }

    /// Makes `stream`'s later work wait until the last recorded point
    /// completes: what [`HostStream::wait`] does.
    pub(crate) fn enqueue_wait(&self, stream: &HostStream) -> Result<()> {
        refuse_capture(stream, "HostStream::wait")?;
        let target = self.inner.recorded.load(Ordering::Acquire);
        let inner = self.inner.clone();
        let timeout = stream.timeout();
        stream.enqueue(Arc::new(FnTask {
            name: "event_wait",
            f: Arc::new(move || wait_generation(&inner, target, timeout)),
        }))
    }

    /// True when the last recorded point has completed (never blocks).
    ///
    /// # Examples
    /// ```
    /// use streamcomm::host::{HostEvent, HostStream};
    /// let stream = HostStream::new()?;
    /// let ev = HostEvent::new();
    /// ev.record(&stream)?;
    /// stream.synchronize()?;
    /// assert!(ev.query());
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn query(&self) -> bool {
        self.inner.completed.load(Ordering::Acquire) >= self.inner.recorded.load(Ordering::Acquire)
    }

    /// Blocks the calling thread until the last recorded point completes
    /// (at most the default timeout).
    ///
    /// # Examples
    /// ```
    /// use streamcomm::host::{HostEvent, HostStream};
    /// let stream = HostStream::new()?;
    /// let ev = HostEvent::new();
    /// ev.record(&stream)?;
    /// ev.synchronize()?;
    /// assert!(ev.query());
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Timeout`].
    pub fn synchronize(&self) -> Result<()> {
        let target = self.inner.recorded.load(Ordering::Acquire);
        wait_generation(&self.inner, target, crate::config::DEFAULT_TIMEOUT)
    }
}

fn refuse_capture(stream: &HostStream, what: &str) -> Result<()> {
    if stream.is_capturing() {
        return Err(Error::InvalidUsage(format!(
            "{what} is not allowed while the stream is capturing"
        )));
    }
    Ok(())
}

fn wait_generation(inner: &Inner, target: u64, timeout: std::time::Duration) -> Result<()> {
    let policy = WaitPolicy::new(200, timeout);
    inner
        .notifier
        .wait_until(&policy, || {
            (inner.completed.load(Ordering::Acquire) >= target).then_some(())
        })
        .map_err(|e| match e {
            WaitError::Timeout(w) => Error::Timeout {
                op: "event wait".into(),
                what: format!("event generation {target}"),
                waited_ms: w.as_millis() as u64,
            },
            WaitError::Aborted => Error::Aborted("event wait".into()),
        })
}
