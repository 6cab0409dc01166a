//! One verbs peer's memory, registrations and reliable-connected QP.
//!
//! Each peer has three local areas: the *staging* ring (the stream fills
//! it, the NIC reads it), the *inbound* ring (the peer's NIC writes slots
//! into it) and a small control block the peer's NIC writes counters into
//! (slots consumed, abort, goodbye, where the peer's rings are). The
//! control block is registered when the QP is made (at the pair's first
//! use), and its address and key, with the QP number, PSN, LID, GID and
//! the barrier area's, are what a rank tells the peer in the handshake
//! ([`VerbsAddr`]). The
//! rings are registered at the pair's first use ([`Qp::register_rings`]),
//! and their addresses and keys told in-band ([`RingKeys`], written into
//! the peer's control block): until then their pages are neither pinned
//! nor resident.

use std::mem::MaybeUninit;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::transport::verbs::sys::*;

use super::device::Device;
use super::event::CompChannel;
use crate::barrier::area::BarrierArea;
use crate::transport::local_ring::LocalRing;
use crate::transport::ring::{RingEnd, RingShape};
use crate::{Error, Result};

/// A counter the peer's NIC writes, alone in a cache line.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub(crate) struct RemoteWord {
    /// The value (written by RDMA, read by the engine).
    pub value: AtomicU64,
}

/// Words the peer writes into our memory (the inbound ring's tail comes as
/// an immediate instead, and so does the credit when data flows back: see
/// `progress`).
#[repr(C)]
#[derive(Debug, Default)]
pub(crate) struct Ctrl {
    /// Slots the peer has consumed from its inbound ring: our credit
    /// (written by the peer's RDMA, or by us from an immediate).
    pub head: RemoteWord,
    /// `1 + rank` of the rank the peer's communicator failed because of.
    pub abort: RemoteWord,
    /// Non-zero once the peer closed its end cleanly.
    pub closed: RemoteWord,
    /// Where the peer's rings are, once it registered them.
    pub rings: RingWords,
}

/// Where a peer's rings are, written by the peer (one write) when it
/// registers them.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub(crate) struct RingWords {
    /// The words of a [`RingKeys`], the last non-zero once they are in place.
    pub words: [AtomicU64; 4],
}

impl RingWords {
    /// True once the peer's write is complete (its last word is in place).
    pub(crate) fn present(&self) -> bool {
        self.words[3].load(Ordering::Acquire) != 0
    }
}

/// Byte offsets of the words in [`Ctrl`].
pub(crate) const CTRL_HEAD: u64 = 0;
/// See [`CTRL_HEAD`].
pub(crate) const CTRL_ABORT: u64 = 64;
/// See [`CTRL_HEAD`].
pub(crate) const CTRL_CLOSED: u64 = 128;
const _: () = assert!(std::mem::offset_of!(Ctrl, closed) == CTRL_CLOSED as usize);
/// See [`CTRL_HEAD`].
pub(crate) const CTRL_RINGS: u64 = 192;
const _: () = assert!(std::mem::offset_of!(Ctrl, rings) == CTRL_RINGS as usize);

/// Where a peer's rings are: its inbound ring, which our slots are written
/// into, and its staging ring, whose header takes our rendezvous grants.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RingKeys {
    /// Address and key of the inbound ring.
    pub inbound_addr: u64,
    /// See `inbound_addr`.
    pub inbound_rkey: u32,
    /// Address and key of the staging ring.
    pub staging_addr: u64,
    /// See `staging_addr`.
    pub staging_rkey: u32,
}

impl RingKeys {
    /// The words written into the peer's [`RingWords`]; the last is 1
    /// (present).
    pub(crate) fn words(&self) -> [u64; 4] {
        let keys = u64::from(self.inbound_rkey) << 32 | u64::from(self.staging_rkey);
        [self.inbound_addr, self.staging_addr, keys, 1]
    }

