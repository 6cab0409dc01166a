//! The stand-in's profiles and the knobs behind them: `h200` (what an H200
//! on NVIDIA driver 580, CUDA 13.0, reports) and `h100` (the same machine with
//! an H100), compute modes across processes, memory pools through cudarc's
//! allocation path, GPUDirect RDMA attributes, strict callbacks, delayed
//! user-object destructors, the lifetime of IPC mappings, and
//! `STREAMCOMM_STANDIN_REFUSE` (IPC and host registration refused). Each
//! test's body runs in a child process on the stand-in.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::time::Duration;

use common::{bind, code, expect, ok};
use cudarc::driver::sys;

const H200: (&str, &str) = ("STREAMCOMM_STANDIN_PROFILE", "h200");
const H100: (&str, &str) = ("STREAMCOMM_STANDIN_PROFILE", "h100");
const REFUSE: &str = "STREAMCOMM_STANDIN_REFUSE";

fn attribute(attrib: sys::CUdevice_attribute) -> i32 {
    let mut v = 0;
    // SAFETY: valid out-pointer; device 0 exists.
    ok(unsafe { sys::cuDeviceGetAttribute(&mut v, attrib, 0) });
    v
}

fn driver_version() -> i32 {
    let mut v = 0;
    // SAFETY: valid out-pointer.
    ok(unsafe { sys::cuDriverGetVersion(&mut v) });
    v
}

/// A helper process: this test binary re-run as test `name`'s child with
/// `SC_ROLE=role` and `env`, talking over its stdin and stdout lines.
struct Helper {
    child: std::process::Child,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl Helper {
    fn spawn(name: &str, role: &str, env: &[(&str, &str)]) -> Helper {
        let mut child = common::child_command(name, env)
            .env("SC_ROLE", role)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn helper");
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Helper { child, lines }
    }

    /// What follows `prefix` in the next line the helper prints with it
    /// (the test harness may print its own text before it on the line).
    fn expect_line(&mut self, prefix: &str) -> String {
        for line in self.lines.by_ref() {
            let line = line.expect("helper stdout");
            if let Some(at) = line.find(prefix) {
                return line[at + prefix.len()..].trim().to_string();
            }
        }
        panic!("the helper ended before printing {prefix}");
    }

    fn say(&mut self, line: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        let _ = writeln!(stdin, "{line}");
        let _ = stdin.flush();
    }

    /// Waits (at most 10 s) for the helper to exit; true if it succeeded.
    fn finish(mut self) -> bool {
        drop(self.child.stdin.take());
        let ok = common::eventually(Duration::from_secs(10), || {
            self.child.try_wait().ok().flatten().is_some()
        });
        if !ok {
            let _ = self.child.kill();
        }
        self.child.wait().is_ok_and(|s| s.success())
    }
}

/// In a helper: blocks until the parent writes a line (or goes away).
fn await_parent() {
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
}

fn role() -> String {
    std::env::var("SC_ROLE").unwrap_or_default()
}

standin_test!(
    raw every_process_says_it_runs_on_the_standin_and_with_which_profile,
    {
        let want: i32 = std::env::var("SC_WANT_VERSION").unwrap().parse().unwrap();
        // SAFETY: plain driver calls.
        let r = unsafe { sys::cuInit(0) };
        if want < 0 {
            expect(r, 1);
        } else {
            ok(r);
            assert_eq!(driver_version(), want);
        }
    },
    |name| {
        type Case<'a> = (&'a [(&'a str, &'a str)], i32, &'a str);
        let cases: [Case; 10] = [
            (&[], 13000, "(profile default)"),
            // Driver 580 (CUDA 13.0), as on the GPU machines.
            (&[H200], 13000, "(profile h200)"),
            (&[H100], 13000, "(profile h100)"),
            (
                &[H200, ("STREAMCOMM_STANDIN_DRIVER_VERSION", "12080")],
                12080,
                "(profile h200)",
            ),
            (
                &[H100, ("STREAMCOMM_STANDIN_DRIVER_VERSION", "12080")],
                12080,
                "(profile h100)",
            ),
            (
                &[("STREAMCOMM_STANDIN_PROFILE", "a100")],
                -1,
                "STREAMCOMM_STANDIN_PROFILE=\"a100\" is not a profile",
            ),
            (
                &[(REFUSE, "ipc,peer-access")],
                -1,
                "STREAMCOMM_STANDIN_REFUSE=\"ipc,peer-access\" names \"peer-access\"",
            ),
            (
                &[(REFUSE, " ipc , host-register ")],
                13000,
                "(profile default)",
            ),
            (
                &[("STREAMCOMM_STANDIN_MEMORY_POOLS", "yes")],
                -1,
                "STREAMCOMM_STANDIN_MEMORY_POOLS=\"yes\" is not 0 or 1",
            ),
            (
                &[("STREAMCOMM_STANDIN_GDR_FLUSH", "1")],
                -1,
                "STREAMCOMM_STANDIN_GDR_FLUSH=1 needs GPUDirect RDMA",
            ),
        ];
        for (env, version, said) in cases {
            let v = version.to_string();
            let mut env = env.to_vec();
            env.push(("SC_WANT_VERSION", &v));
            let child = common::run_child(name, &env, Duration::from_secs(20));
            child.assert_ok(name);
            assert!(child.stderr.contains(said), "{env:?}: {}", child.stderr);
            assert_eq!(
                child.stderr.matches("not on a GPU").count(),
                1,
                "said once per process: {}",
                child.stderr
            );
        }
    }
);

/// Device 0's name (`cuDeviceGetName`).
fn device_name() -> String {
    let mut name = [0 as std::ffi::c_char; 256];
    // SAFETY: a 256-byte buffer; device 0 exists.
    unsafe {
        ok(sys::cuDeviceGetName(name.as_mut_ptr(), 256, 0));
        std::ffi::CStr::from_ptr(name.as_ptr())
    }
    .to_string_lossy()
    .into_owned()
}

/// Device 0's total memory (`cuDeviceTotalMem_v2`).
fn total_mem() -> usize {
    let mut bytes = 0;
    // SAFETY: valid out-pointer; device 0 exists.
    ok(unsafe { sys::cuDeviceTotalMem_v2(&mut bytes, 0) });
    bytes
}

/// What the profiles of the GPU machines (`h200`, `h100`) share: driver 580
/// (CUDA 13.0), sm_90 with 132 SMs, memory pools, GPUDirect RDMA.
fn gpu_machine_capabilities() {
    use sys::CUdevice_attribute::*;
    assert_eq!(driver_version(), 13000, "driver 580 reports CUDA 13.0");
    assert_eq!(attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR), 9);
    assert_eq!(attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR), 0);
    assert_eq!(attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT), 132);
    let (mut major, mut minor) = (0, 0);
    // SAFETY: valid out-pointers; device 0 exists.
    ok(unsafe { sys::cuDeviceComputeCapability(&mut major, &mut minor, 0) });
    assert_eq!((major, minor), (9, 0));
    assert_eq!(attribute(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED), 1);
    assert_eq!(attribute(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED), 1);
}

