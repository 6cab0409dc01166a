//! The verbs proxy thread: moves slots with RDMA WRITE and polls the CQs.
//!
//! Per peer and per round:
//! - **Send**: every staged slot the peer has credit for is written, header
//!   and payload, into the same slot of the peer's inbound ring (unsignalled
//!   RDMA WRITE from the registered staging ring), then one small inline
//!   WRITE puts the new tail into the peer's control block. Both go on the
//!   same RC QP, so the tail lands after the data: a proxy that sees the
//!   tail sees the slots. The tail write is signalled; its completion
//!   releases the staging slots (completions come in order).
//! - **Receive**: when the tail word the peer wrote moves, the slots below
//!   it are published to the stream's inbound ring.
//! - **Credits**: when the stream has consumed inbound slots, their count is
//!   written (inline) into the peer's control block, where the peer's proxy
//!   reads its credit.
//!
//! A bad completion or a failed post puts the communicator in its error
//! state naming the peer and transport `verbs`; an abort is written into
//! every peer's control block so their waits end too. A peer idle for
//! [`HEARTBEAT`] gets a signalled rewrite of its credit word, so that a dead
//! peer (its QP gone) shows as a failed completion (retries exhausted, about
//! half a second with the QP's timeout 14 and 7 retries), or as a write that
//! never completes ([`STALL`]), even while this rank only waits for it. The thread polls:
//! it spins while work moves, then sleeps in short steps (kicked awake by
//! the stream when it stages a slot or frees one): 50 µs at first, doubling
//! up to 500 µs while nothing moves.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma_sys::*;

use super::qp::{Qp, VerbsAddr, VerbsRings, CTRL_ABORT, CTRL_CLOSED, CTRL_HEAD, CTRL_TAIL};
use crate::transport::ring::{RingEnd, SLOT_HEADER};
use crate::transport::tcp::kick::Kick;
use crate::transport::tcp::progress::FailureSink;
use crate::Error;

/// What a signalled work request stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Signalled {
    /// A tail write: staging slots below this count may be released.
    Tail(u64),
    /// Anything else (signalled only so that the send queue drains).
    Other,
}

/// One verbs peer as the proxy thread sees it.
pub struct PeerRdma {
    /// The peer's rank.
    pub peer: usize,
    // Declared (so dropped) before the rings: the QP and its registrations
    // go before the memory they cover.
    qp: Qp,
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
    /// Signalled requests in flight: (posted count after it, what it was,
    /// when it was posted).
    inflight: VecDeque<(u64, Signalled, Instant)>,
    abort_sent: bool,
    closed_sent: bool,
    /// When a work request was last posted (for the heartbeat).
    last_post: Instant,
}

