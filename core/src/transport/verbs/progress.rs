//! One verbs peer's data path: RDMA WRITEs out, counters in, completions.
//!
//! - **Send**: every staged slot the peer has credit for is written, header
//!   and payload, into the same slot of the peer's inbound ring (unsignalled
//!   RDMA WRITE from the registered staging ring), then one small inline
//!   WRITE_WITH_IMM puts the new tail straight into that ring's header,
//!   where the peer's stream waits for it. Both go on the same RC QP, so the
//!   tail lands after the data: a reader that sees the tail sees the slots.
//!   The tail write is signalled; its completion releases the staging slots
//!   (completions come in order).
//! - **Receive**: the peer's stream sees the tail itself. The immediate
//!   consumes a posted receive; it wakes the peer's proxy only while a
//!   stream sleeps there (see [`super::event`]), which then checks the
//!   tail, wakes the stream and puts the receive back.
//! - **Credits**: when the stream has consumed inbound slots, their count is
//!   written (inline, WRITE_WITH_IMM) into the peer's control block.
//!
//! The stream that staged or consumed a slot posts these itself when the
//! peer is free ([`SharedPeer::pump`]); otherwise the proxy thread
//! ([`super::proxy`]) does. A bad completion or a failed post puts the
//! communicator in its error state naming the peer and transport `verbs`;
//! an abort is written into every peer's control block so their waits end
//! too. A peer idle for `HEARTBEAT` gets a signalled rewrite of its credit
//! word, so that a dead peer (its QP gone) shows as a failed completion
//! (retries exhausted, about half a second with the QP's timeout 14 and 7
//! retries), or as a write that never completes (`STALL`), even while this
//! rank only waits for it.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rdma_sys::*;

use super::qp::{Qp, VerbsAddr, VerbsRings, CTRL_HEAD, RECV_WR_ID, RING_TAIL};
use super::regcache::RegCache;
use crate::transport::ring::{RingEnd, SLOT_HEADER};

mod rendezvous;
use crate::Error;

/// One RDMA WRITE to post: WRITE_WITH_IMM when `notify` (the peer gets a
/// completion, which wakes its proxy if `solicited` or if the proxy asked
/// for every completion). With `lkey` None the `len` bytes at
/// `local` are copied at post time (inline); else they are read from memory
/// registered under that key. `slots`: staging slots written before it
/// (freed once it completes, if `signal`).
struct Write {
    local: u64,
    len: u32,
    remote: u64,
    rkey: u32,
    lkey: Option<u32>,
    notify: bool,
    solicited: bool,
    signal: bool,
    slots: u64,
}

/// One verbs peer as the proxy thread sees it.
pub struct PeerRdma {
    /// The peer's rank.
    pub peer: usize,
    // Declared (so dropped) before the rings: the QP and its registrations
    // go before the memory they cover.
    pub(crate) qp: Qp,
    staging: RingEnd,
    inbound: RingEnd,
    rings: Arc<VerbsRings>,
    remote: VerbsAddr,
    /// Next staged slot to write.
    posted: u64,
    /// Inbound slots published to the stream.
    published: u64,
    /// Consumed count last written to the peer.
    credit_sent: u64,
    /// Work requests posted, and completed, so far.
    wr_posted: u64,
    wr_done: u64,
    /// Posted count of the latest signalled request.
    last_signalled: u64,
    /// Staging slots written before the latest signalled request.
    signalled_slots: u64,
    /// Signalled requests in flight: (work requests posted up to it, staging
    /// slots written before it, when it was posted). Its completion means
    /// every earlier request completed: those slots are free again.
    pub(crate) inflight: VecDeque<(u64, u64, Instant)>,
    pub(crate) abort_sent: bool,
    pub(crate) closed_sent: bool,
    /// When a work request was last posted (for the heartbeat).
    last_post: Instant,
    /// Set by the proxy once the peer failed: nothing more is posted.
    pub(crate) dead: bool,
    /// An error met by [`SharedPeer::pump`] on a stream's thread, reported
    /// by the proxy's next [`PeerRdma::step`].
    deferred: Option<Error>,
    /// Grant numbers forwarded to the peer, and seen from it.
    grant_sent: u64,
    grant_seen: u64,
    regs: Arc<RegCache>,
}