    /// What the peer wrote into `at`, once it did.
    pub(crate) fn read(at: &RingWords) -> Option<RingKeys> {
        if !at.present() {
            return None;
        }
        let [inbound, staging, keys, _] = &at.words;
        let keys = keys.load(Ordering::Acquire);
        Some(RingKeys {
            inbound_addr: inbound.load(Ordering::Acquire),
            inbound_rkey: (keys >> 32) as u32,
            staging_addr: staging.load(Ordering::Acquire),
            staging_rkey: keys as u32,
        })
    }
}

/// The local memory of one verbs peer.
#[derive(Debug)]
pub(crate) struct VerbsRings {
    /// Outgoing slots (stream writes, NIC reads).
    pub staging: LocalRing,
    /// Arriving slots (peer's NIC writes, stream reads).
    pub inbound: LocalRing,
    /// Counters the peer's NIC writes.
    pub ctrl: Box<Ctrl>,
}

impl VerbsRings {
    /// Fresh rings of `shape` and a zeroed control block.
    ///
    /// # Errors
    /// As [`LocalRing::new`].
    pub(crate) fn new(shape: RingShape) -> crate::Result<VerbsRings> {
        Ok(VerbsRings {
            staging: LocalRing::new(shape)?,
            inbound: LocalRing::new(shape)?,
            ctrl: Box::default(),
        })
    }

    /// The stream's ends: (send into staging, receive from inbound).
    pub(crate) fn stream_ends(&self) -> (RingEnd, RingEnd) {
        (self.staging.end(), self.inbound.end())
    }
}

/// What a rank tells one peer about its end of their connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct VerbsAddr {
    /// QP number.
    pub qpn: u32,
    /// First packet sequence number.
    pub psn: u32,
    /// Port LID (InfiniBand).
    pub lid: u16,
    /// Active MTU (`ibv_mtu`).
    pub mtu: u8,
    /// Source GID.
    pub gid: [u8; 16],
    /// Address and key of the control block.
    pub ctrl_addr: u64,
    /// See `ctrl_addr`.
    pub ctrl_rkey: u32,
    /// Address and key of our barrier area (the peer writes its flags and
    /// our release word there).
    pub barrier_addr: u64,
    /// See `barrier_addr`.
    pub barrier_rkey: u32,
}

