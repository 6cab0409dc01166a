//! Posting RDMA writes: one work request ([`PeerRdma::post_one`]), or
//! chains of them, one `ibv_post_send` each ([`PeerRdma::post_writes`]).

use std::mem::MaybeUninit;

use crate::transport::verbs::sys::*;

use super::imm::IMM_CONTROL;
use super::{PeerRdma, Wake};
use crate::Error;

/// Largest write sent inline (the QP is created with this much inline room).
pub(super) const MAX_INLINE: u32 = 64;
/// Most work requests posted by one `ibv_post_send` (longer runs of writes
/// go as several chains, in order).
const CHAIN: usize = 16;

/// One RDMA WRITE to post: WRITE_WITH_IMM carrying `imm` when `notify` (the
/// peer gets a completion, which wakes its engine if `solicited` or if the
/// engine asked for every completion). With `lkey` None the `len` bytes at
/// `local` are copied at post time (inline); else they are read from memory
/// registered under that key. `slots`: staging slots written before it
/// (freed once it completes, if `signal`). With `fetch_add` it is an RDMA
/// fetch-and-add of that amount on the 8-byte word at `remote` instead, the
/// old value landing at `local` (registered under `lkey`).
pub(super) struct Write {
    pub(super) fetch_add: Option<u64>,
    pub(super) local: u64,
    pub(super) len: u32,
    pub(super) remote: u64,
    pub(super) rkey: u32,
    pub(super) lkey: Option<u32>,
    pub(super) notify: bool,
    pub(super) imm: u32,
    pub(super) solicited: bool,
    pub(super) signal: bool,
    pub(super) slots: u64,
}

