//! Pinned host memory, mapped into the device's address space
//! (`cuMemHostAlloc` with `PORTABLE | DEVICEMAP`).

use crate::context::Device;
use crate::driver::result::check;
use crate::driver::sys::{self, CU_MEMHOSTALLOC_DEVICEMAP, CU_MEMHOSTALLOC_PORTABLE, CUdeviceptr};
use crate::error::{Error, Result};
use crate::guard::guarded;

/// `len` bytes of page-locked host memory, zeroed, visible to the device at
/// [`PinnedBuffer::device_ptr`]; freed on drop.
///
/// The device may write it while the host reads it: host access goes through raw
/// pointers or [`crate::Doorbells`], and a host slice view is only sound once the
/// device work touching it has completed.
pub struct PinnedBuffer {
    device: Device,
    host: *mut u8,
    dptr: CUdeviceptr,
    len: usize,
}

// SAFETY: the memory is plain host memory owned by this value; the raw pointer
// is only an address.
unsafe impl Send for PinnedBuffer {}
// SAFETY: shared access only hands out raw pointers and copies.
unsafe impl Sync for PinnedBuffer {}

impl PinnedBuffer {
    /// Allocates `len` (≥ 1) zeroed bytes, host-mapped for `device`.
    pub fn alloc(device: &Device, len: usize) -> Result<PinnedBuffer> {
        if len == 0 {
            return Err(Error::invalid("PinnedBuffer::alloc: len is 0"));
        }
        guarded("cuMemHostAlloc", || {
            device.bind()?;
            let mut host: *mut std::ffi::c_void = std::ptr::null_mut();
            let flags = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP;
            // SAFETY: valid out-pointer; a context is current.
            check("cuMemHostAlloc", unsafe {
                sys::cuMemHostAlloc(&mut host, len, flags)
            })?;
            let mut buf = PinnedBuffer {
                device: device.clone(),
                host: host.cast(),
                dptr: 0,
                len,
            };
            // SAFETY: `host` points to `len` writable bytes just allocated.
            unsafe { std::ptr::write_bytes(buf.host, 0, len) };
            let mut dptr: CUdeviceptr = 0;
            // SAFETY: `host` was allocated with DEVICEMAP; flags must be 0.
            check("cuMemHostGetDevicePointer_v2", unsafe {
                sys::cuMemHostGetDevicePointer_v2(&mut dptr, host, 0)
            })?;
            buf.dptr = dptr;
            Ok(buf)
        })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false (zero-length buffers are refused).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The host address.
    pub fn as_ptr(&self) -> *mut u8 {
        self.host
    }

    /// The address under which the device sees the same bytes.
    pub fn device_ptr(&self) -> CUdeviceptr {
        self.dptr
    }

    /// The device the mapping was made for.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Copies `src` to byte `offset`.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<()> {
        self.check_range("write", offset, src.len())?;
        // SAFETY: the range is inside the allocation; a concurrent device
        // access is the caller's ordering problem and cannot corrupt Rust state.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.host.add(offset), src.len()) };
        Ok(())
    }

    /// Copies bytes from `offset` into `dst`.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.check_range("read", offset, dst.len())?;
        // SAFETY: as in `write`.
        unsafe {
            std::ptr::copy_nonoverlapping(self.host.add(offset), dst.as_mut_ptr(), dst.len())
        };
        Ok(())
    }

    fn check_range(&self, what: &str, offset: usize, n: usize) -> Result<()> {
        if offset.checked_add(n).is_none_or(|end| end > self.len) {
            return Err(Error::invalid(format!(
                "PinnedBuffer::{what}: {n} bytes at offset {offset} exceed {}",
                self.len
            )));
        }
        Ok(())
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        let _ = guarded("cuMemFreeHost", || {
            self.device.bind()?;
            // SAFETY: `host` came from cuMemHostAlloc and is freed once.
            check("cuMemFreeHost", unsafe {
                sys::cuMemFreeHost(self.host.cast())
            })
        });
    }
}
