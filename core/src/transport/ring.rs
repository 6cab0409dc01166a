//! The slot ring: credit-based FIFO of fixed-size slots in shared memory.
//!
//! One ring carries one directed connection (`docs/design/architecture.md`). It lives in the
//! receiver's memory. The sender owns `tail` (slots written), the receiver
//! owns `head` (slots consumed); both only ever grow. The sender may fill slot
//! `tail % nsteps` only while `tail - head < nsteps`, so unread data is never
//! overwritten. Each slot starts with a 64-byte header holding the payload
//! length (so a receiver can tell a message of the wrong size from its own),
//! the call's signature, and the slot's sequence number on the connection:
//! the receiver checks it against its own count, so a slot that a transport
//! lost or delivered twice is an error, never data used in the wrong place.
//!
//! Memory ordering: the sender writes the payload and length, then publishes
//! `tail + 1` with `Release`; the receiver reads `tail` with `Acquire` before
//! touching the slot. Symmetrically for `head` and slot reuse.
//!
//! The ring header also holds the rendezvous [`Mailbox`] (its own module:
//! grants travel beside the slots, never through them).

use std::sync::atomic::{AtomicU64, Ordering};

use super::mailbox::Mailbox;
use crate::config::fault_spec::FaultRule;
use crate::wait::{Notifier, WaitError, WaitPolicy};

/// Bytes of header before each slot's payload.
pub(crate) const SLOT_HEADER: usize = 64;
/// The header bytes that carry anything: the payload length, the
/// signature and the sequence number, in that order, at the end of the
/// header, so that they and the payload are one contiguous range (a
/// network transport sends `SLOT_WIRE_HEADER + len` bytes from
/// [`RingEnd::slot_wire_addr`]; in the Soft-RoCE guest each inline byte of
/// an RDMA write costs ~0.07 µs, and an 8-byte message went from 72 to 32).
pub(crate) const SLOT_WIRE_HEADER: usize = 24;
const LEN_OFFSET: usize = SLOT_HEADER - SLOT_WIRE_HEADER;
/// Where in a slot its wire form ([`SLOT_WIRE_HEADER`]) begins.
#[cfg(any(feature = "verbs", test))]
pub(crate) const SLOT_WIRE_OFFSET: usize = LEN_OFFSET;
const SIG_OFFSET: usize = LEN_OFFSET + 8;
const SEQ_OFFSET: usize = LEN_OFFSET + 16;

/// Writes the wire form of a slot holding `payload` (what
/// [`RingEnd::slot_wire_addr`] points at in a ring: the length, signature
/// and sequence words, then the payload) into the front of `out`, for a
/// transport that sends a slot without staging it; returns its length.
///
/// # Panics
/// If `out` is shorter than `SLOT_WIRE_HEADER + payload.len()`.
#[cfg(any(feature = "verbs", test))]
pub(crate) fn write_wire_slot(out: &mut [u8], payload: &[u8], sig: u64, seq: u64) -> usize {
    let words = [payload.len() as u64, sig, seq];
    for (i, w) in words.iter().enumerate() {
        out[i * 8..i * 8 + 8].copy_from_slice(&w.to_ne_bytes());
    }
    let n = SLOT_WIRE_HEADER + payload.len();
    out[SLOT_WIRE_HEADER..n].copy_from_slice(payload);
    n
}

/// A counter with the notifier its readers sleep on, alone in a cache line.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub(crate) struct Counter {
    /// The monotonic count.
    pub value: AtomicU64,
    /// Wakes whoever waits for `value` to move.
    pub notifier: Notifier,
}

/// The control block at the start of every ring.
#[repr(C)]
#[derive(Debug, Default)]
pub(crate) struct RingHeader {
    /// Slots written by the sender.
    pub tail: Counter,
    /// Slots consumed by the receiver.
    pub head: Counter,
    /// The rendezvous mailbox, where the receiver grants the sender a
    /// destination ([`Mailbox`]).
    pub mailbox: Mailbox,
}

/// Bytes of [`RingHeader`] (a fixed layout shared between processes).
pub(crate) const RING_HEADER_BYTES: usize = 256;
const _: () = assert!(std::mem::size_of::<RingHeader>() == RING_HEADER_BYTES);
const _: () = assert!(std::mem::size_of::<Counter>() == 64);

/// Geometry of a ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingShape {
    /// Number of slots.
    pub nsteps: usize,
    /// Payload bytes per slot (a multiple of 64).
    pub slot_bytes: usize,
}

