//! Per-device access to mappings: `cuMemSetAccess` and `cuMemGetAccess`.

use super::*;

/// `cuMemSetAccess`: for each descriptor (a device location; PROT_NONE or
/// PROT_READWRITE), over whole mappings lying back to back from `ptr` for
/// `size` bytes.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemSetAccess(
    ptr: u64,
    size: usize,
    desc: *const AccessDesc,
    count: usize,
) -> u32 {
    vmm_entry("cuMemSetAccess", |name| {
        if desc.is_null() || count == 0 {
            return Err(refuse(
                INVALID_VALUE,
                name,
                "no access descriptors (desc NULL or count 0)",
            ));
        }
        // SAFETY: the caller passes `count` descriptors at `desc`.
        let descs = unsafe { std::slice::from_raw_parts(desc, count) };
        let mut changes = Vec::with_capacity(count);
        for d in descs {
            let dev = check_device(name, "desc.location", d.location)?;
            let grant = match d.flags {
                PROT_READWRITE => true,
                PROT_NONE => false,
                PROT_READ => {
                    return Err(refuse(
                        NOT_SUPPORTED,
                        name,
                        "read-only access (CU_MEM_ACCESS_FLAGS_PROT_READ)",
                    ));
                }
                other => {
                    return Err(refuse(
                        INVALID_VALUE,
                        name,
                        format!("desc.flags {other} is no CUmemAccess_flags"),
                    ));
                }
            };
            changes.push((1u32 << dev, grant));
        }
        if size == 0 {
            return Err(refuse(INVALID_VALUE, name, "size is 0"));
        }
        let end = ptr.checked_add(size as u64).ok_or_else(|| {
            refuse(
                INVALID_VALUE,
                name,
                format!("[{ptr:#x}, +{size}) overflows"),
            )
        })?;
        let st = lock(&STATE);
        let mut at = ptr;
        let mut bases = Vec::new();
        for (&b, &l) in st.mapped.range(ptr..end) {
            if b != at {
                break;
            }
            at = b + l as u64;
            bases.push(b);
        }
        if at != end {
            return Err(refuse(
                INVALID_VALUE,
                name,
                format!(
                    "[{ptr:#x}, {end:#x}) is not whole cuMemMap mappings lying back to back \
                     (stopped at {at:#x})"
                ),
            ));
        }
        for b in bases {
            let Some(r) = region_of(b) else { continue };
            if let Kind::Vmm { map, .. } = &r.kind {
                for &(bit, grant) in &changes {
                    if grant {
                        map.access.fetch_or(bit, Ordering::AcqRel);
                    } else {
                        map.access.fetch_and(!bit, Ordering::AcqRel);
                    }
                }
            }
        }
        Ok(())
    })
}

/// `cuMemGetAccess`: PROT_READWRITE (3) or PROT_NONE (0) for a device
/// location and an address inside a mapping.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn cuMemGetAccess(
    flags: *mut c_ulonglong,
    location: *const MemLocation,
    ptr: u64,
) -> u32 {
    vmm_entry("cuMemGetAccess", |name| {
        if flags.is_null() || location.is_null() {
            return Err(refuse(INVALID_VALUE, name, "flags or location is NULL"));
        }
        // SAFETY: non-null; the caller passes a valid CUmemLocation.
        let dev = check_device(name, "location", unsafe { location.read() })?;
        let access = with_mapping(name, ptr, |map| map.access.load(Ordering::Acquire))?;
        let rw = access & (1 << dev) != 0;
        out(
            flags,
            c_ulonglong::from(if rw { PROT_READWRITE } else { PROT_NONE }),
        )
    })
}
