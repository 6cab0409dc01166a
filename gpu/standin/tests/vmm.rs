//! CUDA virtual memory management on the stand-in: allocations, reservations,
//! mappings and access, POSIX file-descriptor export and import between
//! processes (what NCCL does with its cuMem buffers), device faults on
//! memory without access or mapping, and each refusal, every test in a child
//! process that loads the stand-in through cudarc.
//!
//! The structures are laid out by hand as `cuda.h` has them (cudarc's
//! bindings differ in shape between CUDA versions); the first test holds
//! them to cudarc's sizes and offsets.

mod common;

use std::ffi::{c_int, c_void};
use std::ptr::null_mut;
use std::time::{Duration, Instant};

use common::{alloc, bind, code, expect, mapped, ok, read};
use cudarc::driver::sys;

/// The granularity the stand-in reports.
const G: usize = 2 << 20;
/// `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`.
const POSIX: u32 = 1;
/// `CU_MEM_HANDLE_TYPE_WIN32`.
const WIN32: u32 = 2;
/// `CU_MEM_HANDLE_TYPE_FABRIC`.
const FABRIC: u32 = 8;

/// `CUmemLocation`.
#[repr(C)]
#[derive(Clone, Copy)]
struct Location {
    kind: u32,
    id: i32,
}

/// `CUmemAllocationProp`.
#[repr(C)]
#[derive(Clone, Copy)]
struct Prop {
    kind: u32,
    handle_types: u32,
    location: Location,
    win32: *mut c_void,
    compression: u8,
    gdr: u8,
    usage: u16,
    reserved: [u8; 4],
}

/// A change to a good [`Prop`].
type Change = fn(&mut Prop);

/// `CUmemAccessDesc`.
#[repr(C)]
#[derive(Clone, Copy)]
struct Access {
    location: Location,
    flags: u32,
}

/// A pinned device-0 allocation's properties with these handle types.
fn prop(handle_types: u32) -> Prop {
    Prop {
        kind: 1,
        handle_types,
        location: Location { kind: 1, id: 0 },
        win32: null_mut(),
        compression: 0,
        gdr: 0,
        usage: 0,
        reserved: [0; 4],
    }
}

fn raw(p: &Prop) -> *const sys::CUmemAllocationProp {
    (p as *const Prop).cast()
}

/// Device `id` with access `flags`.
fn access(id: i32, flags: u32) -> Access {
    Access {
        location: Location { kind: 1, id },
        flags,
    }
}

fn try_create(size: usize, p: &Prop) -> (sys::CUresult, u64) {
    let mut h = 0;
    // SAFETY: valid out-pointer and property structure.
    let r = unsafe { sys::cuMemCreate(&mut h, size, raw(p), 0) };
    (r, h)
}

fn create(size: usize, p: &Prop) -> u64 {
    let (r, h) = try_create(size, p);
    ok(r);
    h
}

fn reserve(size: usize) -> u64 {
    let mut ptr = 0;
    // SAFETY: valid out-pointer.
    ok(unsafe { sys::cuMemAddressReserve(&mut ptr, size, 0, 0, 0) });
    ptr
}

fn map(ptr: u64, size: usize, offset: usize, h: u64) -> sys::CUresult {
    // SAFETY: plain values.
    unsafe { sys::cuMemMap(ptr, size, offset, h, 0) }
}

fn set_access(ptr: u64, size: usize, descs: &[Access]) -> sys::CUresult {
    // SAFETY: `descs` holds `descs.len()` descriptors laid out as cuda.h's.
    unsafe { sys::cuMemSetAccess(ptr, size, descs.as_ptr().cast(), descs.len()) }
}

fn export(h: u64, handle_type: u32) -> (sys::CUresult, c_int) {
    let mut fd: c_int = -1;
    // SAFETY: the out-pointer holds an int, as POSIX_FILE_DESCRIPTOR writes.
    let r = unsafe {
        sys::cuMemExportToShareableHandle(
            (&mut fd as *mut c_int).cast(),
            h,
            sys::CUmemAllocationHandleType(handle_type),
            0,
        )
    };
    (r, fd)
}

fn import(fd: c_int, handle_type: u32) -> (sys::CUresult, u64) {
    let mut h = 0;
    // SAFETY: the descriptor travels as a pointer-sized integer, as in C.
    let r = unsafe {
        sys::cuMemImportFromShareableHandle(
            &mut h,
            fd as usize as *mut c_void,
            sys::CUmemAllocationHandleType(handle_type),
        )
    };
    (r, h)
}

