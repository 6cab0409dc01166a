//! The driver's virtual memory management entry points (`cuMem*` of
//! CUDA 10.2 on), looked up in the loaded driver like [`super::stable`]'s,
//! with their C layouts declared here: cudarc's bindings of these structs
//! change shape between CUDA versions (13.2 makes `CUmemLocation`'s id a
//! union), while the ABI they describe does not.

use std::ffi::{c_int, c_uint, c_ulonglong, c_void};
use std::sync::OnceLock;

use super::probe::{DRIVER_LIB_NAMES, first_loadable};
use super::sys::{CUdeviceptr, CUresult};
use crate::error::{Error, Result};

/// `CUmemGenericAllocationHandle`.
pub(crate) type Handle = c_ulonglong;

/// `CU_MEM_ALLOCATION_TYPE_PINNED`.
pub(crate) const ALLOCATION_PINNED: c_uint = 1;
/// `CU_MEM_LOCATION_TYPE_DEVICE`.
pub(crate) const LOCATION_DEVICE: c_uint = 1;
/// `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`.
pub(crate) const HANDLE_POSIX_FD: c_uint = 1;
/// `CU_MEM_ACCESS_FLAGS_PROT_READWRITE`.
pub(crate) const ACCESS_READWRITE: c_uint = 3;
/// `CU_MEM_ALLOC_GRANULARITY_MINIMUM`.
pub(crate) const GRANULARITY_MINIMUM: c_uint = 0;

/// `CUmemLocation`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Location {
    pub(crate) kind: c_uint,
    pub(crate) id: c_int,
}

/// `CUmemAllocationProp`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct AllocationProp {
    pub(crate) kind: c_uint,
    pub(crate) requested_handle_types: c_uint,
    pub(crate) location: Location,
    pub(crate) win32_handle_meta_data: *mut c_void,
    /// `allocFlags`: compression type, GPUDirect RDMA capable, usage, reserved.
    pub(crate) alloc_flags: [u8; 8],
}

/// `CUmemAccessDesc`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct AccessDesc {
    pub(crate) location: Location,
    pub(crate) flags: c_uint,
}

const _: () = {
    assert!(size_of::<Location>() == 8);
    assert!(size_of::<AllocationProp>() == 32);
    assert!(size_of::<AccessDesc>() == 12);
};

impl AllocationProp {
    /// Pinned device memory on device `ordinal`, exportable as a POSIX file
    /// descriptor.
    pub(crate) fn exportable(ordinal: usize) -> AllocationProp {
        AllocationProp {
            kind: ALLOCATION_PINNED,
            requested_handle_types: HANDLE_POSIX_FD,
            location: Location {
                kind: LOCATION_DEVICE,
                id: ordinal as c_int,
            },
            win32_handle_meta_data: std::ptr::null_mut(),
            alloc_flags: [0; 8],
        }
    }
}

/// The entry points, resolved once.
pub(crate) struct Vmm {
    pub(crate) granularity:
        unsafe extern "C" fn(*mut usize, *const AllocationProp, c_uint) -> CUresult,
    pub(crate) create:
        unsafe extern "C" fn(*mut Handle, usize, *const AllocationProp, c_ulonglong) -> CUresult,
    pub(crate) release: unsafe extern "C" fn(Handle) -> CUresult,
    pub(crate) reserve:
        unsafe extern "C" fn(*mut CUdeviceptr, usize, usize, CUdeviceptr, c_ulonglong) -> CUresult,
    pub(crate) free_address: unsafe extern "C" fn(CUdeviceptr, usize) -> CUresult,
    pub(crate) map:
        unsafe extern "C" fn(CUdeviceptr, usize, usize, Handle, c_ulonglong) -> CUresult,
    pub(crate) unmap: unsafe extern "C" fn(CUdeviceptr, usize) -> CUresult,
    pub(crate) set_access:
        unsafe extern "C" fn(CUdeviceptr, usize, *const AccessDesc, usize) -> CUresult,
    pub(crate) export: unsafe extern "C" fn(*mut c_void, Handle, c_uint, c_ulonglong) -> CUresult,
    pub(crate) import: unsafe extern "C" fn(*mut Handle, *mut c_void, c_uint) -> CUresult,
}

static VMM: OnceLock<std::result::Result<Vmm, String>> = OnceLock::new();

fn resolve() -> std::result::Result<Vmm, String> {
    let name = first_loadable(&DRIVER_LIB_NAMES).ok_or("no CUDA driver library")?;
    // SAFETY: as in `stable`: the driver is loaded already; this only bumps
    // its reference count.
    let lib = unsafe { libloading::Library::new(name) }.map_err(|e| e.to_string())?;
    macro_rules! sym {
        ($name:literal) => {
            // SAFETY: each symbol is the driver's C function of the type of
            // the field it fills (the CUDA headers' prototype of the name).
            *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                .map_err(|e| format!("{name}: {}: {e}", $name))?
        };
    }
    let vmm = Vmm {
        granularity: sym!("cuMemGetAllocationGranularity"),
        create: sym!("cuMemCreate"),
        release: sym!("cuMemRelease"),
        reserve: sym!("cuMemAddressReserve"),
        free_address: sym!("cuMemAddressFree"),
        map: sym!("cuMemMap"),
        unmap: sym!("cuMemUnmap"),
        set_access: sym!("cuMemSetAccess"),
        export: sym!("cuMemExportToShareableHandle"),
        import: sym!("cuMemImportFromShareableHandle"),
    };
    // The function pointers outlive this handle: never unloaded.
    std::mem::forget(lib);
    Ok(vmm)
}

/// The entry points, or `Unavailable` naming what is missing.
pub(crate) fn vmm() -> Result<&'static Vmm> {
    VMM.get_or_init(resolve)
        .as_ref()
        .map_err(|e| Error::Unavailable(format!("CUDA virtual memory management: {e}")))
}
