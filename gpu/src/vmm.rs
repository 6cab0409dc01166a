//! Device memory other processes map through a POSIX file descriptor: the
//! driver's virtual memory management (`cuMemCreate`, `cuMemMap`, ...), as
//! NCCL allocates what it shares. Unlike CUDA IPC (`cuIpcGetMemHandle`),
//! an importer holds the physical memory it maps: the memory stays valid
//! while any process maps it, however the exporter ends, and an exporter
//! may release its allocation while importers still use it.

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use crate::context::Device;
use crate::driver::result::check;
use crate::driver::sys::{CUdevice_attribute, CUdeviceptr};
use crate::driver::vmm_sys::{
    ACCESS_READWRITE, AccessDesc, AllocationProp, GRANULARITY_MINIMUM, HANDLE_POSIX_FD, Handle,
    LOCATION_DEVICE, Location, vmm,
};
use crate::error::{Error, Result};
use crate::guard::guarded;

/// Device memory made with `cuMemCreate` and mapped here, read-write for
/// its device; unmapped and released on drop.
pub struct VmmBuffer {
    device: Device,
    handle: Handle,
    ptr: CUdeviceptr,
    /// Bytes mapped (the requested length rounded up to the granularity).
    size: usize,
    len: usize,
}

// SAFETY: the handle and the address are plain values the driver accepts
// from any thread; the owner frees them once, on drop.
unsafe impl Send for VmmBuffer {}
// SAFETY: as above; no method mutates through `&self`.
unsafe impl Sync for VmmBuffer {}

impl std::fmt::Debug for VmmBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VmmBuffer")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("len", &self.len)
            .finish()
    }
}

impl VmmBuffer {
    /// True when `device` supports virtual memory management with POSIX
    /// file-descriptor handles (both attributes).
    pub fn supported(device: &Device) -> bool {
        let yes = |a| device.attribute(a).is_ok_and(|v| v == 1);
        yes(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)
            && yes(
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
            )
            && vmm().is_ok()
    }

    /// Allocates at least `len` bytes (at least 1) on `device`, exportable
    /// with [`VmmBuffer::export_fd`]; contents undefined.
    pub fn alloc(device: &Device, len: usize) -> Result<VmmBuffer> {
        if len == 0 {
            return Err(Error::invalid("VmmBuffer::alloc: len is 0"));
        }
        let f = vmm()?;
        guarded("cuMemCreate", || {
            device.bind()?;
            let prop = AllocationProp::exportable(device.ordinal());
            let size = rounded(&prop, len)?;
            let mut handle: Handle = 0;
            // SAFETY: valid pointers; the size is a multiple of the granularity.
            check("cuMemCreate", unsafe {
                (f.create)(&mut handle, size, &prop, 0)
            })?;
            // SAFETY: a handle just made, `size` bytes.
            unsafe { VmmBuffer::map(device, handle, size, len) }
        })
    }

    /// Maps the memory another process exported as `fd` (which stays the
    /// caller's), `len` bytes of it, on `device`.
    pub fn import(device: &Device, fd: BorrowedFd<'_>, len: usize) -> Result<VmmBuffer> {
        let f = vmm()?;
        guarded("cuMemImportFromShareableHandle", || {
            device.bind()?;
            let prop = AllocationProp::exportable(device.ordinal());
            let size = rounded(&prop, len)?;
            let mut handle: Handle = 0;
            // SAFETY: the driver reads the descriptor's number from the
            // pointer-sized argument, as its POSIX handle type documents.
            check("cuMemImportFromShareableHandle", unsafe {
                (f.import)(
                    &mut handle,
                    fd.as_raw_fd() as isize as *mut std::ffi::c_void,
                    HANDLE_POSIX_FD,
                )
            })?;
            // SAFETY: an imported handle of at least `size` bytes (the
            // exporter rounded alike).
            unsafe { VmmBuffer::map(device, handle, size, len) }
        })
    }

