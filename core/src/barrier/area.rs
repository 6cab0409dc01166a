//! The barrier area of a rank's segment: the flag memory barriers run on.
//!
//! Barriers need no slots, only words: a counter that other ranks
//! fetch-add, a release word, and one arrival flag per peer (written by that
//! peer alone). Every word is monotonic and carries an epoch (see
//! `step.rs`), so nothing is ever reset and consecutive barriers
//! cannot confuse each other. Each word has its own cache line, so ranks
//! writing different flags do not fight over one line; one notifier per
//! area wakes its owner (or, for the root's release word, every waiter).
//!
//! A peer's area is reached either mapped (shared memory: loads, stores and
//! fetch-adds) or through a network that writes into it ([`RemoteArea`]:
//! RDMA WRITEs over verbs). Remote areas are written, never read, so over a
//! network a barrier plan must wait on its own area alone; it may fetch-add
//! a remote counter (an RDMA atomic) only where every rank's device executes
//! atomics and no rank reaches the counter through shared memory
//! ([`FlagMemory::fits`]). The central counter then releases every rank in
//! its own area ([`super::build_for_network`]).
//!
//! A rank outside the areas is an error, never another rank's area: a
//! store or load naming one is refused, and the barrier returns the error.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::{BarrierMemory, FlagStep, WaitFor};
use crate::Error;
use crate::wait::{Notifier, WaitError, WaitPolicy};

/// One word alone in a cache line.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub(crate) struct Line {
    /// The word.
    pub value: AtomicU64,
}

/// The fixed part of a barrier area; `nranks` flag lines follow it.
#[repr(C)]
#[derive(Debug, Default)]
pub(crate) struct AreaHeader {
    /// Fetch-add target (central counter).
    pub counter: Line,
    /// Release word.
    pub release: Line,
    /// Wakes whoever waits on any word of this area.
    pub notifier: Notifier,
}

/// Bytes of [`AreaHeader`].
pub(crate) const AREA_HEADER_BYTES: usize = 192;
const _: () = assert!(std::mem::size_of::<AreaHeader>() == AREA_HEADER_BYTES);
const _: () = assert!(std::mem::size_of::<Line>() == 64);

/// Bytes of a barrier area for `nranks` ranks.
pub(crate) const fn area_bytes(nranks: usize) -> usize {
    AREA_HEADER_BYTES + nranks * 64
}

/// Byte offset of the counter in an area.
pub(crate) const COUNTER_OFFSET: usize = std::mem::offset_of!(AreaHeader, counter);

/// Byte offset of the release word in an area.
pub(crate) const RELEASE_OFFSET: usize = std::mem::offset_of!(AreaHeader, release);
const _: () = assert!(std::mem::offset_of!(Line, value) == 0);

/// Byte offset of `flags[src]` in an area.
pub(crate) const fn flag_offset(src: usize) -> usize {
    AREA_HEADER_BYTES + src * 64
}

/// Another rank's barrier area, reached through a network that writes into
/// it (verbs: RDMA WRITE into the peer's registered area).
pub(crate) trait RemoteArea: Send + Sync {
    /// Writes `v` into the 8-byte word at `offset` of the owner's area, after
    /// everything this rank sent the owner before, and wakes the owner if it
    /// sleeps.
    ///
    /// # Errors
    /// The transport's error when the write cannot be posted.
    fn store(&self, offset: usize, v: u64) -> Result<(), Error>;
    /// Atomically adds `v` to the 8-byte word at `offset` of the owner's
    /// area (an RDMA fetch-and-add), after everything sent before, and wakes
    /// the owner if it sleeps. Only where [`FlagMemory::fits`] allowed it.
    ///
    /// # Errors
    /// The transport's error when the operation cannot be posted.
    fn fetch_add(&self, offset: usize, v: u64) -> Result<(), Error>;
    /// Moves this rank's side of the network while it waits on its own
    /// area (reaps completions: a peer's write may be what ends the wait).
    fn poke(&self);
}

