//! The CUDA device: the device traits of [`crate::device`] implemented on
//! the driver wrapping of `streamcomm-gpu`, and the set-up of a
//! communicator's direct path and GPUDirect RDMA on one CUDA device.
//! [`crate::cuda::CudaComm`] is built on this.

mod cuda_nic;
mod cuda_queue;
mod cuda_windows;

use std::sync::Arc;

use streamcomm_gpu::{Device, Kernels};

use crate::comm::peer_watch::peer_gone;
use crate::device::direct::Direct;
use crate::device::direct::window::{Off, WindowDevice};
use crate::device::direct::window_watch::WATCH_PERIOD;
use crate::{Communicator, Error, Result};
use cuda_windows::CudaWindows;

pub(crate) use cuda_nic::establish as establish_gpudirect;
pub(crate) use cuda_queue::{CudaQueue, CudaSignal, CudaStaging};

/// Converts an error of the CUDA layer: a failed driver call becomes
/// [`Error::Cuda`] with its `CUresult` and the layer's error as `source()`;
/// a missing driver stays [`Error::Unavailable`].
pub(crate) fn gpu_error(e: streamcomm_gpu::Error) -> Error {
    match e {
        streamcomm_gpu::Error::Unavailable(m) => Error::Unavailable(m),
        streamcomm_gpu::Error::InvalidArgument(m) => Error::InvalidArgument(m),
        streamcomm_gpu::Error::Driver { call, code, name } => Error::Cuda {
            call: call.to_string(),
            code,
            name,
            source: Arc::new(e),
        },
        other => Error::Unavailable(format!("CUDA: {other}")),
    }
}

/// Sets up the direct path (a collective call: every rank makes it):
/// windows on `device` and their watchdog (see [`Direct::establish`]).
pub(crate) fn establish_direct(
    comm: &Communicator,
    device: &Device,
    kernels: Option<&Kernels>,
) -> Result<std::result::Result<Direct, Off>> {
    // Nothing here may return early: every rank must join the exchange.
    let core = comm.inner.core.clone();
    let source = CudaWindows { device };
    // Without the reduce kernels this rank cannot take part.
    let source = kernels.is_some().then_some(&source as &dyn WindowDevice);
    Direct::establish(
        comm,
        source,
        comm.config().cuda_window,
        // The shared-memory watchdog's rule: gone, and not departed cleanly.
        Box::new(move |peer, pid| !peer_gone(&core, peer, pid)),
        WATCH_PERIOD,
    )
}
