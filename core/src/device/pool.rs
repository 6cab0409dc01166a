//! Staging memory and completion words kept for reuse: allocating pinned
//! memory costs far more than a small collective, so an operation takes
//! them from here and its released resources bring them back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use super::device_queue::{CompletionSignal, StagingMemory};
use super::direct::Direct;
use super::graveyard::Graveyard;
use super::runner::Runner;
use crate::Result;

/// Staging buffers kept at most (beyond, released ones are freed).
const MAX_KEPT_BUFFERS: usize = 64;
/// Staging bytes kept at most.
const MAX_KEPT_BYTES: usize = 1 << 30;
/// Completion words kept at most.
const MAX_KEPT_SIGNALS: usize = 256;
/// Smallest staging allocation; sizes are rounded up to powers of two.
const MIN_STAGING: usize = 4096;

/// Free staging buffers and completion words of one device.
pub(crate) struct Pool<S, G> {
    staging: Mutex<Vec<S>>,
    /// Words given back; one the runner still holds (it raises, then lets
    /// go) stays here until it does, and is handed out only then.
    signals: Mutex<Vec<Arc<G>>>,
    allocations: AtomicU64,
}

impl<S: StagingMemory, G: CompletionSignal> Default for Pool<S, G> {
    fn default() -> Self {
        Pool {
            staging: Mutex::new(Vec::new()),
            signals: Mutex::new(Vec::new()),
            allocations: AtomicU64::new(0),
        }
    }
}

impl<S: StagingMemory, G: CompletionSignal> Pool<S, G> {
    /// The smallest free buffer of at least `bytes`, else a new one from
    /// `alloc` (rounded up to a power of two).
    pub(crate) fn staging(
        &self,
        bytes: usize,
        alloc: impl FnOnce(usize) -> Result<S>,
    ) -> Result<S> {
        {
            let mut free = self.staging.lock().unwrap_or_else(|p| p.into_inner());
            let best = free
                .iter()
                .enumerate()
                .filter(|(_, s)| s.capacity() >= bytes)
                .min_by_key(|(_, s)| s.capacity())
                .map(|(i, _)| i);
            if let Some(i) = best {
                return Ok(free.swap_remove(i));
            }
        }
        self.allocations.fetch_add(1, Ordering::Relaxed);
        alloc(
            bytes
                .max(MIN_STAGING)
                .checked_next_power_of_two()
                .unwrap_or(bytes),
        )
    }

    /// Takes back a buffer no operation uses any more.
    pub(crate) fn put_staging(&self, s: S) {
        let mut free = self.staging.lock().unwrap_or_else(|p| p.into_inner());
        let kept: usize = free.iter().map(StagingMemory::capacity).sum();
        if free.len() < MAX_KEPT_BUFFERS && kept + s.capacity() <= MAX_KEPT_BYTES {
            free.push(s);
        }
    }

    /// A completion word holding 0: a free one nobody else holds any more,
    /// else a new one from `alloc`.
    pub(crate) fn signal(&self, alloc: impl FnOnce() -> Result<G>) -> Result<Arc<G>> {
        let reused = {
            let mut free = self.signals.lock().unwrap_or_else(|p| p.into_inner());
            // Only the pool can hand out a kept word, so once the pool's
            // reference is the only one it stays so.
            free.iter()
                .position(|g| Arc::strong_count(g) == 1 && Arc::weak_count(g) == 0)
                .map(|i| free.swap_remove(i))
        };
        match reused {
            Some(g) => {
                g.reset();
                Ok(g)
            }
            None => {
                self.allocations.fetch_add(1, Ordering::Relaxed);
                alloc().map(Arc::new)
            }
        }
    }

    /// Takes back a completion word no operation uses any more (the runner
    /// may still hold it for a moment: it is reused once it lets go).
    pub(crate) fn put_signal(&self, g: Arc<G>) {
        let mut free = self.signals.lock().unwrap_or_else(|p| p.into_inner());
        if free.len() < MAX_KEPT_SIGNALS {
            free.push(g);
        }
    }