/// A registered memory region, deregistered on drop.
pub(crate) struct Mr(*mut ibv_mr, &'static super::dl::Lib);

impl Mr {
    pub(crate) fn new(
        dev: &Device,
        addr: *mut u8,
        len: usize,
        access: u32,
        what: &str,
    ) -> Result<Mr> {
        // SAFETY: addr..addr+len is memory owned by the connection's rings,
        // which outlive the registration (the QP holds both).
        let mr = unsafe { (dev.lib.reg_mr)(dev.pd, addr.cast(), len, access as i32) };
        if mr.is_null() {
            return Err(Error::os(
                format!("verbs: ibv_reg_mr({what}, {len} bytes)"),
                std::io::Error::last_os_error(),
            ));
        }
        Ok(Mr(mr, dev.lib))
    }

    pub(crate) fn lkey(&self) -> u32 {
        // SAFETY: a registered MR stays valid until dropped.
        unsafe { (*self.0).lkey }
    }

    fn rkey(&self) -> u32 {
        // SAFETY: as above.
        unsafe { (*self.0).rkey }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: registered once in `new`, deregistered once here (after
        // the QP that used it was destroyed: field order in `Qp`).
        unsafe { (self.1.dereg_mr)(self.0) };
    }
}

/// What every QP of a communicator shares, registered once: the rank's
/// barrier area (its peers write their flags into it, and fetch-add its
/// counter where the device has atomics), which grows with the ranks, and
/// the sink where the old values of this rank's fetch-adds land.
pub(crate) struct SharedRegs {
    area: Mr,
    area_addr: u64,
    sink: Mr,
    /// Written by the NIC, read by nobody; freed after its registration.
    sink_memory: Box<[u64; 8]>,
    // Dropped last: the registrations belong to its protection domain.
    _dev: Arc<Device>,
}

// SAFETY: the registrations are only read (keys) and deregistered once, on
// drop, from whichever thread drops the last QP; the sink is written only
// by the NIC.
unsafe impl Send for SharedRegs {}
// SAFETY: as above.
unsafe impl Sync for SharedRegs {}

impl SharedRegs {
    /// Registers `barrier` (writable by peers, and by their atomics where
    /// `dev` has them) and a fetch-add sink on `dev`.
    ///
    /// # Errors
    /// [`Error::Os`] when a registration fails.
    pub(crate) fn new(dev: &Arc<Device>, barrier: &BarrierArea) -> Result<SharedRegs> {
        let (bp, bl) = barrier.memory();
        let area = Mr::new(
            dev,
            bp,
            bl,
            REMOTE_WRITE | dev.atomic_access(),
            "barrier area",
        )?;
        let mut sink_memory = Box::new([0u64; 8]);
        let sink = Mr::new(
            dev,
            sink_memory.as_mut_ptr().cast(),
            std::mem::size_of::<[u64; 8]>(),
            ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0,
            "fetch-add sink",
        )?;
        Ok(SharedRegs {
            area,
            area_addr: bp as u64,
            sink,
            sink_memory,
            _dev: dev.clone(),
        })
    }

    /// Where a fetch-add's old value lands, and its local key.
    pub(crate) fn sink(&self) -> (u64, u32) {
        (self.sink_memory.as_ptr() as u64, self.sink.lkey())
    }
}

/// What the peer may do to a registered area: write it (and our NIC too).
const REMOTE_WRITE: u32 =
    ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0 | ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0;

/// `wr_id` of every posted receive (send requests count up from 1).
pub(crate) const RECV_WR_ID: u64 = u64::MAX;

/// A reliable-connected QP with its CQ and the peer's registrations,
/// made at the pair's first use ([`Qp::make`]; until then it holds no
/// verbs object, and its CQ and QP pointers are null).
pub(crate) struct Qp {
    pub(crate) qp: *mut ibv_qp,
    pub(crate) cq: *mut ibv_cq,
    /// Work requests the send queue holds, and receives kept posted (each
    /// WRITE_WITH_IMM from the peer consumes one).
    pub depth: u32,
    /// Local key of the staging ring (0 until [`Qp::register_rings`]).
    pub staging_lkey: u32,
    mrs: Vec<Mr>,
    /// What we tell the peer about our end, once made.
    local: Option<VerbsAddr>,
    /// The peer's QP number, once ours was moved to RTS towards it.
    connected_to: Option<u32>,
    /// The registrations every QP of the communicator shares (released
    /// after the last QP).
    pub(crate) shared: Arc<SharedRegs>,
    /// The channel the CQ reports to (destroyed after the CQ).
    pub(crate) channel: Arc<CompChannel>,
    // Dropped last: the QP, CQ and MRs belong to its context and PD.
    dev: Arc<Device>,
}

// SAFETY: a Qp is used by one thread at a time (under its peer's lock).
unsafe impl Send for Qp {}

impl std::fmt::Debug for Qp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Qp(depth {}, made {})", self.depth, self.made())
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: created once in `make`, destroyed once, QP before its CQ;
        // the MRs and the device are released after (field order).
        unsafe {
            if !self.qp.is_null() {
                (self.dev.lib.destroy_qp)(self.qp);
            }
            if !self.cq.is_null() {
                (self.dev.lib.destroy_cq)(self.cq);
            }
        }
        self.mrs.clear();
        let _ = (&self.dev, &self.channel);
    }
}

fn attr_mask(bits: &[ibv_qp_attr_mask]) -> i32 {
    bits.iter().fold(0u32, |m, b| m | b.0) as i32
}

