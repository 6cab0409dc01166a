//! Transports: how slots travel between ranks.
//!
//! Three carry slots: [`shm`] (processes on one host), a *direct* transport
//! where the thread executing a plan copies into the peer's slot itself, so
//! no proxy is on the data path; and the proxied [`tcp`] and `verbs`
//! (feature `verbs`) between hosts, where the stream fills and reads rings
//! of its own and the slots cross over sockets or by RDMA writes, posted by
//! a progress thread (or the stream). A [`Connection`] joins the two rings
//! of one peer pair, whatever the transport (over shm, outbound in the
//! peer's segment and inbound in ours), and is the one seam through which
//! the stream fills, publishes, takes and returns slots ([`connection`]).
//!
//! Each rank's segment starts with a [`SegmentHeader`] page: a magic/version
//! check for the layout, a failure word that any rank may raise to make
//! every wait of the segment's owner end with an error instead of a timeout,
//! and the mismatch records written before it is raised (which ranks' calls
//! differed, and how), so every rank can say what went wrong.

mod connection;
pub(crate) mod device_span;
pub(crate) mod fault;
pub(crate) mod gpudirect_nic;
mod links;
pub(crate) mod local_ring;
pub(crate) mod mailbox;
pub(crate) mod placement;
pub(crate) mod rendezvous;
pub(crate) mod ring;
pub(crate) mod shm;
pub(crate) mod sweep;
pub(crate) mod tcp;
#[cfg(feature = "verbs")]
pub(crate) mod verbs;

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::barrier::area::{BarrierArea, area_bytes};
pub(crate) use connection::{Carrier, Connection, Link};
pub(crate) use links::{LinkSetup, Links, RdmaDevice, Route, connect_links};
use ring::{RingEnd, RingShape};
use shm::ShmSegment;

use crate::{Error, Result};
use streamcomm_types::MismatchNote;

/// Bytes reserved at the start of a segment for its header.
pub(crate) const SEGMENT_HEADER_BYTES: usize = 4096;
pub(crate) const MAGIC: u64 = 0x7374_7263_6f6d_6d31; // "strcomm1"
pub(crate) const VERSION: u32 = 3;

/// The first bytes of every rank's segment (fixed layout, shared across processes).
#[repr(C)]
#[derive(Debug)]
pub struct SegmentHeader {
    /// `MAGIC` once the owner has initialised the segment.
    pub magic: AtomicU64,
    /// Layout version.
    pub version: AtomicU32,
    /// Owner's process id.
    pub owner_pid: AtomicU32,
    /// 0 while healthy; `1 + rank` of the first rank that reported a failure.
    pub failed_by: AtomicU32,
    /// 1 once the owner has dropped its communicator cleanly (no error, not
    /// unwinding from a panic): its process exiting afterwards is then not
    /// a failure its peers' watchdogs report.
    pub departed: AtomicU32,
    /// Owner's pid namespace ([`sweep::pid_namespace`]), so that a sweep
    /// only judges pids it can see.
    pub pid_ns: AtomicU64,
    /// Mismatch records (two ranks' differing calls) that ranks wrote before
    /// raising `failed_by`, so that every rank woken by the failure can say
    /// what differed. Appended after the fields above in the header page,
    /// which is zero (no record) in segments that predate them.
    pub notes: [NoteSlot; NOTE_SLOTS],
}
const _: () = assert!(std::mem::offset_of!(SegmentHeader, notes) == 32);
const _: () = assert!(std::mem::size_of::<SegmentHeader>() <= SEGMENT_HEADER_BYTES);
const _: () = assert!(std::mem::offset_of!(SegmentHeader, owner_pid) == 12);
const _: () = assert!(std::mem::offset_of!(SegmentHeader, pid_ns) == 24);

/// How many mismatch records a segment header keeps (more are dropped: the
/// first ones tell the story).
pub(crate) const NOTE_SLOTS: usize = 4;

/// One mismatch record in a segment header (see [`SegmentHeader::notes`]).
#[repr(C)]
#[derive(Debug, Default)]
pub struct NoteSlot {
    /// 0 empty, 1 being written, 2 written.
    pub state: AtomicU32,
    /// The rank whose slot was refused.
    pub suspect: AtomicU32,
    /// The rank that refused it.
    pub witness: AtomicU32,
    _pad: AtomicU32,
    /// The refused slot's signature.
    pub suspect_sig: AtomicU64,
    /// The signature of the witness's own call.
    pub witness_sig: AtomicU64,
}

/// Layout of a segment: header page, barrier area, then one inbound ring per peer.
///
/// Where the inbound ring from `peer` lives in `owner`'s segment.
pub(crate) fn ring_offset(owner: usize, peer: usize, nranks: usize, shape: RingShape) -> usize {
    let index = if peer < owner { peer } else { peer - 1 };
    SEGMENT_HEADER_BYTES + area_bytes(nranks) + index * shape.ring_bytes()
}