/// Reserves `size` bytes, maps all of `h` there and gives device 0 access.
fn map_rw(h: u64, size: usize) -> u64 {
    let ptr = reserve(size);
    ok(map(ptr, size, 0, h));
    ok(set_access(ptr, size, &[access(0, 3)]));
    ptr
}

fn write(dst: u64, data: &[u8]) {
    // SAFETY: `data` is readable; `dst` maps at least `data.len()` bytes.
    ok(unsafe { sys::cuMemcpyHtoD_v2(dst, data.as_ptr().cast(), data.len()) });
    // SAFETY: plain driver call; a pageable copy returns once staged.
    ok(unsafe { sys::cuCtxSynchronize() });
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed))
        .collect()
}

fn attribute(a: sys::CUdevice_attribute) -> i32 {
    let mut v = -1;
    // SAFETY: valid out-pointer; device 0 exists.
    ok(unsafe { sys::cuDeviceGetAttribute(&mut v, a, 0) });
    v
}

fn close(fd: c_int) {
    // SAFETY: closes a descriptor this process owns.
    assert_eq!(unsafe { libc::close(fd) }, 0, "close({fd})");
}

type Counters = unsafe extern "C" fn(*mut u64, usize) -> usize;
type Reset = unsafe extern "C" fn();

/// The stand-in's counters (module `counters`): reset, and read
/// (driver calls, bytes read through imported mappings).
fn counters() -> (Reset, Counters) {
    for name in [c"libcuda.so", c"libcuda.so.1"] {
        // SAFETY: RTLD_NOLOAD only finds a library already loaded.
        let lib = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        if lib.is_null() {
            continue;
        }
        // SAFETY: a live handle; the symbols have these types in the stand-in.
        unsafe {
            let read = libc::dlsym(lib, c"streamcomm_standin_counters".as_ptr());
            let reset = libc::dlsym(lib, c"streamcomm_standin_reset_counters".as_ptr());
            if !read.is_null() && !reset.is_null() {
                return (
                    std::mem::transmute::<*mut c_void, Reset>(reset),
                    std::mem::transmute::<*mut c_void, Counters>(read),
                );
            }
        }
    }
    panic!("the stand-in's counters are not loaded");
}

fn imported_bytes(read: Counters) -> u64 {
    let mut out = [0u64; 2];
    // SAFETY: two writable slots.
    assert_eq!(unsafe { read(out.as_mut_ptr(), 2) }, 2);
    out[1]
}

/// Runs test `name`'s body in a child with `env`, and returns what it left.
fn run(name: &str, env: &[(&str, &str)]) -> common::Child {
    let child = common::run_child(name, env, Duration::from_secs(30));
    child.assert_ok(name);
    child
}

#[test]
fn structures_match_cuda_h() {
    use std::mem::{offset_of, size_of};
    assert_eq!(size_of::<Prop>(), 32);
    assert_eq!(size_of::<sys::CUmemAllocationProp>(), size_of::<Prop>());
    assert_eq!(
        offset_of!(sys::CUmemAllocationProp, requestedHandleTypes),
        4
    );
    assert_eq!(offset_of!(sys::CUmemAllocationProp, location), 8);
    assert_eq!(
        offset_of!(sys::CUmemAllocationProp, win32HandleMetaData),
        16
    );
    assert_eq!(offset_of!(sys::CUmemAllocationProp, allocFlags), 24);
    assert_eq!(
        offset_of!(sys::CUmemAllocationProp, allocFlags.gpuDirectRDMACapable),
        offset_of!(Prop, gdr)
    );
    assert_eq!(
        offset_of!(sys::CUmemAllocationProp, allocFlags.usage),
        offset_of!(Prop, usage)
    );
    assert_eq!(
        offset_of!(sys::CUmemAllocationProp, allocFlags.reserved),
        offset_of!(Prop, reserved)
    );
    assert_eq!(size_of::<sys::CUmemLocation>(), size_of::<Location>());
    assert_eq!(size_of::<sys::CUmemAccessDesc>(), size_of::<Access>());
    assert_eq!(size_of::<Access>(), 12);
    assert_eq!(
        offset_of!(sys::CUmemAccessDesc, flags),
        offset_of!(Access, flags)
    );
    assert_eq!(
        sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED as i32,
        102
    );
    assert_eq!(
        sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED
            as i32,
        103
    );
}

