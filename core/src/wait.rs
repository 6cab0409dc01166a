//! Waiting without burning the machine: spin, then yield, then sleep on a futex.
//!
//! Every wait in streamcomm (a slot arriving, a credit coming back, a doorbell,
//! a stream draining) goes through [`Notifier::wait_until`]. The machines we
//! run on taught us (`docs/design/architecture.md`) that waking a parked thread costs
//! microseconds while spinning without yielding costs milliseconds once ranks
//! outnumber cores, so a waiter spins briefly, yields for a while, and only
//! then sleeps on a futex that the writer wakes. A [`Notifier`] is
//! `#[repr(C)]` plain atomics, so it can live in shared memory and wake a
//! waiter in another process (the futex is not process-private).
//!
//! Every wait is bounded: it checks an abort flag and a deadline, and sleeps in
//! short slices, so a lost wake-up costs at most one slice, never a hang.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU32, Ordering, fence};
use std::time::{Duration, Instant};

/// First futex sleep of a wait; bounds the cost of a missed wake-up and the
/// latency of noticing an abort while the wait is young.
const SLEEP_SLICE: Duration = Duration::from_millis(2);
/// Longest futex sleep by default: each slice that ends with nothing ready
/// doubles the next one up to this, so a thread idle for long wakes 60
/// times a second, not 500. (In the Soft-RoCE guest, two idle stream
/// threads waking every 2 ms took the vCPUs of a 2-rank ping-pong from
/// under it: a sixth of the run's samples were in their sleeps, clock
/// reads and context switches.) An idle host-stream worker, whose queue
/// always announces new work, sleeps up to [`IDLE_WORKER_SLICE`] instead.
const MAX_SLEEP_SLICE: Duration = Duration::from_millis(16);
/// Longest futex sleep of an idle host-stream worker: one wake a second.
/// Measured in the Soft-RoCE guest before it (a 2-rank host-call ping-pong
/// on 2 vCPUs, 5 s of `/proc` counters): each rank's idle worker woke ~70
/// times a second, each wake-up a context switch on a vCPU a rank spins on.
pub(crate) const IDLE_WORKER_SLICE: Duration = Duration::from_secs(1);
/// Default `yield_now` calls between the spin phase and the first sleep.
pub const DEFAULT_YIELDS: u32 = 64;

/// Why a wait ended without its condition becoming true.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitError {
    /// The deadline passed; carries how long the wait lasted.
    Timeout(Duration),
    /// The abort flag was raised.
    Aborted,
}

/// How long to spin and when to give up.
#[derive(Clone, Copy)]
pub struct WaitPolicy<'a> {
    /// Busy-poll iterations before yielding.
    pub spin: u32,
    /// `yield_now` calls after spinning, before sleeping on the futex.
    pub yields: u32,
    /// Give up after this long, counted from the wait's first sleep (the
    /// spin and the yields before it are bounded by their counts).
    pub timeout: Duration,
    /// Checked while waiting; when non-zero the wait ends with
    /// [`WaitError::Aborted`] (a word, so it can live in shared memory and be
    /// raised by another process).
    pub abort: Option<&'a AtomicU32>,
    /// Called once per wait, when the waiter is about to sleep on the futex
    /// (already counted as a sleeper): for a waker that only watches for
    /// sleepers when told to (the verbs proxy).
    pub on_sleep: Option<&'a (dyn Fn() + Sync)>,
    /// Longest futex sleep before the condition is looked at again (the
    /// slices double up to it from 2 ms). 16 ms by default, so that a
    /// change nobody announces (another process's memory) is still seen;
    /// a waiter whose condition is always announced through the notifier
    /// may sleep longer ([`WaitPolicy::with_max_slice`]).
    pub max_slice: Duration,
}

impl std::fmt::Debug for WaitPolicy<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WaitPolicy")
            .field("spin", &self.spin)
            .field("yields", &self.yields)
            .field("timeout", &self.timeout)
            .field("abort", &self.abort)
            .field("on_sleep", &self.on_sleep.is_some())
            .field("max_slice", &self.max_slice)
            .finish()
    }
}

