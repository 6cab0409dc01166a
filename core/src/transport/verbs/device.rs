//! Finding and opening the RDMA device, port and GID the verbs transport uses.
//!
//! `ibv_get_device_list` returns NULL (errno `ENOSYS`) on a kernel without
//! RDMA, and an empty list where no device exists: both are "no device", a
//! clean [`Error::Unavailable`], as is a device without an active port.
//! Without `STREAMCOMM_IB_HCA` the first device with an active port is used.
//! The GID is `STREAMCOMM_IB_GID_INDEX` if set, else on Ethernet (RoCE) the
//! first RoCE v2 GID holding an IPv4-mapped address, else the first RoCE v2
//! GID, else index 0 (InfiniBand ports are addressed by LID as well).

use std::ffi::CStr;
use std::sync::{Arc, Mutex, Weak};

use crate::transport::verbs::sys::*;

use super::dl::{self, Lib};
use crate::{Error, Result};

/// What a device was opened for: this process, `STREAMCOMM_IB_HCA`,
/// `STREAMCOMM_IB_GID_INDEX`.
type OpenKey = (u32, Option<String>, Option<u32>);

/// The devices this process has open ([`Device::shared`]).
static OPEN: Mutex<Vec<(OpenKey, Weak<Device>)>> = Mutex::new(Vec::new());

/// An open device with its protection domain and chosen port and GID.
pub(crate) struct Device {
    /// Device name (`mlx5_0`, `rxe0`, ...).
    pub name: String,
    pub(crate) ctx: *mut ibv_context,
    pub(crate) pd: *mut ibv_pd,
    /// libibverbs (loaded at run time).
    pub(crate) lib: &'static Lib,
    /// Port number (1-based).
    pub port: u8,
    /// The port's LID (0 on RoCE).
    pub lid: u16,
    /// The port's active MTU (an `ibv_mtu` value).
    pub mtu: u32,
    /// GID index used as source.
    pub gid_index: u8,
    /// The GID at that index.
    pub gid: [u8; 16],
    /// True on an Ethernet (RoCE) port: addressing needs the GRH.
    pub roce: bool,
    /// True when the device executes RDMA atomics (`atomic_cap` is not
    /// `IBV_ATOMIC_NONE`): the central-counter barrier fetch-adds with them.
    pub atomics: bool,
    /// QPs one multicast group may hold (`max_mcast_qp_attach`; 0 when the
    /// device has no multicast groups): bounds the multicast barrier.
    pub mcast_attach: u32,
}

// SAFETY: the context and PD are thread-safe verbs objects (libibverbs
// serialises where needed); Device only hands them to verbs calls.
unsafe impl Send for Device {}
// SAFETY: as above.
unsafe impl Sync for Device {}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Device({} port {} gid index {})",
            self.name, self.port, self.gid_index
        )
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: both were created by `open` and are released once, after
        // every QP, CQ and MR (which hold an Arc<Device>) is gone.
        unsafe {
            (self.lib.dealloc_pd)(self.pd);
            (self.lib.close_device)(self.ctx);
        }
    }
}

/// The device list, freed on drop.
struct DeviceList {
    list: *mut *mut ibv_device,
    len: usize,
    lib: &'static Lib,
}

impl DeviceList {
    fn get() -> Result<DeviceList> {
        let lib = dl::lib()?;
        let mut n: i32 = 0;
        // SAFETY: plain call; n receives the count.
        let list = unsafe { (lib.get_device_list)(&mut n) };
        if list.is_null() {
            let e = std::io::Error::last_os_error();
            return Err(Error::Unavailable(format!(
                "verbs: no RDMA devices (ibv_get_device_list: {e})"
            )));
        }
        Ok(DeviceList {
            list,
            len: usize::try_from(n).unwrap_or(0),
            lib,
        })
    }

