//! CUDA's virtual memory management (VMM): physical allocations
//! (`cuMemCreate`), address reservations (`cuMemAddressReserve`), mappings
//! between them (`cuMemMap`) with per-device access (`cuMemSetAccess`), and
//! export and import between processes as POSIX file descriptors
//! (`cuMemExportToShareableHandle`, `cuMemImportFromShareableHandle`): what
//! NCCL does with its cuMem buffers.
//!
//! **Memory.** The physical memory behind a handle is an anonymous, sealed
//! memfd (shared memory with no name; `F_SEAL_SHRINK | F_SEAL_GROW |
//! F_SEAL_SEAL`) of the allocation's size plus one page, which holds a
//! header naming it a stand-in VMM allocation (its size, exporting process,
//! device, handle types and GPUDirect RDMA flag). A handle holds one
//! descriptor of it, each mapping an `mmap` of it ([`Segment::map_fd`]), and
//! an export is a fresh descriptor of it (`F_DUPFD_CLOEXEC`) that the caller
//! owns and closes. So the memory lives while a handle, a mapping or an
//! exported descriptor does, in any process: unlike legacy IPC
//! (`exporter_gone`), an importer's mapping stays valid after the exporter
//! unmapped, released, or exited, as on a GPU. An import checks the
//! descriptor's seals and header (anything else is
//! `CUDA_ERROR_INVALID_VALUE`, said on stderr) and holds a duplicate of
//! it; the caller still owns and closes the one it passed. Contents start
//! poisoned (0xA5) unless `STREAMCOMM_STANDIN_POISON=0`, as `cuMemAlloc`'s.
//!
//! **Rules** (the driver API reference's, and where it is silent the
//! stricter reading; each refusal says why once on stderr):
//! - granularity 2 MiB, minimum and recommended (`cuMemGetAllocationGranularity`);
//!   `cuMemCreate` sizes, `cuMemMap` addresses, sizes and offsets must be
//!   multiples of it; reservations a multiple of the host page size, at an
//!   address aligned to 2 MiB or the requested power of two; the address
//!   hint is only a hint, and ignored (said once);
//! - `prop`: type `PINNED`, location a device of this process, handle types
//!   `NONE` or `POSIX_FILE_DESCRIPTOR` (`WIN32`, `WIN32_KMT` and `FABRIC`
//!   are `CUDA_ERROR_NOT_SUPPORTED`, named), `win32HandleMetaData` NULL,
//!   `compressionType` a hint (never granted), `gpuDirectRDMACapable` only
//!   where the device reports `GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED`
//!   (with GPUDirect RDMA: the `h200` and `h100` profiles), `usage` 0, the
//!   reserved bytes 0; flags arguments 0;
//! - `cuMemMap` maps inside one reservation, over no other mapping, a live
//!   handle with `offset + size` within its allocation; a new mapping has
//!   no access: device work touching it faults (`CUDA_ERROR_ILLEGAL_ADDRESS`,
//!   sticky) until `cuMemSetAccess` gives its device `PROT_READWRITE`
//!   (`PROT_NONE` takes it away; read-only access is not modelled:
//!   `CUDA_ERROR_NOT_SUPPORTED`). `cuMemSetAccess` takes whole mappings,
//!   back to back; the stand-in does not know which device runs a piece of
//!   work, so it checks the access of the mapping's own device (the
//!   allocation's location; for an imported allocation, the importer's
//!   device when it imported);
//! - `cuMemUnmap` takes exactly the range one `cuMemMap` mapped; it does
//!   not wait for work in flight (the driver does not promise to, so callers
//!   synchronise first, as PyTorch and NCCL do): work that reaches the range
//!   afterwards faults, as does work touching reserved but unmapped
//!   addresses (copies naming them are refused at the call with
//!   `CUDA_ERROR_INVALID_VALUE`, as for freed memory). The range becomes
//!   reservation again and may be mapped anew;
//! - `cuMemAddressFree` takes exactly one reservation, and none of it may be
//!   mapped (unmap first); freed addresses are never reused;
//! - `cuMemRelease` of a handle that is not live (never made, or released
//!   as many times as it was created, imported or retained) is
//!   `CUDA_ERROR_INVALID_VALUE` (undefined behaviour on the driver); the
//!   physical memory goes when the last handle reference, mapping and
//!   exported descriptor goes, in any order;
//! - export only of a handle created with `POSIX_FILE_DESCRIPTOR` in its
//!   requested handle types, and not of an imported one (not modelled).
//!
//! Also here: `cuMemGetAccess`, `cuMemGetAllocationPropertiesFromHandle`
//! and `cuMemRetainAllocationHandle` (any address inside a mapping; the
//! same handle value, one more reference). Every entry point needs a current
//! context (the stand-in's rule: the sticky error of a faulted context
//! refuses them too, as it does `cuMemFree`); none is refused by stream
//! capture. `STREAMCOMM_STANDIN_REFUSE=vmm` makes both attributes read 0 and
//! `cuMemCreate` refuse, as a driver without POSIX-descriptor VMM would. Device work spanning
//! two adjacent mappings is not modelled: it must lie in one mapping.
//! Reading an imported mapping of another process's allocation counts as
//! imported bytes (module `counters`).

