//! The barrier area of a rank's segment: the flag memory barriers run on.
//!
//! Barriers need no slots, only words: a counter that other ranks
//! fetch-add, a release word, and one arrival flag per peer (written by that
//! peer alone). Every word is monotonic and carries an epoch (see
//! [`crate::barrier`]), so nothing is ever reset and consecutive barriers
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
//! its own area ([`crate::barrier::build_for_network`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::Error;
use crate::barrier::{BarrierMemory, WaitFor};
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

    fn flag(&self, src: usize) -> &AtomicU64 {
        let src = src.min(self.nranks.saturating_sub(1));
        // SAFETY: src < nranks, so the line lies inside the area; aligned to 64.
        unsafe { &(*(self.base.add(AREA_HEADER_BYTES + src * 64) as *const Line)).value }
    }
}

/// Every rank's barrier area as a communicator reaches it: the flag memory
/// its barrier plans run on.
pub(crate) struct FlagMemory<'a> {
    /// `areas[r]` is rank r's area (our own is mapped).
    pub areas: &'a [Area],
    /// Spin, timeout and abort flag for waits.
    pub policy: WaitPolicy<'a>,
    /// The first error met by a store (the trait's actions cannot fail);
    /// the next wait returns it.
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
        steps: &[crate::plan::FlagStep],
        mapped: impl Fn(usize) -> bool,
        remote_atomics: bool,
    ) -> bool {
        use crate::plan::FlagStep as F;
        steps.iter().all(|s| match *s {
            F::FetchAdd { root } => mapped(root) || remote_atomics,
            F::WaitRelease { at } => mapped(at),
            F::Notify { .. } | F::Release { .. } | F::WaitFlag { .. } | F::WaitCounter { .. } => {
                true
            }
        })
    }

    fn area(&self, owner: usize) -> &Area {
        &self.areas[owner.min(self.areas.len() - 1)]
    }

    fn mapped(&self, owner: usize) -> Option<&BarrierArea> {
        match self.area(owner) {
            Area::Mapped(a) => Some(a),
            Area::Remote(_) => None,
        }
    }

    fn fail(&self, e: Error) {
        let mut f = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        f.get_or_insert(e);
    }

    fn store(
        &self,
        owner: usize,
        offset: usize,
        v: u64,
        word: impl Fn(&BarrierArea) -> &AtomicU64,
    ) {
        match self.area(owner) {
            Area::Mapped(a) => {
                word(a).store(v, Ordering::Release);
                a.header().notifier.notify();
            }
            Area::Remote(r) => {
                if let Err(e) = r.store(offset, v) {
                    self.fail(e);
                }
            }
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
            Area::Mapped(a) => {
                a.header().counter.value.fetch_add(v, Ordering::AcqRel);
                a.header().notifier.notify();
            }
            Area::Remote(r) => {
                if let Err(e) = r.fetch_add(COUNTER_OFFSET, v) {
                    self.fail(e);
                }
            }
        }
    }

    fn store_flag(&self, owner: usize, src: usize, v: u64) {
        self.store(owner, flag_offset(src), v, |a| a.flag(src));
    }

    fn store_release(&self, owner: usize, v: u64) {
        self.store(owner, RELEASE_OFFSET, v, |a| &a.header().release.value);
    }

    fn load_counter(&self, owner: usize) -> u64 {
        match self.mapped(owner) {
            Some(a) => a.header().counter.value.load(Ordering::Acquire),
            None => self.unreadable(owner, "counter"),
        }
    }

    fn load_flag(&self, owner: usize, src: usize) -> u64 {
        match self.mapped(owner) {
            Some(a) => a.flag(src).load(Ordering::Acquire),
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
