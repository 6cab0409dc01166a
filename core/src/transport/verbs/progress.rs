//! One verbs peer's data path: RDMA WRITEs out, counters in, completions.
//!
//! - **Send**: every staged slot the peer has credit for is written, header
//!   words and payload (`SLOT_WIRE_HEADER + len` bytes, not the whole
//!   64-byte header), into the same slot of the peer's inbound ring, as one
//!   chain of RDMA WRITEs (inline when small, else from the registered
//!   staging ring). The last of them is a WRITE_WITH_IMM whose immediate is
//!   the new tail (`IMM_TAIL_MASK` bits of it): one work request for a
//!   one-slot message, as NCCL's IB transport does. Its completion at the
//!   receiver comes after all of the chain's data is in place (same RC QP,
//!   in order). Signalled every half ring; its completion releases the
//!   staging slots (completions come in order).
//! - **Receive**: whoever polls the receiver's CQ (the stream waiting for
//!   the slot, or a stream that just moved a ring, or the engine) turns the
//!   immediate into the inbound ring's tail, wakes a stream asleep on it and
//!   puts the receive back. The completion wakes the engine only while a
//!   stream sleeps there (see [`super::event`]).
//!
//!   Measured in the Soft-RoCE guest, the earlier design (slots, then an
//!   inline WRITE_WITH_IMM of the tail into the peer's ring header, seen by
//!   a spinning reader without any CQ) cost two work requests per message:
//!   the `ibv_post_send` of an 8-byte message took ~25-30 µs inline against
//!   perftest's 10.7 µs one-way for one request.
//! - **Credits**: the count of inbound slots the stream consumed rides in the
//!   immediate of every slot write going back (`IMM_CREDIT_SHIFT`), as TCP
//!   piggybacks its acknowledgements: a ping-pong never sends a credit of
//!   its own. Without traffic back, the count is written (inline,
//!   WRITE_WITH_IMM) into the peer's control block once half a ring was
//!   consumed: by a stream waiting on this peer, by the engine, or at once
//!   when the peer has used up its credit. (Measured in the Soft-RoCE guest
//!   before piggybacking: a credit write on the receiver's path every fourth
//!   message cost ~25 µs, and delayed about 4 round trips in 10.)
//!
//! The stream that staged or consumed a slot posts these itself when the
//! peer is free ([`SharedPeer::pump`]); otherwise the progress engine
//! ([`super::source`]) does. A bad completion or a failed post puts the
//! communicator in its error state naming the peer and transport `verbs`;
//! an abort is written into every peer's control block so their waits end
//! too. A peer idle for `HEARTBEAT` gets a signalled rewrite of its credit
//! word, so that a dead peer (its QP gone) shows as a failed completion
//! (retries exhausted, about half a second with the QP's timeout 14 and 7
//! retries), or as a write that never completes (`STALL`), even while this
//! rank only waits for it.

use std::collections::VecDeque;
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use crate::transport::verbs::sys::*;

use super::handshake::Shaker;
use super::qp::{CTRL_HEAD, Qp, RECV_WR_ID, RingKeys, VerbsAddr, VerbsRings};
use super::regcache::RegCache;
use crate::barrier::area::BarrierArea;
use crate::transport::ring::{RingEnd, SLOT_WIRE_HEADER, SLOT_WIRE_OFFSET, write_wire_slot};

mod barrier;
mod imm;
mod post;
mod rendezvous;
mod rings;
use crate::Error;
use imm::{IMM_CONTROL, IMM_CREDIT_MASK, IMM_CREDIT_SHIFT, IMM_TAIL_MASK, rebuild};
use post::{MAX_INLINE, Write};

/// Whom an RDMA WRITE tells, besides landing in the peer's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wake {
    /// Nobody: a plain RDMA WRITE.
    Nobody,
    /// A WRITE_WITH_IMM: a completion on the peer's CQ, which its streams
    /// poll while they wait; it wakes the peer's engine only while a stream
    /// sleeps there (unsolicited).
    IfAsked,
    /// A solicited WRITE_WITH_IMM: always wakes the peer's engine (abort,
    /// goodbye: nobody else would act on them).
    Engine,
}

/// Receives consumed before they are posted again, in one call.
const RECV_BATCH: usize = 4;

/// The immediate of the write that completes slots below `tail`, carrying
/// the `consumed` count back (both truncated; see [`imm`]).
#[inline]
fn tail_imm(tail: u64, consumed: u64) -> u32 {
    (tail as u32 & IMM_TAIL_MASK) | ((consumed as u32 & IMM_CREDIT_MASK) << IMM_CREDIT_SHIFT)
}

