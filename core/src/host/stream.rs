//! `HostStream`: an in-order queue of work on the CPU, the host backend's CUDA stream.
//!
//! Work enqueued on a stream runs strictly in order, one task at a time, on
//! one executor at a time. The executor is normally the stream's worker
//! thread, but a thread that blocks on the stream (in
//! [`HostStream::synchronize`]) runs the queued tasks itself instead of
//! sleeping while the worker does: on our machines waking another thread costs
//! more than most small collectives (`docs/design/architecture.md`).
//!
//! # Who runs the queue
//! A program that enqueues and then synchronizes in a loop drains its own
//! stream, and waking the worker for each enqueue only costs a system
//! call and a thread competing for the caller's core. So once a stream's
//! last [`CALLER_DRIVEN`] jobs were all run by threads in `synchronize`,
//! an enqueue no longer wakes the worker: the worker watches the queue
//! instead, waking every [`WATCH_SLICE`], and takes a job that has waited
//! through a whole slice with nothing completing. That job ends the
//! caller-driven run (enqueues wake the worker again), so work enqueued
//! and not synchronized starts at most two slices late, once. Recording an
//! event ends the spell at once (another thread or stream waits for it).
//! A watching worker that finds the stream idle for [`WATCH_IDLE`] slices
//! parks for long again (the next enqueue wakes it).
//!
//! Errors are sticky, like CUDA's: the first failing task's error is kept,
//! later tasks are skipped (releasing their communicator turn), and
//! `synchronize` returns the error.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::config::DEFAULT_TIMEOUT;
use crate::host::doorbell::{Doorbell, WaitCmp};
use crate::host::event::HostEvent;
use crate::host::graph::Graph;
use crate::host::job::{FnTask, Job, JobMode, Task};
use crate::wait::{Notifier, WaitError, WaitPolicy};
use crate::{Error, Result};

#[derive(Default)]
struct State {
    queue: VecDeque<Job>,
    /// Someone is executing a job right now.
    running: bool,
    error: Option<Error>,
    capture: Option<Vec<Arc<dyn Task>>>,
    shutdown: bool,
}

struct Shared {
    state: Mutex<State>,
    /// Bumped (and `work` notified) when work arrives that nobody is about
    /// to run, or the stream shuts down: what the worker sleeps on.
    work_version: AtomicU64,
    work: Notifier,
    /// The smallest completion count a thread asleep in `synchronize`
    /// waits for (`u64::MAX`: none). Only the completion that reaches it
    /// notifies `done`, so a thread waiting for the last of 50 queued
    /// collectives is woken once, not 50 times (each wake a context switch
    /// on a core some rank's stream thread needs).
    wanted: AtomicU64,
    /// What threads in `synchronize` sleep on. Kept apart from `work` so
    /// that completions do not wake the worker.
    done: Notifier,
    /// How many completions notified `done` (a test checks that it is one
    /// per target reached, not one per job).
    done_wakes: AtomicU64,
    enqueued: AtomicU64,
    completed: AtomicU64,
    timeout: Duration,
    /// Jobs run by threads in `synchronize` since the worker last ran one
    /// (saturating at [`CALLER_DRIVEN`]).
    driven: AtomicU32,
    /// True while the worker watches the queue in short slices: enqueues
    /// then need not wake it.
    watching: AtomicBool,
    /// Set by [`Shared::bump_work`]: the worker runs the queue at once.
    urgent: AtomicBool,
}

/// Jobs in a row run by synchronizing threads after which enqueues stop
/// waking the worker (see the module docs).
const CALLER_DRIVEN: u32 = 8;
/// How often a watching worker looks at the queue; the longest a job
/// waits for it is two of these (one to be seen, one with nothing
/// completing).
const WATCH_SLICE: Duration = Duration::from_millis(2);
/// Slices with nothing enqueued after which a watching worker parks.
const WATCH_IDLE: u32 = 10;

