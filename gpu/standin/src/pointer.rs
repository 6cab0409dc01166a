//! Pointer attributes and GPUDirect RDMA: `cuPointerGetAttribute` for device
//! memory, and `cuFlushGPUDirectRDMAWrites`.
//!
//! With `STREAMCOMM_STANDIN_GDR` (the `h200` and `h100` profiles) the device
//! reports GPUDirect RDMA as an H200 does, and `cuMemAlloc` memory (and IPC
//! mappings of it) reports `IS_GPU_DIRECT_RDMA_CAPABLE` = 1; memory from the
//! default memory pool (`cuMemAllocAsync`) reports 0, as the driver's
//! default pool is not created RDMA-capable; a VMM mapping reports 1 when
//! its allocation was created with `allocFlags.gpuDirectRDMACapable` (module
//! `vmm`). Without it every buffer reports 0. No NIC ever writes into
//! stand-in memory: the flush is a memory fence.
//!
//! The values: `GPU_DIRECT_RDMA_SUPPORTED` 1, `GPU_DIRECT_RDMA_WRITES_ORDERING`
//! OWNER (100: the device consumes remote writes in order itself, so a flush
//! to the owner is a no-op, as on Hopper), `GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS`
//! HOST (1, `cuFlushGPUDirectRDMAWrites` available) but not MEMOPS (the device
//! reports `CAN_FLUSH_REMOTE_WRITES` = 0). These are chosen from the
//! architecture's documented behaviour, not read from an H200.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{Ordering, fence};

use crate::config::config;
use crate::device::{CONTEXTS, current, out};
use crate::error::{INVALID_VALUE, NOT_SUPPORTED, Res};
use crate::guard::{entry, say_once};
use crate::memory::{Kind, region_of};

/// `CU_FLUSH_GPU_DIRECT_RDMA_WRITES_OPTION_HOST`.
pub(crate) const FLUSH_OPTION_HOST: c_int = 1;
/// `CU_GPU_DIRECT_RDMA_WRITES_ORDERING_OWNER`.
pub(crate) const WRITES_ORDERING_OWNER: c_int = 100;

/// `GPU_DIRECT_RDMA_SUPPORTED` (116).
pub(crate) fn rdma_supported() -> c_int {
    config().gdr.into()
}

/// `GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS` (117): HOST, where flushing is on.
pub(crate) fn flush_options() -> c_int {
    if config().gdr_flush {
        FLUSH_OPTION_HOST
    } else {
        0
    }
}

/// `GPU_DIRECT_RDMA_WRITES_ORDERING` (118): OWNER with GPUDirect RDMA.
pub(crate) fn writes_ordering() -> c_int {
    if config().gdr {
        WRITES_ORDERING_OWNER
    } else {
        0
    }
}

/// `cuPointerGetAttribute` for device memory (allocations, stream-ordered
/// allocations, IPC mappings, VMM mappings, whose range is the mapping's
/// and which are not legacy-IPC capable): CONTEXT, MEMORY_TYPE (DEVICE),
/// DEVICE_POINTER, BUFFER_ID, IS_MANAGED (0), DEVICE_ORDINAL,
/// IS_LEGACY_CUDA_IPC_CAPABLE, RANGE_START_ADDR, RANGE_SIZE, MAPPED and
/// IS_GPU_DIRECT_RDMA_CAPABLE.
/// Pinned host memory and other attributes are not modelled
/// (`CUDA_ERROR_NOT_SUPPORTED`, named on stderr); memory the driver does not
/// know is `CUDA_ERROR_INVALID_VALUE`.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuPointerGetAttribute(
    data: *mut c_void,
    attribute: c_int,
    ptr: u64,
) -> u32 {
    entry("cuPointerGetAttribute", || {
        current()?;
        if data.is_null() {
            return Err(INVALID_VALUE);
        }
        let Some(r) = region_of(ptr) else {
            if crate::pinned::is_pinned(ptr as usize, 1) {
                say_once(
                    "ptr-attr:pinned".into(),
                    "cuPointerGetAttribute on pinned host memory is not modelled: CUDA_ERROR_NOT_SUPPORTED",
                );
                return Err(NOT_SUPPORTED);
            }
            return Err(INVALID_VALUE);
        };
        let own = matches!(r.kind, Kind::Device { .. });
        let write_u32 = |v: u32| out(data.cast::<u32>(), v);
        match attribute {
            1 => out(data.cast::<usize>(), CONTEXTS.handle(r.ordinal)),
            2 => write_u32(2),
            3 => out(data.cast::<u64>(), ptr),
            7 => out(data.cast::<u64>(), r.base),
            8 => write_u32(0),
            9 => out(data.cast::<c_int>(), r.ordinal as c_int),
            10 => write_u32(own.into()),
            11 => out(data.cast::<u64>(), r.base),
            12 => out(data.cast::<usize>(), r.len),
            13 => write_u32(1),
            15 => write_u32(rdma_capable(&r.kind).into()),
            _ => Err(not_modelled(attribute)),
        }
    })
}

/// `IS_GPU_DIRECT_RDMA_CAPABLE`: with GPUDirect RDMA, `cuMemAlloc` memory
/// and IPC mappings of it, and VMM mappings of allocations created with
/// `gpuDirectRDMACapable`; never default-pool memory.
fn rdma_capable(kind: &Kind) -> bool {
    config().gdr
        && match kind {
            Kind::Device { .. } | Kind::Ipc { .. } => true,
            Kind::Pool => false,
            Kind::Vmm { map, .. } => map.gdr(),
        }
}

fn not_modelled(attribute: c_int) -> u32 {
    say_once(
        format!("ptr-attr:{attribute}"),
        &format!("cuPointerGetAttribute({attribute}) is not modelled: CUDA_ERROR_NOT_SUPPORTED"),
    );
    NOT_SUPPORTED
}

/// `cuFlushGPUDirectRDMAWrites`: target `CURRENT_CTX` (0), scope `TO_OWNER`
/// (100) or `TO_ALL_DEVICES` (200); `CUDA_ERROR_NOT_SUPPORTED` unless the
/// device reports the HOST flush option.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuFlushGPUDirectRDMAWrites(target: c_int, scope: c_int) -> u32 {
    entry("cuFlushGPUDirectRDMAWrites", || flush(target, scope))
}

fn flush(target: c_int, scope: c_int) -> Res<()> {
    current()?;
    if target != 0 || !(scope == 100 || scope == 200) {
        return Err(INVALID_VALUE);
    }
    if flush_options() & FLUSH_OPTION_HOST == 0 {
        say_once(
            "gdr-flush".into(),
            "cuFlushGPUDirectRDMAWrites: the device reports no GPUDirect RDMA flush option: CUDA_ERROR_NOT_SUPPORTED",
        );
        return Err(NOT_SUPPORTED);
    }
    fence(Ordering::SeqCst);
    Ok(())
}