standin_test!(attributes_and_granularity, 20, &[], {
    use sys::CUdevice_attribute::*;
    bind();
    assert_eq!(
        attribute(CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED),
        1
    );
    assert_eq!(
        attribute(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED),
        1
    );
    assert_eq!(
        attribute(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_HANDLE_SUPPORTED),
        0
    );
    // No GPUDirect RDMA in the default profile, so none with VMM either.
    assert_eq!(
        attribute(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED),
        0
    );
    use sys::CUmemAllocationGranularity_flags::*;
    for option in [
        CU_MEM_ALLOC_GRANULARITY_MINIMUM,
        CU_MEM_ALLOC_GRANULARITY_RECOMMENDED,
    ] {
        let mut g = 0;
        // SAFETY: valid out-pointer and properties.
        ok(unsafe { sys::cuMemGetAllocationGranularity(&mut g, raw(&prop(POSIX)), option) });
        assert_eq!(g, G);
    }
    let mut g = 0;
    // SAFETY: as above; FABRIC handles are not modelled.
    let r = unsafe {
        sys::cuMemGetAllocationGranularity(
            &mut g,
            raw(&prop(FABRIC)),
            CU_MEM_ALLOC_GRANULARITY_MINIMUM,
        )
    };
    expect(r, 801);
    // GPUDirect RDMA capable memory needs GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED.
    let mut p = prop(POSIX);
    p.gdr = 1;
    expect(try_create(G, &p).0, 1);
});

standin_test!(
    gpu_direct_rdma_with_vmm_under_h200,
    20,
    &[("STREAMCOMM_STANDIN_PROFILE", "h200")],
    {
        use sys::CUdevice_attribute::*;
        use sys::CUpointer_attribute::*;
        bind();
        assert_eq!(
            attribute(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED),
            1
        );
        let mut p = prop(POSIX);
        p.gdr = 1;
        let capable = create(G, &p);
        let plain = create(G, &prop(POSIX));
        let (a, b) = (map_rw(capable, G), map_rw(plain, G));
        for (ptr, want) in [(a, 1u32), (b, 0)] {
            let mut v = 7u32;
            // SAFETY: a u32 out-pointer for a boolean attribute.
            ok(unsafe {
                sys::cuPointerGetAttribute(
                    (&mut v as *mut u32).cast(),
                    CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE,
                    ptr + 4096,
                )
            });
            assert_eq!(v, want, "IS_GPU_DIRECT_RDMA_CAPABLE of {ptr:#x}");
        }
        let mut back = prop(0);
        // SAFETY: a CUmemAllocationProp-sized out-pointer.
        ok(unsafe {
            sys::cuMemGetAllocationPropertiesFromHandle((&mut back as *mut Prop).cast(), capable)
        });
        assert_eq!(
            (back.kind, back.handle_types, back.location.kind, back.gdr),
            (1, POSIX, 1, 1)
        );
    }
);