use std::collections::BTreeMap;
use std::ffi::{c_int, c_uint, c_ulonglong, c_void};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::config::config;
use crate::context::lock;
use crate::device::{current, out};
use crate::error::{
    CUresult, INVALID_VALUE, NOT_SUPPORTED, OPERATING_SYSTEM, OUT_OF_MEMORY, Res, describe,
};
use crate::guard::{entry, say_once};
use crate::memory::{FREED, Kind, insert_at, region_of, remove, reserve_aligned};
use crate::shm::Segment;

mod access;
mod memfd;
mod sharing;

use memfd::{Header, check_export, errno, make_memfd, page_size};

/// The allocation granularity, minimum and recommended: 2 MiB, as GPUs
/// report it.
pub(crate) const GRANULARITY: usize = 2 << 20;

/// `CU_MEM_ALLOCATION_TYPE_PINNED`.
const TYPE_PINNED: u32 = 1;
/// `CU_MEM_ALLOCATION_TYPE_MANAGED` (CUDA 13).
const TYPE_MANAGED: u32 = 2;
/// `CU_MEM_LOCATION_TYPE_DEVICE`.
const LOCATION_DEVICE: u32 = 1;
/// `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`.
const HANDLE_POSIX_FD: u32 = 1;
/// `CU_MEM_ACCESS_FLAGS_PROT_NONE`.
const PROT_NONE: u32 = 0;
/// `CU_MEM_ACCESS_FLAGS_PROT_READ`.
const PROT_READ: u32 = 1;
/// `CU_MEM_ACCESS_FLAGS_PROT_READWRITE`.
const PROT_READWRITE: u32 = 3;

/// `CUmemLocation`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct MemLocation {
    /// `CUmemLocationType`.
    kind: u32,
    /// The device ordinal, for `CU_MEM_LOCATION_TYPE_DEVICE`.
    id: c_int,
}

/// `CUmemAllocationProp::allocFlags`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct AllocFlags {
    compression_type: u8,
    gpu_direct_rdma_capable: u8,
    usage: u16,
    reserved: [u8; 4],
}

/// `CUmemAllocationProp`, as `cuda.h` lays it out.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct AllocationProp {
    /// `CUmemAllocationType`.
    kind: u32,
    /// `CUmemAllocationHandleType` bits.
    requested_handle_types: u32,
    location: MemLocation,
    win32_handle_meta_data: *mut c_void,
    alloc_flags: AllocFlags,
}

/// `CUmemAccessDesc`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct AccessDesc {
    location: MemLocation,
    /// `CUmemAccess_flags`.
    flags: u32,
}

