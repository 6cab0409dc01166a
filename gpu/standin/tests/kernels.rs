//! Modules and kernels on the stand-in: entry names from PTX, the launch
//! checks, argument packing through `kernelParams` and `extra`, device
//! faults, and the project's NVRTC-compiled kernels (through
//! `streamcomm-gpu`) checked against a CPU reference with random data.

mod common;

use std::ffi::c_void;
use std::time::Duration;

use common::{bind, code, expect, mapped, ok, stream};
use cudarc::driver::sys;
use rand::{Rng, SeedableRng};
use streamcomm_kernels::cuda::SpinWriteArgs;
use streamcomm_kernels::{DataType, ReduceOp, element_as_f64};

const PTX: &str = "
.version 8.0
.target sm_90
.address_size 64
.visible .entry sc_spin_write(.param .align 8 .b8 sc_spin_write_param_0[16]) { ret; }
.visible .entry sc_reduce_copy_f32_sum(.param .align 8 .b8 p[152]) { ret; }
.visible .entry mystery_kernel() { ret; }
\0";

fn load(text: &str) -> (u32, sys::CUmodule) {
    let mut m = std::ptr::null_mut();
    // SAFETY: NUL-terminated PTX text and a valid out-pointer.
    let r = unsafe { sys::cuModuleLoadData(&mut m, text.as_ptr().cast()) };
    (code(r), m)
}

fn function(m: sys::CUmodule, name: &str) -> (u32, sys::CUfunction) {
    let c = std::ffi::CString::new(name).unwrap();
    let mut f = std::ptr::null_mut();
    // SAFETY: live module, NUL-terminated name, valid out-pointer.
    let r = unsafe { sys::cuModuleGetFunction(&mut f, m, c.as_ptr()) };
    (code(r), f)
}

