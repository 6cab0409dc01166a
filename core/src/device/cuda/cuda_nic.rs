//! GPUDirect RDMA for the CUDA backend: how the NIC reaches this device's
//! memory (dma-buf export, nvidia-peermem) and the flush of its writes.
//!
//! Compiled everywhere; the probe's logic and the data path it enables run
//! on Soft-RoCE with the emulated device (`device::gpudirect_probe_tests`). On a
//! GPU with an RDMA NIC nothing of this has run yet (no such machine was
//! lent): `cuMemGetHandleForAddressRange`, `ibv_reg_dmabuf_mr` on its
//! descriptor, `ibv_reg_mr` under nvidia-peermem and
//! `cuFlushGPUDirectRDMAWrites` are unverified there.
//!
//! Two driver facts decide what runs (read on the CUDA stand-in's `h200`
//! profile): each buffer's `IS_GPU_DIRECT_RDMA_CAPABLE` (memory-pool
//! memory, where cudarc allocates on such GPUs, may say no: that buffer is
//! staged), and the device's write ordering and flush options (no flush
//! call where the device orders the NIC's writes with its own work; no
//! GPUDirect RDMA where neither holds).

use std::os::fd::OwnedFd;
use std::sync::Arc;

use streamcomm_gpu::{Device, GpuDirectFlush};

use super::gpu_error;
use crate::transport::device_span::{GpuDirectMode, NicAccess};
use crate::{Communicator, Result};

/// A CUDA device's memory as the NIC needs it.
pub(super) struct CudaNic {
    device: Device,
    mode: GpuDirectMode,
    /// Probed once: what a receive does after the NIC wrote.
    flush: GpuDirectFlush,
}

impl NicAccess for CudaNic {
    fn mode(&self) -> GpuDirectMode {
        self.mode
    }

    fn export_dmabuf(&self, addr: u64, len: usize) -> Result<OwnedFd> {
        self.device
            .export_dmabuf_range(addr, len)
            .map_err(gpu_error)
    }

    fn reaches(&self, addr: u64) -> bool {
        match self.device.gpudirect_capable(addr) {
            Ok(capable) => capable,
            Err(e) => {
                tracing::debug!(error = %e, addr, "GPUDirect RDMA: not asked of this buffer; staged");
                false
            }
        }
    }

    fn flush(&self) -> Result<()> {
        match self.flush {
            GpuDirectFlush::NotNeeded => Ok(()),
            // `Impossible` never gets here (see `establish`).
            GpuDirectFlush::Call | GpuDirectFlush::Impossible => {
                self.device.flush_gpudirect_writes().map_err(gpu_error)
            }
        }
    }
}

/// Probes GPUDirect RDMA for `comm` on `device` (see
/// `device::gpudirect_probe::establish`), registering a scratch allocation of
/// 2 MiB to try; `None` without the `verbs` feature, without verbs peers,
/// with `STREAMCOMM_GPUDIRECT=0`, or where it does not work.
pub(crate) fn establish(comm: &Communicator, device: &Device) -> Option<Arc<dyn NicAccess>> {
    let dev = crate::device::gpudirect_probe::wanted(comm)?;
    // A receive must make the NIC's writes visible to the device's
    // later work: by the device's own ordering, or by the flush call.
    let flush = device.gpudirect_flush();
    if flush == GpuDirectFlush::Impossible {
        tracing::warn!(
            "GPUDirect RDMA: the device neither orders the NIC's writes with its own work \
             nor offers cuFlushGPUDirectRDMAWrites; device p2p is staged"
        );
        return None;
    }
    let scratch = match streamcomm_gpu::DeviceBuffer::alloc(device, 2 << 20) {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(error = %e, "GPUDirect RDMA: no scratch memory to probe with; device p2p is staged");
            return None;
        }
    };
    let export = |addr, len| device.export_dmabuf_range(addr, len).map_err(gpu_error);
    let probe = crate::device::gpudirect_probe::ProbeMemory {
        addr: scratch.as_raw(),
        len: scratch.allocated_len(),
        export: &export,
        peermem: peermem_loaded(),
    };
    crate::device::gpudirect_probe::establish(&dev, &probe, |mode| {
        Arc::new(CudaNic {
            device: device.clone(),
            mode,
            flush,
        })
    })
}

/// True where the nvidia-peermem module (or the older nv_peer_mem) is
/// loaded: `ibv_reg_mr` may then take device memory.
fn peermem_loaded() -> bool {
    std::path::Path::new("/sys/module/nvidia_peermem").exists()
        || std::path::Path::new("/sys/kernel/mm/memory_peers/nv_mem/version").exists()
}