/// Bytes of a segment for `nranks` ranks: header, barrier area, `nranks - 1` rings.
pub(crate) fn segment_bytes(nranks: usize, shape: RingShape) -> usize {
    SEGMENT_HEADER_BYTES + area_bytes(nranks) + nranks.saturating_sub(1) * shape.ring_bytes()
}

/// A mapped segment with its header.
#[derive(Debug)]
pub struct Segment {
    shm: ShmSegment,
}

impl Segment {
    /// Creates this rank's segment and initialises its header, after
    /// removing segments that dead processes left behind
    /// ([`sweep::sweep_stale_segments`]).
    ///
    /// # Errors
    /// As [`ShmSegment::create`].
    pub fn create(nranks: usize, shape: RingShape) -> Result<Segment> {
        sweep::sweep_stale_segments();
        // The rings' memory is allocated as their peers turn out to share
        // this host and use them (`transport::links`: a header page, the
        // ring neighbours' rings, the rest at the sender's first slot; or
        // [`Segment::reserve_ring`] at creation where the kernel cannot
        // allocate on use): a peer on another host never uses its ring here.
        let seg = Segment {
            shm: ShmSegment::create_reserving(
                segment_bytes(nranks, shape),
                SEGMENT_HEADER_BYTES + area_bytes(nranks),
            )?,
        };
        let h = seg.header();
        h.version.store(VERSION, Ordering::Relaxed);
        h.owner_pid.store(std::process::id(), Ordering::Relaxed);
        h.pid_ns.store(sweep::pid_namespace(), Ordering::Relaxed);
        h.magic.store(MAGIC, Ordering::Release);
        Ok(seg)
    }

    /// Maps a peer's segment and checks its header.
    ///
    /// # Errors
    /// [`Error::Os`] when it cannot be mapped; [`Error::InvalidUsage`] when
    /// the header is not a streamcomm segment of this version.
    pub fn open(name: &str, nranks: usize, shape: RingShape) -> Result<Segment> {
        let seg = Segment {
            shm: ShmSegment::open(name, segment_bytes(nranks, shape))?,
        };
        let h = seg.header();
        if h.magic.load(Ordering::Acquire) != MAGIC || h.version.load(Ordering::Relaxed) != VERSION
        {
            return Err(Error::InvalidUsage(format!(
                "{name} is not a streamcomm v{VERSION} segment"
            )));
        }
        Ok(seg)
    }

    /// The header at the start of the segment.
    pub fn header(&self) -> &SegmentHeader {
        // SAFETY: the mapping is page-aligned, at least SEGMENT_HEADER_BYTES
        // long, zero-initialised, and lives as long as `self`.
        unsafe { &*(self.shm.ring_base() as *const SegmentHeader) }
    }

    /// The segment's barrier area (right after the header page).
    pub fn barrier_area(&self, nranks: usize) -> BarrierArea {
        // SAFETY: segment_bytes reserves area_bytes(nranks) at this 64-aligned
        // offset; the memory is zeroed at creation and outlives the area as
        // long as the communicator holds the segment (it does).
        unsafe { BarrierArea::new(self.shm.ring_base().add(SEGMENT_HEADER_BYTES), nranks) }
    }

    /// Name to publish to peers.
    pub fn name(&self) -> &str {
        self.shm.name()
    }

    /// Removes the name once every peer has mapped the segment.
    pub fn unlink(&mut self) {
        self.shm.unlink();
    }

    /// Allocates the memory of this rank's inbound ring at `offset` now
    /// (its peer shares this host), so that a full /dev/shm is an error
    /// here rather than a SIGBUS later.
    ///
    /// # Errors
    /// As [`ShmSegment::reserve`].
    pub fn reserve_ring(&self, offset: usize, shape: RingShape) -> Result<()> {
        self.shm.reserve(offset, shape.ring_bytes())
    }

    /// Allocates the memory of the header of this rank's inbound ring at
    /// `offset` now (where the ranks' counters and the rendezvous mailbox
    /// live: read before any slot is written); its slots are allocated at
    /// their first use ([`Connection::reserving_on_first_send`]).
    ///
    /// # Errors
    /// As [`ShmSegment::reserve`].
    pub fn reserve_ring_header(&self, offset: usize) -> Result<()> {
        self.shm.reserve(offset, ring::RING_HEADER_BYTES)
    }

    /// True where a ring's memory can be allocated at its first use with
    /// an error rather than a SIGBUS when /dev/shm is full
    /// (`MADV_POPULATE_WRITE`, Linux 5.14 on); elsewhere every ring is
    /// allocated at creation. Probed on this segment's header.
    pub fn reserves_on_use(&self) -> bool {
        shm::reserve_pages(self.shm.ring_base(), SEGMENT_HEADER_BYTES).is_ok()
    }

