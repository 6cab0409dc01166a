//! Initialisation, devices, their attributes, and primary contexts with the
//! per-thread current-context stack.
//!
//! There is one device by default (`STREAMCOMM_STANDIN_DEVICES`); it names
//! itself as the stand-in and reports the compute capability and limits of an
//! H200 (sm_90: compute capability 9.0, 132 SMs), except that capability
//! attributes of features the stand-in does not implement (managed memory,
//! dma-buf, cooperative launch, IPC events, pool export handles) read 0,
//! so callers take their fallback paths instead of reaching an unimplemented
//! entry point. Virtual memory management (102) and POSIX file-descriptor
//! handles (103) read 1 (module `vmm`; 0 under `STREAMCOMM_STANDIN_REFUSE=vmm`); GPUDirect RDMA with VMM memory (110)
//! reads 1 with GPUDirect RDMA (116), as on an H200. Its total memory is
//! the host's. Under the `h100` profile its
//! name adds the H100 it stands for (`... #0, as NVIDIA H100 80GB HBM3`), and
//! it reports an H100 SXM's total memory (81,559 MiB) and 5120-bit memory
//! bus. Memory pools (115) and GPUDirect RDMA (116-118) follow the
//! configuration: 0 under the `default` profile, an H200's values under
//! `h200` and `h100`. `COMPUTE_MODE` (20) reports
//! `STREAMCOMM_STANDIN_COMPUTE_MODE`.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_uint};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::config::{Profile, config};
use crate::context::Context;
use crate::error::{
    INVALID_CONTEXT, INVALID_DEVICE, INVALID_VALUE, NOT_INITIALIZED, NOT_SUPPORTED, Res,
};
use crate::guard::{entry, say_once};
use crate::handles::PerDevice;

/// The name every stand-in device reports (`cuDeviceGetName`).
pub(crate) const DEVICE_NAME: &str = "streamcomm CPU stand-in (not a GPU)";

/// The GPU the `h100` profile's device stands for, as `cuDeviceGetName`
/// spells it on an H100 SXM with 80 GB of HBM3.
const H100_NAME: &str = "NVIDIA H100 80GB HBM3";

/// An H100 SXM's total memory (81,559 MiB, as `nvidia-smi` reports it).
const H100_TOTAL_MEM: usize = 81_559 << 20;

/// The device's total memory under the `h100` profile, else `None` (the
/// host's memory is reported).
fn modelled_total_mem() -> Option<usize> {
    (config().profile == Profile::H100).then_some(H100_TOTAL_MEM)
}

/// Handles of the primary contexts.
pub(crate) const CONTEXTS: PerDevice = PerDevice::new(0x11);

static INITIALIZED: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// The calling thread's context stack (ordinals); the top is current.
    static STACK: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// One device and its primary context.
struct Slot {
    primary: Mutex<Primary>,
}

#[derive(Default)]
struct Primary {
    refs: u32,
    flags: u32,
    ctx: Option<&'static Context>,
    /// The compute mode's claim on the device, held while `refs > 0`.
    claim: Option<crate::mode::Claim>,
}

fn slots() -> &'static [Slot] {
    static SLOTS: OnceLock<Vec<Slot>> = OnceLock::new();
    SLOTS.get_or_init(|| {
        (0..config().devices)
            .map(|_| Slot {
                primary: Mutex::new(Primary::default()),
            })
            .collect()
    })
}

fn lock(slot: &Slot) -> std::sync::MutexGuard<'_, Primary> {
    slot.primary.lock().unwrap_or_else(|e| e.into_inner())
}

/// `CUDA_ERROR_NOT_INITIALIZED` until `cuInit(0)` has succeeded.
pub(crate) fn require_init() -> Res<()> {
    if INITIALIZED.load(Ordering::Acquire) {
        Ok(())
    } else {
        Err(NOT_INITIALIZED)
    }
}

fn slot(dev: c_int) -> Res<&'static Slot> {
    require_init()?;
    usize::try_from(dev)
        .ok()
        .and_then(|d| slots().get(d))
        .ok_or(INVALID_DEVICE)
}

/// The device of a primary context's handle.
fn ctx_ordinal(handle: usize) -> Res<usize> {
    CONTEXTS
        .ordinal(handle, slots().len())
        .ok_or(INVALID_CONTEXT)
}