standin_test!(
    the_h100_profile_reports_an_h100_on_the_same_machine,
    20,
    &[H100],
    {
        use sys::CUdevice_attribute::*;
        gpu_machine_capabilities();
        let name = device_name();
        assert!(
            name.starts_with("streamcomm CPU stand-in (not a GPU) #0")
                && name.ends_with(", as NVIDIA H100 80GB HBM3"),
            "the stand-in first, then the H100 it stands for: {name}"
        );
        assert_eq!(total_mem(), 81_559 << 20, "an H100 SXM's 81,559 MiB");
        assert_eq!(attribute(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH), 5120);
        assert_eq!(
            attribute(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING),
            100
        );
        bind();
        let (mut free, mut total) = (0, 0);
        // SAFETY: valid out-pointers; a context is current.
        ok(unsafe { sys::cuMemGetInfo_v2(&mut free, &mut total) });
        assert_eq!(total, 81_559 << 20);
        assert!(free > 0 && free <= total, "free {free} of {total}");
    }
);

standin_test!(
    the_h200_profile_reports_an_h200s_capabilities,
    20,
    &[H200],
    {
        use sys::CUdevice_attribute::*;
        gpu_machine_capabilities();
        assert_eq!(device_name(), "streamcomm CPU stand-in (not a GPU) #0");
        assert_eq!(attribute(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH), 6144);
        assert_eq!(attribute(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED), 1);
        assert_eq!(attribute(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED), 1);
        assert_eq!(
            attribute(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS),
            1,
            "CU_FLUSH_GPU_DIRECT_RDMA_WRITES_OPTION_HOST"
        );
        assert_eq!(
            attribute(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING),
            100,
            "CU_GPU_DIRECT_RDMA_WRITES_ORDERING_OWNER"
        );
        assert_eq!(attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_MODE), 0);
        assert_eq!(attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR), 9);
    }
);