impl PeerRdma {
    /// Wraps a connected peer.
    pub fn new(peer: usize, rings: Arc<VerbsRings>, qp: Qp, remote: VerbsAddr) -> PeerRdma {
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
            inflight: VecDeque::new(),
            abort_sent: false,
            closed_sent: false,
            last_post: Instant::now(),
        }
    }

    fn fail(&self, cause: String) -> Error {
        Error::Transport {
            transport: "verbs",
            peer: self.peer,
            cause,
        }
    }

    fn room(&self) -> u64 {
        u64::from(self.qp.depth) - (self.wr_posted - self.wr_done)
    }

    /// Posts one RDMA WRITE. `inline` data is copied at post time.
    fn post_write(
        &mut self,
        local: u64,
        len: u32,
        remote: u64,
        rkey: u32,
        inline: bool,
        signal: Option<Signalled>,
    ) -> Result<(), Error> {
        // Signal at least every half queue, so completions free it.
        let half = u64::from(self.qp.depth / 2).max(1);
        let signal = signal.or_else(|| {
            (self.wr_posted + 1 - self.last_signalled >= half).then_some(Signalled::Other)
        });
        let mut sge = ibv_sge {
            addr: local,
            length: len,
            lkey: if inline { 0 } else { self.qp.staging_lkey },
        };
        // SAFETY: a zeroed send WR is valid; filled below.
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = self.wr_posted + 1;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE;
        let mut flags = 0;
        if inline {
            flags |= ibv_send_flags::IBV_SEND_INLINE.0;
        }
        if signal.is_some() {
            flags |= ibv_send_flags::IBV_SEND_SIGNALED.0;
        }
        wr.send_flags = flags;
        wr.wr.rdma = rdma_t {
            remote_addr: remote,
            rkey,
        };
        let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
        // SAFETY: the QP is in RTS; wr and sge live across the call; the
        // local bytes are registered staging memory (or copied now, inline).
        let rc = unsafe { ibv_post_send(self.qp.qp, &mut wr, &mut bad) };
        if rc != 0 {
            return Err(self.fail(format!(
                "ibv_post_send: {}",
                std::io::Error::from_raw_os_error(rc)
            )));
        }
        self.wr_posted += 1;
        self.last_post = Instant::now();
        if let Some(s) = signal {
            self.last_signalled = self.wr_posted;
            self.inflight.push_back((self.wr_posted, s, self.last_post));
        }
        Ok(())
    }

    /// Writes an 8-byte counter into the peer's control block (inline).
    fn post_word(
        &mut self,
        offset: u64,
        value: u64,
        signal: Option<Signalled>,
    ) -> Result<(), Error> {
        let bytes = value.to_le_bytes();
        self.post_write(
            bytes.as_ptr() as u64,
            8,
            self.remote.ctrl_addr + offset,
            self.remote.ctrl_rkey,
            true,
            signal,
        )
    }

    /// Writes every staged slot the peer has room for, then the tail.
    fn send(&mut self) -> Result<bool, Error> {
        let nsteps = self.staging.shape().nsteps as u64;
        let stride = self.staging.shape().slot_stride() as u64;
        let credit = self.rings.ctrl.head.value.load(Ordering::Acquire);
        let start = self.posted;
        // Keep two entries free: the tail write and a credit write.
        while self.posted < credit + nsteps && self.room() > 2 {
            let k = self.posted;
            let len = match self.staging.slot_for_read(k) {
                Ok(Some(slot)) => slot.len(),
                Ok(None) => break,
                Err(e) => return Err(self.fail(format!("staging ring corrupted: {e:?}"))),
            };
            let remote = self.remote.ring_addr
                + crate::transport::ring::RING_HEADER_BYTES as u64
                + (k % nsteps) * stride;
            self.post_write(
                self.staging.slot_addr(k),
                (SLOT_HEADER + len) as u32,
                remote,
                self.remote.ring_rkey,
                false,
                None,
            )?;
            self.posted += 1;
        }
        if self.posted == start {
            return Ok(false);
        }
        self.post_word(CTRL_TAIL, self.posted, Some(Signalled::Tail(self.posted)))?;
        Ok(true)
    }

    /// Publishes slots the peer delivered and returns credits for slots the
    /// stream consumed.
    fn receive(&mut self) -> Result<bool, Error> {
        let nsteps = self.inbound.shape().nsteps as u64;
        let mut moved = false;
        let tail = self.rings.ctrl.tail.value.load(Ordering::Acquire);
        if tail != self.published {
            let consumed = self.inbound.consumed();
            if tail < self.published || tail > consumed + nsteps {
                return Err(self.fail(format!(
                    "peer claims {tail} slots delivered; {} published, {consumed} consumed",
                    self.published
                )));
            }
            self.published = tail;
            self.inbound.publish(tail);
            moved = true;
        }
        let consumed = self.inbound.consumed();
        if consumed != self.credit_sent && self.room() > 1 {
            self.post_word(CTRL_HEAD, consumed, None)?;
            self.credit_sent = consumed;
            moved = true;
        }
        Ok(moved)
    }

    /// Reaps completions; releases staging slots whose tail write completed.
    fn poll(&mut self) -> Result<bool, Error> {
        // SAFETY: a zeroed work completion array is a valid out-parameter.
        let mut wc: [ibv_wc; 16] = unsafe { std::mem::zeroed() };
        // SAFETY: the CQ is valid; wc holds 16 entries.
        let n = unsafe { ibv_poll_cq(self.qp.cq, wc.len() as i32, wc.as_mut_ptr()) };
        if n < 0 {
            return Err(self.fail(format!("ibv_poll_cq returned {n}")));
        }
        let mut release = None;
        for c in &wc[..n as usize] {
            if c.status != ibv_wc_status::IBV_WC_SUCCESS {
                // SAFETY: returns a static string for any status.
                let what = unsafe { std::ffi::CStr::from_ptr(ibv_wc_status_str(c.status)) };
                return Err(self.fail(format!(
                    "work completion failed: {} (status {}, vendor error {:#x})",
                    what.to_string_lossy(),
                    c.status,
                    c.vendor_err
                )));
            }
            self.wr_done = self.wr_done.max(c.wr_id);
            while let Some(&(at, s, _)) = self.inflight.front() {
                if at > c.wr_id {
                    break;
                }
                self.inflight.pop_front();
                if let Signalled::Tail(t) = s {
                    release = Some(t);
                }
            }
        }
        if let Some(t) = release {
            self.staging.release_to(t);
        }
        Ok(n > 0)
    }

    /// True when every staged slot was written and its write completed.
    fn flushed(&self) -> bool {
        self.inflight.is_empty()
            && self
                .staging
                .slot_for_read(self.posted)
                .map_or(true, |s| s.is_none())
    }

    fn peer_closed(&self) -> bool {
        self.rings.ctrl.closed.value.load(Ordering::Acquire) != 0
    }

    /// One round of work; true if anything moved.
    fn step(&mut self) -> Result<bool, Error> {
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
            self.post_word(CTRL_HEAD, self.credit_sent, Some(Signalled::Other))?;
        }
        Ok(polled || sent || received)
    }
}