    fn name(&self, i: usize) -> String {
        // SAFETY: i < len entries of the list; the name is a NUL-terminated
        // string owned by the device.
        unsafe {
            let p = (self.lib.get_device_name)(*self.list.add(i));
            if p.is_null() {
                return String::new();
            }
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: the list came from ibv_get_device_list and is freed once.
        unsafe { (self.lib.free_device_list)(self.list) };
    }
}

/// `IBV_LINK_LAYER_ETHERNET` (an anonymous enum in verbs.h).
const LINK_LAYER_ETHERNET: u8 = 2;

/// The port attributes that matter here.
struct PortInfo {
    port: u8,
    lid: u16,
    mtu: u32,
    gid_tbl_len: i32,
    roce: bool,
    atomics: bool,
    mcast_attach: u32,
}

/// First active port of an open device.
fn active_port(v: &Lib, ctx: *mut ibv_context) -> Option<PortInfo> {
    // SAFETY: zeroed ibv_device_attr is a valid out-parameter.
    let mut dattr: ibv_device_attr = unsafe { std::mem::zeroed() };
    // SAFETY: ctx is an open context; dattr is writable.
    if unsafe { (v.query_device)(ctx, &mut dattr) } != 0 {
        return None;
    }
    for port in 1..=dattr.phys_port_cnt {
        // SAFETY: zeroed ibv_port_attr is a valid out-parameter.
        let mut pattr: ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: ctx is open, port is in range, pattr is writable (the
        // exported ibv_query_port fills its leading, compatible part, which
        // holds every field read below).
        if unsafe { (v.query_port)(ctx, port, &mut pattr) } != 0 {
            continue;
        }
        if pattr.state == ibv_port_state::IBV_PORT_ACTIVE {
            return Some(PortInfo {
                port,
                lid: pattr.lid,
                mtu: pattr.active_mtu,
                gid_tbl_len: pattr.gid_tbl_len,
                roce: pattr.link_layer == LINK_LAYER_ETHERNET,
                atomics: dattr.atomic_cap != ibv_atomic_cap::IBV_ATOMIC_NONE,
                mcast_attach: if dattr.max_mcast_grp > 0 {
                    u32::try_from(dattr.max_mcast_qp_attach).unwrap_or(0)
                } else {
                    0
                },
            });
        }
    }
    None
}

fn query_gid(v: &Lib, ctx: *mut ibv_context, port: u8, index: i32) -> Option<[u8; 16]> {
    // SAFETY: zeroed ibv_gid is valid; ctx is open.
    let mut gid: ibv_gid = unsafe { std::mem::zeroed() };
    // SAFETY: ctx open, gid writable.
    if unsafe { (v.query_gid)(ctx, port, index, &mut gid) } != 0 {
        return None;
    }
    // SAFETY: every bit pattern is a valid raw GID.
    Some(unsafe { gid.raw })
}

/// The GID type the kernel reports for an index (`RoCE v2`, `IB/RoCE v1`).
fn gid_type(dev: &str, port: u8, index: i32) -> String {
    std::fs::read_to_string(format!(
        "/sys/class/infiniband/{dev}/ports/{port}/gid_attrs/types/{index}"
    ))
    .map(|s| s.trim().to_string())
    .unwrap_or_default()
}

/// Picks the GID index as the module docs say.
fn choose_gid(v: &Lib, dev: &str, ctx: *mut ibv_context, p: &PortInfo) -> Option<(u8, [u8; 16])> {
    let mut v2 = None;
    let mut first = None;
    for i in 0..p.gid_tbl_len.min(256) {
        let Some(g) = query_gid(v, ctx, p.port, i) else {
            continue;
        };
        if g == [0; 16] {
            continue;
        }
        first.get_or_insert((i as u8, g));
        if !p.roce {
            break;
        }
        if gid_type(dev, p.port, i).eq_ignore_ascii_case("RoCE v2") {
            let v4 = g[..10] == [0; 10] && g[10] == 0xff && g[11] == 0xff;
            if v4 {
                return Some((i as u8, g));
            }
            v2.get_or_insert((i as u8, g));
        }
    }
    v2.or(first)
}

impl Device {
    /// The access flag that lets peers' atomics reach a registration:
    /// remote atomics where the device executes them, else none.
    pub(crate) fn atomic_access(&self) -> u32 {
        if self.atomics {
            ibv_access_flags::IBV_ACCESS_REMOTE_ATOMIC.0
        } else {
            0
        }
    }

    /// The device this process has open for `hca` and `gid_index`, or
    /// [`Device::open`]ed now: the communicators of one process (a parent
    /// and its split children, ranks as threads) share one context and
    /// protection domain, as NCCL's process-wide device table does. Closed
    /// when the last communicator using it goes. Keyed by process id too:
    /// a forked child opens its own (verbs contexts do not survive a fork).
    ///
    /// # Errors
    /// As [`Device::open`].
    pub(crate) fn shared(hca: Option<&str>, gid_index: Option<u32>) -> Result<Arc<Device>> {
        let key = (std::process::id(), hca.map(str::to_owned), gid_index);
        let mut open = OPEN.lock().unwrap_or_else(|p| p.into_inner());
        open.retain(|(_, device)| device.strong_count() > 0);
        if let Some(device) = open
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, device)| device.upgrade())
        {
            return Ok(device);
        }
        let device = Arc::new(Device::open(hca, gid_index)?);
        open.push((key, Arc::downgrade(&device)));
        Ok(device)
    }

