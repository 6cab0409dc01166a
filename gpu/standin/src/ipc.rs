//! CUDA IPC of device memory between processes, over the shared-memory
//! segments that back every allocation.
//!
//! A handle names the exporting process and segment. Only the base of a
//! `cuMemAlloc` allocation can be exported; opening in the exporting process
//! is `CUDA_ERROR_INVALID_CONTEXT`; reopening in one process returns the same
//! address and counts references; closing unmaps at zero. IPC event handles
//! are not implemented. With `STREAMCOMM_STANDIN_REFUSE=ipc`, export and open
//! return `CUDA_ERROR_NOT_SUPPORTED` (after the context check), as where a
//! sandbox denies the driver IPC, and say so once on stderr.
//!
//! Every open mapping is recorded (a marker file in `/dev/shm`), so that the
//! exporter's `cuMemFree` can tell it frees memory a live process still has
//! mapped: undefined on a GPU, so said on stderr (fatal under
//! `STREAMCOMM_STANDIN_STRICT=1`).

use std::collections::BTreeMap;
use std::ffi::c_uint;
use std::sync::Mutex;

use crate::config::config;
use crate::context::lock;
use crate::device::{current, out};
use crate::error::{INVALID_CONTEXT, INVALID_VALUE};
use crate::guard::{entry, refused};
use crate::memory::{Kind, insert, region_of, remove};
use crate::shm::Segment;

const MAGIC: &[u8; 8] = b"SCSTNDIN";

/// `CUipcMemHandle`: 64 opaque bytes, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct IpcMemHandle {
    reserved: [u8; 64],
}

/// Imported mappings: (pid, serial) → (device address, references).
static OPENED: Mutex<BTreeMap<(u32, u64), (u64, usize)>> = Mutex::new(BTreeMap::new());

fn field(b: &[u8; 64], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

/// `cuIpcGetMemHandle`: only the base of a `cuMemAlloc` allocation;
/// `CUDA_ERROR_NOT_SUPPORTED` under `STREAMCOMM_STANDIN_REFUSE=ipc`.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuIpcGetMemHandle(handle: *mut IpcMemHandle, dptr: u64) -> u32 {
    entry("cuIpcGetMemHandle", || {
        current()?;
        if config().refuse.ipc {
            return Err(refused("cuIpcGetMemHandle", "ipc"));
        }
        let r = region_of(dptr).ok_or(INVALID_VALUE)?;
        let Kind::Device { serial } = r.kind else {
            return Err(INVALID_VALUE);
        };
        if r.base != dptr {
            return Err(INVALID_VALUE);
        }
        let mut b = [0u8; 64];
        b[..8].copy_from_slice(MAGIC);
        b[8..16].copy_from_slice(&u64::from(std::process::id()).to_le_bytes());
        b[16..24].copy_from_slice(&serial.to_le_bytes());
        b[24..32].copy_from_slice(&(r.len as u64).to_le_bytes());
        out(handle, IpcMemHandle { reserved: b })
    })
}

/// `cuIpcOpenMemHandle_v2`: flags must be `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`;
/// `CUDA_ERROR_NOT_SUPPORTED` under `STREAMCOMM_STANDIN_REFUSE=ipc`.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuIpcOpenMemHandle_v2(
    pdptr: *mut u64,
    handle: IpcMemHandle,
    flags: c_uint,
) -> u32 {
    entry("cuIpcOpenMemHandle_v2", || {
        let ctx = current()?;
        if config().refuse.ipc {
            return Err(refused("cuIpcOpenMemHandle_v2", "ipc"));
        }
        let b = &handle.reserved;
        if pdptr.is_null() || flags != 1 || &b[..8] != MAGIC {
            return Err(INVALID_VALUE);
        }
        let pid = field(b, 8) as u32;
        let key = (pid, field(b, 16));
        let len = field(b, 24) as usize;
        if pid == std::process::id() {
            return Err(INVALID_CONTEXT);
        }
        let mut opened = lock(&OPENED);
        if let Some((addr, refs)) = opened.get_mut(&key) {
            *refs += 1;
            return out(pdptr, *addr);
        }
        let seg = Segment::open(key.0, key.1, len)?;
        let addr = insert(len, Kind::Ipc { key }, seg, ctx.ordinal)?;
        opened.insert(key, (addr, 1));
        crate::shm::mark_import(key.0, key.1);
        out(pdptr, addr)
    })
}

/// `cuIpcCloseMemHandle`: unmaps when the last open of the handle closes.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuIpcCloseMemHandle(dptr: u64) -> u32 {
    entry("cuIpcCloseMemHandle", || {
        current()?;
        let r = region_of(dptr).ok_or(INVALID_VALUE)?;
        let Kind::Ipc { key } = r.kind else {
            return Err(INVALID_VALUE);
        };
        if r.base != dptr {
            return Err(INVALID_VALUE);
        }
        let mut opened = lock(&OPENED);
        let (_, refs) = opened.get_mut(&key).ok_or(INVALID_VALUE)?;
        *refs -= 1;
        if *refs == 0 {
            opened.remove(&key);
            remove(dptr, |r| matches!(r.kind, Kind::Ipc { .. }))?;
            crate::shm::unmark_import(key.0, key.1);
        }
        Ok(())
    })
}