    /// Reserves `size` bytes of address space, maps `handle` there and
    /// gives `device` read-write access; releases the handle on failure.
    ///
    /// # Safety
    /// `handle` must be a live allocation of at least `size` bytes that the
    /// returned buffer then owns.
    unsafe fn map(device: &Device, handle: Handle, size: usize, len: usize) -> Result<VmmBuffer> {
        let f = vmm()?;
        let mut buf = VmmBuffer {
            device: device.clone(),
            handle,
            ptr: 0,
            size,
            len,
        };
        // From here on, a failure drops `buf`, which undoes what was done.
        // SAFETY: a valid out-pointer; no fixed address, no alignment.
        check("cuMemAddressReserve", unsafe {
            (f.reserve)(&mut buf.ptr, size, 0, 0, 0)
        })?;
        // SAFETY: the reservation and the handle are both `size` bytes.
        let mapped = unsafe { (f.map)(buf.ptr, size, 0, handle, 0) };
        if let Err(e) = check("cuMemMap", mapped) {
            // Not mapped: only the reservation and the handle to undo.
            // SAFETY: the reservation made above.
            let _ = unsafe { (f.free_address)(buf.ptr, size) };
            buf.ptr = 0;
            return Err(e);
        }
        let access = AccessDesc {
            location: Location {
                kind: LOCATION_DEVICE,
                id: device.ordinal() as i32,
            },
            flags: ACCESS_READWRITE,
        };
        // SAFETY: the range is mapped; one descriptor.
        check("cuMemSetAccess", unsafe {
            (f.set_access)(buf.ptr, size, &access, 1)
        })?;
        Ok(buf)
    }

    /// A new file descriptor for the memory, which another process imports
    /// with [`VmmBuffer::import`] (send it over a Unix socket).
    pub fn export_fd(&self) -> Result<OwnedFd> {
        let f = vmm()?;
        guarded("cuMemExportToShareableHandle", || {
            self.device.bind()?;
            let mut fd: std::ffi::c_int = -1;
            // SAFETY: the POSIX handle type writes an int.
            check("cuMemExportToShareableHandle", unsafe {
                (f.export)(
                    (&mut fd as *mut std::ffi::c_int).cast(),
                    self.handle,
                    HANDLE_POSIX_FD,
                    0,
                )
            })?;
            if fd < 0 {
                return Err(Error::Unavailable(
                    "cuMemExportToShareableHandle returned no descriptor".into(),
                ));
            }
            // SAFETY: a new descriptor the driver handed over.
            Ok(unsafe { OwnedFd::from_raw_fd(fd) })
        })
    }

    /// The device address.
    pub fn as_raw(&self) -> CUdeviceptr {
        self.ptr
    }

    /// Length in bytes, as requested.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false (zero-length buffers are refused).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Sets every byte to `value` and waits for it, on a private
    /// non-blocking stream (as [`crate::DeviceBuffer::fill`]).
    pub fn fill(&mut self, value: u8) -> Result<()> {
        crate::memory::fill_privately(&self.device, self.ptr, self.len, value)
    }
}

/// `len` rounded up to the allocation granularity of `prop` (a context is
/// current).
fn rounded(prop: &AllocationProp, len: usize) -> Result<usize> {
    let f = vmm()?;
    let mut granule = 0usize;
    // SAFETY: valid pointers for the call.
    check("cuMemGetAllocationGranularity", unsafe {
        (f.granularity)(&mut granule, prop, GRANULARITY_MINIMUM)
    })?;
    len.checked_next_multiple_of(granule.max(1))
        .ok_or_else(|| Error::invalid(format!("VmmBuffer: len {len} too large")))
}

impl Drop for VmmBuffer {
    fn drop(&mut self) {
        let Ok(f) = vmm() else { return };
        let _ = guarded("cuMemUnmap", || {
            self.device.bind()?;
            if self.ptr != 0 {
                // SAFETY: mapped and reserved by `map`, undone once. A
                // failure (a sticky context error) can only leak them.
                unsafe {
                    check("cuMemUnmap", (f.unmap)(self.ptr, self.size))?;
                    check("cuMemAddressFree", (f.free_address)(self.ptr, self.size))?;
                }
            }
            // SAFETY: the handle is this buffer's, released once; the
            // memory lives on while another process maps it.
            check("cuMemRelease", unsafe { (f.release)(self.handle) })
        });
    }
}
