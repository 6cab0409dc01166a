//! Host memory the caller owns, page-locked and mapped into the device's
//! address space (`cuMemHostRegister` with `PORTABLE | DEVICEMAP`): shared
//! memory of several processes, for example, that device work reads and
//! writes while the host does too.

use std::ffi::c_void;

use crate::context::Device;
use crate::driver::result::check;
use crate::driver::sys::{
    self, CU_MEMHOSTREGISTER_DEVICEMAP, CU_MEMHOSTREGISTER_PORTABLE, CUdeviceptr,
};
use crate::error::{Error, Result};
use crate::guard::guarded;

/// A registration of `len` bytes of host memory at `host`, visible to the
/// device at [`HostRegistration::device_ptr`]; unregistered on drop (the
/// memory itself stays the caller's).
///
/// # Examples
/// ```no_run
/// use streamcomm_gpu::{Device, HostRegistration};
///
/// let device = Device::open(0)?;
/// let mut words = vec![0u32; 1024];
/// // SAFETY: `words` outlives the registration and is not moved or resized.
/// let reg = unsafe { HostRegistration::new(&device, words.as_mut_ptr().cast(), 4096) }?;
/// println!("device address {:#x}", reg.device_ptr());
/// drop(reg);
/// # Ok::<(), streamcomm_gpu::Error>(())
/// ```
pub struct HostRegistration {
    device: Device,
    host: *mut u8,
    dptr: CUdeviceptr,
}

// SAFETY: the registration is of process-wide memory; the raw pointer is only
// an address, used to unregister.
unsafe impl Send for HostRegistration {}
// SAFETY: shared access only reads addresses.
unsafe impl Sync for HostRegistration {}

impl HostRegistration {
    /// Registers `len` (≥ 1) bytes at `host` for `device`.
    ///
    /// # Safety
    /// `host..host + len` must be mapped, writable memory of this process
    /// that stays mapped until the registration is dropped, and no other
    /// registration may cover any of it.
    pub unsafe fn new(device: &Device, host: *mut u8, len: usize) -> Result<HostRegistration> {
        if len == 0 || host.is_null() {
            return Err(Error::invalid(
                "HostRegistration::new: empty range or null address",
            ));
        }
        guarded("cuMemHostRegister", || {
            device.bind()?;
            let flags = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP;
            // SAFETY: the caller vouches for the range; a context is current.
            check("cuMemHostRegister_v2", unsafe {
                sys::cuMemHostRegister_v2(host.cast(), len, flags)
            })?;
            let mut reg = HostRegistration {
                device: device.clone(),
                host,
                dptr: 0,
            };
            let mut dptr: CUdeviceptr = 0;
            // SAFETY: the range was registered with DEVICEMAP; flags must be 0.
            check("cuMemHostGetDevicePointer_v2", unsafe {
                sys::cuMemHostGetDevicePointer_v2(&mut dptr, host.cast::<c_void>(), 0)
            })?;
            reg.dptr = dptr;
            Ok(reg)
        })
    }

    /// The device address of the registered memory's first byte.
    pub fn device_ptr(&self) -> CUdeviceptr {
        self.dptr
    }
}

impl Drop for HostRegistration {
    fn drop(&mut self) {
        let _ = guarded("cuMemHostUnregister", || {
            self.device.bind()?;
            // SAFETY: `host` was registered by `new` and is unregistered once.
            check("cuMemHostUnregister", unsafe {
                sys::cuMemHostUnregister(self.host.cast())
            })
        });
    }
}