const _: () = {
    assert!(size_of::<MemLocation>() == 8);
    assert!(size_of::<AllocFlags>() == 8);
    assert!(size_of::<AllocationProp>() == 32);
    assert!(std::mem::offset_of!(AllocationProp, requested_handle_types) == 4);
    assert!(std::mem::offset_of!(AllocationProp, location) == 8);
    assert!(std::mem::offset_of!(AllocationProp, win32_handle_meta_data) == 16);
    assert!(std::mem::offset_of!(AllocationProp, alloc_flags) == 24);
    assert!(std::mem::offset_of!(AllocFlags, usage) == 2);
    assert!(size_of::<AccessDesc>() == 12);
    assert!(std::mem::offset_of!(AccessDesc, flags) == 8);
};

/// The memfd header's first bytes.
const MAGIC: &[u8; 8] = b"SCVMM001";
/// Bytes after the allocation that hold the header (one page).
const HEADER_SPACE: usize = 4096;
/// Bytes of the header in use.
const HEADER_LEN: usize = 32;
/// The memfd's name (shown in `/proc/<pid>/fd`).
const MEMFD_NAME: &std::ffi::CStr = c"sc-cuda-standin-vmm";
/// The seals every stand-in VMM memfd carries.
const SEALS: c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
/// Handle tag of allocation handles (as module `handles` tags objects).
const HANDLE_TAG: u64 = 0x1A;

/// The physical memory behind one or more handles: a descriptor of its
/// memfd, closed when the last handle reference and mapping go.
pub(crate) struct Alloc {
    fd: OwnedFd,
    /// Bytes (a multiple of [`GRANULARITY`]).
    size: usize,
    /// The device it belongs to (for an import, the importer's device).
    ordinal: usize,
    /// The requested handle types it was created with.
    handle_types: u32,
    /// `allocFlags.gpuDirectRDMACapable`.
    gdr: bool,
    /// Exported by another process (its bytes are another process's memory).
    foreign: bool,
    /// Came from `cuMemImportFromShareableHandle`.
    imported: bool,
}

/// What a VMM region ([`Kind::Vmm`]) holds: the handle it was mapped with,
/// the allocation (kept alive by the mapping) and the access granted.
pub(crate) struct Mapping {
    handle: u64,
    alloc: Arc<Alloc>,
    /// Bit `d`: device `d` has read-write access.
    access: AtomicU32,
}

impl Mapping {
    /// Why device `ordinal`'s work may not touch the mapping, if it may not.
    pub(crate) fn inaccessible(&self, ordinal: usize) -> Option<String> {
        if self.access.load(Ordering::Acquire) & (1 << ordinal) != 0 {
            return None;
        }
        Some(format!(
            "no cuMemSetAccess has given device {ordinal} read-write access to its VMM mapping"
        ))
    }

    /// True when the allocation was created GPUDirect RDMA capable.
    pub(crate) fn gdr(&self) -> bool {
        self.alloc.gdr
    }
}

/// A live handle: its allocation and references (creation or import, and
/// each `cuMemRetainAllocationHandle`); gone at zero.
struct Entry {
    alloc: Arc<Alloc>,
    refs: usize,
}

static HANDLES: Mutex<BTreeMap<u64, Entry>> = Mutex::new(BTreeMap::new());

/// Reservations and mappings of this process: base → size.
struct State {
    reserved: BTreeMap<u64, usize>,
    mapped: BTreeMap<u64, usize>,
}

static STATE: Mutex<State> = Mutex::new(State {
    reserved: BTreeMap::new(),
    mapped: BTreeMap::new(),
});

/// The two kinds of range in [`State`]: each is taken back whole, a
/// reservation by `cuMemAddressFree` and a mapping by `cuMemUnmap`.
#[derive(Clone, Copy)]
enum Range {
    Reservation,
    Mapping,
}

