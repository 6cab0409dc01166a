//! Export and import of allocations between processes as POSIX file
//! descriptors: `cuMemExportToShareableHandle` and
//! `cuMemImportFromShareableHandle`.

use super::*;

/// `cuMemExportToShareableHandle`: POSIX_FILE_DESCRIPTOR only, of a live
/// handle created with it in its requested handle types (not an imported
/// one); writes a new descriptor (`int`, close-on-exec) that the caller
/// owns; flags must be 0.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemExportToShareableHandle(
    shareable_handle: *mut c_void,
    handle: u64,
    handle_type: c_uint,
    flags: c_ulonglong,
) -> u32 {
    vmm_entry("cuMemExportToShareableHandle", |name| {
        not_null(name, "shareableHandle", shareable_handle)?;
        check_shareable(name, handle_type)?;
        flags_zero(name, flags)?;
        let alloc = live(name, handle)?;
        if alloc.handle_types & HANDLE_POSIX_FD == 0 {
            return Err(refuse(
                INVALID_VALUE,
                name,
                format!(
                    "{handle:#x} was created without CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR in \
                     prop.requestedHandleTypes"
                ),
            ));
        }
        if alloc.imported {
            return Err(refuse(
                INVALID_VALUE,
                name,
                format!(
                    "{handle:#x} was imported; exporting an imported allocation again is not \
                     modelled"
                ),
            ));
        }
        let fd = dup_fd(name, alloc.fd.as_raw_fd())?;
        out(shareable_handle.cast::<c_int>(), fd.into_raw_fd())
    })
}

/// `cuMemImportFromShareableHandle`: POSIX_FILE_DESCRIPTOR only; `os_handle`
/// is the descriptor (`(void *)(uintptr_t)fd`), which must be a stand-in VMM
/// export and stays the caller's. A new handle, one reference.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemImportFromShareableHandle(
    handle: *mut u64,
    os_handle: *mut c_void,
    handle_type: c_uint,
) -> u32 {
    const NAME: &str = "cuMemImportFromShareableHandle";
    entry(NAME, || {
        let ctx = current()?;
        not_null(NAME, "handle", handle)?;
        check_shareable(NAME, handle_type)?;
        let raw = os_handle as usize;
        let fd = c_int::try_from(raw).map_err(|_| {
            refuse(
                INVALID_VALUE,
                NAME,
                format!("osHandle {raw:#x} is not a file descriptor"),
            )
        })?;
        let header = check_export(NAME, fd)?;
        let fd = dup_fd(NAME, fd)?;
        let h = register(Arc::new(Alloc {
            fd,
            size: header.size,
            ordinal: ctx.ordinal,
            handle_types: header.handle_types,
            gdr: header.gdr,
            foreign: header.pid != std::process::id(),
            imported: true,
        }));
        out(handle, h)
    })
}
