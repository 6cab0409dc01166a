//! Loading, initialisation, devices, contexts, errors, memory and IPC on the
//! stand-in, each test in a child process that loads it through cudarc.

mod common;

use std::ffi::CStr;
use std::time::Duration;

use common::{alloc, bind, code, expect, mapped, ok, read};
use cudarc::driver::sys;

standin_test!(
    raw cudarc_binds_every_symbol_and_unimplemented_calls_say_so,
    {
        // cudarc resolves all 382 cuda-12000 symbols here, panicking on a missing one.
        cudarc::driver::result::init().expect("cuInit through cudarc");
        let ctx = cudarc::driver::CudaContext::new(0).expect("CudaContext::new");
        let dev = ctx.name().expect("device name");
        assert!(dev.contains("streamcomm CPU stand-in"), "{dev}");
        let mut p = 0;
        // SAFETY: valid out-pointer; the stand-in does not implement managed memory.
        let r = unsafe { sys::cuMemAllocManaged(&mut p, 64, 1) };
        expect(r, 801);
        println!("device: {dev}");
    },
    |name| {
        let child = common::run_child(name, &[], Duration::from_secs(20));
        child.assert_ok(name);
        assert!(
            child
                .stderr
                .contains("cuMemAllocManaged is not implemented by the stand-in"),
            "the unimplemented entry point names itself: {}",
            child.stderr
        );
    }
);

standin_test!(raw init_devices_contexts_and_errors, 20, &[], {
    // SAFETY: driver calls with valid pointers throughout.
    unsafe {
        let mut n = 0;
        expect(sys::cuDeviceGetCount(&mut n), 3);
        let mut v = 0;
        ok(sys::cuDriverGetVersion(&mut v));
        assert_eq!(v, 13000);
        expect(sys::cuInit(1), 1);
        common::check_standin();
        ok(sys::cuDeviceGetCount(&mut n));
        assert_eq!(n, 1);
        let mut dev = 0;
        expect(sys::cuDeviceGet(&mut dev, 1), 101);
        let mut x = 0;
        let major = sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR;
        ok(sys::cuDeviceGetAttribute(&mut x, major, 0));
        assert_eq!(x, 9);
        // No current context yet.
        let mut p = 0;
        expect(sys::cuMemAlloc_v2(&mut p, 16), 201);
        expect(sys::cuDevicePrimaryCtxRelease_v2(0), 201);
        let ctx = bind();
        let mut cur = std::ptr::null_mut();
        ok(sys::cuCtxGetCurrent(&mut cur));
        assert_eq!(cur, ctx);
        ok(sys::cuCtxSynchronize());
        // A new thread has no current context.
        let r = std::thread::spawn(|| {
            let mut p = 0;
            code(sys::cuMemAlloc_v2(&mut p, 16))
        })
        .join()
        .unwrap();
        assert_eq!(r, 201);
        let mut s = std::ptr::null();
        ok(sys::cuGetErrorName(sys::cudaError_enum::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, &mut s));
        assert_eq!(CStr::from_ptr(s).to_str().unwrap(), "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED");
        ok(sys::cuGetErrorString(sys::cudaError_enum::CUDA_ERROR_INVALID_VALUE, &mut s));
        assert!(CStr::from_ptr(s).to_str().unwrap().contains("not within an acceptable range"));
        ok(sys::cuDevicePrimaryCtxRelease_v2(0));
        expect(sys::cuDevicePrimaryCtxRelease_v2(0), 201);
    }
});