/// How long one idle wait lasts before it is simply renewed.
const IDLE: Duration = Duration::from_secs(3600);

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wakes the worker to run the queue now, watching or not (work left
    /// behind by a synchronizing thread, shutdown).
    fn bump_work(&self) {
        self.driven.store(0, Ordering::Relaxed);
        self.urgent.store(true, Ordering::SeqCst);
        self.work_version.fetch_add(1, Ordering::SeqCst);
        self.work.notify();
    }

    /// Announces an enqueued job: wakes the worker unless it is watching
    /// the queue (a caller-driven stream, see the module docs). The
    /// version is bumped before `watching` is read, and the worker clears
    /// `watching` before it reads the version to park: one of the two sees
    /// the other, so a parking worker never misses the job.
    fn announce(&self) {
        self.work_version.fetch_add(1, Ordering::SeqCst);
        if !self.watching.load(Ordering::SeqCst) {
            self.work.notify();
        }
    }

    /// True once the last [`CALLER_DRIVEN`] jobs were run by synchronizing
    /// threads.
    fn caller_driven(&self) -> bool {
        self.driven.load(Ordering::Relaxed) >= CALLER_DRIVEN
    }

    /// Counts a completed job and wakes the threads in `synchronize` if
    /// one of them waits for this count. The woken ones register again
    /// ([`Shared::wait_for`]) if they need more.
    fn count_done(&self) {
        let done = self.completed.fetch_add(1, Ordering::SeqCst) + 1;
        if done >= self.wanted.load(Ordering::SeqCst) {
            self.wanted.store(u64::MAX, Ordering::SeqCst);
            self.done_wakes.fetch_add(1, Ordering::Relaxed);
            self.done.notify();
        }
    }

    /// True once `target` jobs completed; otherwise registers `target` for
    /// [`Shared::count_done`] (before the caller sleeps: checked after the
    /// registration, so a completion cannot slip between them).
    fn wait_for(&self, target: u64) -> bool {
        self.wanted.fetch_min(target, Ordering::SeqCst);
        self.completed.load(Ordering::SeqCst) >= target
    }

    /// Runs the front job (called with `running` just set by the caller).
    fn run_one<'a>(&'a self, mut st: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        let Some(job) = st.queue.pop_front() else {
            st.running = false;
            return st;
        };
        let mode = if st.error.is_some() {
            JobMode::Skip
        } else {
            JobMode::Run
        };
        drop(st);
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(mode)))
            .unwrap_or_else(|panic| Err(Error::UserTask(panic_message(&panic))));
        let mut st = self.lock();
        if let Err(e) = result
            && st.error.is_none()
        {
            tracing::debug!(error = %e, "host stream task failed");
            st.error = Some(e);
        }
        st.running = false;
        self.count_done();
        st
    }
}

pub(crate) fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        format!("panicked: {s}")
    } else if let Some(s) = panic.downcast_ref::<String>() {
        format!("panicked: {s}")
    } else {
        "panicked".to_string()
    }
}

/// An in-order queue of CPU work (the host backend's stream).
///
/// # Examples
/// ```
/// use std::sync::{Arc, Mutex};
/// use streamcomm::host::{HostBuffer, HostStream};
/// let stream = HostStream::new().unwrap();
/// // A buffer that host work on the stream writes is shared explicitly.
/// let buf = Arc::new(Mutex::new(HostBuffer::<u32>::zeroed(4)));
/// let b = buf.clone();
/// stream.host_fn(move || b.lock().unwrap().with_mut(|s| s.fill(7))).unwrap();
/// stream.synchronize().unwrap();
/// assert_eq!(buf.lock().unwrap().to_vec(), vec![7; 4]);
/// ```
pub struct HostStream {
    shared: Arc<Shared>,
    worker: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for HostStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostStream")
            .field("enqueued", &self.shared.enqueued.load(Ordering::Relaxed))
            .field("completed", &self.shared.completed.load(Ordering::Relaxed))
            .finish()
    }
}