standin_test!(
    explicit_variables_win_over_the_profile,
    20,
    &[
        H200,
        ("STREAMCOMM_STANDIN_MEMORY_POOLS", "0"),
        ("STREAMCOMM_STANDIN_GDR", "0"),
        ("STREAMCOMM_STANDIN_COMPUTE_MODE", "0"),
    ],
    {
        use sys::CUdevice_attribute::*;
        assert_eq!(attribute(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED), 0);
        assert_eq!(attribute(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED), 0);
        assert_eq!(
            attribute(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS),
            0
        );
        assert_eq!(
            attribute(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING),
            0
        );
        assert_eq!(driver_version(), 13000, "the rest of the profile stays");
        bind();
        let mut p = 0;
        // SAFETY: valid out-pointer; the legacy stream.
        expect(
            unsafe { sys::cuMemAllocAsync(&mut p, 64, std::ptr::null_mut()) },
            801,
        );
        // cudarc takes its cuMemAlloc path when pools are not supported.
        let ctx = cudarc::driver::CudaContext::new(0).unwrap();
        let s = ctx.default_stream();
        assert_eq!(
            s.clone_dtoh(&s.clone_htod(&[1u8, 2]).unwrap()).unwrap(),
            [1, 2]
        );
    }
);

standin_test!(
    compute_mode_exclusive_process_refuses_a_second_process,
    30,
    // Another test run of this user is another machine.
    &[
        ("STREAMCOMM_STANDIN_COMPUTE_MODE", "3"),
        (
            "STREAMCOMM_STANDIN_MACHINE_ID",
            &format!("excl{}", std::process::id())
        ),
    ],
    {
        let name = "compute_mode_exclusive_process_refuses_a_second_process";
        let retain = || {
            let mut ctx = std::ptr::null_mut();
            // SAFETY: valid out-pointer; device 0 exists.
            code(unsafe { sys::cuDevicePrimaryCtxRetain(&mut ctx, 0) })
        };
        if role() == "other" {
            println!("RETAIN {}", retain());
            return;
        }
        let other = |want: u32| {
            let mut h = Helper::spawn(name, "other", &[]);
            let got = h.expect_line("RETAIN ");
            assert!(h.finish(), "the other process failed");
            assert_eq!(got, want.to_string(), "the other process's context");
        };
        use sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_MODE;
        other(0);
        bind();
        assert_eq!(attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_MODE), 3);
        other(46);
        // Threads of this process share the device.
        let r = std::thread::spawn(retain).join().unwrap();
        assert_eq!(r, 0);
        // SAFETY: releases both retains above.
        unsafe {
            ok(sys::cuDevicePrimaryCtxRelease_v2(0));
            ok(sys::cuDevicePrimaryCtxRelease_v2(0));
        }
        other(0);
    }
);

standin_test!(
    raw compute_mode_prohibited_refuses_every_context,
    20,
    &[("STREAMCOMM_STANDIN_COMPUTE_MODE", "2")],
    {
        common::check_standin();
        use sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_MODE;
        assert_eq!(attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_MODE), 2);
        let mut ctx = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        expect(unsafe { sys::cuDevicePrimaryCtxRetain(&mut ctx, 0) }, 46);
    }
);

/// The default pool's `attr` (a `cuuint64_t` counter).
fn pool_counter(attr: sys::CUmemPool_attribute) -> u64 {
    let mut pool = std::ptr::null_mut();
    let mut v = 0u64;
    // SAFETY: valid out-pointers; the counters are cuuint64_t.
    unsafe {
        ok(sys::cuDeviceGetDefaultMemPool(&mut pool, 0));
        ok(sys::cuMemPoolGetAttribute(pool, attr, (&raw mut v).cast()));
    }
    v
}

