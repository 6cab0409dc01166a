//! Device memory (`cuMemAlloc`).

use crate::context::Device;
use crate::driver::result::check;
use crate::driver::sys::{self, CUdeviceptr};
use crate::error::{Error, Result};
use crate::guard::guarded;

/// Allocations are rounded up to this many bytes, so any buffer can be exported
/// as a dma-buf (which needs host-page-aligned ranges).
pub const ALLOC_GRANULE: usize = 4096;

/// A device allocation of `len` bytes, freed on drop.
pub struct DeviceBuffer {
    device: Device,
    ptr: CUdeviceptr,
    len: usize,
}

impl DeviceBuffer {
    /// Allocates `len` bytes (at least 1) on `device`; contents undefined.
    pub fn alloc(device: &Device, len: usize) -> Result<DeviceBuffer> {
        if len == 0 {
            return Err(Error::invalid("DeviceBuffer::alloc: len is 0"));
        }
        let rounded = len
            .checked_next_multiple_of(ALLOC_GRANULE)
            .ok_or_else(|| Error::invalid(format!("DeviceBuffer::alloc: len {len} too large")))?;
        guarded("cuMemAlloc", || {
            device.bind()?;
            let mut ptr: CUdeviceptr = 0;
            // SAFETY: valid out-pointer; a context is current.
            check("cuMemAlloc_v2", unsafe {
                sys::cuMemAlloc_v2(&mut ptr, rounded)
            })?;
            Ok(DeviceBuffer {
                device: device.clone(),
                ptr,
                len,
            })
        })
    }

    /// Length in bytes, as requested.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false (zero-length buffers are refused).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes actually allocated (`len` rounded up to [`ALLOC_GRANULE`]).
    pub fn allocated_len(&self) -> usize {
        self.len.next_multiple_of(ALLOC_GRANULE)
    }

    /// The device this buffer lives on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The device address.
    pub fn as_raw(&self) -> CUdeviceptr {
        self.ptr
    }

    /// Copies `src` to the start of the buffer and waits until the copy has
    /// landed (so work on any stream enqueued afterwards sees it).
    pub fn copy_from_host(&mut self, src: &[u8]) -> Result<()> {
        self.check_len("copy_from_host", src.len())?;
        guarded("cuMemcpyHtoD", || {
            self.device.bind()?;
            // SAFETY: the range was checked against the allocation; `src` is a
            // valid host slice for the duration of the call.
            check("cuMemcpyHtoD_v2", unsafe {
                sys::cuMemcpyHtoD_v2(self.ptr, src.as_ptr().cast(), src.len())
            })?;
            legacy_sync()
        })
    }

    /// Copies the start of the buffer into `dst` and waits for the copy. Like
    /// the other copies here it is not ordered after work enqueued on a
    /// [`crate::Stream`]: synchronise that stream first.
    pub fn copy_to_host(&self, dst: &mut [u8]) -> Result<()> {
        self.check_len("copy_to_host", dst.len())?;
        guarded("cuMemcpyDtoH", || {
            self.device.bind()?;
            // SAFETY: as in `copy_from_host`, with `dst` writable.
            check("cuMemcpyDtoH_v2", unsafe {
                sys::cuMemcpyDtoH_v2(dst.as_mut_ptr().cast(), self.ptr, dst.len())
            })
        })
    }

    /// Sets every byte to `value` and waits until the device has done it.
    ///
    /// The fill runs on a private non-blocking stream, which is all it
    /// waits for: the legacy default stream (with which every blocking
    /// stream synchronises) is left alone, so a fill neither invalidates
    /// another thread's capture on a blocking stream nor waits for that
    /// thread's work.
    pub fn fill(&mut self, value: u8) -> Result<()> {
        fill_privately(&self.device, self.ptr, self.len, value)
    }

    fn check_len(&self, what: &str, n: usize) -> Result<()> {
        if n > self.len {
            return Err(Error::invalid(format!(
                "DeviceBuffer::{what}: {n} bytes do not fit in {}",
                self.len
            )));
        }
        Ok(())
    }
}

/// Sets `len` bytes at `ptr` (device memory of `device`) to `value` and
/// waits for it, on a private non-blocking stream: nothing else is waited
/// for, and the legacy default stream is left alone.
pub(crate) fn fill_privately(
    device: &Device,
    ptr: CUdeviceptr,
    len: usize,
    value: u8,
) -> Result<()> {
    let stream = crate::Stream::new(device)?;
    guarded("cuMemsetD8Async", || {
        device.bind()?;
        // SAFETY: the caller's range is device memory of `device`, which
        // outlives the wait below; the stream is live.
        check("cuMemsetD8Async", unsafe {
            sys::cuMemsetD8Async(ptr, value, len, stream.as_raw())
        })?;
        // SAFETY: as above.
        check("cuStreamSynchronize", unsafe {
            sys::cuStreamSynchronize(stream.as_raw())
        })
    })
}

/// Waits for the legacy default stream. The "synchronous" `cuMemcpyHtoD` (from
/// pageable memory) may return before the device has finished, and it is
/// ordered only with the legacy stream, not with the non-blocking streams of
/// this crate.
fn legacy_sync() -> Result<()> {
    // SAFETY: the null handle is the legacy default stream of the current context.
    check("cuStreamSynchronize", unsafe {
        sys::cuStreamSynchronize(std::ptr::null_mut())
    })
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        let _ = guarded("cuMemFree", || {
            self.device.bind()?;
            // SAFETY: `ptr` came from cuMemAlloc and is freed once; a failure
            // (e.g. a sticky context error) can only leak it.
            check("cuMemFree_v2", unsafe { sys::cuMemFree_v2(self.ptr) })
        });
    }
}