impl RingShape {
    /// Bytes one slot occupies, header included.
    pub const fn slot_stride(&self) -> usize {
        SLOT_HEADER + self.slot_bytes
    }

    /// Bytes the whole ring occupies.
    pub const fn ring_bytes(&self) -> usize {
        RING_HEADER_BYTES + self.nsteps * self.slot_stride()
    }

    /// This shape, with slots shrunk (in whole 64 bytes, to no less than
    /// [`MIN_BUDGET_SLOT`] or this shape's own slot, if smaller) until
    /// `rings` rings fit in `budget` bytes. The configured shape is kept
    /// where its slots' data fits (`rings × BUFFSIZE ≤ budget`: the
    /// headers, 0.02% of a ring, are not counted, so that 7 rings of
    /// 4 MiB fit the default 28 MiB); shrunk rings fit headers and all.
    pub(crate) fn within(self, budget: usize, rings: usize) -> RingShape {
        if rings == 0 || rings * self.nsteps * self.slot_bytes <= budget {
            return self;
        }
        let per_ring = budget / rings;
        let fit = (per_ring.saturating_sub(RING_HEADER_BYTES) / self.nsteps.max(1))
            .saturating_sub(SLOT_HEADER)
            & !63;
        RingShape {
            nsteps: self.nsteps,
            slot_bytes: fit.clamp(MIN_BUDGET_SLOT.min(self.slot_bytes), self.slot_bytes),
        }
    }
}

/// The smallest slot a memory budget shrinks slots to.
pub(crate) const MIN_BUDGET_SLOT: usize = 4 << 10;

/// Why a ring operation (or the seam's, [`super::Connection`]) failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RingError {
    /// The wait ended (timeout or abort).
    Wait(WaitError),
    /// The slot header claims more bytes than a slot holds (corruption).
    BadLength(u64),
    /// The slot carries sequence number `got` where `expected` was due: an
    /// earlier slot was lost (`got > expected`) or one came twice (`got < expected`).
    OutOfOrder {
        /// The receiver's count of slots consumed.
        expected: u64,
        /// What the slot header says.
        got: u64,
    },
    /// A fault rule failed the slot ([`super::fault`]).
    Injected(FaultRule),
    /// A shared-memory ring's memory could not be allocated at its first
    /// use (a full /dev/shm): the kernel's error number.
    Reserve(i32),
}

/// One end of a ring mapped in this process.
///
/// Holds a raw pointer into a shared mapping; the owner of the mapping
/// (`ShmSegment`) must outlive it, which `Connection` guarantees by holding both.
#[derive(Debug)]
pub struct RingEnd {
    base: *mut u8,
    shape: RingShape,
}

// SAFETY: a RingEnd only touches the ring through atomics and through slots
// that the credit protocol hands to exactly one side at a time; the mapping it
// points into is kept alive by its owner.
unsafe impl Send for RingEnd {}
// SAFETY: as above; concurrent use of one end is serialised by the
// communicator's execution turn.
unsafe impl Sync for RingEnd {}

impl RingEnd {
    /// Wraps the ring starting at `base`.
    ///
    /// # Safety
    /// `base` must be 64-byte aligned, point to `shape.ring_bytes()` bytes of
    /// mapped memory that stays mapped for the life of this value, and the
    /// header must have been zero-initialised (a fresh shm segment is).
    pub unsafe fn new(base: *mut u8, shape: RingShape) -> RingEnd {
        RingEnd { base, shape }
    }

    /// Fills the page tables of the ring's memory now (see
    /// [`super::shm::populate`]), so that its first use takes no page
    /// faults.
    pub(crate) fn populate(&self) {
        super::shm::populate(self.base, self.shape.ring_bytes());
    }

    /// Allocates the ring's memory now and fills its page tables, or says
    /// why it cannot (see [`super::shm::reserve_pages`]): a ring
    /// neighbour's, at creation.
    ///
    /// # Errors
    /// As [`super::shm::reserve_pages`].
    pub(crate) fn reserve(&self) -> std::io::Result<()> {
        super::shm::reserve_pages(self.base, self.shape.ring_bytes())
    }

    /// Allocates the ring's memory now, or says why it cannot, without
    /// keeping it mapped (see [`super::shm::reserve_unmapped`]): a
    /// shared-memory ring at its first use, whose pages this process maps
    /// as it writes them.
    ///
    /// # Errors
    /// As [`super::shm::reserve_pages`].
    pub(crate) fn reserve_unmapped(&self) -> std::io::Result<()> {
        super::shm::reserve_unmapped(self.base, self.shape.ring_bytes())
    }

