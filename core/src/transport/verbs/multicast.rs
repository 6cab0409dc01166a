//! The multicast barrier's datagrams over verbs: one unreliable-datagram
//! QP per rank, attached to a multicast group derived from the
//! communicator (`crate::barrier::multicast`).
//!
//! The group is an IPv4 multicast address in the organisation-local range
//! 239.192.0.0/14, chosen from the communicator's tag, written as the
//! IPv4-mapped GID `::ffff:239.x.y.z` that RoCE v2 addresses it by. Every
//! rank attaches its QP with `ibv_attach_mcast`, joins the group at the IP
//! level on the port's interface ([`super::ip_membership`]: the IGMP
//! report, and the kernel's loopback of multicast to this host), and sends
//! through one address handle to that GID (remote QPN `0xffffff`, a shared
//! Q_Key); ranks on one host hear each other, and a rank hears itself
//! (ignored). Joining needs no rdma_cm and no subnet manager. So this runs where the port is RoCE v2 with an IPv4 GID (the
//! Soft-RoCE guest; RoCE NICs behind switches that flood or snoop
//! multicast), and [`UdGroup::join`] refuses an InfiniBand port (its
//! multicast groups are made by a subnet-manager join, which streamcomm
//! does not do), a device without multicast, or a group too large for the
//! device, with the reason: the caller falls back to another barrier.
//!
//! Receives are posted into one registered buffer of fixed slots (each
//! starts with the 40-byte GRH); sends copy into a small ring of
//! registered slots, each signalled, so a slot is reused only after its
//! completion. The receive CQ reports to a completion channel of its own,
//! which a waiting barrier and the idle progress engine sleep on.

use std::sync::Arc;
use std::time::Duration;

use super::device::Device;
use super::event::CompChannel;
use super::ip_membership::IpMembership;
use super::qp::Mr;
use crate::barrier::multicast::Datagrams;
use crate::barrier::multicast::wire;
use crate::transport::verbs::sys::*;
use crate::{Error, Result};

/// Q_Key of every rank's UD QP (the high bit clear: not a controlled key).
const QKEY: u32 = 0x5c_0b17;
/// Destination QP number of a multicast send.
const MULTICAST_QPN: u32 = 0xff_ffff;
/// Receives kept posted: at most two barriers' arrivals of every rank and
/// their questions are in flight (ranks are at most one barrier apart);
/// beyond that a datagram is dropped by the device, which the protocol
/// survives as a loss.
const RECV_SLOTS: usize = 512;
/// Sends in flight.
const SEND_SLOTS: usize = 64;
/// The global route header a UD receive starts with.
const GRH_BYTES: usize = 40;
/// `wr_id` of sends (receives carry their slot index).
const SEND_WR: u64 = u64::MAX;
/// Longest wait for a send slot to complete before it is an error.
const SEND_STALL: Duration = Duration::from_secs(5);

/// The multicast group address (IPv4-mapped GID) of the communicator
/// tagged `tag`.
pub(crate) fn group_gid(tag: u64) -> [u8; 16] {
    let h = tag ^ (tag >> 23) ^ (tag >> 41);
    let mut gid = [0u8; 16];
    gid[10] = 0xff;
    gid[11] = 0xff;
    gid[12] = 239;
    gid[13] = 192 | ((h >> 16) & 3) as u8;
    gid[14] = (h >> 8) as u8;
    gid[15] = h as u8;
    gid
}

/// One rank's UD QP in the communicator's multicast group.
pub(crate) struct UdGroup {
    qp: *mut ibv_qp,
    send_cq: *mut ibv_cq,
    recv_cq: *mut ibv_cq,
    ah: *mut ibv_ah,
    mgid: ibv_gid,
    attached: bool,
    /// Bytes of one receive slot (GRH included).
    slot: usize,
    recv_mem: Box<[u8]>,
    send_mem: Box<[u8]>,
    recv_key: u32,
    send_key: u32,
    /// Sends posted and completed.
    posted: u64,
    completed: u64,
    /// Receive completions taken while arming, handled first next time.
    stash: Vec<ibv_wc>,
    // Released after the verbs objects above (see `Drop`).
    mrs: Vec<Mr>,
    /// The IP-level membership (left after the QP detached).
    _membership: Option<IpMembership>,
    channel: CompChannel,
    dev: Arc<Device>,
}

// SAFETY: the verbs objects are used by one thread at a time (the
// multicast barrier keeps its datagrams behind a mutex); libibverbs
// objects may move between threads.
unsafe impl Send for UdGroup {}

