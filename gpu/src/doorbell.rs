//! Doorbells: 32-bit words in host-mapped pinned memory that the host and the
//! device both read and write (by stream memory operations or kernels).

use std::sync::atomic::{AtomicU32, Ordering};

use streamcomm_kernels::cuda::DOORBELL_STRIDE;

use crate::context::Device;
use crate::driver::sys::CUdeviceptr;
use crate::error::{Error, Result};
use crate::pinned::PinnedBuffer;

/// `count` doorbell words, each alone on a [`DOORBELL_STRIDE`]-byte line, all 0
/// at first.
pub struct Doorbells {
    mem: PinnedBuffer,
    count: usize,
}

impl Doorbells {
    /// Allocates `count` (≥ 1) doorbells mapped for `device`.
    pub fn new(device: &Device, count: usize) -> Result<Doorbells> {
        if count == 0 {
            return Err(Error::invalid("Doorbells::new: count is 0"));
        }
        let bytes = count
            .checked_mul(DOORBELL_STRIDE)
            .ok_or_else(|| Error::invalid(format!("Doorbells::new: count {count} too large")))?;
        Ok(Doorbells {
            mem: PinnedBuffer::alloc(device, bytes)?,
            count,
        })
    }

    /// Number of doorbells.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Always false (an empty set is refused).
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    fn word(&self, i: usize) -> Result<&AtomicU32> {
        if i >= self.count {
            return Err(Error::invalid(format!("doorbell {i} of {}", self.count)));
        }
        // SAFETY: the word is inside the allocation, 4-byte aligned (pages are,
        // and the stride is a multiple of 4), and lives as long as `self`; the
        // device accesses it only with 32-bit operations.
        Ok(unsafe { &*(self.mem.as_ptr().add(i * DOORBELL_STRIDE) as *const AtomicU32) })
    }

    /// Reads doorbell `i` (acquire: what the writer published before is visible).
    pub fn load(&self, i: usize) -> Result<u32> {
        Ok(self.word(i)?.load(Ordering::Acquire))
    }

    /// Writes doorbell `i` (release: earlier host writes are published first).
    pub fn store(&self, i: usize, value: u32) -> Result<()> {
        self.word(i)?.store(value, Ordering::Release);
        Ok(())
    }

    /// The device address of doorbell `i`, for stream memory operations and kernels.
    pub fn device_ptr(&self, i: usize) -> Result<CUdeviceptr> {
        self.word(i)?;
        Ok(self.mem.device_ptr() + (i * DOORBELL_STRIDE) as u64)
    }

    /// The device the doorbells are mapped for.
    pub fn device(&self) -> &Device {
        self.mem.device()
    }
}