    /// Allocations made so far (staging buffers and words).
    #[cfg(test)]
    pub(crate) fn allocations(&self) -> u64 {
        self.allocations.load(Ordering::Relaxed)
    }
}

/// What one communicator keeps for its device operations.
pub(crate) struct DeviceShared<S, G> {
    /// Runs the host tasks.
    pub runner: Arc<Runner>,
    /// Released resources, dropped on application threads.
    pub graveyard: Arc<Graveyard>,
    /// Reusable staging memory and completion words.
    pub pool: Arc<Pool<S, G>>,
    /// The direct path, once set up (never, where it cannot be).
    pub direct: OnceLock<Direct>,
    /// How the NIC reaches this device's memory, once probed (never where
    /// GPUDirect RDMA does not work: p2p with verbs peers is then staged).
    pub gpudirect: OnceLock<Arc<dyn super::NicAccess>>,
}

impl<S: StagingMemory, G: CompletionSignal> DeviceShared<S, G> {
    /// A runner on `engine` (its drain bounded by `timeout`), an empty
    /// graveyard and pool.
    pub(crate) fn new(engine: crate::engine::EngineHandle, timeout: std::time::Duration) -> Self {
        DeviceShared {
            runner: Arc::new(Runner::new(engine, timeout)),
            graveyard: Arc::new(Graveyard::default()),
            pool: Arc::new(Pool::default()),
            direct: OnceLock::new(),
            gpudirect: OnceLock::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    /// A completion word; its value shows whether it was reset (fresh ones hold 7).
    struct Word(AtomicU32);

    impl CompletionSignal for Word {
        fn raise(&self) {
            self.0.store(1, Ordering::Release);
        }
        fn reset(&self) {
            self.0.store(0, Ordering::Release);
        }
    }

    /// Staging memory of a size, never read or written (the tests check
    /// the pool's bookkeeping only).
    struct Sized(usize);

    impl StagingMemory for Sized {
        fn capacity(&self) -> usize {
            self.0
        }
        fn host_buffer(&self, _bytes: usize) -> crate::host::RawBuffer {
            unreachable!("the tests never view staging memory")
        }
        fn dev_addr(&self) -> crate::device::DevAddr {
            0
        }
    }

    type WordPool = Pool<Sized, Word>;

    #[test]
    fn staging_buffers_are_rounded_up_and_reused_by_later_calls() {
        let pool = WordPool::default();
        let alloc = |b: usize| Ok(Sized(b));
        // One call's two buffers, then the same call thirty times more.
        for _ in 0..31 {
            let send = pool.staging(5000 * 4, alloc).unwrap();
            let recv = pool.staging(5000 * 4, alloc).unwrap();
            assert_eq!(send.capacity(), 32 << 10, "rounded to a power of two");
            pool.put_staging(send);
            pool.put_staging(recv);
        }
        assert_eq!(pool.allocations(), 2, "later calls reuse the first two");
        let small = pool.staging(10, alloc).unwrap();
        assert_eq!(
            small.capacity(),
            32 << 10,
            "the smallest free buffer that fits"
        );
        assert_eq!(pool.allocations(), 2);
    }

    fn fresh() -> Result<Word> {
        Ok(Word(AtomicU32::new(7)))
    }

    #[test]
    fn a_word_the_runner_still_holds_is_reused_only_once_it_lets_go() {
        let pool = WordPool::default();
        let first = pool.signal(fresh).unwrap();
        assert_eq!(pool.allocations(), 1);
        first.raise();
        // The runner's handle outlives the operation's resources.
        let runner = first.clone();
        pool.put_signal(first);
        let second = pool.signal(fresh).unwrap();
        assert_eq!(pool.allocations(), 2, "a word still held is not handed out");
        assert_eq!(second.0.load(Ordering::Acquire), 7, "the new word is fresh");
        drop(runner);
        pool.put_signal(second);
        let third = pool.signal(fresh).unwrap();
        assert_eq!(pool.allocations(), 2, "a word nobody holds is reused");
        assert_eq!(third.0.load(Ordering::Acquire), 0, "a reused word is reset");
    }
}