standin_test!(
    cudarc_allocates_from_the_memory_pool_in_two_streams,
    30,
    &[H200],
    {
        use cudarc::driver::DevicePtr;
        use sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_CURRENT as USED;
        // The allocation path every cudarc buffer takes on an H200:
        // MEMORY_POOLS_SUPPORTED = 1, so cuMemAllocAsync / cuMemFreeAsync.
        use sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED as POOLS;
        assert_eq!(attribute(POOLS), 1);
        let ctx = cudarc::driver::CudaContext::new(0).expect("CudaContext::new");
        let streams = [ctx.new_stream().unwrap(), ctx.new_stream().unwrap()];
        for (i, s) in streams.iter().enumerate() {
            let host: Vec<u32> = (0..4096).map(|x| x * (i as u32 + 3)).collect();
            let d = s.clone_htod(&host).unwrap();
            let z = s.alloc_zeros::<u32>(4096).unwrap();
            assert_eq!(s.clone_dtoh(&d).unwrap(), host);
            assert!(s.clone_dtoh(&z).unwrap().iter().all(|&x| x == 0));
            {
                let (p, _sync) = d.device_ptr(s);
                let mut rdma = 7u32;
                let attr =
                    sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE;
                // SAFETY: valid out-pointer; `p` is a live allocation.
                ok(unsafe { sys::cuPointerGetAttribute((&raw mut rdma).cast(), attr, p) });
                assert_eq!(rdma, 0, "default-pool memory is not GPUDirect RDMA capable");
            }
            assert!(pool_counter(USED) >= 2 * 4096 * 4);
        }
        // A buffer made on one stream, read and freed from the other: cudarc
        // orders them with events, so the stream-ordered memory is usable.
        let a = streams[0].clone_htod(&[5u32, 6, 7]).unwrap();
        assert_eq!(streams[1].clone_dtoh(&a).unwrap(), [5, 6, 7]);
        let mut b = streams[1].alloc_zeros::<u32>(3).unwrap();
        streams[1].memcpy_dtod(&a, &mut b).unwrap();
        drop(a);
        assert_eq!(streams[0].clone_dtoh(&b).unwrap(), [5, 6, 7]);
        drop(b);
        for s in &streams {
            s.synchronize().unwrap();
        }
        ctx.synchronize().unwrap();
        assert_eq!(pool_counter(USED), 0, "every free took effect");
    }
);

standin_test!(
    stream_ordered_memory_is_usable_only_in_stream_order,
    30,
    &[H200],
    {
        bind();
        let (word, word_dev) = common::mapped(4);
        // SAFETY: the mapped word is 4 writable bytes.
        unsafe { word.cast::<u32>().write_volatile(0) };
        let (a, b) = (common::stream(true), common::stream(true));
        // SAFETY: driver calls with valid pointers throughout.
        unsafe {
            // Allocation and free in order, on one stream.
            let mut p = 0;
            ok(sys::cuMemAllocAsync(&mut p, 256, a));
            assert_ne!(p, 0, "the address comes back at once");
            ok(sys::cuMemsetD8Async(p, 0x5a, 256, a));
            let mut back = [0u8; 256];
            ok(sys::cuMemcpyDtoHAsync_v2(
                back.as_mut_ptr().cast(),
                p,
                256,
                a,
            ));
            ok(sys::cuMemFreeAsync(p, a));
            expect(sys::cuMemFreeAsync(p, a), 1);
            ok(sys::cuStreamSynchronize(a));
            assert_eq!(back, [0x5a; 256]);
            expect(sys::cuMemsetD8Async(p, 0, 256, a), 1);
            let mut q = 0;
            expect(sys::cuMemAllocAsync(&mut q, 0, a), 1);
            // Capture: graph memory nodes are not implemented; refused, loudly.
            ok(sys::cuStreamBeginCapture_v2(
                a,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            ));
            expect(sys::cuMemAllocAsync(&mut q, 64, a), 801);
            let mut g = std::ptr::null_mut();
            expect(sys::cuStreamEndCapture(a, &mut g), 901);
            // A captured free must free a graph allocation: not this one.
            let mut r = 0;
            ok(sys::cuMemAllocAsync(&mut r, 64, a));
            ok(sys::cuStreamBeginCapture_v2(
                a,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            ));
            expect(sys::cuMemFreeAsync(r, a), 1);
            expect(sys::cuStreamEndCapture(a, &mut g), 901);
            ok(sys::cuMemFreeAsync(r, a));
            // The allocation waits behind a memop on `a`; work on `b` that
            // touches it without waiting is a device fault.
            ok(sys::cuStreamWaitValue32_v2(a, word_dev, 1, 1));
            ok(sys::cuMemAllocAsync(&mut q, 64, a));
            ok(sys::cuMemsetD8Async(q, 0, 64, b));
            expect(sys::cuStreamSynchronize(b), 700);
            word.cast::<u32>().write_volatile(1);
            let mut x = 0;
            expect(sys::cuMemAlloc_v2(&mut x, 16), 700);
        }
    }
);