impl PeerRdma {
    /// Wraps a connected peer.
    pub fn new(
        peer: usize,
        rings: Arc<VerbsRings>,
        qp: Qp,
        remote: VerbsAddr,
        regs: Arc<RegCache>,
    ) -> PeerRdma {
        let staging = rings.staging.end();
        let inbound = rings.inbound.end();
        PeerRdma {
            peer,
            staging,
            inbound,
            rings,
            qp,
            remote,
            posted: 0,
            published: 0,
            credit_sent: 0,
            wr_posted: 0,
            wr_done: 0,
            last_signalled: 0,
            signalled_slots: 0,
            inflight: VecDeque::new(),
            abort_sent: false,
            closed_sent: false,
            last_post: Instant::now(),
            dead: false,
            deferred: None,
            grant_sent: 0,
            grant_seen: 0,
            regs,
        }
    }

    fn fail(&self, cause: String) -> Error {
        Error::Transport {
            transport: "verbs",
            peer: self.peer,
            cause,
        }
    }

    pub(crate) fn room(&self) -> u64 {
        u64::from(self.qp.depth) - (self.wr_posted - self.wr_done)
    }

    /// Posts one RDMA WRITE (see [`Write`]).
    #[allow(clippy::too_many_arguments)]
    fn post_write(
        &mut self,
        local: u64,
        len: u32,
        remote: u64,
        rkey: u32,
        lkey: Option<u32>,
        notify: bool,
        signal: bool,
    ) -> Result<(), Error> {
        let slots = self.posted;
        self.post_writes(&[Write {
            local,
            len,
            remote,
            rkey,
            lkey,
            notify,
            solicited: notify,
            signal,
            slots,
        }])
    }

    /// Posts `writes` as one chain (one `ibv_post_send`: on Soft-RoCE each
    /// call is a system call).
    fn post_writes(&mut self, writes: &[Write]) -> Result<(), Error> {
        // Signal at least every half queue, so completions free it.
        let half = u64::from(self.qp.depth / 2).max(1);
        let mut last_signalled = self.last_signalled;
        let mut sges: Vec<ibv_sge> = Vec::with_capacity(writes.len());
        let mut wrs: Vec<ibv_send_wr> = Vec::with_capacity(writes.len());
        let mut signals = Vec::with_capacity(writes.len());
        for (i, w) in writes.iter().enumerate() {
            let id = self.wr_posted + 1 + i as u64;
            let signal = w.signal || id - last_signalled >= half;
            if signal {
                last_signalled = id;
            }
            signals.push(signal);
            sges.push(ibv_sge {
                addr: w.local,
                length: w.len,
                lkey: w.lkey.unwrap_or(0),
            });
            // SAFETY: a zeroed send WR is valid; filled below.
            let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
            wr.wr_id = id;
            wr.num_sge = 1;
            wr.opcode = if w.notify {
                ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM
            } else {
                ibv_wr_opcode::IBV_WR_RDMA_WRITE
            };
            let mut flags = 0;
            if w.lkey.is_none() {
                flags |= ibv_send_flags::IBV_SEND_INLINE.0;
            }
            if signal {
                flags |= ibv_send_flags::IBV_SEND_SIGNALED.0;
            }
            if w.notify && w.solicited {
                flags |= ibv_send_flags::IBV_SEND_SOLICITED.0;
            }
            wr.send_flags = flags;
            wr.wr.rdma = rdma_t {
                remote_addr: w.remote,
                rkey: w.rkey,
            };
            wrs.push(wr);
        }
        // Link the chain now that the vectors no longer move.
        for i in 0..wrs.len() {
            wrs[i].sg_list = &mut sges[i];
            if i + 1 < wrs.len() {
                wrs[i].next = &mut wrs[i + 1];
            }
        }
        let Some(first) = wrs.first_mut() else {
            return Ok(());
        };
        let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
        // SAFETY: the QP is in RTS; the WRs and SGEs live across the call;
        // the local bytes are registered under each lkey (or copied now,
        // inline, from memory the caller keeps alive across this call).
        let rc = unsafe { ibv_post_send(self.qp.qp, first, &mut bad) };
        if rc != 0 {
            return Err(self.fail(format!(
                "ibv_post_send: {}",
                std::io::Error::from_raw_os_error(rc)
            )));
        }
        self.last_post = Instant::now();
        for (w, signal) in writes.iter().zip(signals) {
            self.wr_posted += 1;
            if signal {
                self.last_signalled = self.wr_posted;
                self.signalled_slots = w.slots;
                self.inflight
                    .push_back((self.wr_posted, w.slots, self.last_post));
            }
        }
        Ok(())
    }