impl std::fmt::Debug for UdGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // SAFETY: every bit pattern is a valid raw GID.
        let g = unsafe { self.mgid.raw };
        write!(f, "UdGroup({}.{}.{}.{})", g[12], g[13], g[14], g[15])
    }
}

/// A verbs call's failure as a fallback reason.
fn failed(call: &str, e: std::io::Error) -> String {
    format!("{call} failed: {e}")
}

impl UdGroup {
    /// Joins the group of the communicator tagged `tag` with `size` ranks
    /// on `dev`, or says why multicast is not there (see the module docs).
    /// `refuse` (fault injection) refuses it as a fabric without multicast
    /// would.
    ///
    /// # Errors
    /// The reason, to report with the fallback.
    pub(crate) fn join(
        dev: &Arc<Device>,
        size: usize,
        tag: u64,
        refuse: bool,
    ) -> std::result::Result<UdGroup, String> {
        if refuse {
            return Err("the multicast join was refused (fault injection: mcast:refuse)".into());
        }
        if !dev.roce {
            return Err(format!(
                "{} is an InfiniBand port, whose multicast groups need a subnet-manager join, which streamcomm does not do",
                dev.name
            ));
        }
        let v4 = dev.gid[..10] == [0; 10] && dev.gid[10..12] == [0xff, 0xff];
        if !v4 {
            return Err(format!(
                "{} GID index {} is not an IPv4 RoCE v2 address (set STREAMCOMM_IB_GID_INDEX to one)",
                dev.name, dev.gid_index
            ));
        }
        if dev.mcast_attach == 0 {
            return Err(format!("{} has no multicast groups", dev.name));
        }
        if size > dev.mcast_attach as usize {
            return Err(format!(
                "{size} ranks are more than the {} QPs a multicast group of {} may hold",
                dev.mcast_attach, dev.name
            ));
        }
        let mtu_bytes = 128usize << dev.mtu.clamp(1, 5);
        if wire::max_bytes(size) > mtu_bytes {
            return Err(format!(
                "a question for {size} ranks ({} bytes) exceeds the port's MTU of {mtu_bytes}",
                wire::max_bytes(size)
            ));
        }
        Self::create(dev, size, tag)
    }

    fn create(dev: &Arc<Device>, size: usize, tag: u64) -> std::result::Result<UdGroup, String> {
        let lib = dev.lib;
        let channel = CompChannel::new(dev).map_err(|e| e.to_string())?;
        let slot = (GRH_BYTES + wire::max_bytes(size)).next_multiple_of(64);
        let mut recv_mem = vec![0u8; slot * RECV_SLOTS].into_boxed_slice();
        let mut send_mem = vec![0u8; slot * SEND_SLOTS].into_boxed_slice();
        let local = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
        let recv_mr = Mr::new(
            dev,
            recv_mem.as_mut_ptr(),
            recv_mem.len(),
            local,
            "UD receives",
        )
        .map_err(|e| e.to_string())?;
        let send_mr = Mr::new(
            dev,
            send_mem.as_mut_ptr(),
            send_mem.len(),
            local,
            "UD sends",
        )
        .map_err(|e| e.to_string())?;
        // SAFETY: the context is open; the receive CQ reports to the
        // channel created above, the send CQ to none.
        let (recv_cq, send_cq) = unsafe {
            (
                (lib.create_cq)(
                    dev.ctx,
                    RECV_SLOTS as i32,
                    std::ptr::null_mut(),
                    channel.as_raw(),
                    0,
                ),
                (lib.create_cq)(
                    dev.ctx,
                    SEND_SLOTS as i32,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    0,
                ),
            )
        };
        let cq_error = (recv_cq.is_null() || send_cq.is_null())
            .then(|| failed("ibv_create_cq", std::io::Error::last_os_error()));
        // From here on, `Drop` releases whatever was made.
        let mut g = UdGroup {
            qp: std::ptr::null_mut(),
            send_cq,
            recv_cq,
            ah: std::ptr::null_mut(),
            mgid: ibv_gid {
                raw: group_gid(tag),
            },
            attached: false,
            slot,
            recv_key: recv_mr.lkey(),
            send_key: send_mr.lkey(),
            recv_mem,
            send_mem,
            posted: 0,
            completed: 0,
            stash: Vec::new(),
            mrs: vec![recv_mr, send_mr],
            _membership: None,
            channel,
            dev: dev.clone(),
        };
        if let Some(e) = cq_error {
            return Err(e);
        }
        // SAFETY: zeroed init attributes are valid; filled below.
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        init.send_cq = send_cq;
        init.recv_cq = recv_cq;
        init.qp_type = ibv_qp_type::IBV_QPT_UD;
        init.cap.max_send_wr = SEND_SLOTS as u32;
        init.cap.max_recv_wr = RECV_SLOTS as u32;
        init.cap.max_send_sge = 1;
        init.cap.max_recv_sge = 1;
        // SAFETY: the PD is valid; init is filled.
        g.qp = unsafe { (lib.create_qp)(dev.pd, &mut init) };
        if g.qp.is_null() {
            return Err(failed(
                "ibv_create_qp (UD)",
                std::io::Error::last_os_error(),
            ));
        }
        g.to_rts()?;
        for i in 0..RECV_SLOTS {
            g.post_recv(i)
                .map_err(|e| failed("ibv_post_recv (UD)", e))?;
        }
        // SAFETY: the QP is live; the GID is a valid multicast GID; the LID
        // is unused on RoCE.
        let rc = unsafe { (lib.attach_mcast)(g.qp, &g.mgid, 0) };
        if rc != 0 {
            return Err(failed(
                "ibv_attach_mcast",
                std::io::Error::from_raw_os_error(rc.abs()),
            ));
        }
        g.attached = true;
        let gid = group_gid(tag);
        let ip = |x: &[u8; 16]| [x[12], x[13], x[14], x[15]];
        g._membership =
            Some(IpMembership::join(ip(&gid), ip(&dev.gid)).map_err(|e| failed(&e.0, e.1))?);
        // SAFETY: zeroed address attributes are valid; filled below.
        let mut ah: ibv_ah_attr = unsafe { std::mem::zeroed() };
        ah.is_global = 1;
        ah.port_num = dev.port;
        ah.grh.dgid = g.mgid;
        ah.grh.sgid_index = dev.gid_index;
        ah.grh.hop_limit = 1;
        // SAFETY: the PD is valid; ah is filled.
        g.ah = unsafe { (lib.create_ah)(dev.pd, &mut ah) };
        if g.ah.is_null() {
            return Err(failed(
                "ibv_create_ah (multicast)",
                std::io::Error::last_os_error(),
            ));
        }
        tracing::debug!(group = ?g, size, "multicast barrier: joined");
        Ok(g)
    }