standin_test!(memory_rules, 20, &[], {
    bind();
    // SAFETY: driver calls with valid pointers throughout.
    unsafe {
        let mut p = 0;
        expect(sys::cuMemAlloc_v2(&mut p, 0), 1);
        let d = alloc(4096);
        assert_eq!(read(d, 4), [0xA5; 4], "new device memory is not zeroed");
        let data: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
        ok(sys::cuMemcpyHtoD_v2(d, data.as_ptr().cast(), 4096));
        assert_eq!(read(d, 4096), data);
        ok(sys::cuMemsetD8_v2(d + 100, 0x3c, 10));
        let back = read(d, 4096);
        assert!(back[100..110].iter().all(|&b| b == 0x3c) && back[110] == data[110]);
        // Out of bounds, a device address as host memory, interior and double frees.
        expect(sys::cuMemcpyHtoD_v2(d + 4000, data.as_ptr().cast(), 200), 1);
        expect(sys::cuMemcpyHtoD_v2(d, d as *const _, 16), 1);
        expect(sys::cuMemFree_v2(d + 16), 1);
        ok(sys::cuMemFree_v2(d));
        expect(sys::cuMemFree_v2(d), 1);
        expect(sys::cuMemcpyDtoH_v2(back.as_ptr() as *mut _, d, 16), 1);
        // Pinned memory: only DEVICEMAP memory has a device pointer (= host pointer).
        let mut h = std::ptr::null_mut();
        ok(sys::cuMemHostAlloc(&mut h, 4096, 0x4));
        let mut dp = 0;
        expect(sys::cuMemHostGetDevicePointer_v2(&mut dp, h, 0), 1);
        let (mh, md) = mapped(4096);
        assert_eq!(md, mh as u64);
        expect(sys::cuMemHostGetDevicePointer_v2(&mut dp, mh.cast(), 1), 1);
        let s = common::stream(true);
        let r = sys::cuStreamWriteValue32_v2(s, h as u64, 1, 0);
        expect(r, 1);
        ok(sys::cuStreamWriteValue32_v2(s, md, 7, 0));
        ok(sys::cuStreamSynchronize(s));
        assert_eq!(*(mh as *const u32), 7);
        expect(sys::cuMemFreeHost(mh.add(8).cast()), 1);
        ok(sys::cuMemFreeHost(mh.cast()));
        ok(sys::cuMemFreeHost(h));
        // Host registration: overlap 712, non-base unregister 713.
        let mut buf = vec![0u8; 8192];
        let b = buf.as_mut_ptr();
        ok(sys::cuMemHostRegister_v2(b.cast(), 4096, 0));
        expect(sys::cuMemHostRegister_v2(b.add(100).cast(), 16, 0), 712);
        expect(sys::cuMemHostUnregister(b.add(100).cast()), 713);
        ok(sys::cuMemHostUnregister(b.cast()));
    }
});

standin_test!(ipc_between_processes, 20, &[], {
    bind();
    if let Ok(hex) = std::env::var("SC_IPC_HANDLE") {
        // The importing process.
        let mut h = sys::CUipcMemHandle { reserved: [0; 64] };
        for (i, b) in h.reserved.iter_mut().enumerate() {
            *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap() as _;
        }
        let flags = sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32;
        let (mut p, mut q) = (0, 0);
        // SAFETY: driver calls with valid pointers.
        unsafe {
            expect(sys::cuIpcOpenMemHandle_v2(&mut p, h, 0), 1);
            ok(sys::cuIpcOpenMemHandle_v2(&mut p, h, flags));
            ok(sys::cuIpcOpenMemHandle_v2(&mut q, h, flags));
            assert_eq!(p, q, "reopening returns the same mapping");
            let got = read(p, 256);
            assert!(
                got.iter().enumerate().all(|(i, &b)| b == i as u8),
                "peer sees the exporter's bytes"
            );
            ok(sys::cuMemsetD8_v2(p, 0xEE, 16));
            ok(sys::cuCtxSynchronize());
            ok(sys::cuIpcCloseMemHandle(p));
            ok(sys::cuIpcCloseMemHandle(q));
            expect(sys::cuIpcCloseMemHandle(p), 1);
        }
        println!("IPC-PEER-OK");
        return;
    }
    let d = alloc(1 << 16);
    let data: Vec<u8> = (0..256u32).map(|i| i as u8).collect();
    let mut h = sys::CUipcMemHandle { reserved: [0; 64] };
    // SAFETY: driver calls with valid pointers.
    unsafe {
        ok(sys::cuMemcpyHtoD_v2(d, data.as_ptr().cast(), 256));
        // A pageable cuMemcpyHtoD returns once staged: wait for it to land
        // before another process looks.
        ok(sys::cuCtxSynchronize());
        expect(sys::cuIpcGetMemHandle(&mut h, d + 64), 1);
        ok(sys::cuIpcGetMemHandle(&mut h, d));
        let mut p = 0;
        let flags = sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32;
        expect(sys::cuIpcOpenMemHandle_v2(&mut p, h, flags), 201);
    }
    let hex: String = h
        .reserved
        .iter()
        .map(|b| format!("{:02x}", *b as u8))
        .collect();
    let peer = common::run_child(
        "ipc_between_processes",
        &[("SC_IPC_HANDLE", &hex)],
        Duration::from_secs(10),
    );
    assert!(
        peer.ok && peer.stdout.contains("IPC-PEER-OK"),
        "peer failed:\n{}\n{}",
        peer.stdout,
        peer.stderr
    );
    let back = read(d, 32);
    assert!(
        back[..16].iter().all(|&b| b == 0xEE) && back[16] == 16,
        "exporter sees the peer's write"
    );
    // SAFETY: frees the allocation made above.
    ok(unsafe { sys::cuMemFree_v2(d) });
});

