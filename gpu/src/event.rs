//! CUDA events.

use crate::context::Device;
use crate::driver::result::check;
use crate::driver::sys::{self, CUevent, cudaError_enum};
use crate::error::Result;
use crate::guard::guarded;
use crate::stream::Stream;

/// A CUDA event, destroyed on drop.
pub struct Event {
    device: Device,
    raw: CUevent,
}

// SAFETY: event handles may be used from any thread.
unsafe impl Send for Event {}
// SAFETY: as above.
unsafe impl Sync for Event {}

impl Event {
    /// Creates an event; `timing` enables [`Event::elapsed_ms`] (slower to record).
    pub fn new(device: &Device, timing: bool) -> Result<Event> {
        guarded("cuEventCreate", || {
            device.bind()?;
            let flags = if timing {
                sys::CUevent_flags::CU_EVENT_DEFAULT as u32
            } else {
                sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32
            };
            let mut raw: CUevent = std::ptr::null_mut();
            // SAFETY: valid out-pointer; a context is current.
            check("cuEventCreate", unsafe {
                sys::cuEventCreate(&mut raw, flags)
            })?;
            Ok(Event {
                device: device.clone(),
                raw,
            })
        })
    }

    /// Records the event on `stream`.
    pub fn record(&self, stream: &Stream) -> Result<()> {
        guarded("cuEventRecord", || {
            self.device.bind()?;
            // SAFETY: both handles are live.
            check("cuEventRecord", unsafe {
                sys::cuEventRecord(self.raw, stream.as_raw())
            })
        })
    }

    /// True when the work before the last record has completed.
    pub fn is_complete(&self) -> Result<bool> {
        guarded("cuEventQuery", || {
            self.device.bind()?;
            // SAFETY: the event is live.
            let r = unsafe { sys::cuEventQuery(self.raw) };
            if r == cudaError_enum::CUDA_ERROR_NOT_READY {
                return Ok(false);
            }
            check("cuEventQuery", r).map(|_| true)
        })
    }

    /// Milliseconds between `start` and `end` (both recorded with timing, complete).
    pub fn elapsed_ms(start: &Event, end: &Event) -> Result<f32> {
        guarded("cuEventElapsedTime", || {
            start.device.bind()?;
            let mut ms = 0f32;
            // SAFETY: valid out-pointer, live events.
            check("cuEventElapsedTime", unsafe {
                crate::driver::stable::event_elapsed_time(&mut ms, start.raw, end.raw)?
            })?;
            Ok(ms)
        })
    }

    /// The raw handle.
    pub fn as_raw(&self) -> CUevent {
        self.raw
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        let _ = guarded("cuEventDestroy", || {
            self.device.bind()?;
            // SAFETY: created by `new`, destroyed once.
            check("cuEventDestroy_v2", unsafe {
                sys::cuEventDestroy_v2(self.raw)
            })
        });
    }
}
