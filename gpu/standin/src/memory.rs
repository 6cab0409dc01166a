//! Device memory and the device address space.
//!
//! Device addresses come from a large `PROT_NONE` reservation, so the host
//! cannot dereference a device pointer (it faults, as with GPU memory), and
//! addresses are never reused, so work on freed memory is a device fault
//! (`CUDA_ERROR_ILLEGAL_ADDRESS`) rather than silent aliasing. The bytes live
//! in a shared-memory segment per allocation ([`crate::shm`]); every device
//! access translates the address through [`resolve`], which also accepts
//! host-mapped pinned memory (whose device address equals its host address,
//! as on devices with `CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM`). VMM
//! address reservations ([`reserve_aligned`]) come from the same space and
//! hold no region until `cuMemMap` registers one where it maps
//! ([`insert_at`]; module `vmm`).

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use crate::capture::check_unsafe;
use crate::device::{current, out};
use crate::error::{INVALID_VALUE, OUT_OF_MEMORY, Res};
use crate::guard::entry;
use crate::pinned;
use crate::shm::Segment;

/// Bytes of address space reserved for device addresses.
const SPACE: usize = 1 << 40;
/// Unmapped gap after each allocation, so overruns fault.
const GAP: usize = 1 << 16;

/// What backs a range of device addresses.
pub(crate) enum Kind {
    /// A `cuMemAlloc` allocation of this process, with its segment serial.
    Device {
        /// Serial of the shared-memory segment.
        serial: u64,
    },
    /// A peer's allocation opened with `cuIpcOpenMemHandle`.
    Ipc {
        /// Exporting process and segment serial.
        key: (u32, u64),
    },
    /// A stream-ordered allocation (`cuMemAllocAsync`) from the device's
    /// default memory pool.
    Pool,
    /// A VMM mapping (`cuMemMap`) of a `cuMemCreate` allocation or of one
    /// imported with `cuMemImportFromShareableHandle` (module `vmm`).
    Vmm {
        /// True when the allocation was exported by another process: its
        /// bytes are another process's device memory.
        imported: bool,
        /// The handle, the allocation and the access granted to it.
        map: crate::vmm::Mapping,
    },
}

/// [`Region::state`]: allocated by a `cuMemAllocAsync` its stream has not
/// reached yet (device work touching it faults).
pub(crate) const PENDING: u8 = 0;
/// [`Region::state`]: usable by device work.
pub(crate) const LIVE: u8 = 1;
/// [`Region::state`]: freed (work still holding its mapping faults).
pub(crate) const FREED: u8 = 2;

/// A range of device addresses and the host mapping behind it.
pub(crate) struct Region {
    /// First device address.
    pub base: u64,
    /// Length in bytes as requested.
    pub len: usize,
    /// What it is.
    pub kind: Kind,
    /// The ordinal of the device whose context made it.
    pub ordinal: usize,
    /// [`PENDING`], [`LIVE`] or [`FREED`] (only stream-ordered allocations
    /// start pending).
    pub state: AtomicU8,
    /// Set once a `cuMemFreeAsync` of it has been enqueued (a second one is
    /// a double free).
    pub free_queued: AtomicBool,
    seg: Segment,
}

/// A translated device range; keeps its mapping alive while held.
pub(crate) struct Mapped {
    region: Option<Arc<Region>>,
    /// Host address of the first byte.
    pub ptr: *mut u8,
}

impl Mapped {
    /// True when the range lies in an imported CUDA IPC mapping or a VMM
    /// mapping of an allocation another process exported: another process's
    /// device memory.
    pub(crate) fn imported(&self) -> bool {
        self.region
            .as_ref()
            .is_some_and(|r| matches!(r.kind, Kind::Ipc { .. } | Kind::Vmm { imported: true, .. }))
    }

    /// Why device work may not touch this range now, if it may not: a
    /// stream-ordered allocation its stream has not reached, an IPC
    /// mapping whose exporter freed the memory or exited, or a VMM mapping
    /// unmapped since, or without read-write access for its device
    /// (`cuMemSetAccess`). A VMM mapping of an imported allocation never
    /// becomes unusable because of its exporter: the mapping holds the
    /// memory.
    pub(crate) fn unusable(&self) -> Option<String> {
        let r = self.region.as_ref()?;
        match r.state.load(Ordering::Acquire) {
            PENDING => {
                return Some(
                    "it belongs to a cuMemAllocAsync allocation its stream has not reached".into(),
                );
            }
            FREED if matches!(r.kind, Kind::Vmm { .. }) => {
                return Some("its VMM mapping has been unmapped (cuMemUnmap)".into());
            }
            FREED => return Some("it has been freed".into()),
            _ => {}
        }
        match &r.kind {
            Kind::Ipc { key: (pid, serial) } => crate::shm::exporter_gone(*pid, *serial),
            Kind::Vmm { map, .. } => map.inaccessible(r.ordinal),
            _ => None,
        }
    }
}

