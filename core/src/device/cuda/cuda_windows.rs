//! Windows of the direct path in CUDA device memory (and flag areas of
//! shared host memory registered with the device): allocated with
//! `cuMemAlloc`, zeroed, exported with CUDA IPC; a peer thread of the same
//! process on the same device uses the address as it is (a process cannot
//! open its own IPC handle) and shares ownership of the allocation, so it
//! outlives whichever rank drops first.

use std::any::Any;
use std::sync::Arc;

use streamcomm_gpu::{Device, DeviceBuffer, HostRegistration, IpcHandle, IpcMapping};

use super::gpu_error;
use crate::device::DevAddr;
use crate::device::direct::window::{WindowDevice, find_in_process, share_in_process};
use crate::{Error, Result};

/// Bytes of an IPC handle's wire form.
const HANDLE: usize = 72;

/// The CUDA device as a source of windows.
pub(crate) struct CudaWindows<'a> {
    pub device: &'a Device,
}

impl WindowDevice for CudaWindows<'_> {
    fn ordinal(&self) -> u32 {
        self.device.ordinal() as u32
    }

    fn alloc(&self, bytes: usize) -> Result<(DevAddr, Vec<u8>, Box<dyn Any + Send + Sync>)> {
        let mut buf = DeviceBuffer::alloc(self.device, bytes).map_err(gpu_error)?;
        buf.fill(0).map_err(gpu_error)?;
        let handle = IpcHandle::export(&buf).map_err(gpu_error)?;
        let mut payload = handle.to_bytes().to_vec();
        let addr = buf.as_raw();
        payload.extend(addr.to_le_bytes());
        payload.extend((self.device.ordinal() as u32).to_le_bytes());
        Ok((addr, payload, share_in_process(addr, Arc::new(buf))))
    }

    fn open(
        &self,
        payload: &[u8],
        same_process: bool,
    ) -> Result<(DevAddr, Box<dyn Any + Send + Sync>)> {
        if payload.len() != HANDLE + 12 {
            return Err(Error::invalid(format!(
                "window record of {} bytes, expected {}",
                payload.len(),
                HANDLE + 12
            )));
        }
        if same_process {
            let ordinal = u32::from_le_bytes(payload[HANDLE + 8..].try_into().expect("4 bytes"));
            if ordinal as usize != self.device.ordinal() {
                return Err(Error::Unavailable(format!(
                    "a peer thread's window is on CUDA device {ordinal}, this rank's on {}",
                    self.device.ordinal()
                )));
            }
            let addr = u64::from_le_bytes(payload[HANDLE..HANDLE + 8].try_into().expect("8 bytes"));
            let keep = find_in_process(addr).ok_or_else(|| {
                Error::Unavailable(format!("no window at {addr:#x} in this process any more"))
            })?;
            return Ok((addr, keep));
        }
        let handle = IpcHandle::from_bytes(&payload[..HANDLE]).map_err(gpu_error)?;
        let mapping = IpcMapping::open(self.device, &handle).map_err(gpu_error)?;
        Ok((mapping.as_raw(), Box::new(mapping)))
    }

    unsafe fn map_host(
        &self,
        host: *mut u8,
        len: usize,
    ) -> Result<(DevAddr, Box<dyn Any + Send + Sync>)> {
        // SAFETY: forwarded contract.
        let registration =
            unsafe { HostRegistration::new(self.device, host, len) }.map_err(gpu_error)?;
        Ok((registration.device_ptr(), Box::new(registration)))
    }
}