/// Locks [`STATE`] for `name`, which takes back the whole `kind` range at
/// `ptr`: refused unless one starts there and is `size` bytes long.
fn lock_whole(name: &str, kind: Range, ptr: u64, size: usize) -> Res<MutexGuard<'static, State>> {
    let st = lock(&STATE);
    let (ranges, noun, maker) = match kind {
        Range::Reservation => (&st.reserved, "reservation", "cuMemAddressReserve"),
        Range::Mapping => (&st.mapped, "mapping", "cuMemMap"),
    };
    match ranges.get(&ptr) {
        Some(&len) if len == size => {}
        Some(&len) => {
            return Err(refuse(
                INVALID_VALUE,
                name,
                format!(
                    "size {size} is not the size of the {noun} at {ptr:#x} ({len}): one {name} \
                     per {maker} range"
                ),
            ));
        }
        None => {
            return Err(refuse(
                INVALID_VALUE,
                name,
                format!("{ptr:#x} is not the start of a live {maker} {noun}"),
            ));
        }
    }
    Ok(st)
}

/// Refuses `name` with `code` (`CUDA_ERROR_INVALID_VALUE`, or
/// `CUDA_ERROR_NOT_SUPPORTED` for what the stand-in does not model), saying
/// why once.
fn refuse(code: CUresult, name: &str, why: impl AsRef<str>) -> CUresult {
    let why = why.as_ref();
    let code_name = describe(code).map_or_else(
        || code.to_string(),
        |(n, _)| n.to_string_lossy().into_owned(),
    );
    say_once(
        format!("vmm:{name}:{why}"),
        &format!("{name}: {why}: {code_name}"),
    );
    code
}

/// Runs the body of VMM entry point `name` under [`entry`], given its name,
/// once [`current`] finds a usable context (its error otherwise).
fn vmm_entry(name: &'static str, body: impl FnOnce(&'static str) -> Res<()>) -> CUresult {
    entry(name, || {
        current()?;
        body(name)
    })
}

/// Refuses a NULL `what` pointer (`p`) for `name`.
fn not_null<T>(name: &str, what: &str, p: *const T) -> Res<()> {
    if p.is_null() {
        return Err(refuse(INVALID_VALUE, name, format!("{what} is NULL")));
    }
    Ok(())
}

/// Refuses `flags` other than 0 for `name` (every VMM call's flags).
fn flags_zero(name: &str, flags: c_ulonglong) -> Res<()> {
    if flags != 0 {
        return Err(refuse(
            INVALID_VALUE,
            name,
            format!("flags {flags:#x} are not 0"),
        ));
    }
    Ok(())
}

/// Runs `f` on the `cuMemMap` mapping holding device address `at`; refused
/// for `name` where none does.
fn with_mapping<T>(name: &str, at: u64, f: impl FnOnce(&Mapping) -> T) -> Res<T> {
    let r = region_of(at)
        .ok_or_else(|| refuse(INVALID_VALUE, name, format!("{at:#x} is not mapped")))?;
    let Kind::Vmm { map, .. } = &r.kind else {
        return Err(refuse(
            INVALID_VALUE,
            name,
            format!("{at:#x} is not in a cuMemMap mapping"),
        ));
    };
    Ok(f(map))
}

/// A new close-on-exec descriptor of the open file `fd`, which stays open;
/// `CUDA_ERROR_OPERATING_SYSTEM` for `name`, said once, where that fails.
fn dup_fd(name: &str, fd: c_int) -> Res<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC touches no memory of ours; a bad `fd` fails.
    let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if dup < 0 {
        say_once(
            format!("vmm:{name}:dup"),
            &format!(
                "{name}: duplicating the descriptor failed ({}): CUDA_ERROR_OPERATING_SYSTEM",
                errno()
            ),
        );
        return Err(OPERATING_SYSTEM);
    }
    // SAFETY: a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(dup) })
}

