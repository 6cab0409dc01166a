//! Page-locked host memory: `cuMemHostAlloc` / `cuMemFreeHost`, host
//! registration, and device pointers for `DEVICEMAP` memory.
//!
//! Only memory allocated or registered with `CU_MEMHOSTALLOC_DEVICEMAP`
//! (`CU_MEMHOSTREGISTER_DEVICEMAP`) is device-accessible here (its device
//! address is its host address). The Programming Guide says that with unified
//! addressing all pinned memory is mapped; the stand-in follows the stricter
//! reading of `cuMemHostGetDevicePointer`'s documentation, so code that relies
//! on unmapped pinned memory being device-visible fails here.

use std::collections::BTreeMap;
use std::ffi::{c_uint, c_void};
use std::sync::{Arc, RwLock};

use crate::capture::check_unsafe;
use crate::config::config;
use crate::device::{current, out};
use crate::error::{
    HOST_MEMORY_ALREADY_REGISTERED, HOST_MEMORY_NOT_REGISTERED, INVALID_VALUE, OUT_OF_MEMORY, Res,
};
use crate::guard::{entry, refused};

/// `CU_MEMHOSTALLOC_DEVICEMAP` (also `CU_MEMHOSTREGISTER_DEVICEMAP`).
const DEVICEMAP: u32 = 2;

/// One pinned range.
struct Pinned {
    len: usize,
    flags: u32,
    /// True for `cuMemHostAlloc` memory (we own the mapping), false for
    /// `cuMemHostRegister`ed memory.
    allocated: bool,
}

static PINNED: RwLock<BTreeMap<usize, Arc<Pinned>>> = RwLock::new(BTreeMap::new());

fn find(addr: usize) -> Option<(usize, Arc<Pinned>)> {
    let map = PINNED.read().unwrap_or_else(|e| e.into_inner());
    let (base, p) = map.range(..=addr).next_back()?;
    (addr < base + p.len).then(|| (*base, p.clone()))
}

/// True when `[addr, addr + len)` is pinned memory (host side of copies).
pub(crate) fn is_pinned(addr: usize, len: usize) -> bool {
    find(addr).is_some_and(|(base, p)| addr + len <= base + p.len)
}

/// True when `[addr, addr + len)` is pinned memory mapped for the device.
pub(crate) fn is_device_mapped(addr: usize, len: usize) -> bool {
    find(addr).is_some_and(|(base, p)| p.flags & DEVICEMAP != 0 && addr + len <= base + p.len)
}

fn alloc(pp: *mut *mut c_void, bytesize: usize, flags: u32, name: &'static str) -> Res<()> {
    current()?;
    check_unsafe(name)?;
    if pp.is_null() || bytesize == 0 || flags & !0x7 != 0 {
        return Err(INVALID_VALUE);
    }
    // SAFETY: anonymous private mapping, checked for MAP_FAILED.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytesize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(OUT_OF_MEMORY);
    }
    if config().poison {
        // SAFETY: the mapping holds `bytesize` writable bytes.
        unsafe { std::ptr::write_bytes(p.cast::<u8>(), 0xA5, bytesize) };
    }
    PINNED.write().unwrap_or_else(|e| e.into_inner()).insert(
        p as usize,
        Arc::new(Pinned {
            len: bytesize,
            flags,
            allocated: true,
        }),
    );
    out(pp, p)
}

/// `cuMemHostAlloc`: flags PORTABLE | DEVICEMAP | WRITECOMBINED; refused
/// while capturing (900); contents poisoned with 0xA5.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemHostAlloc(
    pp: *mut *mut c_void,
    bytesize: usize,
    flags: c_uint,
) -> u32 {
    entry("cuMemHostAlloc", || {
        alloc(pp, bytesize, flags, "cuMemHostAlloc")
    })
}