standin_test!(map_access_copy_and_teardown_in_any_order, 30, &[], {
    use sys::CUpointer_attribute::*;
    bind();
    let size = 2 * G;
    let h = create(size, &prop(POSIX));
    let ptr = reserve(size);
    ok(map(ptr, size, 0, h));
    // Mapped, no access yet.
    let mut flags = 9u64;
    let dev0 = Location { kind: 1, id: 0 };
    // SAFETY: valid out-pointer and location.
    ok(unsafe { sys::cuMemGetAccess(&mut flags, (&dev0 as *const Location).cast(), ptr) });
    assert_eq!(flags, 0);
    ok(set_access(ptr, size, &[access(0, 3)]));
    // SAFETY: as above.
    ok(unsafe { sys::cuMemGetAccess(&mut flags, (&dev0 as *const Location).cast(), ptr + 8) });
    assert_eq!(flags, 3);

    // Copies in and out, and device to device both ways.
    let data = pattern(size, 3);
    write(ptr, &data);
    assert!(
        read(ptr, size) == data,
        "the mapping holds what was written"
    );
    let d = alloc(1 << 16);
    // SAFETY: both ranges are device memory of 64 KiB at least.
    unsafe {
        ok(sys::cuMemcpyDtoD_v2(d, ptr + G as u64, 1 << 16));
        ok(sys::cuMemsetD8_v2(ptr, 0x5A, 16));
        ok(sys::cuCtxSynchronize());
    }
    assert_eq!(read(d, 1 << 16), data[G..G + (1 << 16)]);
    assert!(read(ptr, 16).iter().all(|&b| b == 0x5A));

    // What the driver reports of the mapping.
    let (mut base, mut len) = (0, 0);
    // SAFETY: valid out-pointers.
    ok(unsafe { sys::cuMemGetAddressRange_v2(&mut base, &mut len, ptr + 100) });
    assert_eq!((base, len), (ptr, size));
    let mut legacy = 7u32;
    // SAFETY: a u32 out-pointer for a boolean attribute.
    ok(unsafe {
        sys::cuPointerGetAttribute(
            (&mut legacy as *mut u32).cast(),
            CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
            ptr,
        )
    });
    assert_eq!(legacy, 0, "VMM memory is not legacy-IPC capable");
    let mut ipc = sys::CUipcMemHandle { reserved: [0; 64] };
    // SAFETY: valid out-pointer.
    expect(unsafe { sys::cuIpcGetMemHandle(&mut ipc, ptr) }, 1);
    // SAFETY: plain value; cuMemFree does not free VMM memory.
    expect(unsafe { sys::cuMemFree_v2(ptr) }, 1);

    // Retain gives the same handle, one more reference.
    let mut again = 0;
    // SAFETY: valid out-pointer; an address inside the mapping.
    ok(unsafe { sys::cuMemRetainAllocationHandle(&mut again, (ptr + 12345) as *mut c_void) });
    assert_eq!(again, h);
    // SAFETY: plain values.
    unsafe {
        ok(sys::cuMemRelease(h));
        // Released by its creator, the memory lives on in its mapping.
        ok(sys::cuMemRelease(h));
        expect(sys::cuMemRelease(h), 1);
        expect(sys::cuMemMap(ptr, size, 0, h, 0), 1);
    }
    assert!(
        read(ptr + 16, 64) == data[16..80],
        "the mapping outlives the handle"
    );
    // The address range is not freed while mapped; unmapping frees the memory.
    // SAFETY: plain values.
    unsafe {
        expect(sys::cuMemAddressFree(ptr, size), 1);
        ok(sys::cuMemUnmap(ptr, size));
        expect(sys::cuMemUnmap(ptr, size), 1);
    }
    let mut v = vec![0u8; 16];
    // SAFETY: `v` holds 16 bytes; the address is reserved but unmapped.
    let r = unsafe { sys::cuMemcpyDtoH_v2(v.as_mut_ptr().cast(), ptr, 16) };
    expect(r, 1);

    // The reservation can be mapped again, to new memory without access.
    let h2 = create(G, &prop(0));
    ok(map(ptr + G as u64, G, 0, h2));
    ok(set_access(ptr + G as u64, G, &[access(0, 3)]));
    write(ptr + G as u64, &data[..4096]);
    assert!(read(ptr + G as u64, 4096) == data[..4096]);
    // SAFETY: plain values: unmap, free the reservation, then release.
    unsafe {
        ok(sys::cuMemUnmap(ptr + G as u64, G));
        ok(sys::cuMemAddressFree(ptr, size));
        expect(sys::cuMemAddressFree(ptr, size), 1);
        ok(sys::cuMemRelease(h2));
    }

    // Two mappings back to back take one cuMemSetAccess; each its own unmap.
    let (a, b) = (create(G, &prop(POSIX)), create(2 * G, &prop(POSIX)));
    let base = reserve(4 * G);
    ok(map(base, G, 0, a));
    ok(map(base + G as u64, 2 * G, 0, b));
    expect(set_access(base, 4 * G, &[access(0, 3)]), 1);
    ok(set_access(base, 3 * G, &[access(0, 3)]));
    write(base + G as u64 - 8, &[1; 8]);
    write(base + G as u64, &[2; 8]);
    // SAFETY: plain values.
    unsafe {
        expect(sys::cuMemUnmap(base, 3 * G), 1);
        ok(sys::cuMemRelease(a));
        ok(sys::cuMemRelease(b));
        ok(sys::cuMemUnmap(base + G as u64, 2 * G));
        ok(sys::cuMemUnmap(base, G));
        ok(sys::cuMemAddressFree(base, 4 * G));
    }

    // An exported descriptor alone keeps the memory: import it back after
    // releasing and unmapping everything.
    let h = create(G, &prop(POSIX));
    let ptr = map_rw(h, G);
    write(ptr, &data[..G]);
    let (r, fd) = export(h, POSIX);
    ok(r);
    // SAFETY: plain values.
    unsafe {
        ok(sys::cuMemUnmap(ptr, G));
        ok(sys::cuMemAddressFree(ptr, G));
        ok(sys::cuMemRelease(h));
    }
    let (r, back) = import(fd, POSIX);
    ok(r);
    close(fd);
    let ptr = map_rw(back, G);
    assert!(
        read(ptr, G) == data[..G],
        "the exported descriptor kept the memory"
    );
    // A same-process import is not another process's memory.
    let (reset, counts) = counters();
    // SAFETY: the stand-in's reset.
    unsafe { reset() };
    // SAFETY: both ranges are device memory of 64 KiB at least.
    ok(unsafe { sys::cuMemcpyDtoD_v2(d, ptr, 1 << 16) });
    // SAFETY: plain driver call.
    ok(unsafe { sys::cuCtxSynchronize() });
    assert_eq!(imported_bytes(counts), 0);
    // SAFETY: plain values.
    unsafe {
        ok(sys::cuMemUnmap(ptr, G));
        ok(sys::cuMemAddressFree(ptr, G));
        ok(sys::cuMemRelease(back));
        ok(sys::cuMemFree_v2(d));
    }
});