impl HostStream {
    /// A stream whose waits (doorbells, events) time out after the default 300 s.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// let stream = HostStream::new()?;
    /// stream.host_fn(|| println!("runs on the stream's worker thread"))?;
    /// stream.synchronize()?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Os`] when the worker thread cannot be started.
    pub fn new() -> Result<HostStream> {
        HostStream::with_timeout(DEFAULT_TIMEOUT)
    }

    /// A stream whose doorbell and event waits time out after `timeout`.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// use std::time::Duration;
    /// let stream = HostStream::with_timeout(Duration::from_secs(5))?;
    /// assert_eq!(stream.timeout(), Duration::from_secs(5));
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Os`] when the worker thread cannot be started.
    pub fn with_timeout(timeout: Duration) -> Result<HostStream> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            work_version: AtomicU64::new(0),
            work: Notifier::new(),
            wanted: AtomicU64::new(u64::MAX),
            done: Notifier::new(),
            done_wakes: AtomicU64::new(0),
            enqueued: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            timeout,
            driven: AtomicU32::new(0),
            watching: AtomicBool::new(false),
            urgent: AtomicBool::new(false),
        });
        let worker_shared = shared.clone();
        let worker = std::thread::Builder::new()
            .name("streamcomm-stream".into())
            .spawn(move || worker_loop(&worker_shared))
            .map_err(|e| Error::os("spawn host stream worker", e))?;
        Ok(HostStream {
            shared,
            worker: Some(worker),
        })
    }

    /// Enqueues a task (or records it, while capturing).
    ///
    /// # Errors
    /// None today; fallible for symmetry with the CUDA backend.
    pub(crate) fn enqueue(&self, task: Arc<dyn Task>) -> Result<()> {
        let mut st = self.shared.lock();
        if let Some(graph) = st.capture.as_mut() {
            graph.push(task);
            return Ok(());
        }
        st.queue.push_back(task.prepare());
        self.shared.enqueued.fetch_add(1, Ordering::Relaxed);
        drop(st);
        self.shared.announce();
        Ok(())
    }

    /// Has the worker run the queue now, also on a caller-driven stream
    /// (see the module docs): for work another thread or stream waits for.
    pub(crate) fn wake_worker(&self) {
        self.shared.bump_work();
    }

    /// Enqueues already-prepared jobs as one unit (a graph launch).
    pub(crate) fn enqueue_job(&self, job: Job) -> Result<()> {
        let mut st = self.shared.lock();
        if st.capture.is_some() {
            return Err(Error::InvalidUsage(
                "cannot launch a graph on a stream that is capturing".into(),
            ));
        }
        st.queue.push_back(job);
        self.shared.enqueued.fetch_add(1, Ordering::Relaxed);
        drop(st);
        self.shared.announce();
        Ok(())
    }

    /// Makes this stream's later work wait until `event`'s last recorded
    /// point completes (`cuStreamWaitEvent`; cudarc's `CudaStream::wait`).
    ///
    /// # Stream semantics
    /// Returns at once; the wait runs on this stream. An event never
    /// recorded is complete, so waiting on it does nothing.
    ///
    /// # Examples
    /// ```
    /// use streamcomm::host::{HostEvent, HostStream};
    /// let (a, b) = (HostStream::new()?, HostStream::new()?);
    /// let ev = HostEvent::new();
    /// a.host_fn(|| std::thread::sleep(std::time::Duration::from_millis(5)))?;
    /// ev.record(&a)?;
    /// b.wait(&ev)?; // b's later work starts after a's sleep
    /// b.synchronize()?;
    /// assert!(ev.query());
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidUsage`] while this stream is capturing (a replay would
    /// wait for a stale generation). The wait itself fails the stream with
    /// [`Error::Timeout`] after the stream's timeout.
    pub fn wait(&self, event: &HostEvent) -> Result<()> {
        event.enqueue_wait(self)
    }

    /// Enqueues user work, the host backend's kernel launch (`cuLaunchHostFunc`).
    ///
    /// A panic inside `f` is caught and becomes the stream's error
    /// ([`Error::UserTask`]).
    ///
    /// # Stream semantics
    /// Runs after everything enqueued before it, before everything after it.
    ///
    /// # Graph capture
    /// Capturable; every replay calls `f` again.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::{Doorbell, HostBuffer, HostStream, WaitCmp};
    /// # let stream = HostStream::new()?;
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use std::sync::Arc;
    /// let count = Arc::new(AtomicU32::new(0));
    /// let c = count.clone();
    /// stream.host_fn(move || {
    ///     c.fetch_add(1, Ordering::Relaxed);
    /// })?;
    /// stream.synchronize()?;
    /// assert_eq!(count.load(Ordering::Relaxed), 1);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// None today; fallible for symmetry with the CUDA backend.
    pub fn host_fn(&self, f: impl Fn() + Send + Sync + 'static) -> Result<()> {
        self.enqueue(Arc::new(FnTask {
            name: "host_fn",
            f: Arc::new(move || {
                f();
                Ok(())
            }),
        }))
    }

    /// Enqueues fallible user work; an `Err` becomes the stream's error.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::{Doorbell, HostBuffer, HostStream, WaitCmp};
    /// # let stream = HostStream::new()?;
    /// stream.try_host_fn(|| Err("disk full".to_string()))?; // enqueued fine
    /// let e = stream.synchronize().unwrap_err(); // the stream keeps the error
    /// assert!(matches!(e, streamcomm::Error::UserTask(_)), "{e}");
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`HostStream::host_fn`].
    pub fn try_host_fn(
        &self,
        f: impl Fn() -> std::result::Result<(), String> + Send + Sync + 'static,
    ) -> Result<()> {
        self.enqueue(Arc::new(FnTask {
            name: "try_host_fn",
            f: Arc::new(move || f().map_err(Error::UserTask)),
        }))
    }

    /// Enqueues a write of `value` to `doorbell` (`cuStreamWriteValue32`).
    ///
    /// # Graph capture
    /// Capturable; the value is fixed at capture.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::{Doorbell, HostBuffer, HostStream, WaitCmp};
    /// # let stream = HostStream::new()?;
    /// let bell = Doorbell::new();
    /// let other = HostStream::new()?;
    /// stream.wait_value32(&bell, 1, WaitCmp::Eq)?; // `stream` waits here...
    /// other.write_value32(&bell, 1)?; // ...until `other` rings the doorbell
    /// stream.synchronize()?;
    /// assert_eq!(bell.load(), 1);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// None today.
    pub fn write_value32(&self, doorbell: &Doorbell, value: u32) -> Result<()> {
        let d = doorbell.clone();
        self.enqueue(Arc::new(FnTask {
            name: "write_value32",
            f: Arc::new(move || {
                d.store(value);
                Ok(())
            }),
        }))
    }

    /// Enqueues a wait until `doorbell` compares with `value`
    /// (`cuStreamWaitValue32`). A doorbell set to [`Doorbell::POISON`] fails
    /// the wait (and the stream) with [`Error::Aborted`]; so does a wait longer
    /// than the stream's timeout ([`Error::Timeout`]).
    ///
    /// # Graph capture
    /// Capturable; the value is fixed at capture.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::{Doorbell, HostBuffer, HostStream, WaitCmp};
    /// # let stream = HostStream::new()?;
    /// let bell = Doorbell::new();
    /// stream.wait_value32(&bell, 2, WaitCmp::Geq)?;
    /// stream.write_value32(&bell, 0)?; // the consumer resets: replay-safe
    /// bell.store(3); // the host (or a proxy) releases the stream
    /// stream.synchronize()?;
    /// assert_eq!(bell.load(), 0);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// None at enqueue time.
    pub fn wait_value32(&self, doorbell: &Doorbell, value: u32, cmp: WaitCmp) -> Result<()> {
        let d = doorbell.clone();
        let timeout = self.shared.timeout;
        self.enqueue(Arc::new(FnTask {
            name: "wait_value32",
            f: Arc::new(move || {
                let policy = WaitPolicy::new(200, timeout);
                d.wait(cmp, value, &policy).map_err(|e| match e {
                    None => Error::Aborted("doorbell was poisoned by a failed producer".into()),
                    Some(WaitError::Timeout(w)) => Error::Timeout {
                        op: "wait_value32".into(),
                        what: format!("doorbell {cmp:?} {value}"),
                        waited_ms: w.as_millis() as u64,
                    },
                    Some(WaitError::Aborted) => Error::Aborted("wait_value32".into()),
                })
            }),
        }))
    }

    /// Starts recording: tasks enqueued from now on are kept for a [`Graph`]
    /// instead of running.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::{Doorbell, HostBuffer, HostStream, WaitCmp};
    /// # let stream = HostStream::new()?;
    /// let buf = std::sync::Arc::new(std::sync::Mutex::new(HostBuffer::<u32>::zeroed(1)));
    /// stream.begin_capture()?;
    /// assert!(stream.is_capturing());
    /// let b = buf.clone();
    /// stream.host_fn(move || b.lock().unwrap().with_mut(|s| s[0] += 1))?; // recorded, not run
    /// let graph = stream.end_capture()?;
    /// assert!(!stream.is_capturing());
    /// for _ in 0..3 {
    ///     graph.launch(&stream)?; // each launch runs the captured work again
    /// }
    /// stream.synchronize()?;
    /// assert_eq!(buf.lock().unwrap().to_vec(), vec![3]);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidUsage`] when already capturing.
    pub fn begin_capture(&self) -> Result<()> {
        let mut st = self.shared.lock();
        if st.capture.is_some() {
            return Err(Error::InvalidUsage("stream is already capturing".into()));
        }
        st.capture = Some(Vec::new());
        Ok(())
    }

    /// Ends recording and returns the captured graph.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::{Doorbell, HostBuffer, HostStream, WaitCmp};
    /// # let stream = HostStream::new()?;
    /// let buf = std::sync::Arc::new(std::sync::Mutex::new(HostBuffer::<u32>::zeroed(1)));
    /// stream.begin_capture()?;
    /// assert!(stream.is_capturing());
    /// let b = buf.clone();
    /// stream.host_fn(move || b.lock().unwrap().with_mut(|s| s[0] += 1))?; // recorded, not run
    /// let graph = stream.end_capture()?;
    /// assert!(!stream.is_capturing());
    /// for _ in 0..3 {
    ///     graph.launch(&stream)?; // each launch runs the captured work again
    /// }
    /// stream.synchronize()?;
    /// assert_eq!(buf.lock().unwrap().to_vec(), vec![3]);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidUsage`] when the stream was not capturing.
    pub fn end_capture(&self) -> Result<Graph> {
        let mut st = self.shared.lock();
        match st.capture.take() {
            Some(tasks) => Ok(Graph::new(tasks)),
            None => Err(Error::InvalidUsage(
                "end_capture without begin_capture".into(),
            )),
        }
    }

    /// True while capturing.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::{Doorbell, HostBuffer, HostStream, WaitCmp};
    /// # let stream = HostStream::new()?;
    /// assert!(!stream.is_capturing());
    /// stream.begin_capture()?;
    /// assert!(stream.is_capturing());
    /// stream.end_capture()?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn is_capturing(&self) -> bool {
        self.shared.lock().capture.is_some()
    }

    /// Blocks until everything enqueued so far has finished, running queued
    /// work on the calling thread when the worker is not already busy.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::{Doorbell, HostBuffer, HostStream, WaitCmp};
    /// # let stream = HostStream::new()?;
    /// let buf = std::sync::Arc::new(std::sync::Mutex::new(HostBuffer::<u8>::zeroed(1)));
    /// let b = buf.clone();
    /// stream.host_fn(move || b.lock().unwrap().with_mut(|s| s[0] = 9))?;
    /// stream.synchronize()?; // everything enqueued so far has run
    /// assert_eq!(buf.lock().unwrap().to_vec(), vec![9]);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// The stream's sticky error, if any task failed.
    pub fn synchronize(&self) -> Result<()> {
        let shared = &self.shared;
        let target = shared.enqueued.load(Ordering::Relaxed);
        // When the worker is running a job, sleep right away rather than
        // spin: the job is usually waiting on another rank, and spinning here
        // would take a core from that rank (measured: 0.7 µs vs 45 µs p50 for
        // a 2-rank stream barrier).
        let policy = WaitPolicy::new(0, IDLE).with_yields(0);
        loop {
            if shared.completed.load(Ordering::Acquire) >= target {
                break;
            }
            let mut st = shared.lock();
            if !st.running && !st.queue.is_empty() {
                st.running = true;
                let d = shared.driven.load(Ordering::Relaxed);
                if d < CALLER_DRIVEN {
                    shared.driven.store(d + 1, Ordering::Relaxed);
                }
                let st = shared.run_one(st);
                if shared.completed.load(Ordering::Acquire) >= target && !st.queue.is_empty() {
                    // This thread stops here: the worker takes the rest.
                    drop(st);
                    shared.bump_work();
                }
                continue;
            }
            drop(st);
            // Woken only once the target is reached: meanwhile the worker
            // runs the queue. Each sleep slice also ends here, and the
            // loop looks at the queue again.
            let _ = shared
                .done
                .wait_until(&policy, || shared.wait_for(target).then_some(()));
        }
        match &shared.lock().error {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// True when all enqueued work has finished (never blocks).
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::{Doorbell, HostBuffer, HostStream, WaitCmp};
    /// # let stream = HostStream::new()?;
    /// stream.synchronize()?;
    /// assert!(stream.query()); // nothing pending
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn query(&self) -> bool {
        self.shared.completed.load(Ordering::Acquire)
            >= self.shared.enqueued.load(Ordering::Relaxed)
    }

    /// The sticky error, if a task has failed.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::{Doorbell, HostBuffer, HostStream, WaitCmp};
    /// # let stream = HostStream::new()?;
    /// assert!(stream.error().is_none());
    /// stream.try_host_fn(|| Err("bad input".to_string()))?;
    /// let _ = stream.synchronize();
    /// assert!(stream.error().is_some());
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn error(&self) -> Option<Error> {
        self.shared.lock().error.clone()
    }

    /// Timeout applied to this stream's doorbell and event waits.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// let stream = HostStream::new()?;
    /// assert_eq!(stream.timeout().as_secs(), 300);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn timeout(&self) -> Duration {
        self.shared.timeout
    }
}