impl Qp {
    /// A QP not made yet: nothing is created or registered until
    /// [`Qp::make`].
    pub(crate) fn unmade(
        dev: Arc<Device>,
        channel: &Arc<CompChannel>,
        shared: &Arc<SharedRegs>,
        depth: u32,
    ) -> Qp {
        Qp {
            qp: std::ptr::null_mut(),
            cq: std::ptr::null_mut(),
            depth,
            staging_lkey: 0,
            mrs: Vec::new(),
            local: None,
            connected_to: None,
            shared: shared.clone(),
            channel: channel.clone(),
            dev,
        }
    }

    /// True once [`Qp::make`] created the QP.
    #[inline]
    pub(crate) fn made(&self) -> bool {
        !self.qp.is_null()
    }

    /// True once the QP was moved to RTS towards the peer's.
    pub(crate) fn connected(&self) -> bool {
        self.connected_to.is_some()
    }

    /// Creates the CQ (reporting to the channel) and QP, registers the
    /// control block of `rings` (not the rings: see
    /// [`Qp::register_rings`]), moves the QP to INIT, posts `depth`
    /// receives and returns the address to tell the peer. Once: a second
    /// call returns the same address.
    ///
    /// # Errors
    /// [`Error::Os`] when a verbs call fails.
    pub(crate) fn make(&mut self, rings: &VerbsRings) -> Result<VerbsAddr> {
        if let Some(local) = self.local {
            return Ok(local);
        }
        let dev = self.dev.clone();
        let depth = self.depth;
        let cp = (&*rings.ctrl as *const Ctrl).cast_mut().cast::<u8>();
        let ctrl = Mr::new(
            &dev,
            cp,
            std::mem::size_of::<Ctrl>(),
            REMOTE_WRITE,
            "control",
        )?;
        // SAFETY: the context and the channel are open. Room for a full
        // send queue and a full receive queue of completions.
        let cq = unsafe {
            (dev.lib.create_cq)(
                dev.ctx,
                2 * depth as i32,
                std::ptr::null_mut(),
                self.channel.as_raw(),
                0,
            )
        };
        if cq.is_null() {
            return Err(Error::os(
                "verbs: ibv_create_cq",
                std::io::Error::last_os_error(),
            ));
        }
        // Destroyed by Drop from here on.
        self.cq = cq;
        // SAFETY: zeroed init attributes are valid; filled below.
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        init.send_cq = cq;
        init.recv_cq = cq;
        init.qp_type = ibv_qp_type::IBV_QPT_RC;
        init.cap.max_send_wr = depth;
        init.cap.max_recv_wr = depth;
        init.cap.max_send_sge = 1;
        init.cap.max_recv_sge = 1;
        init.cap.max_inline_data = 64;
        // SAFETY: the PD is valid; init is filled.
        let qp = unsafe { (dev.lib.create_qp)(dev.pd, &mut init) };
        if qp.is_null() {
            return Err(Error::os(
                "verbs: ibv_create_qp",
                std::io::Error::last_os_error(),
            ));
        }
        self.qp = qp;
        // SAFETY: zeroed attributes are valid; filled below.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_INIT;
        a.pkey_index = 0;
        a.port_num = dev.port;
        a.qp_access_flags = REMOTE_WRITE | dev.atomic_access();
        self.modify(
            &mut a,
            &[
                ibv_qp_attr_mask::IBV_QP_STATE,
                ibv_qp_attr_mask::IBV_QP_PKEY_INDEX,
                ibv_qp_attr_mask::IBV_QP_PORT,
                ibv_qp_attr_mask::IBV_QP_ACCESS_FLAGS,
            ],
            "INIT",
        )?;
        let local = VerbsAddr {
            // SAFETY: the QP was created above.
            qpn: unsafe { (*qp).qp_num },
            psn: rand::random::<u32>() & 0xff_ffff,
            lid: dev.lid,
            mtu: dev.mtu as u8,
            gid: dev.gid,
            ctrl_addr: cp as u64,
            ctrl_rkey: ctrl.rkey(),
            barrier_addr: self.shared.area_addr,
            barrier_rkey: self.shared.area.rkey(),
        };
        self.mrs.push(ctrl);
        self.post_recvs(depth as usize)
            .map_err(|e| Error::os("verbs: ibv_post_recv", e))?;
        self.local = Some(local);
        Ok(local)
    }