/// One verbs peer as the progress engine sees it.
pub(crate) struct PeerRdma {
    /// The peer's rank.
    pub peer: usize,
    // Declared (so dropped) before the rings: the QP and its registrations
    // go before the memory they cover.
    pub(crate) qp: Qp,
    staging: RingEnd,
    inbound: RingEnd,
    rings: Arc<VerbsRings>,
    /// The peer's end of the pair, once connected ([`super::handshake`]).
    remote: VerbsAddr,
    /// True once our QP is connected and the peer's is ready to receive
    /// (the handshake is done): words and slots may be written.
    qp_up: bool,
    /// True once something needs the pair while it is not connected: the
    /// engine starts the handshake.
    pub(crate) wanted: bool,
    /// Where the peer's rings are, once it told us ([`rings`]).
    peer_rings: RingKeys,
    /// True once our rings are registered and the peer told where they
    /// are (and where its own are): slots may go.
    rings_up: bool,
    /// True once our rings are registered and we told the peer where.
    rings_told: bool,
    /// Next staged slot to write.
    posted: u64,
    /// Inbound slots published to the stream.
    published: u64,
    /// Consumed count last written to the peer.
    /// (Shared with [`SharedPeer`], which reads it without the lock.)
    credit_sent: Arc<AtomicU64>,
    /// Work requests posted, and completed, so far.
    wr_posted: u64,
    wr_done: u64,
    /// Posted count of the latest signalled request.
    last_signalled: u64,
    /// Staging slots written before the latest signalled request.
    signalled_slots: u64,
    /// Signalled requests in flight: (work requests posted up to it, staging
    /// slots written before it, when the engine first saw it in flight). Its
    /// completion means every earlier request completed: those slots are
    /// free again. (Stamped by the engine, within `IDLE_WAIT` of the post,
    /// so that posting reads no clock: in the Soft-RoCE guest a clock read
    /// is a ~2 µs system call, and a stream posts every fourth message
    /// signalled.)
    pub(crate) inflight: VecDeque<(u64, u64, Option<Instant>)>,
    pub(crate) abort_sent: bool,
    pub(crate) closed_sent: bool,
    /// Work requests posted when the engine last looked, and when that was
    /// (for the heartbeat: no clock is read on the posting path).
    idle_mark: (u64, Instant),
    /// Set by the engine once the peer failed: nothing more is posted.
    pub(crate) dead: bool,
    /// An error met by [`SharedPeer::pump`] on a stream's thread, reported
    /// by the engine's next [`PeerRdma::step`].
    deferred: Option<Error>,
    /// Grant numbers forwarded to the peer, and seen from it.
    grant_sent: u64,
    grant_seen: u64,
    regs: Arc<RegCache>,
    /// Our barrier area, which the peer writes (woken from here).
    barrier: Arc<BarrierArea>,
    /// The writes [`PeerRdma::send`] gathers, kept between calls so that
    /// sending allocates nothing (in the Soft-RoCE guest, a CPU emulated
    /// instruction by instruction, every allocation is on a message's path).
    scratch: Vec<Write>,
    /// Receives consumed and not yet posted again (see [`RECV_BATCH`]).
    recvs_owed: usize,
}

impl PeerRdma {
    /// Wraps a peer whose QP is not made yet ([`super::handshake`] makes
    /// and connects it at the pair's first use).
    pub(crate) fn new(
        peer: usize,
        rings: Arc<VerbsRings>,
        qp: Qp,
        regs: Arc<RegCache>,
        barrier: Arc<BarrierArea>,
    ) -> PeerRdma {
        let staging = rings.staging.end();
        let inbound = rings.inbound.end();
        PeerRdma {
            peer,
            staging,
            inbound,
            rings,
            qp,
            remote: VerbsAddr::default(),
            qp_up: false,
            wanted: false,
            peer_rings: RingKeys::default(),
            rings_up: false,
            rings_told: false,
            posted: 0,
            published: 0,
            credit_sent: Arc::new(AtomicU64::new(0)),
            wr_posted: 0,
            wr_done: 0,
            last_signalled: 0,
            signalled_slots: 0,
            inflight: VecDeque::new(),
            abort_sent: false,
            closed_sent: false,
            idle_mark: (0, Instant::now()),
            dead: false,
            deferred: None,
            grant_sent: 0,
            grant_seen: 0,
            regs,
            barrier,
            scratch: Vec::new(),
            recvs_owed: 0,
        }
    }

    fn fail(&self, cause: String) -> Error {
        Error::Transport {
            transport: "verbs",
            peer: self.peer,
            cause,
        }
    }

    #[inline]
    pub(crate) fn room(&self) -> u64 {
        u64::from(self.qp.depth) - (self.wr_posted - self.wr_done)
    }

