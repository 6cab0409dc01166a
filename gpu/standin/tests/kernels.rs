//! Modules and kernels on the stand-in: entry names from PTX, the launch
//! checks, argument packing through `kernelParams` and `extra`, device
//! faults, and the project's NVRTC-compiled kernels (through
//! `streamcomm-gpu`) checked against a CPU reference with random data.

mod common;

use std::ffi::c_void;
use std::path::PathBuf;
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

/// NVRTC: `STREAMCOMM_NVRTC_LIB`, else the `nvidia-cuda-nvrtc-cu12` wheel.
fn nvrtc_lib() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("STREAMCOMM_NVRTC_LIB") {
        return Some(PathBuf::from(p));
    }
    let code = "import importlib.util as u; s = u.find_spec('nvidia.cuda_nvrtc'); \
                print(list(s.submodule_search_locations)[0] if s else '')";
    let out = std::process::Command::new("python3")
        .args(["-c", code])
        .output()
        .ok()?;
    let lib = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim()).join("lib/libnvrtc.so.12");
    lib.is_file().then_some(lib)
}

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

#[test]
fn nvrtc_reduce_kernels_match_a_cpu_reference() {
    let name = "nvrtc_reduce_kernels_match_a_cpu_reference";
    if common::is_child(name) {
        common::check_standin();
        reduce_body();
        println!("{}", common::token(name));
        return;
    }
    let Some(lib) = nvrtc_lib() else {
        common::skip(
            name,
            "no NVRTC (set STREAMCOMM_NVRTC_LIB or pip install nvidia-cuda-nvrtc-cu12)",
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
    let seed_line = child
        .stdout
        .lines()
        .find(|l| l.contains("seed"))
        .unwrap_or("");
    println!("{seed_line}");
}

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