    /// Registers the staging and inbound rings of `rings` (the pair's first
    /// use: their pages are pinned from now on) and returns where the peer
    /// is to write.
    ///
    /// # Errors
    /// [`Error::Os`] when a registration fails.
    pub(crate) fn register_rings(&mut self, rings: &VerbsRings) -> Result<RingKeys> {
        let (sp, sl) = rings.staging.memory();
        let (ip, il) = rings.inbound.memory();
        let staging = Mr::new(&self.dev, sp, sl, REMOTE_WRITE, "staging ring")?;
        let inbound = Mr::new(&self.dev, ip, il, REMOTE_WRITE, "inbound ring")?;
        let keys = RingKeys {
            inbound_addr: ip as u64,
            inbound_rkey: inbound.rkey(),
            staging_addr: sp as u64,
            staging_rkey: staging.rkey(),
        };
        self.staging_lkey = staging.lkey();
        self.mrs.extend([staging, inbound]);
        Ok(keys)
    }

    /// The device the QP lives on.
    pub(crate) fn device(&self) -> &Arc<Device> {
        &self.dev
    }

    /// Asks the CQ's channel for an event at the CQ's next completion
    /// (`solicited_only`: the next solicited one, or an error).
    ///
    /// # Errors
    /// The verbs error code when the CQ cannot be armed.
    pub(crate) fn arm(&self, solicited_only: bool) -> std::result::Result<(), std::io::Error> {
        if self.cq.is_null() {
            return Ok(());
        }
        // SAFETY: the CQ is live and was created with a completion channel.
        let rc = unsafe { ibv_req_notify_cq(self.cq, i32::from(solicited_only)) };
        if rc != 0 {
            return Err(std::io::Error::from_raw_os_error(rc));
        }
        Ok(())
    }

    /// Posts `n` zero-length receives (each absorbs one WRITE_WITH_IMM).
    ///
    /// # Errors
    /// The verbs error code when posting fails.
    pub(crate) fn post_recvs(&self, mut n: usize) -> std::result::Result<(), std::io::Error> {
        const BATCH: usize = 16;
        while n > 0 {
            let k = n.min(BATCH);
            // Only the `k` entries posted are written (zeroing all of them
            // was most of a small receive's cost here).
            let mut wrs = [const { MaybeUninit::<ibv_recv_wr>::uninit() }; BATCH];
            for i in (0..k).rev() {
                let next = if i + 1 < k {
                    wrs[i + 1].as_mut_ptr()
                } else {
                    std::ptr::null_mut()
                };
                wrs[i].write(ibv_recv_wr {
                    wr_id: RECV_WR_ID,
                    next,
                    sg_list: std::ptr::null_mut(),
                    num_sge: 0,
                });
            }
            let mut bad: *mut ibv_recv_wr = std::ptr::null_mut();
            // SAFETY: the QP is in INIT or later; the chain of the first k
            // WRs (written above) lives across the call and names no memory.
            let rc = unsafe { ibv_post_recv(self.qp, wrs[0].as_mut_ptr(), &mut bad) };
            if rc != 0 {
                return Err(std::io::Error::from_raw_os_error(rc));
            }
            n -= k;
        }
        Ok(())
    }

    fn modify(&self, a: &mut ibv_qp_attr, mask: &[ibv_qp_attr_mask], to: &str) -> Result<()> {
        // SAFETY: the QP is valid; `a` holds the fields the mask names.
        let rc = unsafe { (self.dev.lib.modify_qp)(self.qp, a, attr_mask(mask)) };
        if rc != 0 {
            return Err(Error::os(
                format!("verbs: ibv_modify_qp to {to}"),
                std::io::Error::from_raw_os_error(rc),
            ));
        }
        Ok(())
    }