    /// The ring's geometry.
    pub fn shape(&self) -> RingShape {
        self.shape
    }

    fn header(&self) -> &RingHeader {
        // SAFETY: `new`'s contract: base is aligned and maps a zeroed (valid
        // for atomics) RingHeader for our lifetime.
        unsafe { &*(self.base as *const RingHeader) }
    }

    fn slot_ptr(&self, index: u64) -> *mut u8 {
        let i = (index % self.shape.nsteps as u64) as usize;
        // SAFETY: i < nsteps, so the offset stays inside the ring's bytes.
        unsafe {
            self.base
                .add(RING_HEADER_BYTES + i * self.shape.slot_stride())
        }
    }

    fn header_word(&self, index: u64, offset: usize) -> &AtomicU64 {
        // SAFETY: offset is one of the 8-aligned word offsets below, inside
        // the 64-byte aligned, zero-initialised slot header; an AtomicU64 is
        // valid for any bit pattern.
        unsafe { &*(self.slot_ptr(index).add(offset) as *const AtomicU64) }
    }

    /// Sender: waits for a free slot and returns its payload area.
    ///
    /// # Errors
    /// [`RingError::Wait`] when no credit came back in time.
    #[allow(clippy::mut_from_ref)] // the credit protocol gives the slot to one writer
    pub(in crate::transport) fn acquire_send(
        &self,
        policy: &WaitPolicy<'_>,
    ) -> Result<&mut [u8], RingError> {
        self.acquire_send_with(policy, || {})
    }

    /// As [`RingEnd::acquire_send`], calling `poke` between checks (a
    /// proxied transport's waiter moves its own bytes meanwhile).
    ///
    /// # Errors
    /// As [`RingEnd::acquire_send`].
    #[allow(clippy::mut_from_ref)] // the credit protocol gives the slot to one writer
    pub(in crate::transport) fn acquire_send_with(
        &self,
        policy: &WaitPolicy<'_>,
        mut poke: impl FnMut(),
    ) -> Result<&mut [u8], RingError> {
        let h = self.header();
        let tail = h.tail.value.load(Ordering::Relaxed);
        let nsteps = self.shape.nsteps as u64;
        h.head
            .notifier
            .wait_until(policy, || {
                let free = || tail - h.head.value.load(Ordering::Acquire) < nsteps;
                // Poke only when needed, then look again at once.
                (free() || {
                    poke();
                    free()
                })
                .then_some(())
            })
            .map_err(RingError::Wait)?;
        // SAFETY: the credit check above gives this slot to the sender alone
        // until it publishes `tail + 1`; the payload follows the header.
        Ok(unsafe {
            std::slice::from_raw_parts_mut(
                self.slot_ptr(tail).add(SLOT_HEADER),
                self.shape.slot_bytes,
            )
        })
    }

    /// Sender: publishes the slot returned by [`RingEnd::acquire_send`]
    /// holding `len` bytes, signed with the call's signature
    /// ([`crate::plan::signature`]) and numbered with its position, or
    /// with `renumber` (fault injection makes a transport look so as if it
    /// lost a slot or delivered one twice; the receiver must notice).
    pub(in crate::transport) fn commit_send(&self, len: usize, sig: u64, renumber: Option<u64>) {
        let h = self.header();
        let tail = h.tail.value.load(Ordering::Relaxed);
        self.set_header(tail, len, sig, renumber.unwrap_or(tail));
        h.tail.value.store(tail + 1, Ordering::Release);
        h.tail.notifier.notify();
    }

    /// Receiver: waits for the next slot and returns its payload (for
    /// tests; the executor takes slots with [`RingEnd::try_acquire_recv`]
    /// and waits itself).
    ///
    /// # Errors
    /// [`RingError::Wait`] when nothing arrived in time; as
    /// [`RingEnd::try_acquire_recv`] otherwise.
    #[cfg(test)]
    pub(in crate::transport) fn acquire_recv(
        &self,
        policy: &WaitPolicy<'_>,
    ) -> Result<&[u8], RingError> {
        self.data_notifier()
            .wait_until(policy, || self.has_data().then_some(()))
            .map_err(RingError::Wait)?;
        self.try_acquire_recv()?
            .map(|(slot, _sig)| slot)
            .ok_or(RingError::Wait(crate::wait::WaitError::Aborted))
    }