    /// INIT (port, Q_Key), RTR, RTS.
    fn to_rts(&self) -> std::result::Result<(), String> {
        use ibv_qp_attr_mask as m;
        let steps: [(ibv_qp_state::Type, &[ibv_qp_attr_mask], &str); 3] = [
            (
                ibv_qp_state::IBV_QPS_INIT,
                &[
                    m::IBV_QP_STATE,
                    m::IBV_QP_PKEY_INDEX,
                    m::IBV_QP_PORT,
                    m::IBV_QP_QKEY,
                ],
                "INIT",
            ),
            (ibv_qp_state::IBV_QPS_RTR, &[m::IBV_QP_STATE], "RTR"),
            (
                ibv_qp_state::IBV_QPS_RTS,
                &[m::IBV_QP_STATE, m::IBV_QP_SQ_PSN],
                "RTS",
            ),
        ];
        for (state, mask, name) in steps {
            // SAFETY: zeroed attributes are valid; the mask names the fields set.
            let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
            a.qp_state = state;
            a.port_num = self.dev.port;
            a.qkey = QKEY;
            let bits = mask.iter().fold(0u32, |acc, b| acc | b.0) as i32;
            // SAFETY: the QP is live; `a` holds what the mask names.
            let rc = unsafe { (self.dev.lib.modify_qp)(self.qp, &mut a, bits) };
            if rc != 0 {
                return Err(failed(
                    &format!("ibv_modify_qp (UD) to {name}"),
                    std::io::Error::from_raw_os_error(rc.abs()),
                ));
            }
        }
        Ok(())
    }