    /// The ring at `offset`.
    ///
    /// # Errors
    /// As [`ShmSegment::ring`].
    pub fn ring(&self, offset: usize, shape: RingShape) -> Result<RingEnd> {
        self.shm.ring(offset, shape)
    }
}

/// The failure word's value for `rank` (`1 + rank`, saturating).
fn failure_code(rank: usize) -> u32 {
    u32::try_from(rank).map_or(u32::MAX, |r| r.saturating_add(1))
}

/// Records a mismatch in a segment header, unless the same record is there
/// already or every slot is taken. Call before [`raise_failure`], so that a
/// rank woken by the failure finds it.
pub(crate) fn record_mismatch(header: &SegmentHeader, note: MismatchNote) {
    if mismatches(header).contains(&note) {
        return;
    }
    let (Ok(suspect), Ok(witness)) = (u32::try_from(note.suspect), u32::try_from(note.witness))
    else {
        return;
    };
    for slot in &header.notes {
        if slot
            .state
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            slot.suspect.store(suspect, Ordering::Relaxed);
            slot.witness.store(witness, Ordering::Relaxed);
            slot.suspect_sig.store(note.suspect_sig, Ordering::Relaxed);
            slot.witness_sig.store(note.witness_sig, Ordering::Relaxed);
            slot.state.store(2, Ordering::Release);
            return;
        }
    }
}

/// The mismatch records of a segment header, oldest first. A record still
/// being written is waited for briefly (its writer is between two stores),
/// then skipped.
pub(crate) fn mismatches(header: &SegmentHeader) -> Vec<MismatchNote> {
    let mut out = Vec::new();
    for slot in &header.notes {
        let mut state = slot.state.load(Ordering::Acquire);
        for _ in 0..1000 {
            if state != 1 {
                break;
            }
            std::thread::yield_now();
            state = slot.state.load(Ordering::Acquire);
        }
        if state != 2 {
            continue;
        }
        out.push(MismatchNote {
            suspect: slot.suspect.load(Ordering::Relaxed) as usize,
            suspect_sig: slot.suspect_sig.load(Ordering::Relaxed),
            witness: slot.witness.load(Ordering::Relaxed) as usize,
            witness_sig: slot.witness_sig.load(Ordering::Relaxed),
        });
    }
    out
}

/// Raises the failure word of a segment (first reporter wins).
pub(crate) fn raise_failure(header: &SegmentHeader, rank: usize) {
    let _ = header.failed_by.compare_exchange(
        0,
        failure_code(rank),
        Ordering::AcqRel,
        Ordering::Acquire,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes of /dev/shm that the segment named `name` holds.
    fn allocated(name: &str) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(format!("/dev/shm{name}"))
            .unwrap()
            .blocks()
            * 512
    }

    #[test]
    fn a_segment_holds_memory_for_the_rings_reserved_only() {
        let shape = RingShape {
            nsteps: 8,
            slot_bytes: 64 << 10,
        };
        let ring = shape.ring_bytes() as u64;
        let seg = Segment::create(16, shape).unwrap();
        let head = allocated(seg.name());
        assert!(head < ring, "{head} bytes held before any ring is reserved");
        seg.reserve_ring(ring_offset(0, 3, 16, shape), shape)
            .unwrap();
        seg.reserve_ring(ring_offset(0, 9, 16, shape), shape)
            .unwrap();
        let two = allocated(seg.name());
        assert!(
            two >= head + 2 * ring && two < head + 3 * ring + 8192,
            "{two} bytes held after reserving two rings of {ring} (head {head})"
        );
        // The other 13 rings' memory stays unallocated until they are reserved.
        assert!(two < segment_bytes(16, shape) as u64 / 4);
    }

    #[test]
    fn mismatch_records_are_kept_once_each_up_to_the_slots() {
        let shape = RingShape {
            nsteps: 2,
            slot_bytes: 64,
        };
        let seg = Segment::create(2, shape).unwrap();
        let h = seg.header();
        assert!(mismatches(h).is_empty());
        let note = |suspect: usize, witness: usize| MismatchNote {
            suspect,
            suspect_sig: 1 << 63 | suspect as u64,
            witness,
            witness_sig: 1 << 63 | 1 << 40 | witness as u64,
        };
        record_mismatch(h, note(2, 3));
        record_mismatch(h, note(2, 3));
        record_mismatch(h, note(1, 2));
        assert_eq!(mismatches(h), [note(2, 3), note(1, 2)]);
        for w in 10..20 {
            record_mismatch(h, note(0, w));
        }
        let all = mismatches(h);
        assert_eq!(all.len(), NOTE_SLOTS);
        assert_eq!(all[..3], [note(2, 3), note(1, 2), note(0, 10)]);
        // Recording never raises the failure word itself.
        assert_eq!(h.failed_by.load(Ordering::Acquire), 0);
    }
}