standin_test!(
    /// cudarc loads `libcuda.so` before `libcuda.so.1`, so a CUDA toolkit's
    /// `stubs/` directory (a `libcuda.so` whose every call returns
    /// `CUDA_ERROR_STUB_LIBRARY`, and no `libcuda.so.1`) ahead of the driver
    /// on the library path binds the stub. The probe must look where cudarc
    /// looks and say so plainly. The stub is built here from the stand-in's
    /// symbol list; the driver is the stand-in, as `libcuda.so.1` only.
    raw a_toolkit_stub_ahead_of_the_driver_is_named_by_the_probe,
    {
        let err = streamcomm_gpu::Device::count().expect_err("only a stub answers first");
        let msg = err.to_string();
        assert!(
            msg.contains("stub library") && msg.contains("stubs/"),
            "the probe does not name the stub: {msg}"
        );
        println!("{msg}");
    },
    |name| {
        let lib = common::standin_lib();
        let Ok(nm) = std::process::Command::new("nm")
            .args(["-D", "--defined-only"])
            .arg(&lib)
            .output()
        else {
            common::skip(name, "no `nm` to list the driver's symbols");
            return;
        };
        let symbols: Vec<String> = String::from_utf8_lossy(&nm.stdout)
            .lines()
            .filter_map(|l| l.split_whitespace().nth(2))
            .filter(|s| s.starts_with("cu"))
            .map(str::to_string)
            .collect();
        assert!(symbols.len() >= 382, "{} symbols", symbols.len());
        let dir = lib
            .parent()
            .expect("lib dir")
            .join(format!("stub-test-{}", std::process::id()));
        let (stubs, drv) = (dir.join("stubs"), dir.join("drv"));
        std::fs::create_dir_all(&stubs).unwrap();
        std::fs::create_dir_all(&drv).unwrap();
        let source: String = symbols
            .iter()
            .map(|s| format!("int {s}(void) {{ return 34; }}\n"))
            .collect();
        std::fs::write(dir.join("stub.c"), source).unwrap();
        let built = std::process::Command::new("cc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(stubs.join("libcuda.so"))
            .arg(dir.join("stub.c"))
            .status();
        if !built.is_ok_and(|s| s.success()) {
            let _ = std::fs::remove_dir_all(&dir);
            common::skip(name, "no `cc` to build the stub");
            return;
        }
        std::os::unix::fs::symlink(&lib, drv.join("libcuda.so.1")).unwrap();
        let path = std::path::PathBuf::from(format!("{}:{}", stubs.display(), drv.display()));
        let child = common::run_child_in(name, &[], Duration::from_secs(20), &path);
        let _ = std::fs::remove_dir_all(&dir);
        child.assert_ok(name);
    }
);
