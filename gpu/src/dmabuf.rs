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
        if !self.as_raw().is_multiple_of(ALLOC_GRANULE as u64) {
            return Err(Error::invalid(format!(
                "export_dmabuf: buffer at {:#x} is not {ALLOC_GRANULE}-byte aligned (allocate at least 2 MiB)",
                self.as_raw()
            )));
        }
        self.device()
            .export_dmabuf_range(self.as_raw(), self.allocated_len())
    }
}

/// How writes an RDMA NIC placed in a device's memory become visible to
/// the device's later work (its `GPU_DIRECT_RDMA_WRITES_ORDERING` and
/// `GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS` attributes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuDirectFlush {
    /// The device orders remote writes with its own work (ordering OWNER or
    /// ALL_DEVICES): nothing to do.
    NotNeeded,
    /// `cuFlushGPUDirectRDMAWrites` makes them visible (the HOST option).
    Call,
    /// Neither: the device offers no way to make them visible, so the NIC
    /// must not write into its memory.
    Impossible,
}

impl GpuDirectFlush {
    /// The policy for a device reporting `ordering` (0 NONE, 100 OWNER, 200
    /// ALL_DEVICES) and the flush `options` bit mask (1 HOST, 2 MEMOPS).
    pub fn from_attributes(ordering: i32, options: i32) -> GpuDirectFlush {
        if ordering >= 100 {
            GpuDirectFlush::NotNeeded
        } else if options & 1 != 0 {
            GpuDirectFlush::Call
        } else {
            GpuDirectFlush::Impossible
        }
    }
}

impl Device {
    /// What a receiver must do after the NIC wrote into this device's
    /// memory ([`GpuDirectFlush`]). A driver too old to report the
    /// attributes gets [`GpuDirectFlush::Call`], the call every driver
    /// since CUDA 11.3 has.
    ///
    /// # Examples
    /// ```no_run
    /// let device = streamcomm_gpu::Device::open(0)?;
    /// println!("after a GPUDirect RDMA write: {:?}", device.gpudirect_flush());
    /// # Ok::<(), streamcomm_gpu::Error>(())
    /// ```
    pub fn gpudirect_flush(&self) -> GpuDirectFlush {
        let ordering =
            self.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING);
        let options = self.attribute(
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS,
        );
        match (ordering, options) {
            (Ok(ordering), Ok(options)) => GpuDirectFlush::from_attributes(ordering, options),
            _ => GpuDirectFlush::Call,
        }
    }

    /// True when the NIC may read and write the device memory at `addr`
    /// directly (`CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE`): memory
    /// from a stream-ordered pool (`cuMemAllocAsync`, where every cudarc
    /// buffer lives on a GPU with memory pools) may not be. A driver that
    /// cannot say is taken at its word that the device supports it.
    ///
    /// # Examples
    /// ```no_run
    /// use streamcomm_gpu::{Device, DeviceBuffer};
    ///
    /// let device = Device::open(0)?;
    /// let buf = DeviceBuffer::alloc(&device, 2 << 20)?;
    /// println!("GPUDirect RDMA capable: {}", device.gpudirect_capable(buf.as_raw())?);
    /// # Ok::<(), streamcomm_gpu::Error>(())
    /// ```
    pub fn gpudirect_capable(&self, addr: u64) -> Result<bool> {
        guarded("cuPointerGetAttribute", || {
            self.bind()?;
            let mut capable: std::ffi::c_int = 0;
            // SAFETY: this attribute writes one int into the out-pointer.
            let r = unsafe {
                sys::cuPointerGetAttribute(
                    (&mut capable as *mut std::ffi::c_int).cast(),
                    sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE,
                    addr,
                )
            };
            match check("cuPointerGetAttribute", r) {
                Ok(()) => Ok(capable != 0),
                // INVALID_VALUE: a driver older than the attribute.
                Err(Error::Driver { code: 1, .. }) => Ok(true),
                Err(e) => Err(e),
            }
        })
    }

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
            match check("cuMemGetHandleForAddressRange", r) {
                // The attribute said yes, and the kernel, the allocation
                // (memory-pool memory) or a sandbox says no: NOT_SUPPORTED
                // (801) most often, but a real driver may pick another
                // code; as NCCL, any refusal only means no dma-buf here.
                Err(Error::Driver { code, name, .. }) => {
                    return Err(Error::Unavailable(format!(
                        "{self:?}: dma-buf export of {len} bytes at {addr:#x} is not available \
                         here ({name} ({code}))"
                    )));
                }
                other => other?,
            }
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

#[cfg(test)]
mod tests {
    use super::GpuDirectFlush;

    #[test]
    fn the_flush_follows_the_write_ordering_then_the_options() {
        use GpuDirectFlush::*;
        // (ordering, options) -> policy: OWNER/ALL_DEVICES order the NIC's
        // writes with the device's work; otherwise the HOST option flushes.
        for (ordering, options, want) in [
            (0, 0, Impossible),
            (0, 2, Impossible),
            (0, 1, Call),
            (0, 3, Call),
            (100, 0, NotNeeded),
            (100, 1, NotNeeded),
            (200, 0, NotNeeded),
        ] {
            assert_eq!(
                GpuDirectFlush::from_attributes(ordering, options),
                want,
                "ordering {ordering}, options {options}"
            );
        }
    }
}