static REGIONS: RwLock<BTreeMap<u64, Arc<Region>>> = RwLock::new(BTreeMap::new());

fn space() -> Res<usize> {
    static BASE: OnceLock<usize> = OnceLock::new();
    let base = *BASE.get_or_init(|| {
        // SAFETY: reserves address space only (no access, no backing).
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                SPACE,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED { 0 } else { p as usize }
    });
    if base == 0 {
        Err(OUT_OF_MEMORY)
    } else {
        Ok(base)
    }
}

/// True when `addr` lies in the device address space (not host memory).
pub(crate) fn is_device_address(addr: usize) -> bool {
    space().is_ok_and(|base| (base..base + SPACE).contains(&addr))
}

/// Reserves `len` bytes of fresh device addresses whose first is a
/// multiple of `align` (a power of two): a VMM address reservation
/// (`cuMemAddressReserve`), which stays unmapped until `cuMemMap` maps
/// parts of it ([`insert_at`]). Never reused, as every device address.
pub(crate) fn reserve_aligned(len: usize, align: usize) -> Res<u64> {
    let padded = len.checked_add(align).ok_or(OUT_OF_MEMORY)?;
    let base = reserve(padded)?;
    let mask = align as u64 - 1;
    Ok((base + mask) & !mask)
}

/// Reserves `len` bytes of fresh device addresses.
fn reserve(len: usize) -> Res<u64> {
    static NEXT: AtomicUsize = AtomicUsize::new(GAP);
    let base = space()?;
    let step = len.div_ceil(GAP).max(1) * GAP + GAP;
    let offset = NEXT.fetch_add(step, Ordering::Relaxed);
    if offset + step > SPACE {
        return Err(OUT_OF_MEMORY);
    }
    Ok((base + offset) as u64)
}

fn regions_read() -> std::sync::RwLockReadGuard<'static, BTreeMap<u64, Arc<Region>>> {
    REGIONS.read().unwrap_or_else(|e| e.into_inner())
}

fn regions_write() -> std::sync::RwLockWriteGuard<'static, BTreeMap<u64, Arc<Region>>> {
    REGIONS.write().unwrap_or_else(|e| e.into_inner())
}

/// The region containing device address `addr`.
pub(crate) fn region_of(addr: u64) -> Option<Arc<Region>> {
    let map = regions_read();
    let (_, r) = map.range(..=addr).next_back()?;
    (addr < r.base + r.len as u64).then(|| r.clone())
}

/// Translates `len` bytes of device-accessible memory at `addr` (device
/// memory, an IPC mapping, or host-mapped pinned memory); the whole range must
/// lie in one allocation.
pub(crate) fn resolve(addr: u64, len: usize) -> Res<Mapped> {
    if let Some(r) = region_of(addr) {
        if addr
            .checked_add(len as u64)
            .is_some_and(|end| end <= r.base + r.len as u64)
        {
            let ptr = r.seg.host().wrapping_add((addr - r.base) as usize);
            return Ok(Mapped {
                region: Some(r),
                ptr,
            });
        }
        return Err(INVALID_VALUE);
    }
    if pinned::is_device_mapped(addr as usize, len) {
        return Ok(Mapped {
            region: None,
            ptr: addr as *mut u8,
        });
    }
    Err(INVALID_VALUE)
}

/// Registers a new region of device `ordinal` backed by `seg` and returns
/// its device address; stream-ordered allocations start [`PENDING`].
pub(crate) fn insert(len: usize, kind: Kind, seg: Segment, ordinal: usize) -> Res<u64> {
    let base = reserve(seg.len())?;
    let state = if matches!(kind, Kind::Pool) {
        PENDING
    } else {
        LIVE
    };
    let region = Arc::new(Region {
        base,
        len,
        kind,
        ordinal,
        state: AtomicU8::new(state),
        free_queued: AtomicBool::new(false),
        seg,
    });
    regions_write().insert(base, region);
    Ok(base)
}