/// The thread's loop; runs until `stop` (then flushes and says goodbye).
pub fn run(
    mut peers: Vec<PeerRdma>,
    kick: Arc<Kick>,
    stop: Arc<AtomicBool>,
    abort: Arc<AtomicU32>,
    sink: impl FailureSink,
) {
    let mut dead = vec![false; peers.len()];
    let mut idle = 0u32;
    let mut nap = IDLE_SLEEP;
    let mut drain_deadline: Option<Instant> = None;
    loop {
        let failed = abort.load(Ordering::Acquire);
        if failed != 0 {
            for (p, _) in peers.iter_mut().zip(&dead).filter(|(_, &d)| !d) {
                if !p.abort_sent && p.room() > 0 {
                    p.abort_sent = true;
                    let _ = p.post_word(CTRL_ABORT, u64::from(failed), Some(Signalled::Other));
                }
            }
        }
        let stopping = stop.load(Ordering::Acquire);
        if stopping {
            let now = Instant::now();
            let deadline = *drain_deadline.get_or_insert(now + DRAIN);
            let flushed = peers
                .iter()
                .zip(&dead)
                .all(|(p, &d)| d || p.flushed() || p.peer_closed());
            if flushed || now >= deadline {
                goodbye(&mut peers, &dead);
                return;
            }
        }
        let mut moved = false;
        for (i, p) in peers.iter_mut().enumerate() {
            if dead[i] {
                continue;
            }
            match p.step() {
                Ok(m) => moved |= m,
                Err(e) => {
                    dead[i] = true;
                    if !stopping {
                        let culprit = match &e {
                            Error::RemoteFailed { peer, .. } | Error::Transport { peer, .. } => {
                                *peer
                            }
                            _ => p.peer,
                        };
                        let code = u32::try_from(culprit).map_or(u32::MAX, |r| r.saturating_add(1));
                        let _ =
                            abort.compare_exchange(0, code, Ordering::AcqRel, Ordering::Acquire);
                        sink.fail(e);
                    }
                }
            }
        }
        if moved {
            idle = 0;
            nap = IDLE_SLEEP;
            continue;
        }
        idle = idle.saturating_add(1);
        if idle < SPIN_ROUNDS {
            std::hint::spin_loop();
        } else if idle < SPIN_ROUNDS * 2 {
            std::thread::yield_now();
        } else {
            // Remote writes raise no event: sleep briefly, or until kicked.
            kick.set_sleeping(true);
            let mut fd = libc::pollfd {
                fd: kick.raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: nap.as_nanos() as libc::c_long,
            };
            // The longer nothing moves, the less often we look.
            nap = (nap * 2).min(IDLE_SLEEP_MAX);
            // SAFETY: one valid pollfd, a valid timeout, no signal mask.
            unsafe { libc::ppoll(&mut fd, 1, &ts, std::ptr::null()) };
            kick.set_sleeping(false);
            if fd.revents != 0 {
                kick.drain();
            }
        }
    }
}

/// Writes "closed" to every live peer and waits (bounded) for the writes.
fn goodbye(peers: &mut [PeerRdma], dead: &[bool]) {
    for (p, _) in peers.iter_mut().zip(dead).filter(|(_, &d)| !d) {
        if !p.closed_sent && p.room() > 0 {
            p.closed_sent = true;
            let _ = p.post_word(CTRL_CLOSED, 1, Some(Signalled::Other));
        }
    }
    let deadline = Instant::now() + Duration::from_secs(1);
    while Instant::now() < deadline {
        let mut pending = false;
        for (p, _) in peers.iter_mut().zip(dead).filter(|(_, &d)| !d) {
            if p.poll().is_err() {
                continue;
            }
            pending |= !p.inflight.is_empty();
        }
        if !pending {
            break;
        }
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// A signalled write that has not completed after this long means the
/// peer is gone. A NIC reports exhausted retries sooner (about 0.5 s); Soft-RoCE
/// (rdma_rxe) was seen never completing a write to a killed process's QP.
const STALL: Duration = Duration::from_secs(8);
/// Idle time after which a peer gets a heartbeat write.
const HEARTBEAT: Duration = Duration::from_millis(200);
/// How long a closing communicator keeps writing what it staged.
const DRAIN: Duration = Duration::from_secs(10);
/// Idle rounds spent spinning (then as many yielding) before sleeping.
const SPIN_ROUNDS: u32 = 2000;
/// First sleep of an idle proxy between polls of the remote counters; it
/// doubles while nothing moves, up to [`IDLE_SLEEP_MAX`].
const IDLE_SLEEP: Duration = Duration::from_micros(50);
/// Longest sleep of an idle proxy (a kick from the stream ends it at once).
const IDLE_SLEEP_MAX: Duration = Duration::from_micros(500);