standin_test!(refusals, 30, &[], {
    bind();
    // cuMemCreate.
    let good = prop(POSIX);
    expect(try_create(G + 4096, &good).0, 1);
    expect(try_create(0, &good).0, 1);
    let mut h = 0;
    // SAFETY: valid pointers; flags must be 0.
    expect(unsafe { sys::cuMemCreate(&mut h, G, raw(&good), 1) }, 1);
    // SAFETY: a NULL prop.
    expect(
        unsafe { sys::cuMemCreate(&mut h, G, std::ptr::null(), 0) },
        1,
    );
    let variants: [(Change, u32); 10] = [
        (|p| p.kind = 0, 1),
        (|p| p.kind = 2, 801),
        (|p| p.location.id = 5, 1),
        (|p| p.location.kind = 2, 801),
        (|p| p.location.kind = 9, 1),
        (|p| p.handle_types = FABRIC, 801),
        (|p| p.handle_types = POSIX | WIN32, 801),
        (|p| p.handle_types = 0x100, 1),
        (|p| p.usage = 1, 801),
        (|p| p.reserved[2] = 1, 1),
    ];
    for (i, (change, want)) in variants.into_iter().enumerate() {
        let mut p = prop(POSIX);
        change(&mut p);
        assert_eq!(code(try_create(G, &p).0), want, "variant {i}");
    }
    let mut p = prop(POSIX);
    p.compression = 1;
    let hinted = create(G, &p);
    // SAFETY: plain value.
    ok(unsafe { sys::cuMemRelease(hinted) });

    // cuMemAddressReserve.
    let mut ptr = 0;
    // SAFETY: valid out-pointer in each call.
    unsafe {
        expect(sys::cuMemAddressReserve(&mut ptr, 1000, 0, 0, 0), 1);
        expect(sys::cuMemAddressReserve(&mut ptr, 0, 0, 0, 0), 1);
        expect(sys::cuMemAddressReserve(&mut ptr, G, 3, 0, 0), 1);
        expect(sys::cuMemAddressReserve(&mut ptr, G, 0, 0, 1), 1);
        ok(sys::cuMemAddressReserve(&mut ptr, 4 * G, 4 * G, 0, 0));
    }
    assert_eq!(ptr % (4 * G) as u64, 0, "aligned as asked");

    // cuMemMap.
    let h = create(2 * G, &prop(POSIX));
    let plain = create(G, &prop(0));
    expect(map(ptr + 4096, G, 0, h), 1);
    expect(map(ptr, G + 4096, 0, h), 1);
    expect(map(ptr, G, 4096, h), 1);
    expect(map(ptr, 3 * G, 0, h), 1);
    expect(map(ptr, 2 * G, G, h), 1);
    expect(map(ptr + 3 * G as u64, 2 * G, 0, h), 1);
    expect(map(ptr, G, 0, 0x1234_5670), 1);
    // SAFETY: flags must be 0.
    expect(unsafe { sys::cuMemMap(ptr, G, 0, h, 1) }, 1);
    ok(map(ptr, 2 * G, 0, h));
    expect(map(ptr + G as u64, G, 0, plain), 1);
    expect(map(ptr, G, 0, plain), 1);
    ok(map(ptr + 2 * G as u64, G, 0, plain));

    // cuMemSetAccess.
    expect(set_access(ptr, G, &[access(0, 3)]), 1);
    expect(set_access(ptr + G as u64, G, &[access(0, 3)]), 1);
    expect(set_access(ptr, 2 * G, &[access(0, 1)]), 801);
    expect(set_access(ptr, 2 * G, &[access(0, 7)]), 1);
    expect(set_access(ptr, 2 * G, &[access(9, 3)]), 1);
    expect(set_access(ptr, 2 * G, &[]), 1);
    let host = Access {
        location: Location { kind: 2, id: 0 },
        flags: 3,
    };
    expect(set_access(ptr, 2 * G, &[host]), 801);
    ok(set_access(ptr, 3 * G, &[access(0, 3)]));
    ok(set_access(ptr, 2 * G, &[access(0, 3), access(0, 0)]));
    let mut flags = 9u64;
    let dev0 = Location { kind: 1, id: 0 };
    // SAFETY: valid pointers.
    unsafe {
        ok(sys::cuMemGetAccess(
            &mut flags,
            (&dev0 as *const Location).cast(),
            ptr,
        ));
        assert_eq!(flags, 0, "the later descriptor wins");
        let d = alloc(4096);
        expect(
            sys::cuMemGetAccess(&mut flags, (&dev0 as *const Location).cast(), d),
            1,
        );
        ok(sys::cuMemFree_v2(d));
    }

    // cuMemExportToShareableHandle.
    for (t, want) in [(FABRIC, 801), (WIN32, 801), (4, 801), (0, 1), (3, 1)] {
        assert_eq!(code(export(h, t).0), want, "export type {t}");
    }
    expect(export(plain, POSIX).0, 1);
    expect(export(0x1234_5670, POSIX).0, 1);
    let mut fd: c_int = -1;
    // SAFETY: flags must be 0; a NULL out-pointer is refused.
    unsafe {
        let out = (&mut fd as *mut c_int).cast();
        let posix = sys::CUmemAllocationHandleType(POSIX);
        expect(sys::cuMemExportToShareableHandle(out, h, posix, 1), 1);
        expect(
            sys::cuMemExportToShareableHandle(null_mut(), h, posix, 0),
            1,
        );
    }

    // cuMemImportFromShareableHandle.
    let (r, fd) = export(h, POSIX);
    ok(r);
    expect(import(fd, FABRIC).0, 801);
    expect(import(fd, WIN32).0, 801);
    expect(import(fd, 0).0, 1);
    let (r, imported) = import(fd, POSIX);
    ok(r);
    // An imported allocation is not exported again.
    expect(export(imported, POSIX).0, 1);
    // SAFETY: plain value.
    ok(unsafe { sys::cuMemRelease(imported) });
    close(fd);
    expect(import(fd, POSIX).0, 1);
    let file = std::fs::File::open(std::env::current_exe().unwrap()).unwrap();
    expect(import(std::os::fd::AsRawFd::as_raw_fd(&file), POSIX).0, 1);
    let mut pipe = [0; 2];
    // SAFETY: a two-int buffer.
    assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
    expect(import(pipe[0], POSIX).0, 1);
    close(pipe[0]);
    close(pipe[1]);
    // A memfd of the right size and seals, but not the stand-in's header.
    // SAFETY: plain calls on a fresh memfd.
    unsafe {
        let m = libc::memfd_create(c"forged".as_ptr(), libc::MFD_ALLOW_SEALING);
        assert!(m >= 0);
        assert_eq!(libc::ftruncate(m, (G + 4096) as libc::off_t), 0);
        expect(import(m, POSIX).0, 1);
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        assert_eq!(libc::fcntl(m, libc::F_ADD_SEALS, seals), 0);
        expect(import(m, POSIX).0, 1);
        close(m);
    }
    let mut out = 0;
    // SAFETY: an osHandle that cannot be a descriptor.
    let r = unsafe {
        sys::cuMemImportFromShareableHandle(
            &mut out,
            usize::MAX as *mut c_void,
            sys::CUmemAllocationHandleType(POSIX),
        )
    };
    expect(r, 1);

    // cuMemUnmap, cuMemAddressFree, cuMemRelease.
    // SAFETY: plain values.
    unsafe {
        expect(sys::cuMemUnmap(ptr, G), 1);
        expect(sys::cuMemUnmap(ptr + G as u64, G), 1);
        expect(sys::cuMemUnmap(ptr, 3 * G), 1);
        expect(sys::cuMemAddressFree(ptr, 4 * G), 1);
        expect(sys::cuMemAddressFree(ptr, 2 * G), 1);
        expect(sys::cuMemAddressFree(ptr + G as u64, 3 * G), 1);
        ok(sys::cuMemUnmap(ptr, 2 * G));
        expect(sys::cuMemAddressFree(ptr, 4 * G), 1);
        ok(sys::cuMemUnmap(ptr + 2 * G as u64, G));
        ok(sys::cuMemAddressFree(ptr, 4 * G));
        expect(sys::cuMemAddressFree(ptr, 4 * G), 1);
        expect(sys::cuMemRelease(0x1234_5670), 1);
        ok(sys::cuMemRelease(h));
        ok(sys::cuMemRelease(plain));
        expect(sys::cuMemRelease(h), 1);
    }
});