standin_test!(
    gpudirect_rdma_attributes_per_buffer_and_flush,
    20,
    &[H200],
    {
        bind();
        let rdma = |p: sys::CUdeviceptr| {
            let mut v = 7u32;
            let attr = sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE;
            // SAFETY: valid out-pointer.
            let r = unsafe { sys::cuPointerGetAttribute((&raw mut v).cast(), attr, p) };
            (code(r), v)
        };
        let flush = || {
            use sys::CUflushGPUDirectRDMAWritesScope::CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER as OWNER;
            use sys::CUflushGPUDirectRDMAWritesTarget::CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX as CTX;
            // SAFETY: plain driver call.
            code(unsafe { sys::cuFlushGPUDirectRDMAWrites(CTX, OWNER) })
        };
        let d = common::alloc(4096);
        let s = common::stream(true);
        let mut p = 0;
        // SAFETY: valid out-pointer and stream.
        ok(unsafe { sys::cuMemAllocAsync(&mut p, 4096, s) });
        let flush_off = std::env::var("SC_FLUSH_OFF").is_ok();
        let default = std::env::var("SC_DEFAULT").is_ok();
        use sys::CUdevice_attribute::*;
        if default {
            assert_eq!(attribute(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED), 0);
            assert_eq!(rdma(d), (0, 0));
        } else {
            assert_eq!(rdma(d), (0, 1), "cuMemAlloc memory is RDMA capable");
            assert_eq!(rdma(p), (0, 0), "memory-pool memory is not");
            assert_eq!(rdma(d + 4000), (0, 1));
        }
        assert_eq!(rdma(d + 8192).0, 1, "not device memory");
        if flush_off || default {
            assert_eq!(
                attribute(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS),
                0
            );
            assert_eq!(flush(), 801);
        } else {
            assert_eq!(flush(), 0);
        }
    }
);

#[test]
fn gpudirect_rdma_without_flush_and_under_the_default_profile() {
    let name = "gpudirect_rdma_attributes_per_buffer_and_flush";
    for env in [
        &[
            H200,
            ("STREAMCOMM_STANDIN_GDR_FLUSH", "0"),
            ("SC_FLUSH_OFF", "1"),
        ][..],
        &[
            ("STREAMCOMM_STANDIN_MEMORY_POOLS", "1"),
            ("SC_DEFAULT", "1"),
        ][..],
    ] {
        common::run_child(name, env, Duration::from_secs(20)).assert_ok(name);
    }
}

unsafe extern "C" fn calls_the_driver(_: *mut std::ffi::c_void) {
    // SAFETY: a plain driver call (refused: it runs in a host function).
    let r = unsafe { sys::cuCtxSynchronize() };
    println!("HOSTFN-RESULT {}", code(r));
}

standin_test!(
    strict_mode_aborts_on_a_driver_call_from_a_host_function,
    {
        bind();
        let s = common::stream(true);
        // SAFETY: a valid stream and a host function that takes no data.
        unsafe {
            ok(sys::cuLaunchHostFunc(
                s,
                Some(calls_the_driver),
                std::ptr::null_mut(),
            ));
            let _ = sys::cuStreamSynchronize(s);
        }
    },
    |name| {
        let lenient = common::run_child(name, &[], Duration::from_secs(20));
        lenient.assert_ok(name);
        assert!(
            lenient.stdout.contains("HOSTFN-RESULT 800"),
            "{}",
            lenient.stdout
        );
        let strict = common::run_child(
            name,
            &[("STREAMCOMM_STANDIN_STRICT", "1")],
            Duration::from_secs(20),
        );
        assert!(
            !strict.ok && !strict.timed_out && !strict.stdout.contains(&common::token(name)),
            "the strict child must abort:\n{}\n{}",
            strict.stdout,
            strict.stderr
        );
        assert!(
            strict
                .stderr
                .contains("cuCtxSynchronize called from a host function or destructor"),
            "{}",
            strict.stderr
        );
    }
);

static DESTROYED_AT: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