/// The name of a handle type other than POSIX_FILE_DESCRIPTOR.
fn handle_type_name(bit: u32) -> &'static str {
    match bit {
        2 => "CU_MEM_HANDLE_TYPE_WIN32",
        4 => "CU_MEM_HANDLE_TYPE_WIN32_KMT",
        8 => "CU_MEM_HANDLE_TYPE_FABRIC",
        _ => "an unknown handle type",
    }
}

/// Checks requested handle types: NONE or POSIX_FILE_DESCRIPTOR.
fn check_requested(name: &str, types: u32) -> Res<()> {
    if types & !0xF != 0 {
        return Err(refuse(
            INVALID_VALUE,
            name,
            format!("requestedHandleTypes {types:#x} has bits no CUmemAllocationHandleType has"),
        ));
    }
    let others: Vec<&str> = [2, 4, 8]
        .into_iter()
        .filter(|b| types & b != 0)
        .map(handle_type_name)
        .collect();
    if !others.is_empty() {
        return Err(refuse(
            NOT_SUPPORTED,
            name,
            format!(
                "requested handle type(s) {} (only CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR is)",
                others.join(", ")
            ),
        ));
    }
    Ok(())
}

/// Checks the handle type of an export or import: POSIX_FILE_DESCRIPTOR.
fn check_shareable(name: &str, handle_type: c_uint) -> Res<()> {
    match handle_type {
        HANDLE_POSIX_FD => Ok(()),
        2 | 4 | 8 => Err(refuse(
            NOT_SUPPORTED,
            name,
            format!(
                "handle type {} (only CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR is)",
                handle_type_name(handle_type)
            ),
        )),
        other => Err(refuse(
            INVALID_VALUE,
            name,
            format!("handle type {other} is not one shareable handle type"),
        )),
    }
}

/// Checks a location: a device of this process.
fn check_device(name: &str, what: &str, loc: MemLocation) -> Res<usize> {
    match loc.kind {
        LOCATION_DEVICE => {}
        2..=4 => {
            return Err(refuse(
                NOT_SUPPORTED,
                name,
                format!("{what} is a host location (only device locations are modelled)"),
            ));
        }
        other => {
            return Err(refuse(
                INVALID_VALUE,
                name,
                format!("{what} has type {other}, not CU_MEM_LOCATION_TYPE_DEVICE"),
            ));
        }
    }
    match usize::try_from(loc.id) {
        Ok(d) if d < config().devices => Ok(d),
        _ => Err(refuse(
            INVALID_VALUE,
            name,
            format!("{what} names device {}, which does not exist", loc.id),
        )),
    }
}

/// GPUDirect RDMA on VMM allocations (`GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED`).
pub(crate) fn rdma_with_vmm() -> c_int {
    crate::pointer::rdma_supported()
}