    /// Writes an 8-byte counter into the peer's control block (inline),
    /// waking the peer's proxy when `notify`.
    pub(crate) fn post_word(
        &mut self,
        offset: u64,
        value: u64,
        notify: bool,
        signal: bool,
    ) -> Result<(), Error> {
        let bytes = value.to_le_bytes();
        self.post_write(
            bytes.as_ptr() as u64,
            8,
            self.remote.ctrl_addr + offset,
            self.remote.ctrl_rkey,
            None,
            notify,
            signal,
        )
    }

    /// Writes every staged slot the peer has room for, then the tail, as
    /// one chain.
    fn send(&mut self) -> Result<bool, Error> {
        let nsteps = self.staging.shape().nsteps as u64;
        let stride = self.staging.shape().slot_stride() as u64;
        let credit = self.rings.ctrl.head.value.load(Ordering::Acquire);
        let mut writes = Vec::new();
        let mut k = self.posted;
        // Keep two entries free: the tail write and a credit write.
        while k < credit + nsteps && self.room() > writes.len() as u64 + 2 {
            let len = match self.staging.slot_for_read(k) {
                Ok(Some(slot)) => slot.len(),
                Ok(None) => break,
                Err(e) => return Err(self.fail(format!("staging ring corrupted: {e:?}"))),
            };
            writes.push(Write {
                local: self.staging.slot_addr(k),
                len: (SLOT_HEADER + len) as u32,
                remote: self.remote.ring_addr
                    + crate::transport::ring::RING_HEADER_BYTES as u64
                    + (k % nsteps) * stride,
                rkey: self.remote.ring_rkey,
                lkey: Some(self.qp.staging_lkey),
                notify: false,
                solicited: false,
                signal: false,
                slots: k,
            });
            k += 1;
        }
        if writes.is_empty() {
            return Ok(false);
        }
        // The tail goes straight into the peer's inbound ring header, where
        // its stream waits for it: no proxy between the NIC and the reader.
        let tail = k.to_le_bytes();
        writes.push(Write {
            local: tail.as_ptr() as u64,
            len: 8,
            remote: self.remote.ring_addr + RING_TAIL,
            rkey: self.remote.ring_rkey,
            lkey: None,
            notify: true,
            // Not solicited: it wakes the peer's proxy only while a stream
            // sleeps there (the proxy then asks for every completion);
            // a spinning stream sees the tail itself.
            solicited: false,
            // Signalled only every half ring: its completion frees the
            // staging slots before it, and no completion wakes this proxy
            // for each small message.
            signal: k - self.signalled_slots >= (nsteps / 2).max(1),
            slots: k,
        });
        self.post_writes(&writes)?;
        self.posted = k;
        Ok(true)
    }

    /// Checks the tail the peer delivered and returns credits for slots the
    /// stream consumed.
    fn receive(&mut self) -> Result<bool, Error> {
        let nsteps = self.inbound.shape().nsteps as u64;
        let mut moved = false;
        // The peer's NIC writes the tail into the ring itself; the stream
        // may already be reading those slots. Check it, and wake a stream
        // asleep on the ring (never store: a newer tail may be landing).
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
        let cts = self.staging.grant_count();
        if cts != self.grant_seen {
            self.grant_seen = cts;
            self.staging.grant_notifier().notify();
            moved = true;
        }
        Ok(self.forward_grant()? || self.return_credit()? || moved)
    }

    /// True while a stream sleeps on one of this peer's rings: the proxy
    /// must then wake at every completion (tails are not solicited).
    pub(crate) fn has_sleepers(&self) -> bool {
        self.inbound.data_notifier().has_sleepers()
            || self.staging.credit_notifier().has_sleepers()
            || self.staging.grant_notifier().has_sleepers()
    }

    /// Writes the count of inbound slots the stream consumed, once it moved
    /// by half a ring.
    fn return_credit(&mut self) -> Result<bool, Error> {
        // Returned every half ring, not per slot: a sender only waits for
        // credit once the whole ring is in flight, and then at least half
        // of it comes back as soon as it is consumed.
        let every = (self.inbound.shape().nsteps as u64 / 2).max(1);
        let consumed = self.inbound.consumed();
        if consumed >= self.credit_sent + every && self.room() > 1 {
            self.post_word(CTRL_HEAD, consumed, true, false)?;
            self.credit_sent = consumed;
            return Ok(true);
        }
        Ok(false)
    }