unsafe extern "C" fn note_destroyed(_: *mut std::ffi::c_void) {
    let _ = DESTROYED_AT.set(std::time::Instant::now());
}

standin_test!(
    user_object_destructors_run_later_on_a_destructor_thread,
    20,
    &[H200],
    { destructors_run_late() }
);

standin_test!(
    user_object_destructors_run_later_under_the_h100_profile_too,
    20,
    &[H100],
    { destructors_run_late() }
);

/// A graph's user object, released with the graph: its destructor runs on
/// the destructor thread, at least 50 ms later.
fn destructors_run_late() {
    bind();
    // SAFETY: driver calls with valid pointers throughout.
    unsafe {
        let mut g = std::ptr::null_mut();
        ok(sys::cuGraphCreate(&mut g, 0));
        common::give_graph_user_object(g, note_destroyed);
        let released = std::time::Instant::now();
        ok(sys::cuGraphDestroy(g));
        assert!(
            DESTROYED_AT.get().is_none(),
            "the destructor ran at once, not later"
        );
        assert!(common::eventually(Duration::from_secs(5), || DESTROYED_AT
            .get()
            .is_some()));
        let after = DESTROYED_AT.get().unwrap().duration_since(released);
        assert!(
            after >= Duration::from_millis(50),
            "the destructor ran after {after:?}"
        );
    }
}

standin_test!(
    ipc_mappings_fault_once_the_exporter_frees_or_exits,
    40,
    &[],
    {
        let name = "ipc_mappings_fault_once_the_exporter_frees_or_exits";
        if role() == "exporter" {
            bind();
            let d = common::alloc(4096);
            let mut h = sys::CUipcMemHandle { reserved: [0; 64] };
            // SAFETY: driver calls with valid pointers.
            unsafe {
                ok(sys::cuMemsetD8_v2(d, 0x42, 4096));
                ok(sys::cuCtxSynchronize());
                ok(sys::cuIpcGetMemHandle(&mut h, d));
            }
            let hex: String = h
                .reserved
                .iter()
                .map(|b| format!("{:02x}", *b as u8))
                .collect();
            println!("HANDLE {hex}");
            await_parent();
            if std::env::var("SC_EXIT_ONLY").is_err() {
                // SAFETY: frees the allocation made above.
                ok(unsafe { sys::cuMemFree_v2(d) });
                println!("FREED");
                await_parent();
            }
            return;
        }
        let import = |hex: &str| {
            let mut h = sys::CUipcMemHandle { reserved: [0; 64] };
            for (i, b) in h.reserved.iter_mut().enumerate() {
                *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap() as _;
            }
            let mut p = 0;
            let flags = sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32;
            // SAFETY: valid out-pointer and handle.
            ok(unsafe { sys::cuIpcOpenMemHandle_v2(&mut p, h, flags) });
            p
        };
        let copy = |p: sys::CUdeviceptr| {
            let mut b = [0u8; 16];
            // SAFETY: 16 writable bytes; `p` is a 4096-byte mapping.
            code(unsafe { sys::cuMemcpyDtoH_v2(b.as_mut_ptr().cast(), p, 16) })
        };
        // The exporter frees: the importer's next copy faults, and sticks.
        bind();
        let mut exporter = Helper::spawn(name, "exporter", &[]);
        let p = import(&exporter.expect_line("HANDLE "));
        assert_eq!(common::read(p, 4), [0x42; 4]);
        exporter.say("free");
        exporter.expect_line("FREED");
        assert_eq!(copy(p), 700);
        let mut x = 0;
        // SAFETY: valid out-pointer.
        expect(unsafe { sys::cuMemAlloc_v2(&mut x, 16) }, 700);
        assert!(exporter.finish(), "the exporter failed");
        // A fresh context; the exporter exits without freeing.
        // SAFETY: retires the faulted primary context.
        ok(unsafe { sys::cuDevicePrimaryCtxRelease_v2(0) });
        bind();
        let mut exporter = Helper::spawn(name, "exporter", &[("SC_EXIT_ONLY", "1")]);
        let p = import(&exporter.expect_line("HANDLE "));
        assert_eq!(copy(p), 0);
        assert!(exporter.finish(), "the exporter failed");
        assert_eq!(copy(p), 700);
        // SAFETY: plain driver call.
        expect(unsafe { sys::cuCtxSynchronize() }, 700);
        // A stream memory operation waiting on such a word faults too,
        // instead of waiting for ever.
        // SAFETY: retires the faulted primary context.
        ok(unsafe { sys::cuDevicePrimaryCtxRelease_v2(0) });
        bind();
        let mut exporter = Helper::spawn(name, "exporter", &[("SC_EXIT_ONLY", "1")]);
        let p = import(&exporter.expect_line("HANDLE "));
        let s = common::stream(true);
        // SAFETY: `p` is a live, aligned word of an IPC mapping.
        ok(unsafe { sys::cuStreamWaitValue32_v2(s, p, 1, 1) });
        assert!(exporter.finish(), "the exporter failed");
        // SAFETY: plain driver call.
        expect(unsafe { sys::cuStreamSynchronize(s) }, 700);
    }
);