    /// Writes every staged slot the peer has room for, then the tail, as
    /// one chain.
    fn send(&mut self) -> Result<bool, Error> {
        // Most calls (a stream that consumed a slot, or polls while it
        // waits) find nothing staged: say so before anything else (the
        // counts are in docs/measurements/soft-roce.md).
        if !self.staged_unwritten() {
            return Ok(false);
        }
        if !self.rings_up && !self.rings_ready()? {
            return Ok(false);
        }
        let nsteps = self.staging.shape().nsteps as u64;
        let credit = self.rings.ctrl.head.value.load(Ordering::Acquire);
        let first = self.posted;
        // One small slot staged (a small message's case): one inline
        // WRITE_WITH_IMM, without the gathering below.
        if first < credit + nsteps
            && self.room() > 2
            && self.staging.tail() == first + 1
            && let Ok(Some(slot)) = self.staging.slot_for_read(first)
        {
            let len = (SLOT_WIRE_HEADER + slot.len()) as u32;
            if len <= MAX_INLINE {
                self.post_inline_slot(first, self.staging.slot_wire_addr(first), len)?;
                return Ok(true);
            }
        }
        let mut writes = std::mem::take(&mut self.scratch);
        writes.clear();
        let mut k = first;
        // Keep one entry free for a credit write.
        while k < credit + nsteps && self.room() > writes.len() as u64 + 1 {
            match self.slot_write(k) {
                Ok(Some(w)) => writes.push(w),
                Ok(None) => break,
                Err(e) => {
                    self.scratch = writes;
                    return Err(e);
                }
            }
            k += 1;
        }
        let Some(last) = writes.last_mut() else {
            self.scratch = writes;
            return Ok(false);
        };
        let consumed = self.tail_write(last, k);
        let posted = self.post_writes(&writes);
        let inline = writes.iter().all(|w| w.lkey.is_none());
        self.scratch = writes;
        posted?;
        self.slots_posted(first, k, consumed, inline);
        Ok(true)
    }

    /// Posts slot `k` (`len` bytes of its wire form at `local`, at most
    /// [`MAX_INLINE`]), the only one not yet written, as one inline
    /// WRITE_WITH_IMM carrying the new tail: the whole of a small message's
    /// send. What [`PeerRdma::slot_write`], [`PeerRdma::tail_write`],
    /// [`PeerRdma::post_one`] and [`PeerRdma::slots_posted`] do for any run
    /// of slots, on the stack and in one piece (about a tenth fewer
    /// instructions for a small verbs host send).
    fn post_inline_slot(&mut self, k: u64, local: u64, len: u32) -> Result<(), Error> {
        let remote = self.remote_slot_addr(k);
        let consumed = self.inbound.consumed();
        let imm = tail_imm(k + 1, consumed);
        let id = self.wr_posted + 1;
        let signal = self.tail_signal_due(k + 1) || self.queue_signal_due(id, self.last_signalled);
        let mut sge = ibv_sge {
            addr: local,
            length: len,
            lkey: 0,
        };
        // SAFETY: a zeroed send WR is valid; filled below.
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = id;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM;
        wr.send_flags = ibv_send_flags::IBV_SEND_INLINE.0
            | if signal {
                ibv_send_flags::IBV_SEND_SIGNALED.0
            } else {
                0
            };
        set_imm(&mut wr, imm);
        wr.wr.rdma = RdmaWr {
            remote_addr: remote,
            rkey: self.peer_rings.inbound_rkey,
        };
        let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
        // SAFETY: the QP is in RTS; the WR and its SGE live across the
        // call, its `next` null (zeroed); the `len` bytes at `local` (a
        // staged slot, or the caller's buffer) are alive and copied now
        // (inline).
        let rc = unsafe { ibv_post_send(self.qp.qp, &mut wr, &mut bad) };
        if rc != 0 {
            return Err(self.post_failed(rc));
        }
        self.posted_one(k + 1, signal);
        self.slots_posted(k, k + 1, consumed, true);
        Ok(())
    }

    /// Sends `payload` as the next slot, signed `sig`, straight from the
    /// caller's bytes (one inline write from the stack, the staging ring
    /// only counted past), if nothing is staged or in flight before it and
    /// the peer and the work queue have room; false (nothing done)
    /// otherwise.
    fn post_inline(&mut self, payload: &[u8], sig: u64) -> Result<bool, Error> {
        if !self.rings_up {
            // Staged instead: the pair's first slot makes the rings.
            return Ok(false);
        }
        let k = self.posted;
        let nsteps = self.staging.shape().nsteps as u64;
        let credit = self.rings.ctrl.head.value.load(Ordering::Acquire);
        if self.staging.tail() != k
            || self.staging.consumed() != k
            || k >= credit + nsteps
            || self.room() <= 2
        {
            return Ok(false);
        }
        let mut wire = [0u8; MAX_INLINE as usize];
        let len = write_wire_slot(&mut wire, payload, sig, k);
        // Counted as staged, then posted and (inline) released at once.
        self.staging.publish(k + 1);
        self.post_inline_slot(k, wire.as_ptr() as u64, len as u32)?;
        Ok(true)
    }