/// Reads and checks an allocation property structure; returns it and its
/// device.
fn read_prop(name: &str, prop: *const AllocationProp) -> Res<(AllocationProp, usize)> {
    not_null(name, "prop", prop)?;
    // SAFETY: non-null; the caller passes a valid CUmemAllocationProp.
    let p = unsafe { prop.read() };
    match p.kind {
        TYPE_PINNED => {}
        TYPE_MANAGED => {
            return Err(refuse(
                NOT_SUPPORTED,
                name,
                "prop.type CU_MEM_ALLOCATION_TYPE_MANAGED",
            ));
        }
        other => {
            return Err(refuse(
                INVALID_VALUE,
                name,
                format!("prop.type {other} is not CU_MEM_ALLOCATION_TYPE_PINNED"),
            ));
        }
    }
    let ordinal = check_device(name, "prop.location", p.location)?;
    check_requested(name, p.requested_handle_types)?;
    if !p.win32_handle_meta_data.is_null() {
        return Err(refuse(
            INVALID_VALUE,
            name,
            "prop.win32HandleMetaData is not NULL (it is for Windows handle types)",
        ));
    }
    let f = p.alloc_flags;
    if f.compression_type > 1 {
        return Err(refuse(
            INVALID_VALUE,
            name,
            format!(
                "prop.allocFlags.compressionType {} is no CUmemAllocationCompType",
                f.compression_type
            ),
        ));
    }
    match f.gpu_direct_rdma_capable {
        0 => {}
        1 if rdma_with_vmm() == 1 => {}
        1 => {
            return Err(refuse(
                INVALID_VALUE,
                name,
                "prop.allocFlags.gpuDirectRDMACapable is set, but the device reports \
                 GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED = 0",
            ));
        }
        other => {
            return Err(refuse(
                INVALID_VALUE,
                name,
                format!("prop.allocFlags.gpuDirectRDMACapable is {other}, not 0 or 1"),
            ));
        }
    }
    if f.usage != 0 {
        return Err(refuse(
            NOT_SUPPORTED,
            name,
            format!(
                "prop.allocFlags.usage {} (tile pools, decompression)",
                f.usage
            ),
        ));
    }
    if f.reserved != [0; 4] {
        return Err(refuse(
            INVALID_VALUE,
            name,
            "prop.allocFlags.reserved is not zero",
        ));
    }
    Ok((p, ordinal))
}

/// Registers a new handle for `alloc` with one reference.
fn register(alloc: Arc<Alloc>) -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let h = (HANDLE_TAG << 44) | (NEXT.fetch_add(1, Ordering::Relaxed) << 4);
    lock(&HANDLES).insert(h, Entry { alloc, refs: 1 });
    h
}

/// The allocation of a live handle.
fn live(name: &str, handle: u64) -> Res<Arc<Alloc>> {
    lock(&HANDLES)
        .get(&handle)
        .map(|e| e.alloc.clone())
        .ok_or_else(|| {
            refuse(
                INVALID_VALUE,
                name,
                format!("{handle:#x} is not a live allocation handle"),
            )
        })
}

/// `cuMemGetAllocationGranularity`: 2 MiB for MINIMUM (0) and RECOMMENDED
/// (1); `prop` must describe an allocation `cuMemCreate` would accept.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemGetAllocationGranularity(
    granularity: *mut usize,
    prop: *const AllocationProp,
    option: c_uint,
) -> u32 {
    vmm_entry("cuMemGetAllocationGranularity", |name| {
        not_null(name, "granularity", granularity)?;
        read_prop(name, prop)?;
        if option > 1 {
            return Err(refuse(
                INVALID_VALUE,
                name,
                format!("option {option} is neither MINIMUM (0) nor RECOMMENDED (1)"),
            ));
        }
        out(granularity, GRANULARITY)
    })
}

/// `cuMemCreate`: a new allocation of `size` bytes (a nonzero multiple of
/// the granularity) on the device `prop` names; flags must be 0.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemCreate(
    handle: *mut u64,
    size: usize,
    prop: *const AllocationProp,
    flags: c_ulonglong,
) -> u32 {
    vmm_entry("cuMemCreate", |name| {
        if crate::config::config().refuse.vmm {
            return Err(crate::guard::refused("cuMemCreate", "vmm"));
        }
        not_null(name, "handle", handle)?;
        let (p, ordinal) = read_prop(name, prop)?;
        flags_zero(name, flags)?;
        if size == 0 || !size.is_multiple_of(GRANULARITY) {
            return Err(refuse(
                INVALID_VALUE,
                name,
                format!(
                    "size {size} is not a nonzero multiple of the granularity ({GRANULARITY} bytes)"
                ),
            ));
        }
        let gdr = p.alloc_flags.gpu_direct_rdma_capable == 1;
        let header = Header {
            size,
            pid: std::process::id(),
            ordinal: ordinal as u32,
            handle_types: p.requested_handle_types,
            gdr,
        };
        let fd = make_memfd(name, &header)?;
        let h = register(Arc::new(Alloc {
            fd,
            size,
            ordinal,
            handle_types: p.requested_handle_types,
            gdr,
            foreign: false,
            imported: false,
        }));
        out(handle, h)
    })
}

