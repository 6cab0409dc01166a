//! Sleeping until the NIC has something for the engine.
//!
//! A remote RDMA WRITE lands in memory without telling the CPU, so an engine
//! that only watched its counters had to poll them, and an idle engine slept
//! blindly between polls (measured in the Soft-RoCE guest: the reply to a
//! ping waited ~0.7 ms for the proxies to give the CPUs back). Instead every
//! change a peer may have to react to (a tail, which travels as the
//! immediate of the last slot write, a credit, a grant, an abort, a goodbye)
//! comes with an RDMA WRITE_WITH_IMM, which also consumes a posted receive
//! and puts a completion on our CQ; only the abort and the goodbye are
//! *solicited*. Every peer's CQ reports to one completion channel per
//! communicator; an idle progress engine arms the CQs (`ibv_req_notify_cq`: for solicited
//! completions only, unless a stream sleeps on one of its rings), checks
//! once more, and sleeps in `poll(2)` on the channel's descriptor and the
//! engine's kick eventfd (with its other sources' descriptors), with a
//! timeout so the heartbeat and stall checks still run. A waiting stream
//! polls the CQ itself, so the engine is not woken for tails, credits or
//! grants (such a wake-up takes a CPU from the streams: in Soft-RoCE A/B
//! pairs, solicited credits alone cost 8 B ping-pongs 74 against 33-37 µs
//! p50); a stream about to sleep kicks the engine (the wait policy's
//! `on_sleep`), which then arms for every completion.

use crate::transport::verbs::sys::*;

use super::device::Device;
use crate::{Error, Result};

/// A completion channel, destroyed on drop (after every CQ using it: each
/// [`Qp`](super::qp::Qp) holds an `Arc` to it).
pub(crate) struct CompChannel {
    chan: *mut ibv_comp_channel,
    lib: &'static super::dl::Lib,
}

// SAFETY: the channel is a kernel descriptor plus a context pointer; verbs
// calls on it are thread-safe, and only the engine thread reads events.
unsafe impl Send for CompChannel {}
// SAFETY: as above.
unsafe impl Sync for CompChannel {}

impl std::fmt::Debug for CompChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CompChannel(fd {})", self.fd())
    }
}

impl CompChannel {
    /// Creates a non-blocking completion channel on `dev`'s context.
    ///
    /// # Errors
    /// [`Error::Os`] when the channel cannot be created or made non-blocking.
    pub(crate) fn new(dev: &Device) -> Result<CompChannel> {
        // SAFETY: the context is open.
        let chan = unsafe { (dev.lib.create_comp_channel)(dev.ctx) };
        if chan.is_null() {
            return Err(Error::os(
                "verbs: ibv_create_comp_channel",
                std::io::Error::last_os_error(),
            ));
        }
        let c = CompChannel { chan, lib: dev.lib };
        let fd = c.fd();
        // SAFETY: plain fcntl calls on a descriptor the channel owns.
        let ok = unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) == 0
        };
        if !ok {
            return Err(Error::os(
                "verbs: making the completion channel non-blocking",
                std::io::Error::last_os_error(),
            ));
        }
        Ok(c)
    }

    /// The raw channel, for `ibv_create_cq`.
    pub(crate) fn as_raw(&self) -> *mut ibv_comp_channel {
        self.chan
    }

    /// The descriptor that becomes readable when an armed CQ gets a completion.
    pub(crate) fn fd(&self) -> i32 {
        // SAFETY: the channel stays valid until drop.
        unsafe { (*self.chan).fd }
    }

    /// Reads and acknowledges every pending event (never blocks).
    pub(crate) fn drain(&self) {
        loop {
            let mut cq: *mut ibv_cq = std::ptr::null_mut();
            let mut ctx: *mut std::ffi::c_void = std::ptr::null_mut();
            // SAFETY: the channel is valid and non-blocking; cq and ctx are
            // out-parameters.
            if unsafe { (self.lib.get_cq_event)(self.chan, &mut cq, &mut ctx) } != 0 {
                return;
            }
            // SAFETY: cq was just returned with one unacknowledged event;
            // acknowledging it at once lets ibv_destroy_cq finish later.
            unsafe { (self.lib.ack_cq_events)(cq, 1) };
        }
    }
}

impl Drop for CompChannel {
    fn drop(&mut self) {
        // SAFETY: created once in `new`, destroyed once, after the CQs that
        // used it (they hold an Arc to it).
        unsafe { (self.lib.destroy_comp_channel)(self.chan) };
    }
}