/// How a barrier plan reaches one rank's area.
#[derive(Clone)]
pub(crate) enum Area {
    /// Mapped here: our own, or a peer's shared-memory segment.
    Mapped(Arc<BarrierArea>),
    /// Written through a network.
    Remote(Arc<dyn RemoteArea>),
}

impl std::fmt::Debug for Area {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Area::Mapped(a) => write!(f, "Mapped({:p})", a.base),
            Area::Remote(_) => write!(f, "Remote"),
        }
    }
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

    /// The area's memory (to register it with a NIC).
    pub fn memory(&self) -> (*mut u8, usize) {
        (self.base.cast_mut(), area_bytes(self.nranks))
    }

    /// Wakes whoever sleeps on this area (after a NIC wrote into it).
    pub fn notify(&self) {
        self.header().notifier.notify();
    }

    /// True while a waiter sleeps (or is about to) on this area.
    pub fn has_sleepers(&self) -> bool {
        self.header().notifier.has_sleepers()
    }

    /// `flags[src]`, or `None` for a `src` beyond the area's ranks.
    fn flag(&self, src: usize) -> Option<&AtomicU64> {
        if src >= self.nranks {
            return None;
        }
        // SAFETY: src < nranks, so the line lies inside the area; aligned to 64.
        Some(unsafe { &(*(self.base.add(flag_offset(src)) as *const Line)).value })
    }
}

/// Every rank's barrier area as a communicator reaches it: the flag memory
/// its barrier plans run on.
pub(crate) struct FlagMemory<'a> {
    /// `areas[r]` is rank r's area (our own is mapped).
    pub areas: &'a [Area],
    /// Spin, timeout and abort flag for waits.
    pub policy: WaitPolicy<'a>,
    /// The first error met by a store or a load (the trait's actions and
    /// loads cannot fail); the next wait returns it, and so does
    /// [`FlagMemory::take_failure`].
    pub failed: Mutex<Option<Error>>,
}

impl<'a> FlagMemory<'a> {
    /// Flag memory over `areas`, waiting under `policy`.
    pub(crate) fn new(areas: &'a [Area], policy: WaitPolicy<'a>) -> FlagMemory<'a> {
        FlagMemory {
            areas,
            policy,
            failed: Mutex::new(None),
        }
    }

    /// Whether a plan's `steps` can run where `mapped(r)` says which ranks'
    /// areas are mapped: a remote area may be written (flags, release) but
    /// not read, and fetch-added only with `remote_atomics` (every area but
    /// one's own is remote and every device executes RDMA atomics: then no
    /// processor atomic touches the same counter).
    pub(crate) fn fits(
        steps: &[FlagStep],
        mapped: impl Fn(usize) -> bool,
        remote_atomics: bool,
    ) -> bool {
        use FlagStep as F;
        steps.iter().all(|s| match *s {
            F::FetchAdd { root } => mapped(root) || remote_atomics,
            F::WaitRelease { at } => mapped(at),
            F::Notify { .. } | F::Release { .. } | F::WaitFlag { .. } | F::WaitCounter { .. } => {
                true
            }
        })
    }

    /// The first error a store or load met since the last call, if any.
    pub(crate) fn take_failure(&self) -> Option<Error> {
        self.failed.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// `owner`'s area; `None`, with the error recorded, for an owner
    /// beyond the areas.
    fn area(&self, owner: usize) -> Option<&Area> {
        let area = self.areas.get(owner);
        if area.is_none() {
            self.fail(out_of_range("area of rank", owner, self.areas.len()));
        }
        area
    }

    /// `owner`'s area when it is mapped here (`None` for a remote one, or,
    /// with the error recorded, an owner beyond the areas).
    fn mapped(&self, owner: usize) -> Option<&BarrierArea> {
        match self.area(owner)? {
            Area::Mapped(a) => Some(a),
            Area::Remote(_) => None,
        }
    }

    fn fail(&self, e: Error) {
        let mut f = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        f.get_or_insert(e);
    }

    /// Stores `v` into the word of `owner`'s area that `word` picks (at
    /// `offset` for a remote area); `word` returns `None` for a word beyond
    /// the area (an error, recorded).
    fn store(
        &self,
        owner: usize,
        offset: usize,
        v: u64,
        word: impl Fn(&BarrierArea) -> Option<&AtomicU64>,
    ) {
        match self.area(owner) {
            Some(Area::Mapped(a)) => match word(a) {
                Some(w) => {
                    w.store(v, Ordering::Release);
                    a.header().notifier.notify();
                }
                None => self.fail(out_of_range("word of", owner, self.areas.len())),
            },
            Some(Area::Remote(r)) => {
                if let Err(e) = r.store(offset, v) {
                    self.fail(e);
                }
            }
            None => {}
        }
    }

    fn unreadable(&self, owner: usize, what: &str) -> u64 {
        self.fail(Error::Unavailable(format!(
            "barrier: the {what} of rank {owner} is reached through a network, which can only write it"
        )));
        0
    }
}