standin_test!(
    /// `STREAMCOMM_STANDIN_REFUSE`: `ipc` refuses IPC export and open with
    /// `CUDA_ERROR_NOT_SUPPORTED` (801), `host-register` refuses
    /// `cuMemHostRegister_v2` (pinned allocations keep working), each refused
    /// entry point says so once on stderr; unset, both work. (An unknown word
    /// failing `cuInit` is a case of
    /// `every_process_says_it_runs_on_the_standin_and_with_which_profile`.)
    raw refuse_turns_ipc_and_host_registration_away_and_says_so,
    {
        let refuse = std::env::var(REFUSE).unwrap_or_default();
        let (ipc, register) = (refuse.contains("ipc"), refuse.contains("host-register"));
        common::check_standin();
        bind();
        let d = common::alloc(4096);
        let mut h = sys::CUipcMemHandle { reserved: [0; 64] };
        // SAFETY: driver calls with valid pointers throughout.
        unsafe {
            for _ in 0..2 {
                expect(sys::cuIpcGetMemHandle(&mut h, d), if ipc { 801 } else { 0 });
            }
            // Not a handle the stand-in made: INVALID_VALUE, unless refused first.
            let zero = sys::CUipcMemHandle { reserved: [0; 64] };
            let mut p = 0;
            let flags = sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32;
            for _ in 0..2 {
                expect(
                    sys::cuIpcOpenMemHandle_v2(&mut p, zero, flags),
                    if ipc { 801 } else { 1 },
                );
            }
            let mut host = vec![0u8; 8192];
            for _ in 0..2 {
                let r = sys::cuMemHostRegister_v2(host.as_mut_ptr().cast(), host.len(), 0);
                expect(r, if register { 801 } else { 0 });
                if !register {
                    ok(sys::cuMemHostUnregister(host.as_mut_ptr().cast()));
                }
            }
            // Pinned allocations are not registrations: they keep working.
            let (pinned, pinned_dev) = common::mapped(64);
            ok(sys::cuMemsetD8_v2(pinned_dev, 0x3c, 64));
            assert_eq!(pinned.read_volatile(), 0x3c);
            ok(sys::cuMemFreeHost(pinned.cast()));
            ok(sys::cuMemFree_v2(d));
        }
    },
    |name| {
        let said = |stderr: &str, call: &str, word: &str| {
            stderr
                .matches(&format!(
                    "{call} refused: STREAMCOMM_STANDIN_REFUSE names {word}: CUDA_ERROR_NOT_SUPPORTED"
                ))
                .count()
        };
        for refuse in [
            None,
            Some("ipc"),
            Some("host-register"),
            Some("host-register,ipc"),
        ] {
            let env: Vec<(&str, &str)> = refuse.iter().map(|r| (REFUSE, *r)).collect();
            let child = common::run_child(name, &env, Duration::from_secs(20));
            child.assert_ok(name);
            let r = refuse.unwrap_or("");
            let (ipc, register) = (r.contains("ipc"), r.contains("host-register"));
            let e = &child.stderr;
            assert_eq!(
                said(e, "cuIpcGetMemHandle", "ipc"),
                usize::from(ipc),
                "{refuse:?}: {e}"
            );
            assert_eq!(
                said(e, "cuIpcOpenMemHandle_v2", "ipc"),
                usize::from(ipc),
                "{refuse:?}: {e}"
            );
            assert_eq!(
                said(e, "cuMemHostRegister_v2", "host-register"),
                usize::from(register),
                "{refuse:?}: {e}"
            );
            assert_eq!(
                e.matches(" refused: ").count(),
                2 * usize::from(ipc) + usize::from(register)
            );
        }
    }
);
