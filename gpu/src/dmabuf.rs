//! dma-buf export of device memory for GPUDirect RDMA
//! (`cuMemGetHandleForAddressRange`).

use std::os::fd::{FromRawFd, OwnedFd};

use crate::context::Device;
use crate::driver::result::check;
use crate::driver::sys::{self, CUdevice_attribute, CUmemRangeHandleType};
use crate::error::{Error, Result};
use crate::guard::guarded;
use crate::memory::{ALLOC_GRANULE, DeviceBuffer};

impl DeviceBuffer {
    /// Exports the whole allocation as a dma-buf file descriptor, which an RDMA
    /// NIC driver can register (`ibv_reg_dmabuf_mr`). [`Error::Unavailable`] when
    /// the device or kernel does not support dma-buf; the buffer must start on a
    /// host page (allocations of 2 MiB and more do).
    pub fn export_dmabuf(&self) -> Result<OwnedFd> {
        if self.as_raw() % ALLOC_GRANULE as u64 != 0 {
            return Err(Error::invalid(format!(
                "export_dmabuf: buffer at {:#x} is not {ALLOC_GRANULE}-byte aligned (allocate at least 2 MiB)",
                self.as_raw()
            )));
        }
        self.device()
            .export_dmabuf_range(self.as_raw(), self.allocated_len())
    }
}

impl Device {
    /// Exports `len` bytes of device memory at `addr` (both multiples of the
    /// host page size, inside one allocation of this device) as a dma-buf
    /// file descriptor. [`Error::Unavailable`] when the device or kernel does
    /// not support dma-buf.
    pub fn export_dmabuf_range(&self, addr: u64, len: usize) -> Result<OwnedFd> {
        let attr = CUdevice_attribute::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED;
        if self.attribute(attr)? != 1 {
            return Err(Error::Unavailable(format!(
                "{self:?} does not support dma-buf export"
            )));
        }
        guarded("cuMemGetHandleForAddressRange", || {
            self.bind()?;
            let mut fd: std::ffi::c_int = -1;
            let kind = CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD;
            // SAFETY: `fd` is the int-sized out-parameter this handle type
            // writes; the driver checks the range against its allocations.
            let r = unsafe {
                sys::cuMemGetHandleForAddressRange(
                    (&mut fd as *mut std::ffi::c_int).cast(),
                    addr,
                    len,
                    kind,
                    0,
                )
            };
            check("cuMemGetHandleForAddressRange", r)?;
            if fd < 0 {
                return Err(Error::Unavailable(
                    "dma-buf export returned no descriptor".into(),
                ));
            }
            // SAFETY: the driver returned a new descriptor that we now own.
            Ok(unsafe { OwnedFd::from_raw_fd(fd) })
        })
    }

    /// Makes every GPUDirect RDMA write that has reached this device so far
    /// visible to its later work (`cuFlushGPUDirectRDMAWrites`, current
    /// context, to the owner); what a receiver does after a NIC wrote into
    /// device memory and before device work reads it.
    pub fn flush_gpudirect_writes(&self) -> Result<()> {
        guarded("cuFlushGPUDirectRDMAWrites", || {
            self.bind()?;
            // SAFETY: plain driver call on the current (bound) context.
            let r = unsafe {
                sys::cuFlushGPUDirectRDMAWrites(
                    sys::CUflushGPUDirectRDMAWritesTarget::CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX,
                    sys::CUflushGPUDirectRDMAWritesScope::CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER,
                )
            };
            check("cuFlushGPUDirectRDMAWrites", r)
        })
    }
}
