//! dma-buf export of device memory for GPUDirect RDMA
//! (`cuMemGetHandleForAddressRange`).

use std::os::fd::{FromRawFd, OwnedFd};

use crate::driver::result::check;
use crate::driver::sys::{self, CUdevice_attribute, CUmemRangeHandleType};
use crate::error::{Error, Result};
use crate::guard::guarded;
use crate::memory::{DeviceBuffer, ALLOC_GRANULE};

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
        let attr = CUdevice_attribute::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED;
        if self.device().attribute(attr)? != 1 {
            return Err(Error::Unavailable(format!(
                "{:?} does not support dma-buf export",
                self.device()
            )));
        }
        guarded("cuMemGetHandleForAddressRange", || {
            self.device().bind()?;
            let mut fd: std::ffi::c_int = -1;
            let kind = CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD;
            // SAFETY: `fd` is the int-sized out-parameter this handle type
            // writes; the range is the whole (page-rounded) allocation.
            let r = unsafe {
                sys::cuMemGetHandleForAddressRange(
                    (&mut fd as *mut std::ffi::c_int).cast(),
                    self.as_raw(),
                    self.allocated_len(),
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
}