/// The active primary context of `ordinal`, if retained.
fn active(ordinal: usize) -> Res<&'static Context> {
    let p = lock(&slots()[ordinal]);
    match (p.refs, p.ctx) {
        (1.., Some(ctx)) => Ok(ctx),
        _ => Err(INVALID_CONTEXT),
    }
}

/// The calling thread's current context, without the sticky-error check.
pub(crate) fn current_any() -> Res<&'static Context> {
    require_init()?;
    let top = STACK.with(|s| s.borrow().last().copied());
    active(top.ok_or(INVALID_CONTEXT)?)
}

/// The calling thread's current context; a context that suffered a device
/// fault returns that error from every call, as the driver's sticky errors do.
pub(crate) fn current() -> Res<&'static Context> {
    let ctx = current_any()?;
    ctx.check_sticky()?;
    Ok(ctx)
}

/// Writes `value` through a C out-pointer, refusing NULL.
pub(crate) fn out<T>(ptr: *mut T, value: T) -> Res<()> {
    if ptr.is_null() {
        return Err(INVALID_VALUE);
    }
    // SAFETY: non-null; the C caller passes a valid, aligned out-pointer.
    unsafe { ptr.write(value) };
    Ok(())
}

/// `cuInit`: flags must be 0. The first call says on stderr, once per
/// process, that the process runs on the stand-in and with which profile;
/// a setting the stand-in cannot read (an unknown profile, for one) is named
/// there and every `cuInit` fails with `CUDA_ERROR_INVALID_VALUE`. Also
/// removes shared-memory segments left by stand-in processes that died.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuInit(flags: c_uint) -> u32 {
    entry("cuInit", || {
        if flags != 0 {
            return Err(INVALID_VALUE);
        }
        let cfg = config();
        if cfg.counts {
            crate::counters::print_at_exit_once();
        }
        say_once(
            "profile".into(),
            &format!(
                "this process runs on the streamcomm CPU stand-in for the CUDA driver, not on a GPU (profile {})",
                cfg.profile.name()
            ),
        );
        if !cfg.problems.is_empty() {
            for p in &cfg.problems {
                say_once(
                    format!("config:{p}"),
                    &format!("{p}: cuInit fails with CUDA_ERROR_INVALID_VALUE"),
                );
            }
            return Err(INVALID_VALUE);
        }
        if !INITIALIZED.swap(true, Ordering::AcqRel) {
            crate::shm::remove_stale();
        }
        Ok(())
    })
}

/// `cuDriverGetVersion` (works before `cuInit`): 13000 unless configured.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuDriverGetVersion(version: *mut c_int) -> u32 {
    entry("cuDriverGetVersion", || {
        out(version, config().driver_version)
    })
}

/// `cuDeviceGetCount`.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuDeviceGetCount(count: *mut c_int) -> u32 {
    entry("cuDeviceGetCount", || {
        require_init()?;
        out(count, slots().len() as c_int)
    })
}

/// `cuDeviceGet`: the device handle is the ordinal.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuDeviceGet(device: *mut c_int, ordinal: c_int) -> u32 {
    entry("cuDeviceGet", || {
        slot(ordinal)?;
        out(device, ordinal)
    })
}

/// `cuDeviceGetName`: always names the stand-in first (so no run on it passes
/// for a GPU run); under the `h100` profile, the H100 it stands for after it.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: c_int) -> u32 {
    entry("cuDeviceGetName", || {
        slot(dev)?;
        if name.is_null() || len <= 0 {
            return Err(INVALID_VALUE);
        }
        let text = match config().profile {
            Profile::H100 => format!("{DEVICE_NAME} #{dev}, as {H100_NAME}"),
            Profile::Default | Profile::H200 => format!("{DEVICE_NAME} #{dev}"),
        };
        let n = text.len().min(len as usize - 1);
        // SAFETY: the caller's buffer holds `len` bytes; we write n + 1 <= len.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr().cast(), name, n);
            *name.add(n) = 0;
        }
        Ok(())
    })
}

/// `cuDeviceGetUuid`: a fixed UUID spelling `SC-STANDIN` and the ordinal.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuDeviceGetUuid(uuid: *mut [u8; 16], dev: c_int) -> u32 {
    entry("cuDeviceGetUuid", || uuid_of(uuid, dev))
}

/// `cuDeviceGetUuid_v2`: as `cuDeviceGetUuid`.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuDeviceGetUuid_v2(uuid: *mut [u8; 16], dev: c_int) -> u32 {
    entry("cuDeviceGetUuid_v2", || uuid_of(uuid, dev))
}