impl<'a> WaitPolicy<'a> {
    /// A policy with the given spin count and timeout and no abort flag.
    pub fn new(spin: u32, timeout: Duration) -> WaitPolicy<'a> {
        WaitPolicy {
            spin,
            yields: DEFAULT_YIELDS,
            timeout,
            abort: None,
            on_sleep: None,
            max_slice: MAX_SLEEP_SLICE,
        }
    }

    /// The same policy with futex sleeps of up to `max_slice`: for a
    /// condition that only changes with a [`Notifier::notify`] (an idle
    /// worker's queue), which then wakes the waiter at once; the slices
    /// only bound the cost of a lost wake-up.
    pub fn with_max_slice(self, max_slice: Duration) -> WaitPolicy<'a> {
        WaitPolicy {
            max_slice: max_slice.max(SLEEP_SLICE),
            ..self
        }
    }

    /// The same policy, calling `f` when a waiter is about to sleep.
    pub fn with_on_sleep(self, f: &'a (dyn Fn() + Sync)) -> WaitPolicy<'a> {
        WaitPolicy {
            on_sleep: Some(f),
            ..self
        }
    }

    /// The same policy with `yields` yield calls before sleeping.
    pub fn with_yields(self, yields: u32) -> WaitPolicy<'a> {
        WaitPolicy { yields, ..self }
    }

    /// The same policy, also watching `abort`.
    pub fn with_abort(self, abort: &'a AtomicU32) -> WaitPolicy<'a> {
        WaitPolicy {
            abort: Some(abort),
            ..self
        }
    }

    /// Whether the abort flag is raised.
    pub(crate) fn aborted(&self) -> bool {
        self.abort.is_some_and(|a| a.load(Ordering::Relaxed) != 0)
    }
}

thread_local! {
    /// Work this thread keeps doing while it waits ([`set_thread_slice_hook`]).
    static SLICE_HOOK: RefCell<Option<Box<dyn Fn()>>> = const { RefCell::new(None) };
}

/// Makes every wait on the calling thread run `hook` before each of its
/// sleeps, and sleep no longer than the first slice (2 ms) at a time: for
/// the progress engine's thread, whose own work (watching peers, reaping
/// completions) must go on while one of its jobs waits.
/// `None` removes it.
pub(crate) fn set_thread_slice_hook(hook: Option<Box<dyn Fn()>>) {
    SLICE_HOOK.with(|h| *h.borrow_mut() = hook);
}

/// Runs this thread's slice hook; false when it has none.
pub(crate) fn run_slice_hook() -> bool {
    SLICE_HOOK.with(|h| match h.try_borrow().as_deref() {
        Ok(Some(hook)) => {
            hook();
            true
        }
        _ => false,
    })
}

/// A wake-up channel: a sequence word to sleep on and a count of sleepers.
///
/// The writer changes the shared state (a counter, a doorbell) and then calls
/// [`Notifier::notify`]; the reader calls [`Notifier::wait_until`] with a
/// predicate over that state. Both fields are plain atomics so the struct may
/// be placed in shared memory mapped by several processes.
#[repr(C)]
#[derive(Debug, Default)]
pub struct Notifier {
    seq: AtomicU32,
    sleepers: AtomicU32,
}

impl Notifier {
    /// A notifier with nobody waiting.
    pub const fn new() -> Notifier {
        Notifier {
            seq: AtomicU32::new(0),
            sleepers: AtomicU32::new(0),
        }
    }

    /// True while a waiter sleeps (or is about to) on this notifier.
    pub fn has_sleepers(&self) -> bool {
        self.sleepers.load(Ordering::SeqCst) != 0
    }

    /// Wakes every sleeper, if there is one. Call after publishing the state
    /// change (the state store may be `Release`; this adds the needed fence).
    #[inline]
    pub fn notify(&self) {
        fence(Ordering::SeqCst);
        if self.sleepers.load(Ordering::Relaxed) != 0 {
            self.seq.fetch_add(1, Ordering::SeqCst);
            futex_wake(&self.seq);
        }
    }

    /// Waits until `ready` returns `Some`, spinning, yielding, then sleeping.
    ///
    /// # Errors
    /// [`WaitError::Timeout`] after `policy.timeout`, [`WaitError::Aborted`]
    /// as soon as the abort flag is seen.
    #[inline]
    pub fn wait_until<T>(
        &self,
        policy: &WaitPolicy<'_>,
        mut ready: impl FnMut() -> Option<T>,
    ) -> Result<T, WaitError> {
        for i in 0..policy.spin {
            if let Some(v) = ready() {
                return Ok(v);
            }
            if i % 256 == 255 && policy.aborted() {
                return Err(WaitError::Aborted);
            }
            std::hint::spin_loop();
        }
        self.wait_slow(policy, &mut ready)
    }