    /// The write of staged slot `k` (header words and payload), if staged.
    #[inline]
    fn slot_write(&self, k: u64) -> Result<Option<Write>, Error> {
        let len = match self.staging.slot_for_read(k) {
            Ok(Some(slot)) => (SLOT_WIRE_HEADER + slot.len()) as u32,
            Ok(None) => return Ok(None),
            Err(e) => return Err(self.fail(format!("staging ring corrupted: {e:?}"))),
        };
        Ok(Some(Write {
            fetch_add: None,
            local: self.staging.slot_wire_addr(k),
            len,
            remote: self.remote_slot_addr(k),
            rkey: self.peer_rings.inbound_rkey,
            // Small slots go inline: copied at post time, no DMA read.
            lkey: (len > MAX_INLINE).then_some(self.qp.staging_lkey),
            notify: false,
            imm: 0,
            solicited: false,
            signal: false,
            slots: k,
        }))
    }

    /// Makes `last` the write that tells the peer every slot below `k` is
    /// in place; returns the consumed count it carries.
    #[inline]
    fn tail_write(&self, last: &mut Write, k: u64) -> u64 {
        // The last write carries the new tail as its immediate: the
        // receiver's completion for it says every slot below `k` is in place.
        // And our consumed count: the peer's credit, for free.
        let consumed = self.inbound.consumed();
        last.notify = true;
        last.imm = tail_imm(k, consumed);
        // Not solicited: it wakes the peer's engine only while a stream sleeps
        // there (the engine then asks for every completion); a waiting stream
        // polls the CQ itself. Signalled only every half ring: its completion
        // frees the staging slots up to it, and no completion wakes this
        // engine for each small message.
        last.signal = self.tail_signal_due(k);
        last.slots = k;
        consumed
    }

    /// Where slot `k`'s wire form goes in the peer's inbound ring: header
    /// words and payload only, at the same offset as in ours.
    #[inline]
    fn remote_slot_addr(&self, k: u64) -> u64 {
        let shape = self.staging.shape();
        self.peer_rings.inbound_addr
            + crate::transport::ring::RING_HEADER_BYTES as u64
            + (k % shape.nsteps as u64) * shape.slot_stride() as u64
            + SLOT_WIRE_OFFSET as u64
    }

    /// Whether the write telling the peer of slots below `k` is signalled:
    /// every half ring of slots, so that completions free staging slots.
    #[inline]
    fn tail_signal_due(&self, k: u64) -> bool {
        k - self.signalled_slots >= (self.staging.shape().nsteps as u64 / 2).max(1)
    }

    /// Staged slots `first..k` were posted, carrying the consumed count
    /// `consumed`. Written inline (copied at post time), they are free again
    /// at once, unless slots before them still wait for their completion
    /// (staging is released in order): then a send needs no completion to
    /// have room, and a small-message sender polls no completion queue.
    #[inline]
    fn slots_posted(&mut self, first: u64, k: u64, consumed: u64, inline: bool) {
        self.posted = k;
        self.credit_sent.fetch_max(consumed, Ordering::Relaxed);
        if inline && self.staging.consumed() == first {
            self.staging.release_to(k);
        }
    }

    /// Checks the tail the peer delivered and returns credits for slots the
    /// stream consumed.
    fn receive(&mut self) -> Result<bool, Error> {
        let nsteps = self.inbound.shape().nsteps as u64;
        let mut moved = false;
        // `poll` turned the peer's immediates into the tail (maybe on a
        // stream's thread); the stream may already be reading those slots.
        // Check it, and wake a stream asleep on the ring.
        let tail = self.inbound.tail();
        if tail != self.published {
            let consumed = self.inbound.consumed();
            if tail < self.published || tail > consumed + nsteps {
                return Err(self.fail(format!(
                    "peer claims {tail} slots delivered; {} published, {consumed} consumed",
                    self.published
                )));
            }
            self.published = tail;
            self.inbound.data_notifier().notify();
            moved = true;
        }
        // A grant the peer wrote into our staging ring's header: wake the
        // stream waiting for it.
        let cts = self.staging.mailbox().grant_count();
        if cts != self.grant_seen {
            self.grant_seen = cts;
            self.staging.mailbox().notifier().notify();
            moved = true;
        }
        Ok(self.forward_grant()? || self.return_credit(false)? || moved)
    }