    /// Posts receive slot `i`.
    fn post_recv(&mut self, i: usize) -> std::result::Result<(), std::io::Error> {
        let mut sge = ibv_sge {
            // SAFETY: i < RECV_SLOTS, so the slot lies inside recv_mem.
            addr: unsafe { self.recv_mem.as_mut_ptr().add(i * self.slot) } as u64,
            length: self.slot as u32,
            lkey: self.recv_key,
        };
        let mut wr = ibv_recv_wr {
            wr_id: i as u64,
            next: std::ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        let mut bad = std::ptr::null_mut();
        // SAFETY: the QP is live; the slot is registered and not posted
        // (it was just consumed, or never posted); wr and sge outlive the
        // call.
        let rc = unsafe { ibv_post_recv(self.qp, &mut wr, &mut bad) };
        match rc {
            0 => Ok(()),
            e => Err(std::io::Error::from_raw_os_error(e.abs())),
        }
    }

    /// Reaps send completions; an error completion is a transport error.
    fn reap_sends(&mut self) -> Result<()> {
        let mut failed = None;
        let n = drain_cq(self.send_cq, |wc| {
            if wc.status != ibv_wc_status::IBV_WC_SUCCESS && failed.is_none() {
                failed = Some(wc.status);
            }
        })
        .map_err(|rc| self.error("polling the UD send CQ", rc.to_string()))?;
        self.completed += n;
        match failed {
            Some(status) => Err(self.error("a multicast send", self.status(status))),
            None => Ok(()),
        }
    }

    fn status(&self, s: ibv_wc_status::Type) -> String {
        // SAFETY: ibv_wc_status_str returns a static string for any value.
        let p = unsafe { (self.dev.lib.wc_status_str)(s) };
        if p.is_null() {
            return format!("status {s}");
        }
        // SAFETY: a NUL-terminated static string.
        unsafe { std::ffi::CStr::from_ptr(p) }
            .to_string_lossy()
            .into_owned()
    }

    fn error(&self, what: &str, cause: String) -> Error {
        Error::os(
            format!("verbs: multicast barrier on {}: {what}", self.dev.name),
            std::io::Error::other(cause),
        )
    }

    /// Moves receive completions into the stash (after arming, so none is
    /// missed between a look and a sleep).
    fn take_completions(&mut self) -> Result<()> {
        let stash = &mut self.stash;
        drain_cq(self.recv_cq, |wc| stash.push(*wc))
            .map(|_| ())
            .map_err(|rc| self.error("polling the UD receive CQ", rc.to_string()))
    }

    /// Arms the receive CQ and takes what came before the arming.
    fn arm_recv(&mut self) -> Result<()> {
        self.channel.drain();
        // SAFETY: the CQ is live and has a completion channel.
        let rc = unsafe { ibv_req_notify_cq(self.recv_cq, 0) };
        if rc != 0 {
            return Err(self.error(
                "arming the UD receive CQ",
                std::io::Error::from_raw_os_error(rc.abs()).to_string(),
            ));
        }
        self.take_completions()
    }
}

/// Hands every completion waiting on `cq` to `each`: how many, or the
/// verbs error code of a failed poll.
fn drain_cq(cq: *mut ibv_cq, mut each: impl FnMut(&ibv_wc)) -> std::result::Result<u64, i32> {
    // SAFETY: an all-zero ibv_wc is a valid value to be overwritten.
    let mut wcs: [ibv_wc; 16] = unsafe { std::mem::zeroed() };
    let mut total = 0;
    loop {
        // SAFETY: the CQ is live (the caller's, until it is dropped); wcs
        // holds 16 entries.
        let n = unsafe { ibv_poll_cq(cq, 16, wcs.as_mut_ptr()) };
        if n < 0 {
            return Err(n);
        }
        wcs[..n as usize].iter().for_each(&mut each);
        total += n as u64;
        if n < 16 {
            return Ok(total);
        }
    }
}

impl Datagrams for UdGroup {
    fn send(&mut self, bytes: &[u8]) -> Result<()> {
        let waited = std::time::Instant::now();
        self.reap_sends()?;
        while self.posted - self.completed >= SEND_SLOTS as u64 {
            if waited.elapsed() > SEND_STALL {
                return Err(self.error("sending", "no send completed in 5 s".into()));
            }
            std::thread::yield_now();
            self.reap_sends()?;
        }
        let at = (self.posted as usize % SEND_SLOTS) * self.slot;
        let len = bytes.len().min(self.slot);
        self.send_mem[at..at + len].copy_from_slice(&bytes[..len]);
        let mut sge = ibv_sge {
            addr: self.send_mem[at..].as_ptr() as u64,
            length: len as u32,
            lkey: self.send_key,
        };
        // SAFETY: an all-zero work request is valid; filled below.
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = SEND_WR;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = ibv_wr_opcode::IBV_WR_SEND;
        wr.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
        wr.wr.ud = ibv_send_wr__bindgen_ty_2__bindgen_ty_3 {
            ah: self.ah,
            remote_qpn: MULTICAST_QPN,
            remote_qkey: QKEY,
        };
        let mut bad = std::ptr::null_mut();
        // SAFETY: the QP is in RTS; the slot is registered and free (its
        // last send completed: checked above); wr, sge and the AH outlive
        // the call.
        let rc = unsafe { ibv_post_send(self.qp, &mut wr, &mut bad) };
        if rc != 0 {
            return Err(self.error(
                "posting a multicast send",
                std::io::Error::from_raw_os_error(rc.abs()).to_string(),
            ));
        }
        self.posted += 1;
        Ok(())
    }