impl BarrierMemory for FlagMemory<'_> {
    fn fetch_add_counter(&self, owner: usize, v: u64) {
        match self.area(owner) {
            Some(Area::Mapped(a)) => {
                a.header().counter.value.fetch_add(v, Ordering::AcqRel);
                a.header().notifier.notify();
            }
            Some(Area::Remote(r)) => {
                if let Err(e) = r.fetch_add(COUNTER_OFFSET, v) {
                    self.fail(e);
                }
            }
            None => {}
        }
    }

    fn store_flag(&self, owner: usize, src: usize, v: u64) {
        if src >= self.areas.len() {
            self.fail(out_of_range("flag of rank", src, self.areas.len()));
            return;
        }
        self.store(owner, flag_offset(src), v, |a| a.flag(src));
    }

    fn store_release(&self, owner: usize, v: u64) {
        self.store(owner, RELEASE_OFFSET, v, |a| {
            Some(&a.header().release.value)
        });
    }

    fn load_counter(&self, owner: usize) -> u64 {
        match self.mapped(owner) {
            Some(a) => a.header().counter.value.load(Ordering::Acquire),
            None => self.unreadable(owner, "counter"),
        }
    }

    fn load_flag(&self, owner: usize, src: usize) -> u64 {
        match self.mapped(owner).map(|a| a.flag(src)) {
            Some(Some(f)) => f.load(Ordering::Acquire),
            Some(None) => {
                self.fail(out_of_range("flag of rank", src, self.areas.len()));
                0
            }
            None => self.unreadable(owner, "flag"),
        }
    }

    fn load_release(&self, owner: usize) -> u64 {
        match self.mapped(owner) {
            Some(a) => a.header().release.value.load(Ordering::Acquire),
            None => self.unreadable(owner, "release word"),
        }
    }

    fn wait(&self, on: &WaitFor, ready: &dyn Fn() -> bool) -> Result<(), Error> {
        let failed = || self.failed.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(e) = failed() {
            return Err(e);
        }
        let Some(a) = self.mapped(on.owner) else {
            self.unreadable(on.owner, "area");
            return Err(failed().unwrap_or_else(|| Error::Unavailable("barrier".into())));
        };
        let any_remote = self.areas.iter().any(|a| matches!(a, Area::Remote(_)));
        let mut checks = 0u32;
        a.header()
            .notifier
            .wait_until(&self.policy, || {
                (ready() || {
                    // A peer's write may need our completion queue reaped
                    // (its receive put back, a sleeping waiter woken).
                    checks = checks.wrapping_add(1);
                    if any_remote && checks.is_multiple_of(POKE_EVERY) {
                        for area in self.areas {
                            if let Area::Remote(r) = area {
                                r.poke();
                            }
                        }
                    }
                    ready()
                })
                .then_some(())
            })
            .map_err(|e| match e {
                WaitError::Timeout(d) => Error::Timeout {
                    op: "barrier".into(),
                    what: on.to_string(),
                    waited_ms: d.as_millis() as u64,
                },
                WaitError::Aborted => Error::Aborted(format!("barrier (waiting for {on})")),
            })?;
        match failed() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// A waiter on a barrier area pokes the network every this many checks.
const POKE_EVERY: u32 = 4;

/// The error for a rank outside the `nranks` areas (`what` names the word).
fn out_of_range(what: &str, rank: usize, nranks: usize) -> Error {
    Error::invalid(format!(
        "barrier: the {what} {rank} is out of range for {nranks} ranks"
    ))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// One 64-byte line of zeroed memory: areas are built from these.
    #[repr(C, align(64))]
    #[derive(Clone)]
    struct Block([u8; 64]);

    /// Zeroed, 64-byte aligned memory for one area of `nranks` ranks.
    fn zeroed(nranks: usize) -> Vec<Block> {
        vec![Block([0; 64]); area_bytes(nranks) / 64]
    }

    fn mapped(memory: &[Block], nranks: usize) -> Area {
        // SAFETY: `memory` is 64-byte aligned, holds `area_bytes(nranks)`
        // zeroed bytes, and outlives the area (every test drops the areas
        // first).
        Area::Mapped(Arc::new(unsafe {
            BarrierArea::new(memory.as_ptr().cast(), nranks)
        }))
    }

    fn words(area: &Area, nranks: usize) -> Vec<u64> {
        let Area::Mapped(a) = area else {
            unreachable!("the tests map every area")
        };
        let mut all = vec![
            a.header().counter.value.load(Ordering::Acquire),
            a.header().release.value.load(Ordering::Acquire),
        ];
        all.extend((0..nranks).map(|src| a.flag(src).map_or(0, |f| f.load(Ordering::Acquire))));
        all
    }

    #[test]
    fn stores_reach_the_named_word() {
        let blocks = [zeroed(2), zeroed(2)];
        let areas: Vec<Area> = blocks.iter().map(|b| mapped(b, 2)).collect();
        let mem = FlagMemory::new(&areas, WaitPolicy::new(10, Duration::from_secs(5)));
        mem.store_flag(1, 0, 256);
        mem.store_release(0, 512);
        mem.fetch_add_counter(1, 1);
        assert!(mem.take_failure().is_none());
        assert_eq!(words(&areas[0], 2), [0, 512, 0, 0]);
        assert_eq!(words(&areas[1], 2), [1, 0, 256, 0]);
        assert_eq!(mem.load_flag(1, 0), 256);
        drop(mem);
        drop(areas);
    }

    /// A rank beyond the areas is refused: nothing is written (in
    /// particular not into the last rank's area), and the error names it.
    #[test]
    fn an_out_of_range_rank_is_refused() {
        let blocks = [zeroed(2), zeroed(2)];
        let areas: Vec<Area> = blocks.iter().map(|b| mapped(b, 2)).collect();
        let mem = FlagMemory::new(&areas, WaitPolicy::new(10, Duration::from_secs(5)));
        let refused = |what: &str| match mem.take_failure() {
            Some(Error::InvalidArgument(msg)) => assert!(msg.contains(what), "{msg}"),
            other => panic!("expected InvalidArgument naming {what}, got {other:?}"),
        };
        mem.store_flag(2, 0, 256);
        refused("rank 2");
        mem.store_flag(1, 3, 256);
        refused("rank 3");
        mem.store_release(5, 256);
        refused("rank 5");
        mem.fetch_add_counter(2, 1);
        refused("rank 2");
        assert_eq!(mem.load_counter(4), 0);
        refused("rank 4");
        assert_eq!(mem.load_flag(0, 7), 0);
        refused("rank 7");
        for area in &areas {
            assert_eq!(words(area, 2), [0, 0, 0, 0]);
        }
        drop(mem);
        drop(areas);
    }
}