    /// True while a stream sleeps on one of this peer's rings or a barrier
    /// waiter on our area: the engine must then wake at every completion
    /// (tails, credits and barrier flags are not solicited).
    pub(crate) fn has_sleepers(&self) -> bool {
        self.inbound.stream_sleeps_on(&self.staging) || self.barrier.has_sleepers()
    }

    /// Writes the count of inbound slots the stream consumed, once it moved
    /// by half a ring; with `only_if_starved`, only if the peer has used up
    /// the credit it has (else a later wait or slot write returns it).
    #[inline]
    fn return_credit(&mut self, only_if_starved: bool) -> Result<bool, Error> {
        // Returned every half ring, not per slot: a sender only waits for
        // credit once the whole ring is in flight, and then at least half
        // of it comes back as soon as it is consumed.
        let nsteps = self.inbound.shape().nsteps as u64;
        let every = (nsteps / 2).max(1);
        let consumed = self.inbound.consumed();
        let credit_sent = self.credit_sent.load(Ordering::Relaxed);
        let starved = self.inbound.tail() >= credit_sent + nsteps;
        if consumed >= credit_sent + every && (starved || !only_if_starved) && self.room() > 1 {
            // A waiting sender sees the credit in its memory, or polls its
            // CQ; its engine is woken only while a stream sleeps there.
            self.post_word(CTRL_HEAD, consumed, Wake::IfAsked, false)?;
            self.credit_sent.store(consumed, Ordering::Relaxed);
            return Ok(true);
        }
        Ok(false)
    }

    /// Reaps completions: releases staging slots whose last write
    /// completed, turns the peer's tail immediates into the inbound ring's
    /// tail (waking a stream asleep on it) and puts receives back.
    pub(crate) fn poll(&mut self) -> Result<bool, Error> {
        if !self.qp.made() {
            return Ok(false);
        }
        // Not zeroed: the poll writes the entries it returns, and this runs
        // every few checks of a spinning wait.
        let mut wc = [const { MaybeUninit::<ibv_wc>::uninit() }; 16];
        // SAFETY: the CQ is valid; wc has room for 16 entries.
        let n = unsafe { ibv_poll_cq(self.qp.cq, wc.len() as i32, wc[0].as_mut_ptr()) };
        if n < 0 {
            return Err(self.fail(format!("ibv_poll_cq returned {n}")));
        }
        let mut release = None;
        let mut recvs = 0;
        let mut slot_imm = None;
        for c in &wc[..n as usize] {
            // SAFETY: `ibv_poll_cq` wrote the first `n` entries.
            let c = unsafe { c.assume_init_ref() };
            if c.status != ibv_wc_status::IBV_WC_SUCCESS {
                // SAFETY: returns a static string for any status.
                let what = unsafe {
                    std::ffi::CStr::from_ptr((self.qp.device().lib.wc_status_str)(c.status))
                };
                return Err(self.fail(format!(
                    "work completion failed: {} (status {}, vendor error {:#x})",
                    what.to_string_lossy(),
                    c.status,
                    c.vendor_err
                )));
            }
            if c.wr_id == RECV_WR_ID {
                // A WRITE_WITH_IMM from the peer: a new tail, or a control
                // word moved (read by `receive` and `send`); put the
                // receive back.
                recvs += 1;
                // A receive completion of a WRITE_WITH_IMM carries its
                // immediate.
                let imm = imm_of(c);
                if imm & IMM_CONTROL == 0 {
                    slot_imm = Some(imm);
                } else {
                    // Maybe a barrier flag: wake a waiter asleep on our area.
                    self.barrier.notify();
                }
                continue;
            }
            self.wr_done = self.wr_done.max(c.wr_id);
            while let Some(&(at, slots, _)) = self.inflight.front() {
                if at > c.wr_id {
                    break;
                }
                self.inflight.pop_front();
                release = Some(slots);
            }
        }
        if let Some(t) = release {
            // Inline slots were released when posted: never move back.
            if t > self.staging.consumed() {
                self.staging.release_to(t);
            }
        }
        if let Some(imm) = slot_imm {
            // Completions come in order: the last slot write's immediate
            // has the newest counts.
            let tail = rebuild(self.inbound.tail(), imm & IMM_TAIL_MASK, IMM_TAIL_MASK);
            self.inbound.publish(tail);
            let head = &self.rings.ctrl.head.value;
            let credit = rebuild(
                head.load(Ordering::Acquire),
                (imm >> IMM_CREDIT_SHIFT) & IMM_CREDIT_MASK,
                IMM_CREDIT_MASK,
            );
            // The peer also writes this word (a credit of its own, always
            // older than this immediate's, or equal): keep the larger.
            head.fetch_max(credit, Ordering::AcqRel);
        }
        // Receives go back in batches: one `ibv_post_recv` per message
        // was a tenth of a host receive's instructions. The queue holds
        // `2 × nsteps + 16`, so a batch's few missing never starve it.
        self.recvs_owed += recvs;
        if self.recvs_owed >= RECV_BATCH {
            self.qp
                .post_recvs(self.recvs_owed)
                .map_err(|e| self.fail(format!("ibv_post_recv: {e}")))?;
            self.recvs_owed = 0;
        }
        Ok(n > 0)
    }