    #[cold]
    fn wait_slow<T>(
        &self,
        policy: &WaitPolicy<'_>,
        ready: &mut impl FnMut() -> Option<T>,
    ) -> Result<T, WaitError> {
        for _ in 0..policy.yields {
            if let Some(v) = ready() {
                return Ok(v);
            }
            if policy.aborted() {
                return Err(WaitError::Aborted);
            }
            std::thread::yield_now();
        }
        // The clock is read only once the wait is about to sleep: most waits
        // end while spinning or yielding, and in a guest without a usable
        // TSC (Soft-RoCE under TCG) each read is a system call. The timeout
        // therefore counts from here; the spin and yields before are bounded
        // by their counts.
        let start = Instant::now();
        let mut told = false;
        let mut slice = SLEEP_SLICE;
        loop {
            let seq = self.seq.load(Ordering::SeqCst);
            self.sleepers.fetch_add(1, Ordering::SeqCst);
            if let (false, Some(f)) = (told, policy.on_sleep) {
                told = true;
                f();
            }
            if let Some(v) = ready() {
                self.sleepers.fetch_sub(1, Ordering::SeqCst);
                return Ok(v);
            }
            let waited = start.elapsed();
            if policy.aborted() {
                self.sleepers.fetch_sub(1, Ordering::SeqCst);
                return Err(WaitError::Aborted);
            }
            if waited >= policy.timeout {
                self.sleepers.fetch_sub(1, Ordering::SeqCst);
                return Err(WaitError::Timeout(waited));
            }
            let hooked = run_slice_hook();
            futex_wait(&self.seq, seq, slice.min(policy.timeout - waited));
            self.sleepers.fetch_sub(1, Ordering::SeqCst);
            if !hooked {
                slice = (slice * 2).min(policy.max_slice);
            }
        }
    }
}

/// Sleeps while `*word == expected`, at most `timeout` (spurious returns allowed).
#[cfg(target_os = "linux")]
fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word` is a valid, aligned 32-bit atomic for the duration of the
    // call; FUTEX_WAIT only reads it. The timespec outlives the call. The
    // operation is not FUTEX_PRIVATE so it also works on shared mappings.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
        );
    }
}

/// Wakes every thread sleeping on `word`.
#[cfg(target_os = "linux")]
fn futex_wake(word: &AtomicU32) {
    // SAFETY: `word` is a valid, aligned 32-bit atomic; FUTEX_WAKE does not
    // access memory through it beyond identifying the futex.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
    }
}

#[cfg(not(target_os = "linux"))]
fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    if word.load(Ordering::SeqCst) == expected {
        std::thread::sleep(timeout.min(Duration::from_micros(50)));
    }
}

#[cfg(not(target_os = "linux"))]
fn futex_wake(_word: &AtomicU32) {}

/// Number of CPUs this process may run on.
pub(crate) fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Spin budget for `ranks_on_host` ranks sharing this machine: the configured
/// value, or none at all when ranks outnumber cores. Spinning then only
/// steals the core from the rank we wait for; measured with 4 ranks on 2
/// cores, a 4-rank barrier took 16 µs (p50) with 250 spins and 3–6 µs with
/// none (`docs/measurements/host-shm.md`, *Barriers*).
pub(crate) fn spin_budget(configured: u32, ranks_on_host: usize) -> u32 {
    if ranks_on_host > available_cores() {
        0
    } else {
        configured
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn wakes_a_sleeping_waiter() {
        let state = Arc::new((AtomicU64::new(0), Notifier::new()));
        let s2 = state.clone();
        let t = std::thread::spawn(move || {
            let policy = WaitPolicy::new(0, Duration::from_secs(10));
            s2.1.wait_until(&policy, || {
                (s2.0.load(Ordering::Acquire) == 7).then_some(())
            })
        });
        std::thread::sleep(Duration::from_millis(30));
        state.0.store(7, Ordering::Release);
        state.1.notify();
        assert_eq!(t.join().unwrap(), Ok(()));
    }

    #[test]
    fn sees_a_change_nobody_announced_and_an_abort_while_its_sleeps_grow() {
        // No `notify`: only the sleep slices bring the waiter back to look,
        // after they have grown for a while.
        for abort in [false, true] {
            let state = Arc::new((AtomicU64::new(0), Notifier::new(), AtomicU32::new(0)));
            let s2 = state.clone();
            let t = std::thread::spawn(move || {
                let policy = WaitPolicy::new(0, Duration::from_secs(30)).with_abort(&s2.2);
                s2.1.wait_until(&policy, || {
                    (s2.0.load(Ordering::Acquire) == 7).then_some(())
                })
            });
            std::thread::sleep(Duration::from_millis(100));
            if abort {
                state.2.store(1, Ordering::Release);
            } else {
                state.0.store(7, Ordering::Release);
            }
            let want = if abort {
                Err(WaitError::Aborted)
            } else {
                Ok(())
            };
            assert_eq!(t.join().unwrap(), want);
        }
    }

    #[test]
    fn times_out_and_aborts() {
        let n = Notifier::new();
        let policy = WaitPolicy::new(10, Duration::from_millis(20));
        let r: Result<(), _> = n.wait_until(&policy, || None);
        assert!(matches!(r, Err(WaitError::Timeout(d)) if d >= Duration::from_millis(20)));
        let abort = AtomicU32::new(1);
        let policy = WaitPolicy::new(10, Duration::from_secs(10)).with_abort(&abort);
        let r: Result<(), _> = n.wait_until(&policy, || None);
        assert_eq!(r, Err(WaitError::Aborted));
    }
}
