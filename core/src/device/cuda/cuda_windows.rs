//! Windows of the direct path in CUDA device memory (and flag areas of
//! shared host memory registered with the device).
//!
//! A window is allocated with the driver's virtual memory management where
//! the device supports it with POSIX file descriptors (`cuMemCreate`, as
//! NCCL allocates what it shares): its descriptor goes to the other
//! processes, and each import holds the memory, so a window stays valid
//! for its readers however its owner ends. Elsewhere it is a `cuMemAlloc`
//! allocation exported with CUDA IPC, which the owner must not free while
//! a peer maps it (the windows' drop waits for that, bounded). Either way
//! it is zeroed on a private stream, and a peer thread of the same process
//! on the same device uses the address as it is and shares ownership of
//! the allocation, so it outlives whichever rank drops first.

use std::any::Any;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use streamcomm_gpu::{Device, DeviceBuffer, HostRegistration, IpcHandle, IpcMapping, VmmBuffer};

use super::gpu_error;
use crate::device::DevAddr;
use crate::device::direct::window::{Allocation, WindowDevice, find_in_process, share_in_process};
use crate::{Error, Result};

/// Bytes of an IPC handle's wire form.
const HANDLE: usize = 72;

/// The payload's first byte: how the window is shared.
const BY_IPC: u8 = 1;
/// See [`BY_IPC`].
const BY_DESCRIPTOR: u8 = 2;

/// The CUDA device as a source of windows.
pub(crate) struct CudaWindows<'a> {
    pub device: &'a Device,
}

impl WindowDevice for CudaWindows<'_> {
    fn ordinal(&self) -> u32 {
        self.device.ordinal() as u32
    }

    fn alloc(&self, bytes: usize) -> Result<Allocation> {
        // payload: kind, address and ordinal (for a peer thread), length,
        // then the IPC handle where there is one.
        let payload = |kind: u8, addr: DevAddr| {
            let mut p = vec![kind];
            p.extend(addr.to_le_bytes());
            p.extend((self.device.ordinal() as u32).to_le_bytes());
            p.extend((bytes as u64).to_le_bytes());
            p
        };
        if VmmBuffer::supported(self.device) {
            let mut buf = VmmBuffer::alloc(self.device, bytes).map_err(gpu_error)?;
            buf.fill(0).map_err(gpu_error)?;
            let fd = buf.export_fd().map_err(gpu_error)?;
            let addr = buf.as_raw();
            return Ok(Allocation {
                addr,
                payload: payload(BY_DESCRIPTOR, addr),
                keep: share_in_process(addr, Arc::new(buf)),
                fd: Some(fd),
            });
        }
        let mut buf = DeviceBuffer::alloc(self.device, bytes).map_err(gpu_error)?;
        buf.fill(0).map_err(gpu_error)?;
        let handle = IpcHandle::export(&buf).map_err(gpu_error)?;
        let addr = buf.as_raw();
        let mut p = payload(BY_IPC, addr);
        p.extend(handle.to_bytes());
        Ok(Allocation {
            addr,
            payload: p,
            keep: share_in_process(addr, Arc::new(buf)),
            fd: None,
        })
    }

    fn open(
        &self,
        payload: &[u8],
        same_process: bool,
        fd: Option<OwnedFd>,
    ) -> Result<(DevAddr, Box<dyn Any + Send + Sync>)> {
        const HEAD: usize = 21;
        let bad = || {
            Error::invalid(format!(
                "window record payload of {} bytes is not one this build makes",
                payload.len()
            ))
        };
        if payload.len() < HEAD {
            return Err(bad());
        }
        let addr = u64::from_le_bytes(payload[1..9].try_into().expect("8 bytes"));
        let ordinal = u32::from_le_bytes(payload[9..13].try_into().expect("4 bytes"));
        let len = u64::from_le_bytes(payload[13..21].try_into().expect("8 bytes")) as usize;
        if same_process {
            if ordinal as usize != self.device.ordinal() {
                return Err(Error::Unavailable(format!(
                    "a peer thread's window is on CUDA device {ordinal}, this rank's on {}",
                    self.device.ordinal()
                )));
            }
            let keep = find_in_process(addr).ok_or_else(|| {
                Error::Unavailable(format!("no window at {addr:#x} in this process any more"))
            })?;
            return Ok((addr, keep));
        }
        match (payload[0], fd) {
            (BY_DESCRIPTOR, Some(fd)) if payload.len() == HEAD => {
                let buf = VmmBuffer::import(self.device, fd.as_fd(), len).map_err(gpu_error)?;
                Ok((buf.as_raw(), Box::new(buf)))
            }
            (BY_DESCRIPTOR, None) => Err(Error::Unavailable(
                "the peer's window descriptor did not arrive".into(),
            )),
            (BY_IPC, _) if payload.len() == HEAD + HANDLE => {
                let handle = IpcHandle::from_bytes(&payload[HEAD..]).map_err(gpu_error)?;
                let mapping = IpcMapping::open(self.device, &handle).map_err(gpu_error)?;
                Ok((mapping.as_raw(), Box::new(mapping)))
            }
            _ => Err(bad()),
        }
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
