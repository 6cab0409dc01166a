//! GPUDirect RDMA over verbs: registering device memory with the NIC.
//!
//! Two ways, probed in this order once per communicator ([`probe`]), as
//! NCCL does:
//! 1. **dma-buf**: the GPU driver exports the pages as a dma-buf file
//!    descriptor (`cuMemGetHandleForAddressRange`) and the NIC registers
//!    that (`ibv_reg_dmabuf_mr`, rdma-core 34 and Linux 5.12 on). The
//!    registration covers whole host pages around the range, with the
//!    device address as its I/O virtual address, so work requests name
//!    device addresses as they would host ones.
//! 2. **nvidia-peermem**: with that kernel module loaded, `ibv_reg_mr` on a
//!    device address pins the GPU's pages itself.
//!
//! Otherwise device data is staged through pinned host memory (the caller's
//! fallback). Device registrations are made afresh for each operation and
//! dropped when it ends, never cached: the library cannot see a cudarc
//! buffer being freed, and a cached registration would then point at
//! memory that was reallocated.
//!
//! Verified where: the probe's fallbacks, the peermem branch (on host
//! memory, which is what peermem makes device memory look like to
//! `ibv_reg_mr`) and the whole data path run on Soft-RoCE in the guest
//! (`device::gpudirect_probe_tests`); Soft-RoCE has no dma-buf support and the
//! guest no exporter, so the dma-buf registration only fails cleanly there.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

use crate::transport::verbs::sys::ibv_access_flags;

use super::device::Device;
use super::dl;
use super::regcache::Registration;
use crate::transport::device_span::{DeviceSpan, GpuDirectMode};
use crate::{Error, Result};

/// What a device registration allows: our NIC reads it (sends), the
/// peer's NIC writes it (receives).
fn access() -> i32 {
    (ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0 | ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0)
        as i32
}

/// Registers the device memory of `span` on `dev`, the way its
/// [`NicAccess`](crate::device::NicAccess) says; held by the operation
/// until the NIC is done with it.
///
/// # Errors
/// [`Error::Unavailable`] or [`Error::Os`] when the registration fails.
pub(crate) fn register(dev: &Arc<Device>, span: &DeviceSpan) -> Result<Arc<Registration>> {
    match span.nic.mode() {
        GpuDirectMode::DmaBuf => register_dmabuf(dev, span.addr, span.len, &|a, l| {
            span.nic.export_dmabuf(a, l)
        }),
        GpuDirectMode::PeerMem => register_peermem(dev, span.addr, span.len),
    }
}

/// dma-buf registration of the pages around `len` bytes at `addr`.
fn register_dmabuf(
    dev: &Arc<Device>,
    addr: u64,
    len: usize,
    export: &dyn Fn(u64, usize) -> Result<OwnedFd>,
) -> Result<Arc<Registration>> {
    let reg = dl::reg_dmabuf_mr().ok_or_else(|| {
        Error::Unavailable(
            "verbs: libibverbs has no ibv_reg_dmabuf_mr (rdma-core before 34)".into(),
        )
    })?;
    let page = crate::transport::shm::page_size() as u64;
    let start = addr & !(page - 1);
    let end = (addr + len.max(1) as u64).div_ceil(page) * page;
    let bytes = (end - start) as usize;
    let fd = export(start, bytes)?;
    // SAFETY: `fd` is a dma-buf of exactly `bytes` bytes of device memory
    // starting at `start`, exported for this call; the PD is live (the
    // device outlives its registrations, which hold it). The MR takes its
    // own reference to the dma-buf, so `fd` may close when this returns.
    let mr = unsafe { reg(dev.pd, 0, bytes, start, fd.as_raw_fd(), access()) };
    if mr.is_null() {
        return Err(Error::os(
            format!("verbs: ibv_reg_dmabuf_mr(device memory, {bytes} bytes)"),
            std::io::Error::last_os_error(),
        ));
    }
    // SAFETY: `mr` was just made on `dev`'s PD and is owned by nothing else.
    Ok(Arc::new(unsafe {
        Registration::adopt(mr, start as usize, end as usize, dev.clone())
    }))
}

/// `ibv_reg_mr` on a device address (nvidia-peermem pins the GPU's pages).
fn register_peermem(dev: &Arc<Device>, addr: u64, len: usize) -> Result<Arc<Registration>> {
    let bytes = len.max(1);
    // SAFETY: the range is live device memory of the operation (its stream
    // orders the operation before any free); the registration is dropped
    // when the operation no longer lets the NIC touch it.
    let mr = unsafe { (dev.lib.reg_mr)(dev.pd, addr as *mut std::ffi::c_void, bytes, access()) };
    if mr.is_null() {
        return Err(Error::os(
            format!("verbs: ibv_reg_mr(device memory, {bytes} bytes)"),
            std::io::Error::last_os_error(),
        ));
    }
    let start = addr as usize;
    // SAFETY: as in `register_dmabuf`.
    Ok(Arc::new(unsafe {
        Registration::adopt(mr, start, start + bytes, dev.clone())
    }))
}

/// Which way the NIC of `dev` can register device memory, tried on `len`
/// bytes of live device memory at `addr`: dma-buf (with `export`), else
/// peermem where `peermem` says the module is loaded. The registration made
/// to try is dropped at once.
///
/// # Errors
/// Why neither works (both causes), for the log line of the staged fallback.
pub(crate) fn probe(
    dev: &Arc<Device>,
    addr: u64,
    len: usize,
    export: &dyn Fn(u64, usize) -> Result<OwnedFd>,
    peermem: bool,
) -> std::result::Result<GpuDirectMode, String> {
    let dmabuf = match register_dmabuf(dev, addr, len, export) {
        Ok(_) => return Ok(GpuDirectMode::DmaBuf),
        Err(e) => e,
    };
    if !peermem {
        return Err(format!(
            "dma-buf: {dmabuf}; nvidia-peermem: module not loaded"
        ));
    }
    match register_peermem(dev, addr, len) {
        Ok(_) => Ok(GpuDirectMode::PeerMem),
        Err(e) => Err(format!("dma-buf: {dmabuf}; nvidia-peermem: {e}")),
    }
}