/// `cuMemRelease`: drops one reference to a live handle; the memory goes
/// when no reference, mapping or exported descriptor is left.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemRelease(handle: u64) -> u32 {
    vmm_entry("cuMemRelease", |name| {
        let mut handles = lock(&HANDLES);
        let Some(e) = handles.get_mut(&handle) else {
            return Err(refuse(
                INVALID_VALUE,
                name,
                format!(
                    "{handle:#x} is not a live allocation handle (never created, imported or \
                     retained, or already released as often)"
                ),
            ));
        };
        e.refs -= 1;
        if e.refs == 0 {
            handles.remove(&handle);
        }
        Ok(())
    })
}

/// `cuMemAddressReserve`: fresh, never reused device addresses, aligned to
/// 2 MiB or `alignment` (0 or a power of two); `size` a nonzero multiple of
/// the host page size; the hint `addr` (a multiple of the page size) is
/// ignored; flags must be 0.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemAddressReserve(
    ptr: *mut u64,
    size: usize,
    alignment: usize,
    addr: u64,
    flags: c_ulonglong,
) -> u32 {
    vmm_entry("cuMemAddressReserve", |name| {
        let page = page_size();
        not_null(name, "ptr", ptr)?;
        if size == 0 || !size.is_multiple_of(page) {
            return Err(refuse(
                INVALID_VALUE,
                name,
                format!("size {size} is not a nonzero multiple of the host page size ({page})"),
            ));
        }
        if alignment != 0 && !alignment.is_power_of_two() {
            return Err(refuse(
                INVALID_VALUE,
                name,
                format!("alignment {alignment} is neither 0 nor a power of two"),
            ));
        }
        if !addr.is_multiple_of(page as u64) {
            return Err(refuse(
                INVALID_VALUE,
                name,
                format!("the address hint {addr:#x} is not a multiple of the host page size"),
            ));
        }
        flags_zero(name, flags)?;
        if addr != 0 {
            say_once(
                "vmm:reserve-hint".into(),
                "cuMemAddressReserve: address hints are ignored by the stand-in (the driver \
                 may ignore them too)",
            );
        }
        let base = reserve_aligned(size, alignment.max(GRANULARITY))?;
        lock(&STATE).reserved.insert(base, size);
        out(ptr, base)
    })
}

/// `cuMemAddressFree`: exactly one reservation (its address and size), none
/// of it still mapped.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemAddressFree(ptr: u64, size: usize) -> u32 {
    vmm_entry("cuMemAddressFree", |name| {
        let mut st = lock_whole(name, Range::Reservation, ptr, size)?;
        let end = ptr + size as u64;
        if let Some((&m, _)) = st.mapped.range(ptr..end).next() {
            return Err(refuse(
                INVALID_VALUE,
                name,
                format!(
                    "the reservation at {ptr:#x} is still mapped at {m:#x}: cuMemUnmap it first"
                ),
            ));
        }
        st.reserved.remove(&ptr);
        Ok(())
    })
}