    /// Receiver: returns the slot from [`RingEnd::try_acquire_recv`] to the sender.
    pub(in crate::transport) fn release_recv(&self) {
        let h = self.header();
        let head = h.head.value.load(Ordering::Relaxed);
        h.head.value.store(head + 1, Ordering::Release);
        h.head.notifier.notify();
    }

    /// Sender side, random access (for a proxy striping slots over several
    /// sockets): the payload area of slot `index` if the ring has room for
    /// it, i.e. `tail <= index < head + nsteps`. Publish with
    /// [`RingEnd::set_header`] and [`RingEnd::publish`].
    #[allow(clippy::mut_from_ref)] // the credit protocol gives the slot to one writer
    pub fn slot_for_write(&self, index: u64) -> Option<&mut [u8]> {
        let h = self.header();
        let tail = h.tail.value.load(Ordering::Relaxed);
        let head = h.head.value.load(Ordering::Acquire);
        if index < tail || index >= head + self.shape.nsteps as u64 {
            return None;
        }
        // SAFETY: the slot is between the published tail and the credit
        // limit, so the receiver does not read it and no other writer exists.
        Some(unsafe {
            std::slice::from_raw_parts_mut(
                self.slot_ptr(index).add(SLOT_HEADER),
                self.shape.slot_bytes,
            )
        })
    }

    /// Sender side: records the payload length, signature and sequence
    /// number of slot `index` (before publishing it).
    pub fn set_header(&self, index: u64, len: usize, sig: u64, seq: u64) {
        self.header_word(index, LEN_OFFSET)
            .store(len as u64, Ordering::Relaxed);
        self.header_word(index, SIG_OFFSET)
            .store(sig, Ordering::Relaxed);
        self.header_word(index, SEQ_OFFSET)
            .store(seq, Ordering::Relaxed);
    }

    /// The signature of slot `index` (read it only while you own the slot:
    /// between `try_acquire_recv` and `release_recv`, or a published staging slot).
    pub fn slot_sig(&self, index: u64) -> u64 {
        self.header_word(index, SIG_OFFSET).load(Ordering::Relaxed)
    }

    /// The sequence number slot `index` was published with (same ownership
    /// rule as [`RingEnd::slot_sig`]).
    pub fn slot_seq(&self, index: u64) -> u64 {
        self.header_word(index, SEQ_OFFSET).load(Ordering::Relaxed)
    }

    /// Sender side: publishes every slot below `new_tail` (all written).
    pub fn publish(&self, new_tail: u64) {
        let h = self.header();
        h.tail.value.store(new_tail, Ordering::Release);
        h.tail.notifier.notify();
    }

    /// Receiver side, random access: slot `index` if published and not yet
    /// consumed (`head <= index < tail`).
    ///
    /// # Errors
    /// [`RingError::BadLength`] when the slot header is impossible.
    pub(crate) fn slot_for_read(&self, index: u64) -> Result<Option<&[u8]>, RingError> {
        let h = self.header();
        let tail = h.tail.value.load(Ordering::Acquire);
        let head = h.head.value.load(Ordering::Relaxed);
        if index < head || index >= tail {
            return Ok(None);
        }
        let len = self.header_word(index, LEN_OFFSET).load(Ordering::Relaxed);
        if len > self.shape.slot_bytes as u64 {
            return Err(RingError::BadLength(len));
        }
        // SAFETY: published (Acquire on tail) and not yet released, so the
        // sender will not write it; length checked.
        Ok(Some(unsafe {
            std::slice::from_raw_parts(self.slot_ptr(index).add(SLOT_HEADER), len as usize)
        }))
    }

    /// Slots the receiver has consumed so far (its `head`), for a proxy
    /// that returns credits to a remote sender.
    pub fn consumed(&self) -> u64 {
        self.header().head.value.load(Ordering::Acquire)
    }

    /// Address of slot `index` (its header; the payload follows
    /// [`SLOT_HEADER`] bytes later), for a transport that copies whole slots
    /// by address (RDMA).
    pub fn slot_addr(&self, index: u64) -> u64 {
        self.slot_ptr(index) as u64
    }

    /// Address of the part of slot `index` worth sending: its
    /// [`SLOT_WIRE_HEADER`] header bytes, then the payload.
    pub fn slot_wire_addr(&self, index: u64) -> u64 {
        self.slot_addr(index) + LEN_OFFSET as u64
    }

