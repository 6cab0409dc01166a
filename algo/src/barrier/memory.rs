//! The flag memory barrier plans run on.
//!
//! Each rank `r` owns a *barrier area* of 64-bit words:
//!
//! | word         | written by                                   | read by        |
//! |--------------|----------------------------------------------|----------------|
//! | `counter`    | every arriving rank (atomic fetch-add)       | `r` only       |
//! | `release`    | whoever releases `r` (or `r` itself, as a central root) | `r`, or everybody for a central root |
//! | `flags[src]` | rank `src` only, for `src` in `0..n`         | `r` only       |
//!
//! Words are monotonic, never reset: their values encode the barrier's epoch
//! ([`super::signal_value`]), so consecutive barriers cannot confuse each
//! other. [`BarrierMemory`] is the whole interface a plan needs; the
//! simulator implements it over plain cells, the communicator over the
//! shared-memory segment of each rank (`docs/design/architecture.md`, `docs/design/barriers.md`).

use std::fmt;

use crate::Error;

/// Access to every rank's barrier area.
///
/// Object safe: the executor takes `&M` with `M: BarrierMemory + ?Sized`,
/// so `&dyn BarrierMemory` works as well as a concrete type.
///
/// # Ordering contract
///
/// Stores and the fetch-add publish with at least `Release` ordering and
/// loads read with at least `Acquire`, so whatever a rank did before a
/// store is visible to a rank whose wait that store satisfied. Every write
/// into `owner`'s area must wake the waiters of that area (for a futex
/// the runtime's notifier: `notify()` after the store), because a wait
/// always sleeps on the area that holds the awaited word
/// ([`WaitFor::owner`]).
pub trait BarrierMemory {
    /// Atomically adds `v` to `counter` in `owner`'s area (acquire-release;
    /// wakes waiters of that area).
    fn fetch_add_counter(&self, owner: usize, v: u64);
    /// Stores `v` into `flags[src]` of `owner`'s area (release ordering;
    /// wakes waiters of that area). Only rank `src` ever calls this for `src`.
    fn store_flag(&self, owner: usize, src: usize, v: u64);
    /// Stores `v` into `release` of `owner`'s area (release ordering; wakes
    /// waiters of that area).
    fn store_release(&self, owner: usize, v: u64);
    /// Loads `counter` of `owner`'s area (acquire).
    fn load_counter(&self, owner: usize) -> u64;
    /// Loads `flags[src]` of `owner`'s area (acquire).
    fn load_flag(&self, owner: usize, src: usize) -> u64;
    /// Loads `release` of `owner`'s area (acquire).
    fn load_release(&self, owner: usize) -> u64;
    /// Blocks until `ready()` returns true.
    ///
    /// `on` says which word is awaited and for what value (for error
    /// messages, and `on.owner` names the area to sleep on); `ready` is the
    /// condition to re-check after every wake-up (it is `on.is_met(self)`).
    /// The real implementation spins, yields, then futex-sleeps on the
    /// owner's notifier, bounded by a timeout and an abort flag. The
    /// simulator never calls it: it checks readiness itself.
    ///
    /// # Errors
    ///
    /// Whatever ends the wait early: a timeout, an abort, a failed peer.
    fn wait(&self, on: &WaitFor, ready: &dyn Fn() -> bool) -> Result<(), Error>;
}

/// One word of a barrier area.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Word {
    /// The arrival counter.
    Counter,
    /// The release word.
    Release,
    /// The flag written by rank `src`.
    Flag {
        /// The only rank that writes this flag.
        src: usize,
    },
}

impl Word {
    /// Loads this word of `owner`'s area.
    #[inline]
    pub fn load<M: BarrierMemory + ?Sized>(self, mem: &M, owner: usize) -> u64 {
        match self {
            Word::Counter => mem.load_counter(owner),
            Word::Release => mem.load_release(owner),
            Word::Flag { src } => mem.load_flag(owner, src),
        }
    }
}

impl fmt::Display for Word {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Word::Counter => f.write_str("counter"),
            Word::Release => f.write_str("release word"),
            Word::Flag { src } => write!(f, "flag from rank {src}"),
        }
    }
}

/// What a wait step waits for: `word` of `owner`'s area `>= target`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WaitFor {
    /// Whose area holds the word (the area to sleep on).
    pub owner: usize,
    /// Which word.
    pub word: Word,
    /// The value it must reach.
    pub target: u64,
}

impl WaitFor {
    /// Whether the word has reached the target.
    #[inline]
    pub fn is_met<M: BarrierMemory + ?Sized>(&self, mem: &M) -> bool {
        self.word.load(mem, self.owner) >= self.target
    }
}

impl fmt::Display for WaitFor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} in rank {}'s barrier area to reach {}",
            self.word, self.owner, self.target
        )
    }
}