    /// Moves the QP (made) through RTR to RTS towards `remote`, once: a
    /// second call towards the same QP does nothing (both ranks of a pair
    /// may have dialed the other), towards another is refused.
    ///
    /// # Errors
    /// [`Error::Os`] when the device refuses a transition;
    /// [`Error::Bootstrap`] when the QP is not made or is connected to
    /// another.
    pub(crate) fn connect(&mut self, remote: &VerbsAddr) -> Result<()> {
        let Some(local) = self.local else {
            return Err(Error::Bootstrap("verbs: connecting a QP not made".into()));
        };
        match self.connected_to {
            Some(qpn) if qpn == remote.qpn => return Ok(()),
            Some(qpn) => {
                return Err(Error::Bootstrap(format!(
                    "verbs: the peer named QP {:#x}, but ours is connected to {qpn:#x}",
                    remote.qpn
                )));
            }
            None => {}
        }
        self.move_to_rts(&local, remote)?;
        self.connected_to = Some(remote.qpn);
        Ok(())
    }

    fn move_to_rts(&self, local: &VerbsAddr, remote: &VerbsAddr) -> Result<()> {
        // SAFETY: zeroed attributes are valid; filled below.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_RTR;
        a.path_mtu = u32::from(local.mtu.min(remote.mtu).max(1));
        a.dest_qp_num = remote.qpn;
        a.rq_psn = remote.psn;
        a.max_dest_rd_atomic = 1;
        a.min_rnr_timer = 12;
        a.ah_attr.dlid = remote.lid;
        a.ah_attr.sl = 0;
        a.ah_attr.port_num = self.dev.port;
        if self.dev.roce || remote.gid != [0; 16] {
            a.ah_attr.is_global = 1;
            a.ah_attr.grh.dgid.raw = remote.gid;
            a.ah_attr.grh.sgid_index = self.dev.gid_index;
            a.ah_attr.grh.hop_limit = 64;
        }
        self.modify(
            &mut a,
            &[
                ibv_qp_attr_mask::IBV_QP_STATE,
                ibv_qp_attr_mask::IBV_QP_AV,
                ibv_qp_attr_mask::IBV_QP_PATH_MTU,
                ibv_qp_attr_mask::IBV_QP_DEST_QPN,
                ibv_qp_attr_mask::IBV_QP_RQ_PSN,
                ibv_qp_attr_mask::IBV_QP_MAX_DEST_RD_ATOMIC,
                ibv_qp_attr_mask::IBV_QP_MIN_RNR_TIMER,
            ],
            "RTR",
        )?;
        // SAFETY: as above.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_RTS;
        a.timeout = 14;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.sq_psn = local.psn;
        a.max_rd_atomic = 1;
        self.modify(
            &mut a,
            &[
                ibv_qp_attr_mask::IBV_QP_STATE,
                ibv_qp_attr_mask::IBV_QP_TIMEOUT,
                ibv_qp_attr_mask::IBV_QP_RETRY_CNT,
                ibv_qp_attr_mask::IBV_QP_RNR_RETRY,
                ibv_qp_attr_mask::IBV_QP_SQ_PSN,
                ibv_qp_attr_mask::IBV_QP_MAX_QP_RD_ATOMIC,
            ],
            "RTS",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_keys_read_back_once_present() {
        let keys = RingKeys {
            inbound_addr: 0x7f00_dead_0000,
            inbound_rkey: 0x1111_2222,
            staging_addr: 0x7f00_cafe_0000,
            staging_rkey: 0x5555_6666,
        };
        let at = RingWords::default();
        let words = keys.words();
        for (word, value) in at.words.iter().zip(words).take(3) {
            word.store(value, Ordering::Relaxed);
        }
        assert_eq!(
            RingKeys::read(&at),
            None,
            "not present before the last word"
        );
        at.words[3].store(words[3], Ordering::Release);
        assert_eq!(RingKeys::read(&at), Some(keys));
    }
}