    /// Receiver side: returns every slot below `new_head` to the sender.
    pub fn release_to(&self, new_head: u64) {
        let h = self.header();
        h.head.value.store(new_head, Ordering::Release);
        h.head.notifier.notify();
    }

    /// Sender: the next slot's payload area if the receiver has returned
    /// enough credit for it, without waiting.
    #[allow(clippy::mut_from_ref)] // the credit protocol gives the slot to one writer
    pub(in crate::transport) fn try_acquire_send(&self) -> Option<&mut [u8]> {
        let tail = self.header().tail.value.load(Ordering::Relaxed);
        self.slot_for_write(tail)
    }

    /// Receiver: the next slot's payload and the signature it was published
    /// with, if one was published, without waiting.
    ///
    /// # Errors
    /// [`RingError::BadLength`] when the slot header is impossible;
    /// [`RingError::OutOfOrder`] when the slot is not the one due next.
    pub(in crate::transport) fn try_acquire_recv(&self) -> Result<Option<(&[u8], u64)>, RingError> {
        let head = self.header().head.value.load(Ordering::Relaxed);
        let Some(slot) = self.slot_for_read(head)? else {
            return Ok(None);
        };
        let seq = self.header_word(head, SEQ_OFFSET).load(Ordering::Relaxed);
        if seq != head {
            return Err(RingError::OutOfOrder {
                expected: head,
                got: seq,
            });
        }
        Ok(Some((
            slot,
            self.header_word(head, SIG_OFFSET).load(Ordering::Relaxed),
        )))
    }

    /// True while a stream sleeps on a proxied peer's rings: for a slot of
    /// `inbound` (this end), or for credit or a grant of `staging`. The
    /// peer's engine must then wake for what that stream no longer polls
    /// itself.
    pub(crate) fn stream_sleeps_on(&self, staging: &RingEnd) -> bool {
        self.data_notifier().has_sleepers()
            || staging.credit_notifier().has_sleepers()
            || staging.mailbox().notifier().has_sleepers()
    }

    /// Sender: true when a slot is free (never blocks).
    pub fn has_credit(&self) -> bool {
        let h = self.header();
        let tail = h.tail.value.load(Ordering::Relaxed);
        tail - h.head.value.load(Ordering::Acquire) < self.shape.nsteps as u64
    }

    /// What a sender waiting for credit sleeps on.
    pub fn credit_notifier(&self) -> &Notifier {
        &self.header().head.notifier
    }

    /// What a receiver waiting for data sleeps on.
    pub fn data_notifier(&self) -> &Notifier {
        &self.header().tail.notifier
    }

    /// The ring's rendezvous mailbox (in its header).
    #[inline]
    pub(crate) fn mailbox(&self) -> &Mailbox {
        &self.header().mailbox
    }

    /// Receiver: true when a slot is waiting (never blocks).
    pub fn has_data(&self) -> bool {
        let h = self.header();
        h.tail.value.load(Ordering::Acquire) > h.head.value.load(Ordering::Relaxed)
    }

    /// Slots published so far (for diagnostics).
    pub fn tail(&self) -> u64 {
        self.header().tail.value.load(Ordering::Acquire)
    }