fn uuid_of(uuid: *mut [u8; 16], dev: c_int) -> Res<()> {
    slot(dev)?;
    let mut bytes = *b"SC-STANDIN-\0\0\0\0\0";
    bytes[15] = dev as u8;
    out(uuid, bytes)
}

/// `cuDeviceTotalMem_v2`: the host's physical memory (an H100's under the
/// `h100` profile).
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: c_int) -> u32 {
    entry("cuDeviceTotalMem_v2", || {
        slot(dev)?;
        out(bytes, modelled_total_mem().unwrap_or(host_memory().1))
    })
}

/// `cuMemGetInfo_v2`: the host's available and physical memory; under the
/// `h100` profile an H100's total, and free memory no more than it nor than
/// the host has (device memory lives in the host's).
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> u32 {
    entry("cuMemGetInfo_v2", || {
        current()?;
        let (f, t) = match (host_memory(), modelled_total_mem()) {
            ((f, _), Some(t)) => (f.min(t), t),
            (host, None) => host,
        };
        out(free, f)?;
        out(total, t)
    })
}

fn host_memory() -> (usize, usize) {
    // SAFETY: sysconf has no preconditions.
    let (avail, phys, page) = unsafe {
        (
            libc::sysconf(libc::_SC_AVPHYS_PAGES),
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let b = |pages: libc::c_long| (pages.max(0) as usize).saturating_mul(page.max(0) as usize);
    (b(avail), b(phys))
}

/// `cuDeviceComputeCapability` (deprecated): 9.0.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuDeviceComputeCapability(
    major: *mut c_int,
    minor: *mut c_int,
    dev: c_int,
) -> u32 {
    entry("cuDeviceComputeCapability", || {
        slot(dev)?;
        out(major, 9)?;
        out(minor, 0)
    })
}

/// The attribute values of an H200 (sm_90) that the stand-in models (an
/// H100's memory bus under the `h100` profile); 0 for features it does not
/// implement.
fn attribute(attrib: c_int, ordinal: c_int) -> Option<c_int> {
    let mode = config().compute_mode;
    let bus_width = match config().profile {
        Profile::H100 => 5120,
        Profile::Default | Profile::H200 => 6144,
    };
    let pools = config().memory_pools.into();
    let vmm_rdma = crate::vmm::rdma_with_vmm();
    let (rdma, flush, order) = (
        crate::pointer::rdma_supported(),
        crate::pointer::flush_options(),
        crate::pointer::writes_ordering(),
    );
    Some(match attrib {
        1 => 1024,         // MAX_THREADS_PER_BLOCK
        2 | 3 => 1024,     // MAX_BLOCK_DIM_X/Y
        4 => 64,           // MAX_BLOCK_DIM_Z
        5 => i32::MAX,     // MAX_GRID_DIM_X
        6 | 7 => 65535,    // MAX_GRID_DIM_Y/Z
        8 => 49152,        // MAX_SHARED_MEMORY_PER_BLOCK
        9 => 65536,        // TOTAL_CONSTANT_MEMORY
        10 => 32,          // WARP_SIZE
        11 => i32::MAX,    // MAX_PITCH
        12 => 65536,       // MAX_REGISTERS_PER_BLOCK
        13 => 1_980_000,   // CLOCK_RATE (kHz)
        14 => 512,         // TEXTURE_ALIGNMENT
        15 => 1,           // GPU_OVERLAP
        16 => 132,         // MULTIPROCESSOR_COUNT
        17 | 18 => 0,      // KERNEL_EXEC_TIMEOUT, INTEGRATED
        19 => 1,           // CAN_MAP_HOST_MEMORY
        20 => mode,        // COMPUTE_MODE
        31 | 32 => 1,      // CONCURRENT_KERNELS, ECC_ENABLED
        33 => ordinal + 1, // PCI_BUS_ID
        34 | 35 => 0,      // PCI_DEVICE_ID, TCC_DRIVER
        36 => 2_619_000,   // MEMORY_CLOCK_RATE
        37 => bus_width,   // GLOBAL_MEMORY_BUS_WIDTH
        38 => 52_428_800,  // L2_CACHE_SIZE
        39 => 2048,        // MAX_THREADS_PER_MULTIPROCESSOR
        40 => 5,           // ASYNC_ENGINE_COUNT
        41 => 1,           // UNIFIED_ADDRESSING
        50 => 0,           // PCI_DOMAIN_ID
        75 => 9,           // COMPUTE_CAPABILITY_MAJOR
        76 => 0,           // COMPUTE_CAPABILITY_MINOR
        78..=80 => 1,      // STREAM_PRIORITIES, L1 caches
        81 => 233_472,     // MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
        82 => 65536,       // MAX_REGISTERS_PER_MULTIPROCESSOR
        83..=86 => 0, // MANAGED_MEMORY (not implemented), MULTI_GPU_BOARD(_GROUP_ID), HOST_NATIVE_ATOMIC
        87 => 2,      // SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO
        88 | 89 => 0, // PAGEABLE_MEMORY_ACCESS, CONCURRENT_MANAGED_ACCESS
        90 | 91 => 1, // COMPUTE_PREEMPTION, CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM
        92..=94 => 1, // CAN_USE_STREAM_MEM_OPS_V1, 64_BIT_V1, WAIT_VALUE_NOR_V1
        95 | 96 => 0, // COOPERATIVE_LAUNCH (not implemented), MULTI_DEVICE
        97 => 232_448, // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
        98 => 0,      // CAN_FLUSH_REMOTE_WRITES
        99 => 1,      // HOST_REGISTER_SUPPORTED
        100 | 101 => 0, // PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES, DIRECT_MANAGED_MEM_ACCESS_FROM_HOST
        // VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED
        // (0 under STREAMCOMM_STANDIN_REFUSE=vmm)
        102 | 103 => i32::from(!config().refuse.vmm),
        104 | 105 => 0, // HANDLE_TYPE_WIN32_HANDLE_SUPPORTED, HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED
        106 => 32,      // MAX_BLOCKS_PER_MULTIPROCESSOR
        107..=109 => 0, // compression, persisting L2, access policy
        110 => vmm_rdma, // GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED
        111 => 1024,    // RESERVED_SHARED_MEMORY_PER_BLOCK
        112 | 113 => 0, // sparse arrays, read-only host register
        114 => 0,       // TIMELINE_SEMAPHORE_INTEROP_SUPPORTED
        115 => pools,   // MEMORY_POOLS_SUPPORTED
        116 => rdma,    // GPU_DIRECT_RDMA_SUPPORTED
        117 => flush,   // GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS
        118 => order,   // GPU_DIRECT_RDMA_WRITES_ORDERING
        119..=121 => 0, // MEMPOOL_SUPPORTED_HANDLE_TYPES (no pool export), cluster launch, ...
        122 | 123 => 1, // CAN_USE_64_BIT_STREAM_MEM_OPS, CAN_USE_STREAM_WAIT_VALUE_NOR
        124 | 125 => 0, // DMA_BUF_SUPPORTED, IPC_EVENT_SUPPORTED
        _ => return None,
    })
}

/// Whether the device can flush remote writes (`CU_STREAM_WAIT_VALUE_FLUSH`).
pub(crate) fn can_flush_remote_writes() -> bool {
    attribute(98, 0) == Some(1)
}

/// `cuDeviceGetAttribute`: see the module docs; unmodelled attributes return
/// `CUDA_ERROR_NOT_SUPPORTED` and say so.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuDeviceGetAttribute(value: *mut c_int, attrib: c_int, dev: c_int) -> u32 {
    entry("cuDeviceGetAttribute", || {
        slot(dev)?;
        if !(1..=300).contains(&attrib) {
            return Err(INVALID_VALUE);
        }
        match attribute(attrib, dev) {
            Some(v) => out(value, v),
            None => {
                say_once(
                    format!("attr:{attrib}"),
                    &format!(
                        "cuDeviceGetAttribute({attrib}) is not modelled: CUDA_ERROR_NOT_SUPPORTED"
                    ),
                );
                Err(NOT_SUPPORTED)
            }
        }
    })
}