    fn recv(&mut self, each: &mut dyn FnMut(&[u8])) -> Result<()> {
        if self.stash.is_empty() {
            self.take_completions()?;
        }
        let stash = std::mem::take(&mut self.stash);
        let mut result = Ok(());
        for wc in &stash {
            let i = wc.wr_id as usize;
            if wc.status != ibv_wc_status::IBV_WC_SUCCESS || i >= RECV_SLOTS {
                result = Err(self.error("a multicast receive", self.status(wc.status)));
                break;
            }
            let len = (wc.byte_len as usize).min(self.slot);
            if len > GRH_BYTES {
                let at = i * self.slot;
                each(&self.recv_mem[at + GRH_BYTES..at + len]);
            }
            if let Err(e) = self.post_recv(i) {
                result = Err(self.error("reposting a UD receive", e.to_string()));
                break;
            }
        }
        self.stash = stash;
        self.stash.clear();
        result
    }

    fn sleep(&mut self, timeout: Duration) -> Result<()> {
        self.arm_recv()?;
        if !self.stash.is_empty() {
            return Ok(());
        }
        let mut fd = libc::pollfd {
            fd: self.channel.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd; a failed or interrupted poll is a
        // short sleep, after which the caller looks again.
        unsafe { libc::poll(&mut fd, 1, ms) };
        self.channel.drain();
        Ok(())
    }

    fn wake_fd(&self) -> Option<i32> {
        Some(self.channel.fd())
    }

    fn arm(&mut self) -> Result<bool> {
        self.arm_recv()?;
        Ok(!self.stash.is_empty())
    }
}

impl Drop for UdGroup {
    fn drop(&mut self) {
        let lib = self.dev.lib;
        // SAFETY: each object was created once by `create` (null where it
        // was not) and is released once, in dependency order: the group
        // membership and the AH, then the QP, then its CQs; the MRs, the
        // channel and the device after (field order).
        unsafe {
            if self.attached {
                (lib.detach_mcast)(self.qp, &self.mgid, 0);
            }
            if !self.ah.is_null() {
                (lib.destroy_ah)(self.ah);
            }
            if !self.qp.is_null() {
                (lib.destroy_qp)(self.qp);
            }
            for cq in [self.send_cq, self.recv_cq] {
                if !cq.is_null() {
                    (lib.destroy_cq)(cq);
                }
            }
        }
        self.mrs.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_addresses_are_organisation_local_ipv4_multicast() {
        for tag in [0u64, 1, u64::MAX, 0x1234_5678_9abc_def0] {
            let g = group_gid(tag);
            assert_eq!(g[..12], [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]);
            assert_eq!(g[12], 239);
            assert!((192..=195).contains(&g[13]), "{g:?}");
        }
        assert_ne!(group_gid(1), group_gid(2));
    }

    /// Three QPs of one process join a group on the device and run
    /// barriers as threads: the group loops datagrams back to every
    /// member, none leaves early.
    #[test]
    fn ud_group_runs_barriers() {
        use crate::barrier::multicast::{DatagramFaults, MulticastBarrier};
        use crate::wait::WaitPolicy;
        use std::sync::atomic::{AtomicU64, Ordering};
        if !streamcomm_testkit::rdma_device(true) {
            streamcomm_testkit::skip(
                &streamcomm_testkit::current_test(),
                "no active RDMA device on this host (scripts/verbs-check.sh runs it in the Soft-RoCE guest)",
            );
            return;
        }
        let dev = Arc::new(Device::open(None, None).unwrap());
        let tag = rand::random::<u64>();
        let size = 3;
        let arrived = AtomicU64::new(0);
        let barriers: Vec<MulticastBarrier> = (0..size)
            .map(|r| {
                let g = UdGroup::join(&dev, size, tag, false).unwrap();
                MulticastBarrier::new(r, size, tag, Box::new(g), DatagramFaults::default())
            })
            .collect();
        std::thread::scope(|s| {
            for b in &barriers {
                let arrived = &arrived;
                s.spawn(move || {
                    for e in 0..200u64 {
                        arrived.fetch_add(1, Ordering::SeqCst);
                        b.run(&WaitPolicy::new(1000, Duration::from_secs(30)))
                            .unwrap();
                        assert!(arrived.load(Ordering::SeqCst) >= size as u64 * (e + 1));
                    }
                });
            }
        });
        let stats: Vec<_> = barriers.iter().map(|b| b.stats()).collect();
        eprintln!("UD group: 200 barriers on {size} threads, {stats:?}");
    }
}
