//! The RDMA device that GPUDirect RDMA registers device memory with, as the
//! layers above the transports see it: a handle a connection hands out, and
//! the probe that finds which registration works on it. In a build without
//! the `verbs` feature no connection hands one out, and nothing of this
//! names a transport above this folder.

use std::os::fd::OwnedFd;

use crate::Result;
use crate::transport::device_span::GpuDirectMode;

/// The RDMA device a connection writes through ([`Connection::gpudirect_nic`](
/// crate::transport::Connection::gpudirect_nic)).
#[derive(Clone)]
pub(crate) struct GpuDirectNic {
    #[cfg(feature = "verbs")]
    pub(super) device: std::sync::Arc<crate::transport::verbs::device::Device>,
}

impl GpuDirectNic {
    /// The device's name, for log lines.
    pub(crate) fn name(&self) -> &str {
        #[cfg(feature = "verbs")]
        return &self.device.name;
        #[cfg(not(feature = "verbs"))]
        ""
    }

    /// Which way this NIC can register device memory, tried on `len` bytes
    /// of live device memory at `addr`: dma-buf (with `export`), else
    /// nvidia-peermem where `peermem` says the module is loaded. The
    /// registrations made to try are dropped at once.
    ///
    /// # Errors
    /// Why neither works (both causes), for the log line of the staged
    /// fallback.
    pub(crate) fn probe(
        &self,
        addr: u64,
        len: usize,
        export: &dyn Fn(u64, usize) -> Result<OwnedFd>,
        peermem: bool,
    ) -> std::result::Result<GpuDirectMode, String> {
        #[cfg(feature = "verbs")]
        return crate::transport::verbs::gpudirect::probe(&self.device, addr, len, export, peermem);
        #[cfg(not(feature = "verbs"))]
        {
            let _ = (addr, len, export, peermem);
            Err("this build of streamcomm has no verbs transport".into())
        }
    }
}

/// Whether this build has the verbs transport (tests that need an RDMA
/// device skip without it).
#[cfg(test)]
pub(crate) const VERBS_BUILT: bool = cfg!(feature = "verbs");