/// `cuDevicePrimaryCtxRetain`: refcounted; does not make the context current.
/// Creating the context obeys the compute mode (module `mode`): 46 under
/// PROHIBITED, and under EXCLUSIVE_PROCESS while another process holds one.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuDevicePrimaryCtxRetain(pctx: *mut usize, dev: c_int) -> u32 {
    entry("cuDevicePrimaryCtxRetain", || {
        let s = slot(dev)?;
        if pctx.is_null() {
            return Err(INVALID_VALUE);
        }
        let mut p = lock(s);
        if p.refs == 0 || p.ctx.is_none() {
            if p.claim.is_none() {
                // (A claim left by a release still finishing is reused: a
                // second lock of this process's own would conflict.)
                p.claim = Some(crate::mode::claim(dev as usize)?);
            }
            p.ctx = Some(Context::create(dev as usize));
        }
        p.refs += 1;
        out(pctx, CONTEXTS.handle(dev as usize))
    })
}

/// `cuDevicePrimaryCtxRelease_v2`: a release without a retain is
/// `CUDA_ERROR_INVALID_CONTEXT`; the last release waits for the context's
/// work and retires it (the next retain makes a fresh one).
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: c_int) -> u32 {
    entry("cuDevicePrimaryCtxRelease_v2", || {
        let s = slot(dev)?;
        let retired = {
            let mut p = lock(s);
            if p.refs == 0 {
                return Err(INVALID_CONTEXT);
            }
            p.refs -= 1;
            if p.refs == 0 { p.ctx.take() } else { None }
        };
        if let Some(ctx) = retired {
            ctx.wait_all();
            let mut p = lock(s);
            if p.refs == 0 {
                // The process's last context on the device is gone.
                p.claim = None;
            }
        }
        Ok(())
    })
}