    /// True when a staged slot is not yet written (a corrupt one counts:
    /// `send` reports it).
    #[inline]
    fn staged_unwritten(&self) -> bool {
        self.staging.tail() > self.posted
    }

    /// True when a staged slot or a grant is still to be written (the
    /// peer's credit or the work queue's room was short when last tried).
    #[inline]
    fn backlogged(&self) -> bool {
        self.staged_unwritten() || self.inbound.mailbox().grant_count() != self.grant_sent
    }

    /// True when every staged slot was written and its write completed.
    pub(crate) fn flushed(&self) -> bool {
        self.inflight.is_empty()
            && self
                .staging
                .slot_for_read(self.posted)
                .map_or(true, |s| s.is_none())
    }

    /// True once the pair is connected (see [`PeerRdma::qp_up`]'s field).
    pub(crate) fn up(&self) -> bool {
        self.qp_up
    }

    pub(crate) fn peer_closed(&self) -> bool {
        self.rings.ctrl.closed.value.load(Ordering::Acquire) != 0
    }

    /// One round of work; true if anything moved.
    pub(crate) fn step(&mut self) -> Result<bool, Error> {
        if let Some(e) = self.deferred.take() {
            return Err(e);
        }
        let abort = self.rings.ctrl.abort.value.load(Ordering::Acquire);
        if abort != 0 {
            let failed = usize::try_from(abort - 1)
                .ok()
                .filter(|&r| r < crate::bootstrap::MAX_RANKS)
                .unwrap_or(self.peer);
            return Err(Error::RemoteFailed {
                peer: failed,
                op: "communicator".into(),
                cause: format!("it failed, and rank {} aborted the communicator", self.peer),
            });
        }
        let polled = self.poll();
        let polled = match polled {
            Err(_) if self.peer_closed() => return Ok(false),
            r => r?,
        };
        let sent = if self.peer_closed() {
            false
        } else {
            // The peer's first slot for us may be waiting for our rings.
            let answered = !self.rings_up && self.peer_told_rings() && self.rings_ready()?;
            self.send()? || answered
        };
        let received = self.receive()?;
        let now = Instant::now();
        if let Some((_, _, seen)) = self.inflight.front_mut() {
            let at = *seen.get_or_insert(now);
            if !self.peer_closed() && now.duration_since(at) > STALL {
                return Err(self.fail(format!(
                    "an RDMA write to it has not completed in {} s: the peer is dead or unreachable",
                    STALL.as_secs()
                )));
            }
        }
        if self.idle_mark.0 != self.wr_posted {
            self.idle_mark = (self.wr_posted, now);
        }
        if self.qp_up
            && !self.peer_closed()
            && now.duration_since(self.idle_mark.1) >= HEARTBEAT
            && self.room() > 1
        {
            // Nothing else would show that the peer died while we only
            // wait: rewrite our credit (same value, harmless), signalled, so
            // a dead peer's QP turns into a failed completion.
            let credit = self.credit_sent.load(Ordering::Relaxed);
            self.post_word(CTRL_HEAD, credit, Wake::Nobody, true)?;
        }
        Ok(polled || sent || received)
    }
}

/// A peer shared by the progress engine, the streams' threads and the
/// handshakes that connect it.
///
/// Measured in the Soft-RoCE guest, every thread hand-off on a message's
/// path (stream wakes the engine, the engine posts) cost about as much as the RDMA
/// itself. So a stream that has just staged a slot (or consumed one) posts
/// the write and the tail (or the credit) itself when the peer is free
/// ([`SharedPeer::pump`]); the engine keeps everything that waits (CQ
/// polling, staging release, heartbeats, failure reports) and takes over
/// whenever the lock is busy.
#[derive(Debug)]
pub(crate) struct SharedPeer {
    peer: Mutex<PeerRdma>,
    /// The peer's `credit_sent`: whether a credit is due after a receive
    /// is known without the lock.
    credit_sent: Arc<AtomicU64>,
    /// Makes the pair's handshake (and wakes the engine).
    shaker: Arc<Shaker>,
    /// The peer's rank, and where it answers handshakes.
    rank: usize,
    addr: SocketAddr,
    /// Set once this side's handshake was started (by whichever thread
    /// first needed the pair).
    dialing: AtomicBool,
    /// This peer, for the handshake's thread.
    me: Weak<SharedPeer>,
}