standin_test!(
    unaffected_by_refuse,
    20,
    &[("STREAMCOMM_STANDIN_REFUSE", "ipc,host-register")],
    {
        bind();
        let h = create(G, &prop(POSIX));
        let (r, fd) = export(h, POSIX);
        ok(r);
        let (r, back) = import(fd, POSIX);
        ok(r);
        close(fd);
        let ptr = map_rw(back, G);
        write(ptr, &[7; 64]);
        assert_eq!(read(ptr, 64), vec![7; 64]);
        // SAFETY: plain values.
        unsafe {
            ok(sys::cuMemUnmap(ptr, G));
            ok(sys::cuMemAddressFree(ptr, G));
            ok(sys::cuMemRelease(back));
            ok(sys::cuMemRelease(h));
        }
    }
);

standin_test!(
    access_before_set_access_faults,
    {
        bind();
        let h = create(G, &prop(POSIX));
        let ptr = reserve(G);
        ok(map(ptr, G, 0, h));
        let mut v = vec![0u8; 64];
        // SAFETY: `v` holds 64 bytes; the mapping has no access yet.
        let r = unsafe { sys::cuMemcpyDtoH_v2(v.as_mut_ptr().cast(), ptr, 64) };
        expect(r, 700);
        // The fault is sticky, as on a GPU.
        // SAFETY: plain driver call.
        expect(unsafe { sys::cuCtxSynchronize() }, 700);
    },
    |name| {
        let child = run(name, &[]);
        assert!(
            child.stderr.contains(
                "no cuMemSetAccess has given device 0 read-write access to its VMM mapping"
            ),
            "the fault names the missing access:\n{}",
            child.stderr
        );
    }
);