/// `cuDevicePrimaryCtxGetState`.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuDevicePrimaryCtxGetState(
    dev: c_int,
    flags: *mut c_uint,
    is_active: *mut c_int,
) -> u32 {
    entry("cuDevicePrimaryCtxGetState", || {
        let p = lock(slot(dev)?);
        out(flags, p.flags)?;
        out(is_active, c_int::from(p.refs > 0))
    })
}

/// `cuDevicePrimaryCtxSetFlags_v2`: scheduling flags are stored, not used.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuDevicePrimaryCtxSetFlags_v2(dev: c_int, flags: c_uint) -> u32 {
    entry("cuDevicePrimaryCtxSetFlags_v2", || {
        if flags & !0x3f != 0 {
            return Err(INVALID_VALUE);
        }
        lock(slot(dev)?).flags = flags;
        Ok(())
    })
}

/// `cuCtxSetCurrent`: replaces the top of the thread's context stack (NULL pops).
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuCtxSetCurrent(ctx: usize) -> u32 {
    entry("cuCtxSetCurrent", || {
        require_init()?;
        if ctx == 0 {
            STACK.with(|s| s.borrow_mut().pop());
            return Ok(());
        }
        let ordinal = ctx_ordinal(ctx)?;
        active(ordinal)?;
        STACK.with(|s| {
            let mut s = s.borrow_mut();
            s.pop();
            s.push(ordinal);
        });
        Ok(())
    })
}

/// `cuCtxGetCurrent`: NULL when the thread has none.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuCtxGetCurrent(pctx: *mut usize) -> u32 {
    entry("cuCtxGetCurrent", || {
        require_init()?;
        let top = STACK.with(|s| s.borrow().last().copied());
        out(pctx, top.map_or(0, |o| CONTEXTS.handle(o)))
    })
}

/// `cuCtxPushCurrent_v2`.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuCtxPushCurrent_v2(ctx: usize) -> u32 {
    entry("cuCtxPushCurrent_v2", || {
        require_init()?;
        let ordinal = ctx_ordinal(ctx)?;
        active(ordinal)?;
        STACK.with(|s| s.borrow_mut().push(ordinal));
        Ok(())
    })
}

/// `cuCtxPopCurrent_v2`.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuCtxPopCurrent_v2(pctx: *mut usize) -> u32 {
    entry("cuCtxPopCurrent_v2", || {
        require_init()?;
        let top = STACK
            .with(|s| s.borrow_mut().pop())
            .ok_or(INVALID_CONTEXT)?;
        if !pctx.is_null() {
            out(pctx, CONTEXTS.handle(top))?;
        }
        Ok(())
    })
}

/// `cuCtxGetDevice`.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuCtxGetDevice(device: *mut c_int) -> u32 {
    entry("cuCtxGetDevice", || {
        let ctx = current_any()?;
        out(device, ctx.ordinal as c_int)
    })
}

/// `cuCtxSynchronize`: waits for all work of the current context, for ever
/// if a stream waits on a memory operation nobody releases. Refused (900,
/// invalidating the capture) while any stream of the context captures.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuCtxSynchronize() -> u32 {
    entry("cuCtxSynchronize", || {
        let ctx = current()?;
        crate::capture::check_context_sync(ctx, "cuCtxSynchronize")?;
        crate::capture::check_unsafe("cuCtxSynchronize")?;
        ctx.wait_all();
        ctx.check_sticky()
    })
}