/// `cuMemAllocHost_v2`: `cuMemHostAlloc` with flags 0.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemAllocHost_v2(pp: *mut *mut c_void, bytesize: usize) -> u32 {
    entry("cuMemAllocHost_v2", || {
        alloc(pp, bytesize, 0, "cuMemAllocHost_v2")
    })
}

/// `cuMemFreeHost`: only the base of `cuMemHostAlloc` memory; waits for the
/// current context's work first.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemFreeHost(p: *mut c_void) -> u32 {
    entry("cuMemFreeHost", || {
        let ctx = current()?;
        check_unsafe("cuMemFreeHost")?;
        match find(p as usize) {
            Some((base, pin)) if base == p as usize && pin.allocated => {}
            _ => return Err(INVALID_VALUE),
        }
        ctx.wait_all();
        let pin = PINNED
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(p as usize))
            .ok_or(INVALID_VALUE)?;
        // SAFETY: unmaps exactly the mapping made by `alloc`.
        unsafe { libc::munmap(p, pin.len) };
        Ok(())
    })
}

/// `cuMemHostGetDevicePointer_v2`: flags must be 0; only `DEVICEMAP` memory
/// (else `CUDA_ERROR_INVALID_VALUE`); the device pointer equals `p`.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemHostGetDevicePointer_v2(
    pdptr: *mut u64,
    p: *mut c_void,
    flags: c_uint,
) -> u32 {
    entry("cuMemHostGetDevicePointer_v2", || {
        current()?;
        if flags != 0 || !is_device_mapped(p as usize, 1) {
            return Err(INVALID_VALUE);
        }
        out(pdptr, p as u64)
    })
}

/// `cuMemHostGetFlags`.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemHostGetFlags(pflags: *mut c_uint, p: *mut c_void) -> u32 {
    entry("cuMemHostGetFlags", || {
        current()?;
        let (_, pin) = find(p as usize).ok_or(INVALID_VALUE)?;
        out(pflags, pin.flags)
    })
}

/// `cuMemHostRegister_v2`: pins an existing host range (flags PORTABLE 1,
/// DEVICEMAP 2, IOMEMORY 4, READ_ONLY 8); overlapping a pinned range is
/// `CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED`; refused while capturing.
/// Under `STREAMCOMM_STANDIN_REFUSE=host-register`, every call (after the
/// context check) is `CUDA_ERROR_NOT_SUPPORTED`, said once on stderr.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemHostRegister_v2(
    p: *mut c_void,
    bytesize: usize,
    flags: c_uint,
) -> u32 {
    entry("cuMemHostRegister_v2", || {
        current()?;
        if config().refuse.host_register {
            return Err(refused("cuMemHostRegister_v2", "host-register"));
        }
        check_unsafe("cuMemHostRegister_v2")?;
        if p.is_null() || bytesize == 0 || flags & !0xf != 0 || flags & 0x4 != 0 {
            return Err(INVALID_VALUE);
        }
        let start = p as usize;
        let mut map = PINNED.write().unwrap_or_else(|e| e.into_inner());
        let overlaps = map
            .range(..start + bytesize)
            .next_back()
            .is_some_and(|(base, pin)| base + pin.len > start);
        if overlaps {
            return Err(HOST_MEMORY_ALREADY_REGISTERED);
        }
        map.insert(
            start,
            Arc::new(Pinned {
                len: bytesize,
                flags,
                allocated: false,
            }),
        );
        Ok(())
    })
}

/// `cuMemHostUnregister`: only the exact base of a registered range.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemHostUnregister(p: *mut c_void) -> u32 {
    entry("cuMemHostUnregister", || {
        current()?;
        check_unsafe("cuMemHostUnregister")?;
        let mut map = PINNED.write().unwrap_or_else(|e| e.into_inner());
        match map.get(&(p as usize)) {
            Some(pin) if !pin.allocated => {
                map.remove(&(p as usize));
                Ok(())
            }
            _ => Err(HOST_MEMORY_NOT_REGISTERED),
        }
    })
}