impl std::fmt::Debug for PeerRdma {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PeerRdma(rank {}, {} posted)", self.peer, self.posted)
    }
}

impl SharedPeer {
    /// Wraps a peer that answers handshakes at `addr`; `shaker` connects
    /// the pair at its first use.
    pub(crate) fn new(p: PeerRdma, shaker: Arc<Shaker>, addr: SocketAddr) -> Arc<SharedPeer> {
        Arc::new_cyclic(|me| SharedPeer {
            credit_sent: p.credit_sent.clone(),
            rank: p.peer,
            peer: Mutex::new(p),
            shaker,
            addr,
            dialing: AtomicBool::new(false),
            me: me.clone(),
        })
    }

    /// Starts this side's handshake (once), from whichever thread first
    /// needs the pair: a stream, a job on the engine's thread, the engine
    /// (takes no lock: the caller may hold the peer's).
    pub(crate) fn want(&self) {
        if self.dialing.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Some(me) = self.me.upgrade() {
            self.shaker.dial(me, self.rank, self.addr);
        }
    }

    /// Makes this side's QP (once) and returns its address.
    ///
    /// # Errors
    /// As [`Qp::make`].
    pub(crate) fn make_qp(&self) -> Result<VerbsAddr, Error> {
        let mut p = self.lock();
        let p = &mut *p;
        p.qp.make(&p.rings)
    }

    /// Moves this side's QP to RTS towards `remote` (once); with `up`, the
    /// peer's QP is known ready to receive, so the pair may carry writes.
    ///
    /// # Errors
    /// As [`Qp::connect`].
    pub(crate) fn connect_qp(&self, remote: &VerbsAddr, up: bool) -> Result<(), Error> {
        let mut p = self.lock();
        p.qp.connect(remote)?;
        p.remote = *remote;
        p.qp_up |= up;
        Ok(())
    }

    /// The peer said its QP is ready to receive: the pair may carry writes.
    pub(crate) fn mark_up(&self) {
        let mut p = self.lock();
        p.qp_up |= p.qp.connected();
    }

    /// Leaves `e` for the engine to report (first error kept).
    pub(crate) fn defer(&self, e: Error) {
        let mut p = self.lock();
        if p.deferred.is_none() {
            p.deferred = Some(e);
        }
    }

    /// Waits until the pair is connected, starting this side's handshake
    /// if nobody has (a barrier's flag write, on any thread).
    ///
    /// # Errors
    /// [`Error::Transport`] when connecting failed, or took longer than
    /// the timeout.
    pub(crate) fn await_up(&self) -> Result<(), Error> {
        let deadline = Instant::now() + self.shaker.timeout + Duration::from_secs(1);
        let mut nap = Duration::from_micros(20);
        self.want();
        loop {
            {
                let p = self.lock();
                if p.qp_up {
                    return Ok(());
                }
                if p.dead || p.deferred.is_some() || Instant::now() > deadline {
                    return Err(
                        p.fail("the pair could not be connected (the engine reports why)".into())
                    );
                }
            }
            // On the engine's thread (a job), its sources go on meanwhile:
            // the peer's own handshake to us must be answered.
            crate::wait::run_slice_hook();
            std::thread::sleep(nap);
            nap = (nap * 2).min(Duration::from_millis(2));
        }
    }