    /// Slots consumed so far (for diagnostics).
    pub fn head(&self) -> u64 {
        self.header().head.value.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_budget_shrinks_slots_until_the_rings_fit() {
        let four = RingShape {
            nsteps: 8,
            slot_bytes: 512 << 10,
        };
        // 7 rings of 4 MiB fit the default budget, 16 fit 64 MiB: unchanged.
        assert_eq!(four.within(crate::config::DEFAULT_SHM_BUDGET, 7), four);
        assert_eq!(four.within(64 << 20, 16), four);
        assert_eq!(four.within(64 << 20, 0), four);
        assert_ne!(four.within(crate::config::DEFAULT_SHM_BUDGET, 8), four);
        // 63 rings in 64 MiB: about 1 MiB each.
        let small = four.within(64 << 20, 63);
        assert_eq!(small.nsteps, 8);
        assert!(small.slot_bytes.is_multiple_of(64));
        assert!(63 * small.ring_bytes() <= 64 << 20, "{small:?}");
        assert!(
            63 * (small.ring_bytes() + 8 * 64) > 64 << 20,
            "{small:?} is not the largest"
        );
        // Never below 4 KiB slots, nor above the configured ones.
        assert_eq!(four.within(1 << 20, 1000).slot_bytes, MIN_BUDGET_SLOT);
        let tiny = RingShape {
            nsteps: 2,
            slot_bytes: 1024,
        };
        assert_eq!(tiny.within(1, 10), tiny);
    }

    use super::*;
    use std::time::Duration;

    /// Room for a ring of 4 slots of 64 bytes (header included), aligned.
    #[repr(C, align(64))]
    struct Aligned([u8; RING_HEADER_BYTES + 4 * (SLOT_HEADER + 64)]);

    /// The shape that fits [`Aligned`].
    const SHAPE: RingShape = RingShape {
        nsteps: 4,
        slot_bytes: 64,
    };

    /// A ring of [`SHAPE`] in zeroed memory, and its two ends (sender,
    /// receiver); the memory is returned with them and must outlive them.
    fn ring() -> (Box<Aligned>, RingEnd, RingEnd) {
        let mut mem = Box::new(Aligned([0; RING_HEADER_BYTES + 4 * (SLOT_HEADER + 64)]));
        // SAFETY: aligned, zeroed, sized for the shape; the box's memory
        // does not move when the box does, and the caller keeps it alive.
        let (tx, rx) = unsafe {
            (
                RingEnd::new(mem.0.as_mut_ptr(), SHAPE),
                RingEnd::new(mem.0.as_mut_ptr(), SHAPE),
            )
        };
        (mem, tx, rx)
    }

    #[test]
    fn a_wire_slot_is_the_bytes_a_staged_slot_sends() {
        let (_mem, ring, _) = ring();
        let payload = [7u8, 1, 2, 3, 4, 5, 6, 9, 11];
        for seq in 0..6u64 {
            let slot = ring.try_acquire_send().expect("credit");
            slot[..payload.len()].copy_from_slice(&payload);
            ring.commit_send(payload.len(), 0xfeed_0000 + seq, None);
            let staged_len = SLOT_WIRE_HEADER + payload.len();
            // SAFETY: the slot was published above and lies in `mem`.
            let staged = unsafe {
                std::slice::from_raw_parts(ring.slot_wire_addr(seq) as *const u8, staged_len)
            };
            let mut out = [0xAAu8; 64];
            let n = write_wire_slot(&mut out, &payload, 0xfeed_0000 + seq, seq);
            assert_eq!(n, staged_len);
            assert_eq!(&out[..n], staged, "slot {seq}");
            assert_eq!(
                ring.slot_wire_addr(seq) - ring.slot_addr(seq),
                SLOT_WIRE_OFFSET as u64
            );
            ring.try_acquire_recv().unwrap().unwrap();
            ring.release_recv();
        }
    }

    #[test]
    fn fifo_with_credits() {
        let (_mem, tx, rx) = ring();
        let policy = WaitPolicy::new(10, Duration::from_millis(20));
        for i in 0..4u8 {
            let s = tx.acquire_send(&policy).unwrap();
            s[0] = i;
            tx.commit_send(1 + i as usize, 7, None);
        }
        // Ring full: no credit.
        assert!(matches!(
            tx.acquire_send(&policy),
            Err(RingError::Wait(WaitError::Timeout(_)))
        ));
        for i in 0..4u8 {
            let s = rx.acquire_recv(&policy).unwrap();
            assert_eq!((s[0], s.len()), (i, 1 + i as usize));
            rx.release_recv();
        }
        assert!(matches!(rx.acquire_recv(&policy), Err(RingError::Wait(_))));
        assert_eq!((tx.tail(), rx.head()), (4, 4));
    }

    #[test]
    fn lost_and_repeated_slots_are_refused() {
        let (_mem, tx, rx) = ring();
        let policy = WaitPolicy::new(10, Duration::from_millis(20));
        tx.acquire_send(&policy).unwrap();
        tx.commit_send(1, 7, Some(0));
        tx.acquire_send(&policy).unwrap();
        tx.commit_send(1, 7, Some(0)); // the same slot again
        tx.acquire_send(&policy).unwrap();
        tx.commit_send(1, 7, Some(3)); // slot 2 never came
        assert!(rx.acquire_recv(&policy).is_ok());
        rx.release_recv();
        assert_eq!(
            rx.acquire_recv(&policy),
            Err(RingError::OutOfOrder {
                expected: 1,
                got: 0
            })
        );
        rx.release_recv();
        assert_eq!(
            rx.acquire_recv(&policy),
            Err(RingError::OutOfOrder {
                expected: 2,
                got: 3
            })
        );
    }
}
