//! GPUDirect RDMA: the NIC reads and writes device memory itself, so a
//! device send or receive over verbs moves no byte through host memory.
//!
//! Here: whether a communicator wants it and the probe that picks a
//! [`GpuDirectMode`] per communicator. The spans and the access a device
//! implements are `transport::device_span`; the registration is
//! `transport::verbs::gpudirect`; the CUDA implementation is
//! `device::cuda::cuda_nic`; which operations use it is decided in
//! `device::call` (`enqueue_device_group`).

use std::os::fd::OwnedFd;
use std::sync::Arc;

use crate::Result;
use crate::comm::submit::Submit;
use crate::transport::device_span::{GpuDirectMode, NicAccess};
use crate::transport::gpudirect_nic::GpuDirectNic;

/// The RDMA device of `comm`'s peers that move by RDMA, if any does.
pub(crate) fn rdma_device(comm: &crate::Communicator) -> Option<GpuDirectNic> {
    (0..comm.size())
        .filter(|&p| comm.moves_by_rdma(p))
        .find_map(|p| comm.inner.core.connection(p).ok()?.gpudirect_nic())
}

/// The RDMA device GPUDirect would use for `comm`'s device operations:
/// `None` when no peer moves by RDMA, or with `STREAMCOMM_GPUDIRECT=0`
/// (logged). What to check before allocating memory to probe with.
pub(crate) fn wanted(comm: &crate::Communicator) -> Option<GpuDirectNic> {
    let dev = rdma_device(comm)?;
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
pub(crate) fn establish(
    dev: &GpuDirectNic,
    probe: &ProbeMemory<'_>,
    make: impl FnOnce(GpuDirectMode) -> Arc<dyn NicAccess>,
) -> Option<Arc<dyn NicAccess>> {
    match dev.probe(probe.addr, probe.len, probe.export, probe.peermem) {
        Ok(mode) => {
            tracing::info!(device = dev.name(), %mode, "GPUDirect RDMA: device p2p over verbs moves no byte through host memory");
            Some(make(mode))
        }
        Err(why) => {
            tracing::warn!(device = dev.name(), %why, "GPUDirect RDMA unavailable: device p2p over verbs is staged through pinned host memory");
            None
        }
    }
}