    /// The peer, for a stream's thread: `None` when another thread holds
    /// it (that thread is moving its bytes) or it is failing (the engine
    /// reports that).
    #[inline(always)]
    fn for_stream(&self) -> Option<MutexGuard<'_, PeerRdma>> {
        let p = self.peer.try_lock().ok()?;
        (!(p.dead || p.deferred.is_some() || p.peer_closed())).then_some(p)
    }

    /// The peer, for the progress engine (blocks while a stream pumps).
    pub(crate) fn lock(&self) -> MutexGuard<'_, PeerRdma> {
        self.peer.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stream side, after staging or consuming a slot: posts what can go
    /// now. False when the engine must be woken instead (the lock was busy,
    /// or the peer is failing: the engine reports it).
    pub(crate) fn pump(&self) -> bool {
        let Some(mut p) = self.for_stream() else {
            return false;
        };
        // Post first, so that a ping-pong's reply goes out before anything
        // else is looked at. The CQ is polled (completions reaped: the
        // peer's credit from its immediates, staging slots and work-queue
        // room freed) only when something staged could not go without it;
        // every wait on this peer polls it anyway. (Polling first would be
        // an empty poll on a ping-pong's path, about 3 % of a host call's
        // instructions.)
        let mut step = || -> Result<bool, Error> {
            p.send()?;
            if p.backlogged() {
                p.poll()?;
                p.send()?;
            }
            p.forward_grant()?;
            p.return_credit(true)
        };
        match step() {
            Ok(_) if p.qp_up => true,
            // The pair's first use: connect it (and have the engine post
            // once it is).
            Ok(_) => {
                let wanted = p.wanted;
                drop(p);
                if wanted {
                    self.want();
                }
                false
            }
            Err(e) => {
                p.deferred = Some(e);
                false
            }
        }
    }
}

impl SharedPeer {
    /// Stream side, in its turn: sends `payload` as one slot signed `sig`
    /// from the caller's bytes if it fits one inline write, the peer is
    /// free and nothing is queued before it ([`PeerRdma::post_inline`]);
    /// false (nothing done) otherwise: stage it instead.
    pub(crate) fn send_inline(&self, payload: &[u8], sig: u64) -> bool {
        if SLOT_WIRE_HEADER + payload.len() > MAX_INLINE as usize {
            return false;
        }
        let Some(mut p) = self.for_stream() else {
            return false;
        };
        match p.post_inline(payload, sig) {
            Ok(sent) => sent,
            Err(e) => {
                p.deferred = Some(e);
                false
            }
        }
    }

    /// Stream side, after consuming an inbound slot: returns the credit at
    /// once if the peer has used up what it had (else a later slot write
    /// going back, a wait or the engine returns it). What [`SharedPeer::pump`]
    /// does, less the sending a receive has nothing for. False when the
    /// engine must be woken instead.
    pub(crate) fn consumed(&self, inbound: &RingEnd) -> bool {
        // Not starved (the common case): nothing to do, and no lock taken.
        let nsteps = inbound.shape().nsteps as u64;
        if inbound.tail() < self.credit_sent.load(Ordering::Relaxed) + nsteps {
            return true;
        }
        let Some(mut p) = self.for_stream() else {
            return false;
        };
        if let Err(e) = p.return_credit(true) {
            p.deferred = Some(e);
            return false;
        }
        true
    }

    /// Stream side, while waiting on this pair's rings (a slot, credit or a
    /// grant): [`SharedPeer::poll_now`], once the pair is connected. A pair
    /// nobody used yet (this rank only receives from the peer) is connected
    /// now, as a first slot would connect it, so that what the peer sends,
    /// or its failure, reaches this rank, and a peer that is gone fails the
    /// dial naming it instead of the wait running into its timeout. (A
    /// barrier's wait polls its areas' peers with `poll_now` alone: its
    /// writers connect the pairs its flags need.)
    pub(crate) fn wait_on(&self) {
        let Some(mut p) = self.for_stream() else {
            return;
        };
        if p.qp_up {
            p.poll_waiting();
            return;
        }
        // Nothing for the engine to post once connected (`wanted` is for
        // a side with slots waiting): starting the handshake is all.
        drop(p);
        self.want();
    }

    /// Stream side, while waiting on one of this peer's rings: reaps
    /// completions (a new tail and credit from the peer's immediate,
    /// staging slots freed), posts what the new credit allows and returns
    /// a credit that is due, unless the engine holds the peer (it does all
    /// that itself).
    pub(crate) fn poll_now(&self) {
        if let Some(mut p) = self.for_stream() {
            p.poll_waiting();
        }
    }
}

impl PeerRdma {
    /// What a waiting stream does with the peer it holds: reaps
    /// completions, then posts what new credit lets go and returns a
    /// credit of ours that is due now that the stream waits rather than
    /// sends; a failure is kept for the engine to report.
    fn poll_waiting(&mut self) {
        if let Err(e) = self
            .poll()
            .and_then(|_| self.send())
            .and_then(|_| self.return_credit(false))
        {
            self.deferred = Some(e);
        }
    }
}

/// A signalled write that has not completed after this long means the
/// peer is gone. A NIC reports exhausted retries sooner (about 0.5 s); Soft-RoCE
/// (rdma_rxe) was seen never completing a write to a killed process's QP.
pub(crate) const STALL: Duration = Duration::from_secs(8);
/// Idle time after which a peer gets a heartbeat write.
pub(crate) const HEARTBEAT: Duration = Duration::from_millis(200);