thread_local! {
    /// True on a host stream's worker thread.
    static WORKER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// True when the calling thread is a host stream's worker (what a
/// communicator may bind to a core: `comm::affinity`).
pub(crate) fn on_worker_thread() -> bool {
    WORKER.get()
}

fn worker_loop(shared: &Shared) {
    WORKER.set(true);
    // The worker goes straight to sleep when idle: a thread in `synchronize`
    // usually runs short jobs itself, and a spinning worker would only steal
    // the core from the ranks.
    // Its queue always announces new work (`announce`), so its sleeps may
    // be long: an idle worker wakes once a second. A watching worker (see
    // the module docs) wakes every `WATCH_SLICE`.
    let parked = WaitPolicy::new(0, IDLE)
        .with_yields(0)
        .with_max_slice(crate::wait::IDLE_WORKER_SLICE);
    let watch = WaitPolicy::new(0, WATCH_SLICE).with_yields(0);
    // While watching: the completions counted when a job was last seen
    // waiting, the enqueues counted at the last look, and how many looks in
    // a row saw nothing new enqueued.
    let mut waiting_since: Option<u64> = None;
    let mut last_enqueued = 0;
    let mut idle_looks = 0;
    loop {
        let seen = shared.work_version.load(Ordering::SeqCst);
        let urgent = shared.urgent.swap(false, Ordering::SeqCst);
        let watching = !urgent && shared.caller_driven() && idle_looks <= WATCH_IDLE;
        shared.watching.store(watching, Ordering::SeqCst);
        let mut st = shared.lock();
        if !st.running && !st.queue.is_empty() {
            let completed = shared.completed.load(Ordering::Acquire);
            if !watching || waiting_since == Some(completed) {
                // Nobody drains this stream (or not in time): run the
                // queue, and have enqueues wake the worker again.
                st.running = true;
                shared.driven.store(0, Ordering::Relaxed);
                shared.watching.store(false, Ordering::SeqCst);
                waiting_since = None;
                drop(shared.run_one(st));
                continue;
            }
            // A caller may be about to synchronize: look again after a
            // slice, and run the job then if nothing completed meanwhile.
            waiting_since = Some(completed);
            idle_looks = 0;
        } else {
            waiting_since = None;
            let enqueued = shared.enqueued.load(Ordering::Relaxed);
            if enqueued == last_enqueued {
                idle_looks += 1;
            } else {
                (last_enqueued, idle_looks) = (enqueued, 0);
            }
        }
        if st.shutdown && st.queue.is_empty() {
            return;
        }
        drop(st);
        if watching {
            let _ = shared.work.wait_until(&watch, || {
                let new_work =
                    waiting_since.is_none() && shared.work_version.load(Ordering::SeqCst) != seen;
                (new_work || shared.urgent.load(Ordering::SeqCst)).then_some(())
            });
        } else {
            idle_looks = 0;
            let _ = shared.work.wait_until(&parked, || {
                (shared.work_version.load(Ordering::SeqCst) != seen).then_some(())
            });
        }
    }
}

impl Drop for HostStream {
    /// Finishes enqueued work (each task's own waits are bounded by timeouts),
    /// then stops the worker. Never panics.
    fn drop(&mut self) {
        let _ = self.synchronize();
        self.shared.lock().shutdown = true;
        self.shared.bump_work();
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_the_jobs_enqueued_and_completed() {
        let stream = HostStream::new().unwrap();
        for _ in 0..3 {
            stream.host_fn(|| {}).unwrap();
        }
        stream.synchronize().unwrap();
        assert_eq!(
            format!("{stream:?}"),
            "HostStream { enqueued: 3, completed: 3 }"
        );
    }

    /// Enqueues a job that waits for `gate`, then `quick` empty jobs.
    fn gated_queue(stream: &HostStream, gate: &Doorbell, quick: usize) {
        stream.wait_value32(gate, 1, WaitCmp::Geq).unwrap();
        for _ in 0..quick {
            stream.host_fn(|| {}).unwrap();
        }
    }

    /// Makes `stream` caller-driven: jobs enqueued and drained by
    /// `synchronize` on this thread, until the worker watches.
    fn drive(stream: &HostStream) {
        for _ in 0..CALLER_DRIVEN + 2 {
            stream.host_fn(|| {}).unwrap();
            stream.synchronize().unwrap();
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !stream.shared.watching.load(Ordering::SeqCst) {
            assert!(
                std::time::Instant::now() < deadline,
                "the worker never watched"
            );
            // The worker decides at its next look; give it one.
            stream.host_fn(|| {}).unwrap();
            stream.synchronize().unwrap();
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_caller_driven_stream_still_runs_work_nobody_synchronizes() {
        let stream = HostStream::new().unwrap();
        drive(&stream);
        assert!(stream.shared.caller_driven());
        // Enqueued, not synchronized: the watching worker takes it within
        // two slices (allow far more on a loaded machine).
        let ran = Arc::new(AtomicU64::new(0));
        let r = ran.clone();
        let started = std::time::Instant::now();
        stream
            .host_fn(move || {
                r.store(1, Ordering::SeqCst);
            })
            .unwrap();
        // Waits for what it checks: the job counted as done (it stores its
        // flag before the stream counts it), not just its flag.
        while !stream.query() {
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "a job on a caller-driven stream never completed (ran: {})",
                ran.load(Ordering::SeqCst)
            );
            std::thread::sleep(Duration::from_micros(200));
        }
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        // Its run ended the caller-driven spell: enqueues wake the worker
        // again.
        assert!(!stream.shared.caller_driven());
    }

    #[test]
    fn recording_an_event_ends_the_caller_driven_spell() {
        let stream = HostStream::new().unwrap();
        drive(&stream);
        let ran = Arc::new(AtomicU64::new(0));
        let r = ran.clone();
        stream
            .host_fn(move || {
                r.store(1, Ordering::SeqCst);
            })
            .unwrap();
        let ev = HostEvent::new();
        ev.record(&stream).unwrap();
        // The worker was told to run the queue now, not at its next look.
        assert!(!stream.shared.caller_driven());
        ev.synchronize().unwrap();
        assert_eq!(ran.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn work_left_behind_by_a_synchronize_is_run_by_the_worker() {
        let stream = Arc::new(HostStream::new().unwrap());
        drive(&stream);
        // A thread synchronizes up to a gated job, which it runs itself;
        // meanwhile this thread enqueues more and opens the gate without
        // synchronizing. The synchronizing thread stops at its target, and
        // the worker must take the rest at once.
        let gate = Doorbell::new();
        stream.wait_value32(&gate, 1, WaitCmp::Geq).unwrap();
        let syncer = {
            let stream = stream.clone();
            std::thread::spawn(move || stream.synchronize())
        };
        // Enqueue only once the gated job runs (the target is then fixed).
        while !stream.shared.lock().running {
            std::thread::yield_now();
        }
        let ran = Arc::new(AtomicU64::new(0));
        for _ in 0..20 {
            let ran = ran.clone();
            stream
                .host_fn(move || {
                    ran.fetch_add(1, Ordering::SeqCst);
                })
                .unwrap();
        }
        gate.store(1);
        syncer.join().unwrap().unwrap();
        let started = std::time::Instant::now();
        while ran.load(Ordering::SeqCst) < 20 {
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "jobs left unrun"
            );
            std::thread::sleep(Duration::from_micros(200));
        }
        assert!(stream.query());
    }

    #[test]
    fn a_synchronizing_thread_is_woken_once_not_per_job() {
        let stream = HostStream::new().unwrap();
        let gate = Doorbell::new();
        gated_queue(&stream, &gate, 50);
        let opener = {
            let gate = gate.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                gate.store(1);
            })
        };
        stream.synchronize().unwrap();
        opener.join().unwrap();
        assert!(stream.query());
        // The worker ran the 51 jobs while this thread slept (or this
        // thread ran some itself): at most the one wake for its target.
        let wakes = stream.shared.done_wakes.load(Ordering::Relaxed);
        assert!(wakes <= 1, "woken {wakes} times for one synchronize");
    }

    #[test]
    fn synchronizers_with_different_targets_all_return() {
        let stream = Arc::new(HostStream::new().unwrap());
        let gate = Doorbell::new();
        let ran = Arc::new(AtomicU64::new(0));
        stream.wait_value32(&gate, 1, WaitCmp::Geq).unwrap();
        let mut waiters = Vec::new();
        for batch in 1..=4u64 {
            for _ in 0..10 {
                let ran = ran.clone();
                stream
                    .host_fn(move || {
                        ran.fetch_add(1, Ordering::SeqCst);
                    })
                    .unwrap();
            }
            // Each waiter wants everything enqueued so far: 1 + 10 * batch.
            let (s, r) = (stream.clone(), ran.clone());
            waiters.push(std::thread::spawn(move || {
                s.synchronize().unwrap();
                assert!(r.load(Ordering::SeqCst) >= 10 * batch);
            }));
        }
        std::thread::sleep(Duration::from_millis(20));
        gate.store(1);
        let start = std::time::Instant::now();
        for w in waiters {
            w.join().unwrap();
        }
        assert_eq!(ran.load(Ordering::SeqCst), 40);
        assert!(start.elapsed() < Duration::from_secs(5));
    }
}