/// Registers a new region at `base` (inside a VMM address reservation, not
/// overlapping another region) of device `ordinal`, backed by `seg`; live
/// at once.
pub(crate) fn insert_at(base: u64, kind: Kind, seg: Segment, ordinal: usize) -> Res<()> {
    let len = seg.len();
    let end = base.checked_add(len as u64).ok_or(INVALID_VALUE)?;
    let mut map = regions_write();
    let before = map
        .range(..end)
        .next_back()
        .is_some_and(|(_, r)| r.base + r.len as u64 > base);
    if before {
        return Err(INVALID_VALUE);
    }
    let region = Arc::new(Region {
        base,
        len,
        kind,
        ordinal,
        state: AtomicU8::new(LIVE),
        free_queued: AtomicBool::new(false),
        seg,
    });
    map.insert(base, region);
    Ok(())
}

/// Unregisters the region starting at `base` if `pick` accepts it.
pub(crate) fn remove(base: u64, pick: impl FnOnce(&Region) -> bool) -> Res<Arc<Region>> {
    let mut map = regions_write();
    match map.get(&base) {
        Some(r) if pick(r) => Ok(map.remove(&base).expect("present")),
        _ => Err(INVALID_VALUE),
    }
}

/// `cuMemAlloc_v2`: refused while capturing (900); size 0 is
/// `CUDA_ERROR_INVALID_VALUE`; contents are not zeroed (poisoned with 0xA5).
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemAlloc_v2(dptr: *mut u64, bytesize: usize) -> u32 {
    entry("cuMemAlloc_v2", || {
        let ctx = current()?;
        check_unsafe("cuMemAlloc_v2")?;
        if dptr.is_null() || bytesize == 0 {
            return Err(INVALID_VALUE);
        }
        let (seg, serial) = Segment::create(bytesize)?;
        let base = insert(bytesize, Kind::Device { serial }, seg, ctx.ordinal)?;
        out(dptr, base)
    })
}

/// True for the base of an allocation this process made (`cuMemAlloc` or
/// `cuMemAllocAsync`), which the free calls accept.
pub(crate) fn is_own_base(r: &Region, dptr: u64) -> bool {
    r.base == dptr && matches!(r.kind, Kind::Device { .. } | Kind::Pool)
}

/// `cuMemFree_v2`: only the base of a `cuMemAlloc` (or `cuMemAllocAsync`)
/// allocation not already freed; waits for all work of the context first
/// (for ever, if a stream never finishes).
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemFree_v2(dptr: u64) -> u32 {
    entry("cuMemFree_v2", || {
        let ctx = current()?;
        check_unsafe("cuMemFree_v2")?;
        match region_of(dptr) {
            Some(r) if is_own_base(&r, dptr) && !r.free_queued.swap(true, Ordering::AcqRel) => {
                if let Kind::Device { serial } = r.kind {
                    freeing_exported(dptr, serial);
                }
            }
            _ => return Err(INVALID_VALUE),
        }
        ctx.wait_all();
        let r = remove(dptr, |r| is_own_base(r, dptr))?;
        r.state.store(FREED, Ordering::Release);
        crate::pool::released(&r);
        Ok(())
    })
}

/// Freeing memory that another live process still has mapped through CUDA
/// IPC is undefined on a GPU (the importer must close its mapping first):
/// said once on stderr, or fatal in strict mode.
fn freeing_exported(dptr: u64, serial: u64) {
    let importers = crate::shm::live_importers(serial);
    if importers.is_empty() {
        return;
    }
    let line = format!(
        "cuMemFree_v2 of {dptr:#x}, which process(es) {importers:?} still have mapped through \
         CUDA IPC: undefined on a GPU (importers must close their mappings first)"
    );
    if crate::config::config().strict {
        crate::guard::say(&format!("{line}; STREAMCOMM_STANDIN_STRICT=1: aborting"));
        std::process::abort();
    }
    crate::guard::say_once(format!("free-mapped:{dptr:#x}"), &line);
}

/// `cuMemGetAddressRange_v2`: base and size of the allocation holding `dptr`.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemGetAddressRange_v2(
    pbase: *mut u64,
    psize: *mut usize,
    dptr: u64,
) -> u32 {
    entry("cuMemGetAddressRange_v2", || {
        current()?;
        let r = region_of(dptr).ok_or(crate::error::NOT_FOUND)?;
        if !pbase.is_null() {
            out(pbase, r.base)?;
        }
        if !psize.is_null() {
            out(psize, r.len)?;
        }
        Ok(())
    })
}

/// A host pointer argument; refuses device addresses passed as host memory.
pub(crate) fn host_ptr(p: *const c_void) -> Res<usize> {
    if p.is_null() || is_device_address(p as usize) {
        return Err(INVALID_VALUE);
    }
    Ok(p as usize)
}
