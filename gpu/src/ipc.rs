//! CUDA IPC: sharing a device allocation with another process on the host.

use crate::context::Device;
use crate::driver::probe;
use crate::driver::result::check;
use crate::driver::sys::{self, CUdeviceptr, CUipcMemHandle};
use crate::error::{Error, Result};
use crate::guard::guarded;
use crate::memory::DeviceBuffer;

/// Size of a CUDA IPC memory handle in bytes.
pub(crate) const IPC_HANDLE_BYTES: usize = 64;

/// An exported allocation, as 64 opaque bytes to send to a peer process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpcHandle {
    bytes: [u8; IPC_HANDLE_BYTES],
    len: usize,
}

impl IpcHandle {
    /// Exports `buffer` (`cuIpcGetMemHandle`).
    pub fn export(buffer: &DeviceBuffer) -> Result<IpcHandle> {
        guarded("cuIpcGetMemHandle", || {
            buffer.device().bind()?;
            // SAFETY: CUipcMemHandle is a plain byte array; all-zero is valid.
            let mut h: CUipcMemHandle = unsafe { std::mem::zeroed() };
            // SAFETY: valid out-pointer; the pointer is the base of an allocation.
            check("cuIpcGetMemHandle", unsafe {
                sys::cuIpcGetMemHandle(&mut h, buffer.as_raw())
            })?;
            let mut bytes = [0u8; IPC_HANDLE_BYTES];
            for (b, c) in bytes.iter_mut().zip(h.reserved.iter()) {
                *b = *c as u8;
            }
            Ok(IpcHandle {
                bytes,
                len: buffer.len(),
            })
        })
    }

    /// The wire form: 64 handle bytes then the length as little-endian u64.
    pub fn to_bytes(&self) -> [u8; IPC_HANDLE_BYTES + 8] {
        let mut out = [0u8; IPC_HANDLE_BYTES + 8];
        out[..IPC_HANDLE_BYTES].copy_from_slice(&self.bytes);
        out[IPC_HANDLE_BYTES..].copy_from_slice(&(self.len as u64).to_le_bytes());
        out
    }

    /// Parses [`IpcHandle::to_bytes`].
    pub fn from_bytes(b: &[u8]) -> Result<IpcHandle> {
        if b.len() != IPC_HANDLE_BYTES + 8 {
            return Err(Error::invalid(format!(
                "IpcHandle::from_bytes: {} bytes, expected {}",
                b.len(),
                IPC_HANDLE_BYTES + 8
            )));
        }
        let mut bytes = [0u8; IPC_HANDLE_BYTES];
        bytes.copy_from_slice(&b[..IPC_HANDLE_BYTES]);
        let mut len = [0u8; 8];
        len.copy_from_slice(&b[IPC_HANDLE_BYTES..]);
        let len = usize::try_from(u64::from_le_bytes(len))
            .map_err(|_| Error::invalid("IpcHandle::from_bytes: length overflows usize"))?;
        Ok(IpcHandle { bytes, len })
    }

    /// Length of the exported buffer in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length export (never produced by [`IpcHandle::export`]).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A peer's allocation opened in this process, closed on drop.
pub struct IpcMapping {
    device: Device,
    ptr: CUdeviceptr,
    len: usize,
}

// SAFETY: the mapping is a device address; handles are thread-agnostic.
unsafe impl Send for IpcMapping {}
// SAFETY: as above.
unsafe impl Sync for IpcMapping {}

impl IpcMapping {
    /// Opens `handle` (exported by another process) on `device`.
    pub fn open(device: &Device, handle: &IpcHandle) -> Result<IpcMapping> {
        probe::driver()?;
        guarded("cuIpcOpenMemHandle", || {
            device.bind()?;
            // SAFETY: plain byte array, all-zero valid.
            let mut h: CUipcMemHandle = unsafe { std::mem::zeroed() };
            for (c, b) in h.reserved.iter_mut().zip(handle.bytes.iter()) {
                *c = *b as _;
            }
            let mut ptr: CUdeviceptr = 0;
            let flags = sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32;
            // SAFETY: valid out-pointer; a context is current.
            check("cuIpcOpenMemHandle_v2", unsafe {
                sys::cuIpcOpenMemHandle_v2(&mut ptr, h, flags)
            })?;
            Ok(IpcMapping {
                device: device.clone(),
                ptr,
                len: handle.len,
            })
        })
    }

    /// The device address of the peer's buffer in this process.
    pub fn as_raw(&self) -> CUdeviceptr {
        self.ptr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length mapping.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for IpcMapping {
    fn drop(&mut self) {
        let _ = guarded("cuIpcCloseMemHandle", || {
            self.device.bind()?;
            // SAFETY: opened by `open`, closed once.
            check("cuIpcCloseMemHandle", unsafe {
                sys::cuIpcCloseMemHandle(self.ptr)
            })
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handle_bytes_round_trip_and_bad_lengths_are_refused() {
        let mut bytes = [0u8; IPC_HANDLE_BYTES];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (i * 7 + 3) as u8;
        }
        let h = IpcHandle {
            bytes,
            len: 123_456_789,
        };
        assert_eq!(IpcHandle::from_bytes(&h.to_bytes()).unwrap(), h);
        let err = IpcHandle::from_bytes(&[0u8; 10]).unwrap_err();
        assert!(err.to_string().contains("10 bytes"), "{err}");
    }
}