/// The work request of `w`, numbered `id`, reading its bytes through `sge`
/// (which must outlive the post).
fn work_request(w: &Write, id: u64, signal: bool, sge: &mut ibv_sge) -> ibv_send_wr {
    // SAFETY: a zeroed send WR is valid; filled below.
    let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
    wr.wr_id = id;
    wr.num_sge = 1;
    wr.opcode = match (w.fetch_add, w.notify) {
        (Some(_), _) => ibv_wr_opcode::IBV_WR_ATOMIC_FETCH_AND_ADD,
        (None, true) => ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM,
        (None, false) => ibv_wr_opcode::IBV_WR_RDMA_WRITE,
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
    set_imm(&mut wr, w.imm);
    match w.fetch_add {
        Some(add) => {
            wr.wr.atomic = AtomicWr {
                remote_addr: w.remote,
                compare_add: add,
                swap: 0,
                rkey: w.rkey,
            }
        }
        None => {
            wr.wr.rdma = RdmaWr {
                remote_addr: w.remote,
                rkey: w.rkey,
            }
        }
    }
    wr.sg_list = sge;
    wr
}

impl PeerRdma {
    /// Posts one RDMA WRITE (see [`Write`]), telling the peer as `wake` says.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn post_write(
        &mut self,
        local: u64,
        len: u32,
        remote: u64,
        rkey: u32,
        lkey: Option<u32>,
        wake: Wake,
        signal: bool,
    ) -> Result<(), Error> {
        let slots = self.posted;
        self.post_one(&Write {
            fetch_add: None,
            local,
            len,
            remote,
            rkey,
            lkey,
            notify: wake != Wake::Nobody,
            imm: IMM_CONTROL,
            solicited: wake == Wake::Engine,
            signal,
            slots,
        })
    }

    /// Posts one write (see [`Write`]) as a chain of one: the common case
    /// (a small message's slot, a credit, a control word), without the
    /// arrays and loops of [`PeerRdma::post_chain`].
    pub(super) fn post_one(&mut self, w: &Write) -> Result<(), Error> {
        let id = self.wr_posted + 1;
        let signal = self.signal_due(w, id, self.last_signalled);
        let mut sge = ibv_sge {
            addr: w.local,
            length: w.len,
            lkey: w.lkey.unwrap_or(0),
        };
        let mut wr = work_request(w, id, signal, &mut sge);
        let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
        // SAFETY: the QP is in RTS; the WR and its SGE are initialised and
        // live across the call, its `next` null (zeroed); the local bytes
        // are registered under the lkey (or copied now, inline, from memory
        // the caller keeps alive across this call).
        let rc = unsafe { ibv_post_send(self.qp.qp, &mut wr, &mut bad) };
        if rc != 0 {
            return Err(self.post_failed(rc));
        }
        self.posted_one(w.slots, signal);
        Ok(())
    }

    /// Whether the write with work-request id `id` is signalled: when asked,
    /// and at least every half queue, so that completions free it.
    fn signal_due(&self, w: &Write, id: u64, last_signalled: u64) -> bool {
        w.signal || self.queue_signal_due(id, last_signalled)
    }

    /// Whether work request `id` must be signalled for the queue's sake:
    /// at least every half queue, so that completions free it.
    #[inline]
    pub(super) fn queue_signal_due(&self, id: u64, last_signalled: u64) -> bool {
        id - last_signalled >= u64::from(self.qp.depth / 2).max(1)
    }

    pub(super) fn post_failed(&self, rc: i32) -> Error {
        self.fail(format!(
            "ibv_post_send: {}",
            std::io::Error::from_raw_os_error(rc)
        ))
    }

    /// Counts a posted write; a signalled one goes in flight.
    /// (`slots`: the staging slots written before it, see [`Write`].)
    #[inline]
    pub(super) fn posted_one(&mut self, slots: u64, signal: bool) {
        self.wr_posted += 1;
        if signal {
            self.last_signalled = self.wr_posted;
            self.signalled_slots = slots;
            self.inflight.push_back((self.wr_posted, slots, None));
        }
    }

    /// Posts `writes` in order, as chains of up to [`CHAIN`] work requests
    /// (one `ibv_post_send` each: on Soft-RoCE each call is a system call).
    pub(super) fn post_writes(&mut self, writes: &[Write]) -> Result<(), Error> {
        for chain in writes.chunks(CHAIN) {
            self.post_chain(chain)?;
        }
        Ok(())
    }

    /// Posts at most [`CHAIN`] writes as one chain, its work requests on
    /// the stack.
    fn post_chain(&mut self, writes: &[Write]) -> Result<(), Error> {
        debug_assert!(writes.len() <= CHAIN, "a chain of {} writes", writes.len());
        let mut last_signalled = self.last_signalled;
        let mut sges = [const { MaybeUninit::<ibv_sge>::uninit() }; CHAIN];
        let mut wrs = [const { MaybeUninit::<ibv_send_wr>::uninit() }; CHAIN];
        let mut signals = [false; CHAIN];
        for (i, w) in writes.iter().enumerate() {
            let id = self.wr_posted + 1 + i as u64;
            let signal = self.signal_due(w, id, last_signalled);
            if signal {
                last_signalled = id;
            }
            signals[i] = signal;
            let sge = sges[i].write(ibv_sge {
                addr: w.local,
                length: w.len,
                lkey: w.lkey.unwrap_or(0),
            });
            wrs[i].write(work_request(w, id, signal, sge));
        }
        let n = writes.len();
        if n == 0 {
            return Ok(());
        }
        // Link the chain (the arrays no longer move).
        for i in 0..n - 1 {
            let next = wrs[i + 1].as_mut_ptr();
            // SAFETY: entries below `n` were written above.
            unsafe { (*wrs[i].as_mut_ptr()).next = next };
        }
        let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
        // SAFETY: the QP is in RTS; the first `n` WRs and SGEs are
        // initialised and live across the call, the last WR's `next` null
        // (zeroed); the local bytes are registered under each lkey (or
        // copied now, inline, from memory the caller keeps alive across
        // this call).
        let rc = unsafe { ibv_post_send(self.qp.qp, wrs[0].as_mut_ptr(), &mut bad) };
        if rc != 0 {
            return Err(self.post_failed(rc));
        }
        for (w, &signal) in writes.iter().zip(&signals) {
            self.posted_one(w.slots, signal);
        }
        Ok(())
    }

    /// Writes an 8-byte counter into the peer's control block (inline),
    /// telling the peer as `wake` says.
    pub(crate) fn post_word(
        &mut self,
        offset: u64,
        value: u64,
        wake: Wake,
        signal: bool,
    ) -> Result<(), Error> {
        let (addr, rkey) = (self.remote.ctrl_addr + offset, self.remote.ctrl_rkey);
        self.post_u64(addr, rkey, value, wake, signal)
    }

    /// Writes the 8-byte `value` (inline) at `remote` under `rkey` in the
    /// peer's memory, telling the peer as `wake` says.
    pub(super) fn post_u64(
        &mut self,
        remote: u64,
        rkey: u32,
        value: u64,
        wake: Wake,
        signal: bool,
    ) -> Result<(), Error> {
        let bytes = value.to_le_bytes();
        // The bytes are copied at post time (inline): a local is enough.
        self.post_write(bytes.as_ptr() as u64, 8, remote, rkey, None, wake, signal)
    }
}
