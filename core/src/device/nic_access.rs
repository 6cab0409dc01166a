//! GPUDirect RDMA: the NIC reads and writes device memory itself, so a
//! device send or receive over verbs moves no byte through host memory.
//!
//! What the p2p engine needs from a device is here, independent of CUDA and
//! of the `verbs` feature: a [`DeviceSpan`] names device memory by address
//! (the CPU never reads or writes it), and its [`NicAccess`] says how the
//! NIC may reach it ([`GpuDirectMode`]) and makes the NIC's writes visible
//! to the device. The registration itself is `transport::verbs::gpudirect`;
//! the CUDA implementation is `device::cuda::cuda_nic`; which operations use it is
//! decided in `device::call` (`enqueue_device_group`).

// Without the `verbs` feature nothing builds a device span or probes.
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
    pub fn slice(&self, offset: usize, len: usize) -> DeviceSpan {
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

/// The RDMA device GPUDirect would use for `comm`'s device operations:
/// `None` when no peer moves by RDMA, or with `STREAMCOMM_GPUDIRECT=0`
/// (logged). What to check before allocating memory to probe with.
#[cfg(feature = "verbs")]
pub(crate) fn wanted(
    comm: &crate::Communicator,
) -> Option<Arc<crate::transport::verbs::device::Device>> {
    let dev = comm.rdma_device()?;
    if !comm.config().gpudirect {
        tracing::info!(
            "GPUDirect RDMA off (STREAMCOMM_GPUDIRECT=0): device p2p over verbs is staged"
        );
        return None;
    }
    Some(dev)
}

/// Where the probe of [`establish`] tries registrations.
pub(crate) struct ProbeMemory<'a> {
    /// Live device memory to register (`len` bytes at `addr`, page aligned).
    pub addr: u64,
    /// Its length.
    pub len: usize,
    /// Exports device memory as a dma-buf.
    pub export: &'a dyn Fn(u64, usize) -> Result<OwnedFd>,
    /// Whether nvidia-peermem is loaded (`ibv_reg_mr` may take device memory).
    pub peermem: bool,
}

/// Probes GPUDirect RDMA on `dev` (from [`wanted`]): `None` when neither
/// registration works on this rank's NIC (then its device p2p is staged);
/// else the access `make` builds for the mode that works. Logged once per
/// communicator. Each rank decides alone: the protocol is the same either
/// way (device groups send every non-empty message over verbs by
/// rendezvous).
#[cfg(feature = "verbs")]
pub(crate) fn establish(
    dev: &Arc<crate::transport::verbs::device::Device>,
    probe: &ProbeMemory<'_>,
    make: impl FnOnce(GpuDirectMode) -> Arc<dyn NicAccess>,
) -> Option<Arc<dyn NicAccess>> {
    match crate::transport::verbs::gpudirect::probe(
        dev,
        probe.addr,
        probe.len,
        probe.export,
        probe.peermem,
    ) {
        Ok(mode) => {
            tracing::info!(device = %dev.name, %mode, "GPUDirect RDMA: device p2p over verbs moves no byte through host memory");
            Some(make(mode))
        }
        Err(why) => {
            tracing::warn!(device = %dev.name, %why, "GPUDirect RDMA unavailable: device p2p over verbs is staged through pinned host memory");
            None
        }
    }
}
