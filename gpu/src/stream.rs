//! CUDA streams, with a bounded wait for completion.

use std::time::{Duration, Instant};

use crate::context::Device;
use crate::driver::result::check;
use crate::driver::sys::{self, CUstream, cudaError_enum};
use crate::error::{Error, Result};
use crate::guard::guarded;

/// A CUDA stream (non-blocking with respect to the legacy default stream).
pub struct Stream {
    device: Device,
    raw: CUstream,
    owned: bool,
}

// SAFETY: stream handles may be used from any thread; the driver serialises.
unsafe impl Send for Stream {}
// SAFETY: as above; no Rust-side state is mutated through `&Stream`.
unsafe impl Sync for Stream {}

impl Stream {
    /// Creates a stream on `device`.
    pub fn new(device: &Device) -> Result<Stream> {
        guarded("cuStreamCreate", || {
            device.bind()?;
            let mut raw: CUstream = std::ptr::null_mut();
            let flags = sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32;
            // SAFETY: valid out-pointer; a context is current.
            check("cuStreamCreate", unsafe {
                sys::cuStreamCreate(&mut raw, flags)
            })?;
            Ok(Stream {
                device: device.clone(),
                raw,
                owned: true,
            })
        })
    }

    /// Wraps a stream created elsewhere (e.g. cudarc's `CudaStream::cu_stream()`);
    /// it is not destroyed on drop.
    ///
    /// # Safety
    /// `raw` must be a stream of `device`'s primary context that outlives the
    /// returned value.
    pub unsafe fn from_raw(device: &Device, raw: CUstream) -> Stream {
        Stream {
            device: device.clone(),
            raw,
            owned: false,
        }
    }

    /// The device the stream belongs to.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The raw handle.
    pub fn as_raw(&self) -> CUstream {
        self.raw
    }

    /// True when all work enqueued so far has completed.
    pub fn is_idle(&self) -> Result<bool> {
        guarded("cuStreamQuery", || {
            self.device.bind()?;
            // SAFETY: the stream is live.
            let r = unsafe { sys::cuStreamQuery(self.raw) };
            if r == cudaError_enum::CUDA_ERROR_NOT_READY {
                return Ok(false);
            }
            check("cuStreamQuery", r).map(|_| true)
        })
    }

    /// Waits until the stream is idle, at most `timeout` (polling, so a stream
    /// blocked on a doorbell that never rings returns [`Error::Timeout`]).
    pub fn synchronize_timeout(&self, timeout: Duration) -> Result<()> {
        let start = Instant::now();
        let mut pause = Duration::from_micros(1);
        while !self.is_idle()? {
            if start.elapsed() > timeout {
                return Err(Error::Timeout(format!(
                    "stream of {:?} still busy after {timeout:?}",
                    self.device
                )));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(1));
        }
        Ok(())
    }

    /// Makes later work on this stream wait for `event`.
    pub fn wait_event(&self, event: &crate::Event) -> Result<()> {
        guarded("cuStreamWaitEvent", || {
            self.device.bind()?;
            // SAFETY: both handles are live.
            check("cuStreamWaitEvent", unsafe {
                sys::cuStreamWaitEvent(self.raw, event.as_raw(), 0)
            })
        })
    }

    /// Enqueues a device-to-device copy of `bytes` bytes.
    ///
    /// # Safety
    /// Both ranges must be valid device memory until the copy has run.
    pub unsafe fn copy_async(
        &self,
        dst: sys::CUdeviceptr,
        src: sys::CUdeviceptr,
        bytes: usize,
    ) -> Result<()> {
        guarded("cuMemcpyDtoDAsync", || {
            self.device.bind()?;
            // SAFETY: the caller guarantees both ranges.
            check("cuMemcpyDtoDAsync_v2", unsafe {
                sys::cuMemcpyDtoDAsync_v2(dst, src, bytes, self.raw)
            })
        })
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        let _ = guarded("cuStreamDestroy", || {
            self.device.bind()?;
            // SAFETY: the stream was created by `new` and is destroyed once;
            // pending work still completes (driver semantics).
            check("cuStreamDestroy_v2", unsafe {
                sys::cuStreamDestroy_v2(self.raw)
            })
        });
    }
}
