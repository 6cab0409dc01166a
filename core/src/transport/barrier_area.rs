//! The barrier area of a rank's segment: the flag memory barriers run on.
//!
//! Barriers between ranks of one host need no slots, only words: a counter
//! that other ranks fetch-add, a release word, and one arrival flag per peer
//! (written by that peer alone). Every word is monotonic and carries an epoch
//! (see [`crate::barrier`]), so nothing is ever reset and consecutive
//! barriers cannot confuse each other. Each word has its own cache line, so
//! ranks writing different flags do not fight over one line; one notifier per
//! area wakes its owner (or, for the root's release word, every waiter).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::barrier::{BarrierMemory, WaitFor};
use crate::wait::{Notifier, WaitError, WaitPolicy};
use crate::Error;

/// One word alone in a cache line.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct Line {
    /// The word.
    pub value: AtomicU64,
}

/// The fixed part of a barrier area; `nranks` flag lines follow it.
#[repr(C)]
#[derive(Debug, Default)]
pub struct AreaHeader {
    /// Fetch-add target (central counter).
    pub counter: Line,
    /// Release word.
    pub release: Line,
    /// Wakes whoever waits on any word of this area.
    pub notifier: Notifier,
}

/// Bytes of [`AreaHeader`].
pub const AREA_HEADER_BYTES: usize = 192;
const _: () = assert!(std::mem::size_of::<AreaHeader>() == AREA_HEADER_BYTES);
const _: () = assert!(std::mem::size_of::<Line>() == 64);

/// Bytes of a barrier area for `nranks` ranks.
pub const fn area_bytes(nranks: usize) -> usize {
    AREA_HEADER_BYTES + nranks * 64
}

/// A barrier area mapped in this process.
#[derive(Debug)]
pub struct BarrierArea {
    base: *const u8,
    nranks: usize,
}

// SAFETY: only atomics are accessed through the pointer; the mapping is kept
// alive by the segment that the area's owner (the communicator) holds.
unsafe impl Send for BarrierArea {}
// SAFETY: as above.
unsafe impl Sync for BarrierArea {}

impl BarrierArea {
    /// Wraps the area at `base`.
    ///
    /// # Safety
    /// `base` must be 64-byte aligned and point to `area_bytes(nranks)` zeroed
    /// (or previously used as an area) bytes of mapped memory that outlive the value.
    pub unsafe fn new(base: *const u8, nranks: usize) -> BarrierArea {
        BarrierArea { base, nranks }
    }

    fn header(&self) -> &AreaHeader {
        // SAFETY: `new`'s contract; AreaHeader is plain atomics, valid for any bits.
        unsafe { &*(self.base as *const AreaHeader) }
    }

    fn flag(&self, src: usize) -> &AtomicU64 {
        let src = src.min(self.nranks.saturating_sub(1));
        // SAFETY: src < nranks, so the line lies inside the area; aligned to 64.
        unsafe { &(*(self.base.add(AREA_HEADER_BYTES + src * 64) as *const Line)).value }
    }
}

/// The barrier areas of every rank of a communicator, as flag memory.
pub struct ShmBarrierMemory<'a> {
    /// `areas[r]` is rank r's area (our own included).
    pub areas: &'a [BarrierArea],
    /// Spin, timeout and abort flag for waits.
    pub policy: WaitPolicy<'a>,
}

impl ShmBarrierMemory<'_> {
    fn area(&self, owner: usize) -> &BarrierArea {
        &self.areas[owner.min(self.areas.len() - 1)]
    }
}

impl BarrierMemory for ShmBarrierMemory<'_> {
    fn fetch_add_counter(&self, owner: usize, v: u64) {
        let a = self.area(owner);
        a.header().counter.value.fetch_add(v, Ordering::AcqRel);
        a.header().notifier.notify();
    }

    fn store_flag(&self, owner: usize, src: usize, v: u64) {
        let a = self.area(owner);
        a.flag(src).store(v, Ordering::Release);
        a.header().notifier.notify();
    }

    fn store_release(&self, owner: usize, v: u64) {
        let a = self.area(owner);
        a.header().release.value.store(v, Ordering::Release);
        a.header().notifier.notify();
    }

    fn load_counter(&self, owner: usize) -> u64 {
        self.area(owner)
            .header()
            .counter
            .value
            .load(Ordering::Acquire)
    }

    fn load_flag(&self, owner: usize, src: usize) -> u64 {
        self.area(owner).flag(src).load(Ordering::Acquire)
    }

    fn load_release(&self, owner: usize) -> u64 {
        self.area(owner)
            .header()
            .release
            .value
            .load(Ordering::Acquire)
    }

    fn wait(&self, on: &WaitFor, ready: &dyn Fn() -> bool) -> Result<(), Error> {
        self.area(on.owner)
            .header()
            .notifier
            .wait_until(&self.policy, || ready().then_some(()))
            .map_err(|e| match e {
                WaitError::Timeout(d) => Error::Timeout {
                    op: "barrier".into(),
                    what: on.to_string(),
                    waited_ms: d.as_millis() as u64,
                },
                WaitError::Aborted => Error::Aborted(format!("barrier (waiting for {on})")),
            })
    }
}