standin_test!(
    work_reaching_an_unmapped_range_faults,
    {
        bind();
        let h = create(G, &prop(POSIX));
        let ptr = map_rw(h, G);
        write(ptr, &[1; 64]);
        let s = common::stream(true);
        let (gate_host, gate) = mapped(64);
        let (dst, _) = mapped(4096);
        // SAFETY: the gate word is pinned, device-mapped and 4-byte aligned;
        // `dst` is pinned host memory of 4 KiB.
        unsafe {
            gate_host.cast::<u32>().write_volatile(0);
            ok(sys::cuStreamWaitValue32_v2(s, gate, 1, 0));
            ok(sys::cuMemcpyDtoHAsync_v2(dst.cast(), ptr, 64, s));
            // cuMemUnmap does not wait for the copy behind the gate.
            ok(sys::cuMemUnmap(ptr, G));
            ok(sys::cuMemRelease(h));
            std::sync::atomic::AtomicU32::from_ptr(gate_host.cast())
                .store(1, std::sync::atomic::Ordering::SeqCst);
            expect(sys::cuStreamSynchronize(s), 700);
        }
    },
    |name| {
        let child = run(name, &[]);
        assert!(
            child
                .stderr
                .contains("which is not device-accessible memory"),
            "the fault names the unmapped range:\n{}",
            child.stderr
        );
    }
);

/// The importer of [`between_processes`]: imports the descriptor it
/// inherited, reads and writes through its own mapping, tells the exporter,
/// then waits for the exporter to release everything and exit, and reads
/// again.
fn importer(fd: c_int, ready: c_int, exporter: u32) {
    // Never outlive a lost exporter by much (the test's reader waits for us).
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_secs(40));
        eprintln!("VMM importer: timed out");
        std::process::exit(3);
    });
    common::check_standin();
    bind();
    let (r, h) = import(fd, POSIX);
    ok(r);
    // The caller owns the descriptor it passed: closing it keeps the import.
    close(fd);
    let ptr = map_rw(h, 2 * G);
    let want = pattern(2 * G, 11);
    assert!(
        read(ptr, 2 * G) == want,
        "the importer sees the exporter's bytes"
    );
    let (reset, counts) = counters();
    let d = alloc(1 << 16);
    // SAFETY: the stand-in's reset; both ranges hold 64 KiB.
    unsafe {
        reset();
        ok(sys::cuMemcpyDtoD_v2(d, ptr + G as u64, 1 << 16));
        ok(sys::cuCtxSynchronize());
    }
    assert_eq!(
        imported_bytes(counts),
        1 << 16,
        "reading another process's VMM memory counts as imported"
    );
    assert!(read(d, 1 << 16) == want[G..G + (1 << 16)]);
    write(ptr, &[0xEE; 32]);
    // SAFETY: writes one byte to the inherited pipe, then closes it.
    unsafe {
        assert_eq!(libc::write(ready, [1u8].as_ptr().cast(), 1), 1);
    }
    close(ready);
    let start = Instant::now();
    // SAFETY: getppid has no preconditions.
    while unsafe { libc::getppid() } == exporter as i32 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the exporter never exited"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // The exporter released, unmapped, freed and exited: the memory is ours.
    let mut after = want.clone();
    after[..32].fill(0xEE);
    after[32..64].fill(0x77);
    assert!(
        read(ptr, 2 * G) == after,
        "the importer still reads the memory after its exporter exited"
    );
    // SAFETY: both ranges hold 64 KiB.
    unsafe {
        ok(sys::cuMemcpyDtoD_v2(d, ptr, 1 << 16));
        ok(sys::cuCtxSynchronize());
        ok(sys::cuMemUnmap(ptr, 2 * G));
        ok(sys::cuMemAddressFree(ptr, 2 * G));
        ok(sys::cuMemRelease(h));
        ok(sys::cuMemFree_v2(d));
    }
    println!("VMM-IMPORTER-OK after exporter {exporter} exited");
}