    /// Reaps completions; releases staging slots whose tail write completed.
    pub(crate) fn poll(&mut self) -> Result<bool, Error> {
        // SAFETY: a zeroed work completion array is a valid out-parameter.
        let mut wc: [ibv_wc; 16] = unsafe { std::mem::zeroed() };
        // SAFETY: the CQ is valid; wc holds 16 entries.
        let n = unsafe { ibv_poll_cq(self.qp.cq, wc.len() as i32, wc.as_mut_ptr()) };
        if n < 0 {
            return Err(self.fail(format!("ibv_poll_cq returned {n}")));
        }
        let mut release = None;
        let mut recvs = 0;
        for c in &wc[..n as usize] {
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
                // A WRITE_WITH_IMM from the peer: its counters moved (read
                // by `receive` and `send`); put the receive back.
                recvs += 1;
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
            self.staging.release_to(t);
        }
        if recvs > 0 {
            self.qp
                .post_recvs(recvs)
                .map_err(|e| self.fail(format!("ibv_post_recv: {e}")))?;
        }
        Ok(n > 0)
    }

    /// True when every staged slot was written and its write completed.
    pub(crate) fn flushed(&self) -> bool {
        self.inflight.is_empty()
            && self
                .staging
                .slot_for_read(self.posted)
                .map_or(true, |s| s.is_none())
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
            self.send()?
        };
        let received = self.receive()?;
        if let Some(&(_, _, at)) = self.inflight.front() {
            if !self.peer_closed() && at.elapsed() > STALL {
                return Err(self.fail(format!(
                    "an RDMA write to it has not completed in {} s: the peer is dead or unreachable",
                    STALL.as_secs()
                )));
            }
        }
        if !self.peer_closed() && self.last_post.elapsed() >= HEARTBEAT && self.room() > 1 {
            // Nothing else would show that the peer died while we only
            // wait: rewrite our credit (same value, harmless), signalled, so
            // a dead peer's QP turns into a failed completion.
            self.post_word(CTRL_HEAD, self.credit_sent, false, true)?;
        }
        Ok(polled || sent || received)
    }
}

/// A peer shared by the proxy thread and the streams' threads.
///
/// Measured in the Soft-RoCE guest, every thread hand-off on a message's
/// path (stream wakes proxy, proxy posts) cost about as much as the RDMA
/// itself. So a stream that has just staged a slot (or consumed one) posts
/// the write and the tail (or the credit) itself when the peer is free
/// ([`SharedPeer::pump`]); the proxy keeps everything that waits (CQ
/// polling, staging release, heartbeats, failure reports) and takes over
/// whenever the lock is busy.
#[derive(Debug)]
pub struct SharedPeer(Mutex<PeerRdma>);

impl std::fmt::Debug for PeerRdma {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PeerRdma(rank {}, {} posted)", self.peer, self.posted)
    }
}

impl SharedPeer {
    /// Wraps a peer.
    pub fn new(p: PeerRdma) -> SharedPeer {
        SharedPeer(Mutex::new(p))
    }

    /// The peer, for the proxy thread (blocks while a stream pumps).
    pub fn lock(&self) -> MutexGuard<'_, PeerRdma> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stream side, after staging or consuming a slot: posts what can go
    /// now. False when the proxy must be woken instead (the lock was busy,
    /// or the peer is failing: the proxy reports it).
    pub fn pump(&self) -> bool {
        let Ok(mut p) = self.0.try_lock() else {
            return false;
        };
        if p.dead || p.deferred.is_some() || p.peer_closed() {
            return false;
        }
        match p
            .send()
            .and_then(|_| p.forward_grant())
            .and_then(|_| p.return_credit())
        {
            Ok(_) => true,
            Err(e) => {
                p.deferred = Some(e);
                false
            }
        }
    }
}

/// A signalled write that has not completed after this long means the
/// peer is gone. A NIC reports exhausted retries sooner (about 0.5 s); Soft-RoCE
/// (rdma_rxe) was seen never completing a write to a killed process's QP.
pub(crate) const STALL: Duration = Duration::from_secs(8);
/// Idle time after which a peer gets a heartbeat write.
pub(crate) const HEARTBEAT: Duration = Duration::from_millis(200);
