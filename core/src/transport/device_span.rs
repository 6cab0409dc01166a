//! Device memory as the NIC sees it (GPUDirect RDMA): a [`DeviceSpan`]
//! names device memory by address (the CPU never reads or writes it), and
//! its [`NicAccess`] says how the NIC may reach it ([`GpuDirectMode`]) and
//! makes the NIC's writes visible to the device. Independent of CUDA and
//! of the `verbs` feature: the p2p engine carries spans, the verbs
//! transport registers them (`transport::verbs::gpudirect`), and a device
//! implements the access (`device::cuda::cuda_nic` for CUDA).

// Without the `verbs` feature nothing builds a device span.
#![cfg_attr(not(feature = "verbs"), allow(dead_code))]

use std::fmt;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use crate::Result;

/// How a rank's NIC reaches device memory (GPUDirect RDMA), chosen once per
/// communicator by probing, in this order (as NCCL does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuDirectMode {
    /// The driver exports the memory as a dma-buf file descriptor
    /// (`cuMemGetHandleForAddressRange`) and the NIC registers that
    /// (`ibv_reg_dmabuf_mr`): upstream kernels, no extra module.
    DmaBuf,
    /// `ibv_reg_mr` on the device address itself, which works where the
    /// `nvidia-peermem` kernel module is loaded.
    PeerMem,
}

impl fmt::Display for GpuDirectMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GpuDirectMode::DmaBuf => "dma-buf (ibv_reg_dmabuf_mr)",
            GpuDirectMode::PeerMem => "nvidia-peermem (ibv_reg_mr on device memory)",
        })
    }
}

/// A device's memory as the NIC needs it.
pub(crate) trait NicAccess: Send + Sync {
    /// How this device's memory is registered.
    fn mode(&self) -> GpuDirectMode;

    /// A dma-buf file descriptor for `len` bytes at `addr` (both multiples
    /// of the host page size), for [`GpuDirectMode::DmaBuf`].
    ///
    /// # Errors
    /// [`crate::Error::Unavailable`] where the memory cannot be exported.
    fn export_dmabuf(&self, addr: u64, len: usize) -> Result<OwnedFd>;

    /// True when the NIC may read and write the device memory at `addr`
    /// directly; memory it cannot reach (a stream-ordered pool's, on CUDA)
    /// is staged through host memory instead.
    fn reaches(&self, addr: u64) -> bool;

    /// Makes every write the NIC has placed in this device's memory so far
    /// visible to device work enqueued after this returns
    /// (`cuFlushGPUDirectRDMAWrites`).
    ///
    /// # Errors
    /// As the driver reports it.
    fn flush(&self) -> Result<()>;
}

/// `len` bytes of device memory at `addr` that an operation sends from or
/// receives into by RDMA. The CPU never touches them.
#[derive(Clone)]
pub(crate) struct DeviceSpan {
    /// First byte (a device address).
    pub addr: u64,
    /// Bytes.
    pub len: usize,
    /// How the NIC reaches the memory.
    pub nic: Arc<dyn NicAccess>,
}

impl DeviceSpan {
    /// Bytes `offset..offset + len` of this span.
    pub(crate) fn slice(&self, offset: usize, len: usize) -> DeviceSpan {
        debug_assert!(offset + len <= self.len, "device span sliced past its end");
        DeviceSpan {
            addr: self.addr + offset as u64,
            len,
            nic: self.nic.clone(),
        }
    }
}

impl fmt::Debug for DeviceSpan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "DeviceSpan({} bytes at {:#x}, {:?})",
            self.len,
            self.addr,
            self.nic.mode()
        )
    }
}