standin_test!(
    /// NCCL's cuMem path across processes: the exporter creates, maps, gives
    /// access, writes and exports a descriptor; another process, which inherits
    /// it, imports, maps, gives access, reads and writes; each sees the other's
    /// bytes through device copies; the exporter then releases everything and
    /// exits while the importer goes on reading.
    raw between_processes,
    {
        if let Ok(fd) = std::env::var("SC_VMM_FD") {
            let ready = std::env::var("SC_VMM_READY").unwrap().parse().unwrap();
            let exporter = std::env::var("SC_VMM_EXPORTER").unwrap().parse().unwrap();
            importer(fd.parse().unwrap(), ready, exporter);
            return;
        }
        common::check_standin();
        bind();
        let mut g = 0;
        // SAFETY: valid out-pointer and properties.
        ok(unsafe {
            sys::cuMemGetAllocationGranularity(
                &mut g,
                raw(&prop(POSIX)),
                sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
            )
        });
        let size = 2 * g;
        let h = create(size, &prop(POSIX));
        let ptr = map_rw(h, size);
        write(ptr, &pattern(size, 11));
        let (r, fd) = export(h, POSIX);
        ok(r);
        let mut pipe = [0; 2];
        // SAFETY: a two-int buffer; then the ends the importer inherits lose
        // close-on-exec (the exported descriptor has it, as a fresh one should).
        unsafe {
            assert_eq!(libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC), 0);
            assert!(libc::fcntl(fd, libc::F_GETFD) & libc::FD_CLOEXEC != 0);
            assert_eq!(libc::fcntl(fd, libc::F_SETFD, 0), 0);
            assert_eq!(libc::fcntl(pipe[1], libc::F_SETFD, 0), 0);
        }
        // The importer writes to our stdout and stderr, which the test reads
        // to their end, after we exit. It must outlive us, so we never wait
        // for it: it is re-parented when we exit (no zombie stays behind).
        let (fd_s, ready_s) = (fd.to_string(), pipe[1].to_string());
        let exporter_s = std::process::id().to_string();
        let env = [
            ("SC_VMM_FD", fd_s.as_str()),
            ("SC_VMM_READY", &ready_s),
            ("SC_VMM_EXPORTER", &exporter_s),
        ];
        #[allow(clippy::zombie_processes)]
        let _importer = common::child_command(name, &env)
            .env("LD_LIBRARY_PATH", common::lib_dir())
            .spawn()
            .expect("spawn the importer");
        close(fd);
        close(pipe[1]);
        let mut byte = [0u8; 1];
        // SAFETY: reads one byte into our buffer.
        let n = unsafe { libc::read(pipe[0], byte.as_mut_ptr().cast(), 1) };
        assert_eq!(
            n, 1,
            "the importer did not get through importing and writing"
        );
        close(pipe[0]);
        let mut want = pattern(size, 11);
        want[..32].fill(0xEE);
        assert!(
            read(ptr, size) == want,
            "the exporter sees the importer's bytes"
        );
        // The exporter's last write, then everything released, in an order
        // the driver allows: handle, mapping, reservation.
        write(ptr + 32, &[0x77; 32]);
        // SAFETY: plain values.
        unsafe {
            ok(sys::cuMemRelease(h));
            ok(sys::cuMemUnmap(ptr, size));
            ok(sys::cuMemAddressFree(ptr, size));
        }
    },
    |name| {
        let child = run(name, &[]);
        assert!(
            child.stdout.contains("VMM-IMPORTER-OK after exporter"),
            "the importer finished after its exporter exited:\n--- stdout\n{}\n--- stderr\n{}",
            child.stdout,
            child.stderr
        );
    }
);