    /// Opens the device `hca` (or the first with an active port).
    ///
    /// # Errors
    /// [`Error::Unavailable`] when there is no RDMA device, the named one
    /// does not exist, or no port is active; [`Error::InvalidArgument`] for
    /// a GID index that the port does not have.
    pub(crate) fn open(hca: Option<&str>, gid_index: Option<u32>) -> Result<Device> {
        let list = DeviceList::get()?;
        let v = list.lib;
        if list.len == 0 {
            return Err(Error::Unavailable("verbs: no RDMA devices".into()));
        }
        let names: Vec<String> = (0..list.len).map(|i| list.name(i)).collect();
        let candidates: Vec<usize> = match hca {
            Some(h) => match names.iter().position(|n| n == h) {
                Some(i) => vec![i],
                None => {
                    return Err(Error::Unavailable(format!(
                        "verbs: STREAMCOMM_IB_HCA={h:?} is not a device here (devices: {names:?})"
                    )));
                }
            },
            None => (0..list.len).collect(),
        };
        for i in candidates {
            // SAFETY: i < len; the device pointer is valid while the list lives.
            let ctx = unsafe { (v.open_device)(*list.list.add(i)) };
            if ctx.is_null() {
                continue;
            }
            let Some(port) = active_port(v, ctx) else {
                // SAFETY: opened above, closed once.
                unsafe { (v.close_device)(ctx) };
                continue;
            };
            let gid = match gid_index {
                Some(g) if (g as i32) < port.gid_tbl_len => {
                    query_gid(v, ctx, port.port, g as i32).map(|x| (g as u8, x))
                }
                Some(g) => {
                    // SAFETY: opened above, closed once.
                    unsafe { (v.close_device)(ctx) };
                    return Err(Error::invalid(format!(
                        "STREAMCOMM_IB_GID_INDEX={g}: port {} of {} has {} GIDs",
                        port.port, names[i], port.gid_tbl_len
                    )));
                }
                None => choose_gid(v, &names[i], ctx, &port),
            };
            let (gid_index, gid) = gid.unwrap_or((0, [0; 16]));
            if port.roce && gid == [0; 16] {
                // SAFETY: opened above, closed once.
                unsafe { (v.close_device)(ctx) };
                continue;
            }
            // SAFETY: ctx is open.
            let pd = unsafe { (v.alloc_pd)(ctx) };
            if pd.is_null() {
                let e = std::io::Error::last_os_error();
                // SAFETY: opened above, closed once.
                unsafe { (v.close_device)(ctx) };
                return Err(Error::Unavailable(format!(
                    "verbs: ibv_alloc_pd on {}: {e}",
                    names[i]
                )));
            }
            let d = Device {
                name: names[i].clone(),
                ctx,
                pd,
                lib: v,
                port: port.port,
                lid: port.lid,
                mtu: port.mtu,
                gid_index,
                gid,
                roce: port.roce,
                atomics: port.atomics,
                mcast_attach: port.mcast_attach,
            };
            tracing::debug!(?d, "verbs: device opened");
            return Ok(d);
        }
        Err(Error::Unavailable(format!(
            "verbs: no RDMA device with an active port (devices: {names:?})"
        )))
    }
}
