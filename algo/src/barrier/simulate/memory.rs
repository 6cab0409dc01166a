//! Barrier areas as plain cells, for the single-threaded simulator.

use std::cell::Cell;

use crate::Error;
use crate::barrier::{BarrierMemory, WaitFor, Word};

/// A store that made a word smaller: words are monotonic, so a plan whose
/// writes go backwards could let a later barrier satisfy an earlier wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Regression {
    /// Whose area holds the word.
    pub owner: usize,
    /// Which word.
    pub word: Word,
    /// The value before the store.
    pub old: u64,
    /// The smaller value stored.
    pub new: u64,
}

/// Every rank's barrier area in one `Vec` of cells (no threads, no atomics).
///
/// Records the first store that lowers a word ([`SimMemory::take_regression`])
/// and wraps nothing: a counter overflow counts as a regression.
/// [`BarrierMemory::wait`] is an error here: the simulator checks readiness
/// itself and never blocks.
#[derive(Debug)]
pub(super) struct SimMemory {
    nranks: usize,
    /// Area of rank `r`: `[counter, release, flags[0..n]]` at `r * (n + 2)`.
    words: Vec<Cell<u64>>,
    regression: Cell<Option<Regression>>,
    /// Index of the last word written, for waking the ranks that wait on it.
    written: Cell<Option<usize>>,
}

impl SimMemory {
    /// Zeroed areas for `nranks` ranks.
    pub(super) fn new(nranks: usize) -> SimMemory {
        let len = nranks * (nranks + 2);
        SimMemory {
            nranks,
            words: (0..len).map(|_| Cell::new(0)).collect(),
            regression: Cell::new(None),
            written: Cell::new(None),
        }
    }

    /// The first store that lowered a word since the last call, if any.
    pub(super) fn take_regression(&self) -> Option<Regression> {
        self.regression.take()
    }

    /// Number of words of all areas together.
    pub(super) fn len(&self) -> usize {
        self.words.len()
    }

    /// Position of `word` of `owner`'s area among all words.
    pub(super) fn index(&self, owner: usize, word: Word) -> usize {
        let offset = match word {
            Word::Counter => 0,
            Word::Release => 1,
            Word::Flag { src } => 2 + src,
        };
        owner * (self.nranks + 2) + offset
    }

    /// The index of the last word written since the last call, if any.
    pub(super) fn take_written(&self) -> Option<usize> {
        self.written.take()
    }

    fn cell(&self, owner: usize, word: Word) -> &Cell<u64> {
        &self.words[self.index(owner, word)]
    }

    fn store(&self, owner: usize, word: Word, new: u64) {
        self.written.set(Some(self.index(owner, word)));
        let cell = self.cell(owner, word);
        let old = cell.get();
        if new < old && self.regression.get().is_none() {
            self.regression.set(Some(Regression {
                owner,
                word,
                old,
                new,
            }));
        }
        cell.set(new);
    }
}

impl BarrierMemory for SimMemory {
    fn fetch_add_counter(&self, owner: usize, v: u64) {
        let old = self.cell(owner, Word::Counter).get();
        self.store(owner, Word::Counter, old.wrapping_add(v));
    }

    fn store_flag(&self, owner: usize, src: usize, v: u64) {
        self.store(owner, Word::Flag { src }, v);
    }

    fn store_release(&self, owner: usize, v: u64) {
        self.store(owner, Word::Release, v);
    }

    fn load_counter(&self, owner: usize) -> u64 {
        self.cell(owner, Word::Counter).get()
    }

    fn load_flag(&self, owner: usize, src: usize) -> u64 {
        self.cell(owner, Word::Flag { src }).get()
    }

    fn load_release(&self, owner: usize) -> u64 {
        self.cell(owner, Word::Release).get()
    }

    fn wait(&self, on: &WaitFor, ready: &dyn Fn() -> bool) -> Result<(), Error> {
        if ready() {
            return Ok(());
        }
        Err(Error::InvalidUsage(format!(
            "the barrier simulator cannot block (waiting for {on})"
        )))
    }
}