/// `cuMemMap`: maps `size` bytes of a live handle's allocation from
/// `offset` at `ptr`, inside one reservation and over no other mapping; all
/// three multiples of the granularity; flags must be 0. The mapping has no
/// access until `cuMemSetAccess`.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemMap(
    ptr: u64,
    size: usize,
    offset: usize,
    handle: u64,
    flags: c_ulonglong,
) -> u32 {
    vmm_entry("cuMemMap", |name| {
        flags_zero(name, flags)?;
        let g = GRANULARITY;
        if size == 0
            || !size.is_multiple_of(g)
            || !offset.is_multiple_of(g)
            || !ptr.is_multiple_of(g as u64)
        {
            return Err(refuse(
                INVALID_VALUE,
                name,
                format!(
                    "ptr {ptr:#x}, size {size} and offset {offset} must be multiples of the \
                     granularity ({g} bytes), size nonzero"
                ),
            ));
        }
        let end = ptr.checked_add(size as u64).ok_or(INVALID_VALUE)?;
        let mut st = lock(&STATE);
        let inside = st
            .reserved
            .range(..=ptr)
            .next_back()
            .is_some_and(|(&b, &l)| end <= b + l as u64);
        if !inside {
            return Err(refuse(
                INVALID_VALUE,
                name,
                format!(
                    "[{ptr:#x}, {end:#x}) does not lie inside one cuMemAddressReserve reservation"
                ),
            ));
        }
        if let Some((&b, _)) = st
            .mapped
            .range(..end)
            .next_back()
            .filter(|(b, l)| **b + **l as u64 > ptr)
        {
            return Err(refuse(
                INVALID_VALUE,
                name,
                format!("[{ptr:#x}, {end:#x}) overlaps the mapping at {b:#x}"),
            ));
        }
        let alloc = live(name, handle)?;
        if offset.checked_add(size).is_none_or(|e| e > alloc.size) {
            return Err(refuse(
                INVALID_VALUE,
                name,
                format!(
                    "offset {offset} + size {size} exceeds the allocation's {} bytes",
                    alloc.size
                ),
            ));
        }
        let seg = Segment::map_fd(alloc.fd.as_raw_fd(), offset, size)?;
        let kind = Kind::Vmm {
            imported: alloc.foreign,
            map: Mapping {
                handle,
                alloc: alloc.clone(),
                access: AtomicU32::new(0),
            },
        };
        insert_at(ptr, kind, seg, alloc.ordinal)?;
        st.mapped.insert(ptr, size);
        Ok(())
    })
}

/// `cuMemUnmap`: exactly the range one `cuMemMap` mapped; does not wait for
/// work in flight (work reaching the range afterwards faults).
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemUnmap(ptr: u64, size: usize) -> u32 {
    vmm_entry("cuMemUnmap", |name| {
        let mut st = lock_whole(name, Range::Mapping, ptr, size)?;
        let r = remove(ptr, |r| matches!(r.kind, Kind::Vmm { .. }))?;
        st.mapped.remove(&ptr);
        r.state.store(FREED, Ordering::Release);
        Ok(())
    })
}

/// `cuMemGetAllocationPropertiesFromHandle`: the properties of a live
/// handle's allocation (compression never granted).
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemGetAllocationPropertiesFromHandle(
    prop: *mut AllocationProp,
    handle: u64,
) -> u32 {
    vmm_entry("cuMemGetAllocationPropertiesFromHandle", |name| {
        not_null(name, "prop", prop)?;
        let alloc = live(name, handle)?;
        out(
            prop,
            AllocationProp {
                kind: TYPE_PINNED,
                requested_handle_types: alloc.handle_types,
                location: MemLocation {
                    kind: LOCATION_DEVICE,
                    id: alloc.ordinal as c_int,
                },
                win32_handle_meta_data: std::ptr::null_mut(),
                alloc_flags: AllocFlags {
                    compression_type: 0,
                    gpu_direct_rdma_capable: u8::from(alloc.gdr),
                    usage: 0,
                    reserved: [0; 4],
                },
            },
        )
    })
}

/// `cuMemRetainAllocationHandle`: the handle a mapping holding `addr` was
/// made with, with one more reference (live again if it had been released).
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemRetainAllocationHandle(handle: *mut u64, addr: *mut c_void) -> u32 {
    vmm_entry("cuMemRetainAllocationHandle", |name| {
        not_null(name, "handle", handle)?;
        let (h, alloc) = with_mapping(name, addr as u64, |map| (map.handle, map.alloc.clone()))?;
        lock(&HANDLES)
            .entry(h)
            .or_insert_with(|| Entry { alloc, refs: 0 })
            .refs += 1;
        out(handle, h)
    })
}