fn launch(
    f: sys::CUfunction,
    s: sys::CUstream,
    block: u32,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> u32 {
    // SAFETY: the stand-in validates every argument; pointers are live.
    code(unsafe { sys::cuLaunchKernel(f, 1, 1, 1, block, 1, 1, 0, s, params, extra) })
}

standin_test!(ptx_entry_names_launch_checks_and_faults, 20, &[], {
    bind();
    let (r, m) = load(PTX);
    assert_eq!(r, 0);
    assert_eq!(function(m, "nope").0, 500);
    let (_, write) = function(m, "sc_spin_write");
    let (_, reduce) = function(m, "sc_reduce_copy_f32_sum");
    let (_, mystery) = function(m, "mystery_kernel");
    assert_eq!(
        load(&PTX.replace(".version 8.0", ".version 9.1")).0,
        222,
        "PTX newer than CUDA 13.0"
    );
    assert_eq!(
        load(&PTX.replace("sm_90", "sm_100")).0,
        209,
        "PTX for a newer GPU"
    );
    assert_eq!(load("hello\0").0, 200);
    let s = stream(true);
    let (h, d) = mapped(64);
    let mut args = SpinWriteArgs {
        addr: d,
        value: 42,
        reserved: 0,
    };
    let ap = &mut args as *mut SpinWriteArgs;
    let mut p: [*mut c_void; 1] = [ap.cast()];
    assert_eq!(
        launch(write, s, 1025, p.as_mut_ptr(), std::ptr::null_mut()),
        1
    );
    assert_eq!(
        launch(mystery, s, 32, p.as_mut_ptr(), std::ptr::null_mut()),
        801
    );
    assert_eq!(
        launch(reduce, s, 1024, p.as_mut_ptr(), std::ptr::null_mut()),
        701,
        "__launch_bounds__(512)"
    );
    let mut size = std::mem::size_of::<SpinWriteArgs>();
    let mut extra: [*mut c_void; 5] = [
        std::ptr::without_provenance_mut(1), // CU_LAUNCH_PARAM_BUFFER_POINTER
        ap.cast(),
        std::ptr::without_provenance_mut(2), // CU_LAUNCH_PARAM_BUFFER_SIZE
        (&mut size as *mut usize).cast(),
        std::ptr::null_mut(),
    ];
    assert_eq!(
        launch(write, s, 32, p.as_mut_ptr(), extra.as_mut_ptr()),
        1,
        "kernelParams and extra"
    );
    assert_eq!(
        launch(write, s, 32, std::ptr::null_mut(), std::ptr::null_mut()),
        1
    );
    assert_eq!(
        launch(write, s, 32, p.as_mut_ptr(), std::ptr::null_mut()),
        0
    );
    // SAFETY: valid stream; `h` is the mapped word.
    unsafe {
        ok(sys::cuStreamSynchronize(s));
        assert_eq!(*(h as *const u32), 42);
    }
    // SAFETY: `ap` points to `args`, alive here.
    unsafe { (*ap).value = 43 };
    assert_eq!(
        launch(write, s, 32, std::ptr::null_mut(), extra.as_mut_ptr()),
        0
    );
    // The argument block was copied at launch: changing it now changes nothing.
    // SAFETY: as above.
    unsafe { (*ap).value = 44 };
    // SAFETY: as above.
    unsafe {
        ok(sys::cuStreamSynchronize(s));
        assert_eq!(*(h as *const u32), 43);
    }
    // A bad device pointer is a device fault: sticky 700.
    // SAFETY: as above.
    unsafe { (*ap).addr = 0x1234 };
    assert_eq!(
        launch(write, s, 32, p.as_mut_ptr(), std::ptr::null_mut()),
        0
    );
    // SAFETY: valid stream and out-pointer.
    unsafe {
        expect(sys::cuStreamSynchronize(s), 700);
        let mut x = 0;
        expect(sys::cuMemAlloc_v2(&mut x, 16), 700);
    }
});

fn random_bytes(dtype: DataType, n: usize, rng: &mut rand::rngs::StdRng) -> Vec<u8> {
    let mut out = vec![0u8; n * dtype.size()];
    for i in 0..n {
        let v: f64 = match dtype {
            DataType::F32 | DataType::F64 | DataType::F16 | DataType::Bf16 => {
                rng.gen_range(-4.0..4.0)
            }
            _ => rng.gen_range(0.0..100.0f64).floor(),
        };
        streamcomm_kernels::write_element_from_f64(dtype, &mut out, i, v);
    }
    out
}

standin_test!(
    nvrtc_reduce_kernels_match_a_cpu_reference,
    {
        reduce_body();
    },
    |name| {
        let Some(lib) = streamcomm_testkit::nvrtc_library() else {
            common::skip(
                name,
                &format!("no NVRTC: {}", streamcomm_testkit::NVRTC_INSTALL),
            );
            return;
        };
        let lib = lib.display().to_string();
        let child = common::run_child(
            name,
            &[
                ("STREAMCOMM_NVRTC_LIB", &lib),
                ("STREAMCOMM_KERNEL_CACHE", "off"),
            ],
            Duration::from_secs(25),
        );
        child.assert_ok(name);
        assert!(
            !child.stderr.contains("cuGetExportTable"),
            "NVRTC's cuGetExportTable calls are answered quietly: {}",
            child.stderr
        );
        let seed_line = child
            .stdout
            .lines()
            .find(|l| l.contains("seed"))
            .unwrap_or("");
        println!("{seed_line}");
    }
);

fn reduce_body() {
    use streamcomm_gpu::{
        DeviceBuffer, Doorbells, GpuConfig, Kernels, ReduceCopy, Signals, Stream, WaitCondition,
    };
    let seed = streamcomm_testkit::seed();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let dev = streamcomm_gpu::Device::open(0).expect("Device::open on the stand-in");
    assert!(dev.name().contains("stand-in"), "{}", dev.name());
    let kernels =
        Kernels::load(&dev, &GpuConfig::from_env()).expect("NVRTC compile + cuModuleLoadData");
    let stream = Stream::new(&dev).unwrap();
    let count = 1000 + rng.gen_range(0..64);
    for dtype in DataType::ALL {
        for op in ReduceOp::ALL {
            let nsrcs = if matches!(dtype, DataType::F16 | DataType::Bf16) {
                2
            } else {
                3
            };
            let inputs: Vec<Vec<u8>> = (0..nsrcs)
                .map(|_| random_bytes(dtype, count, &mut rng))
                .collect();
            let mut bufs: Vec<DeviceBuffer> = Vec::new();
            for data in &inputs {
                let mut b = DeviceBuffer::alloc(&dev, data.len()).unwrap();
                b.copy_from_host(data).unwrap();
                bufs.push(b);
            }
            let outs: Vec<DeviceBuffer> = (0..2)
                .map(|_| DeviceBuffer::alloc(&dev, count * dtype.size()).unwrap())
                .collect();
            let srcs: Vec<u64> = bufs.iter().map(|b| b.as_raw()).collect();
            let dsts: Vec<u64> = outs.iter().map(|b| b.as_raw()).collect();
            let work = ReduceCopy {
                srcs: &srcs,
                dsts: &dsts,
                count,
                avg_divisor: nsrcs as u32,
            };
            // SAFETY: every buffer holds `count` elements and outlives the sync below.
            unsafe { kernels.reduce_copy(&stream, dtype, op, &work) }.unwrap();
            stream.synchronize_timeout(Duration::from_secs(5)).unwrap();
            let mut want = inputs[0].clone();
            for other in &inputs[1..] {
                streamcomm_kernels::reduce_in_place(dtype, op, &mut want, other).unwrap();
            }
            if op == ReduceOp::Avg {
                streamcomm_kernels::divide(dtype, &mut want, nsrcs).unwrap();
            }
            for out in &outs {
                let mut got = vec![0u8; count * dtype.size()];
                out.copy_to_host(&mut got).unwrap();
                for i in 0..count {
                    let (g, w) = (
                        element_as_f64(dtype, &got, i),
                        element_as_f64(dtype, &want, i),
                    );
                    let half_avg =
                        op == ReduceOp::Avg && matches!(dtype, DataType::F16 | DataType::Bf16);
                    let close = if half_avg {
                        (g - w).abs() <= 1e-2 * w.abs().max(1.0)
                    } else {
                        g == w
                    };
                    assert!(
                        close,
                        "{dtype:?} {op:?} element {i}: got {g}, want {w} (seed {seed})"
                    );
                }
            }
        }
    }
    // The stream memory operations and the spin-kernel fallback both work.
    let bells = Doorbells::new(&dev, 2).unwrap();
    for force_spin in [false, true] {
        let sig = Signals::new(&dev, Some(&kernels), force_spin, Duration::from_secs(5)).unwrap();
        bells.store(0, 0).unwrap();
        bells.store(1, 0).unwrap();
        // SAFETY: doorbell words live until the end of the loop body.
        unsafe {
            sig.wait_value32(&stream, bells.device_ptr(1).unwrap(), 1, WaitCondition::Eq)
                .unwrap();
            sig.write_value32(&stream, bells.device_ptr(0).unwrap(), 9)
                .unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            bells.load(0).unwrap(),
            0,
            "write ran before the wait was released ({:?})",
            sig.path()
        );
        bells.store(1, 1).unwrap();
        stream.synchronize_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(bells.load(0).unwrap(), 9, "{:?}", sig.path());
        sig.check_timeouts().unwrap();
    }
}

/// A minimal CUBIN (CUDA ELF for sm_90) with one kernel section, `.text.k`,
/// made by the toolkit `e_version` names (major × 10 + minor).
fn cubin(e_version: u32) -> Vec<u8> {
    let shstr = b"\0.shstrtab\0.text.k\0";
    let mut b = vec![0u8; 128 + 3 * 64];
    let put =
        |b: &mut Vec<u8>, at: usize, bytes: &[u8]| b[at..at + bytes.len()].copy_from_slice(bytes);
    put(&mut b, 0, b"\x7fELF\x02\x01\x01\x33\x07");
    put(&mut b, 16, &2u16.to_le_bytes()); // ET_EXEC
    put(&mut b, 18, &190u16.to_le_bytes()); // EM_CUDA
    put(&mut b, 20, &e_version.to_le_bytes());
    put(&mut b, 40, &128u64.to_le_bytes()); // e_shoff
    put(&mut b, 48, &0x5a055au32.to_le_bytes()); // e_flags: sm_90
    put(&mut b, 52, &64u16.to_le_bytes());
    put(&mut b, 58, &64u16.to_le_bytes()); // e_shentsize
    put(&mut b, 60, &3u16.to_le_bytes()); // e_shnum
    put(&mut b, 62, &1u16.to_le_bytes()); // e_shstrndx
    put(&mut b, 64, shstr);
    // Section 1: .shstrtab; section 2: .text.k (16 bytes at 96).
    for (i, name, kind, off, len) in [
        (1, 1u32, 3u32, 64u64, shstr.len() as u64),
        (2, 11, 1, 96, 16),
    ] {
        let sh = 128 + i * 64;
        put(&mut b, sh, &name.to_le_bytes());
        put(&mut b, sh + 4, &kind.to_le_bytes());
        put(&mut b, sh + 24, &off.to_le_bytes());
        put(&mut b, sh + 32, &len.to_le_bytes());
    }
    b
}

fn load_image(image: &[u8]) -> (u32, sys::CUmodule) {
    let mut m = std::ptr::null_mut();
    // SAFETY: a complete image in memory and a valid out-pointer.
    let r = unsafe { sys::cuModuleLoadData(&mut m, image.as_ptr().cast()) };
    (code(r), m)
}

standin_test!(
    /// A CUBIN's toolkit is its ELF `e_version` (NVRTC 12.9 writes 129): a newer
    /// minor version than the driver's loads, a newer major version does not;
    /// PTX whose `.version` the driver does not know is refused.
    module_images_newer_than_the_driver_are_refused,
    {
            bind();
            let driver: i32 = std::env::var("STREAMCOMM_STANDIN_DRIVER_VERSION")
                .unwrap()
                .parse()
                .unwrap();
            let (r, m) = load_image(&cubin(129));
            assert_eq!(r, 0, "a CUDA 12.9 CUBIN on driver {driver}");
            assert_eq!(function(m, "k").0, 0);
            let want = if driver >= 13000 { 0 } else { 200 };
            assert_eq!(
                load_image(&cubin(130)).0,
                want,
                "a CUDA 13.0 CUBIN on driver {driver}"
            );
            let ptx = |version: &str| {
                let text = PTX.replace(".version 8.0", &format!(".version {version}"));
                load(&text).0
            };
            assert_eq!(ptx("8.7"), 0);
            assert_eq!(ptx("8.8"), if driver >= 12090 { 0 } else { 222 });
    },
    |name| {
        let old = common::run_child(
            name,
            &[("STREAMCOMM_STANDIN_DRIVER_VERSION", "12080")],
            Duration::from_secs(20),
        );
        old.assert_ok(name);
        assert!(
            old.stderr.contains("a CUBIN made by CUDA 13.0") && old.stderr.contains(".version 8.8"),
            "the refusals are named: {}",
            old.stderr
        );
        common::run_child(
            name,
            &[("STREAMCOMM_STANDIN_DRIVER_VERSION", "13000")],
            Duration::from_secs(20),
        )
        .assert_ok(name);
    }
);
