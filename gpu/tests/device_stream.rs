//! Stream-ordered machinery on a GPU: doorbells with stream memory operations
//! and with the spin-kernel fallback, the bounded spin wait, host functions,
//! events, graph capture replayed with fresh data, CUDA IPC with a child
//! process, dma-buf export. Skips without a GPU.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use streamcomm_gpu::{
    DeviceBuffer, Doorbells, Error, Event, GpuConfig, IpcHandle, IpcMapping, Kernels, MemOp,
    ReduceCopy, SignalPath, Signals, Stream, WaitCondition,
};
use streamcomm_kernels::{DataType, ReduceOp};

const LONG: Duration = Duration::from_secs(30);

/// Which driver answered, in one line (`driver: <device name> ...`), which
/// scripts/gpu-check.sh reads first: a run on the CPU stand-in must never be
/// mistaken for a GPU run.
#[test]
fn the_driver_answers_and_names_itself() {
    let Some(device) = common::device_or_skip("the_driver_answers_and_names_itself") else {
        return;
    };
    let info = streamcomm_gpu::driver::probe::driver().unwrap();
    println!(
        "\ndriver: {} ({}, driver API {}, {} device(s), {})",
        device.name(),
        device.arch(),
        info.version,
        info.device_count,
        streamcomm_gpu::driver::probe::driver_path().unwrap_or("?")
    );
    // scripts/gpu-check-run.sh reads this line: under EXCLUSIVE_PROCESS or
    // PROHIBITED it skips the steps that need several processes on a GPU.
    println!("compute mode: {}", device.compute_mode().unwrap().name());
}

/// Which role a process of the compute-mode test plays.
const EXCLUSIVE_ROLE: &str = "SC_EXCLUSIVE_ROLE";
const EXCLUSIVE_TEST: &str = "a_second_process_on_an_exclusive_process_gpu_is_told_the_mode";

/// On a GPU in compute mode EXCLUSIVE_PROCESS (common on shared clusters)
/// a second process's context fails with `CUDA_ERROR_DEVICE_UNAVAILABLE`:
/// the error names the mode and what to do. Only the stand-in can set the
/// mode for a test (`STREAMCOMM_STANDIN_COMPUTE_MODE`); a GPU skips it.
#[test]
fn a_second_process_on_an_exclusive_process_gpu_is_told_the_mode() {
    match std::env::var(EXCLUSIVE_ROLE).as_deref() {
        Ok("holder") => return exclusive_holder(),
        Ok("second") => return exclusive_second(),
        _ => {}
    }
    let Some(device) = common::device_or_skip(EXCLUSIVE_TEST) else {
        return;
    };
    if !common::is_stand_in(&device) {
        streamcomm_testkit::skip(
            EXCLUSIVE_TEST,
            "a GPU's compute mode is set by its administrator (nvidia-smi -c), not by a test",
        );
        return;
    }
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", EXCLUSIVE_TEST, "--nocapture"])
        .env(EXCLUSIVE_ROLE, "holder")
        .env("STREAMCOMM_STANDIN_COMPUTE_MODE", "3")
        .env(
            "STREAMCOMM_STANDIN_MACHINE_ID",
            format!("exclusive-test-{}", std::process::id()),
        )
        .status()
        .unwrap();
    assert!(status.success(), "the holder process failed: {status}");
}

/// The first process: holds the device while a second one tries.
fn exclusive_holder() {
    let device = streamcomm_gpu::Device::open(0).expect("the first process gets the device");
    assert_eq!(
        device.compute_mode().unwrap(),
        streamcomm_gpu::ComputeMode::ExclusiveProcess
    );
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", EXCLUSIVE_TEST, "--nocapture"])
        .env(EXCLUSIVE_ROLE, "second")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("refused as it should be"),
        "the second process: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    drop(device);
}

/// The second process: refused, with the mode named.
fn exclusive_second() {
    let e = streamcomm_gpu::Device::open(0)
        .expect_err("a second process on an EXCLUSIVE_PROCESS device");
    let msg = e.to_string();
    assert!(
        msg.contains("EXCLUSIVE_PROCESS") && msg.contains("one process per GPU"),
        "the error names the mode and the way out: {msg}"
    );
    println!("refused as it should be: {msg}");
}

/// A fill must be done when `fill` returns, or a copy on a non-blocking
/// stream reads the buffer before it. The legacy stream is held back by a
/// stream wait: a fill that ran on it (or waited for it) would show.
#[test]
fn a_fill_is_done_before_other_streams_read_the_buffer() {
    let Some(device) =
        common::device_or_skip("a_fill_is_done_before_other_streams_read_the_buffer")
    else {
        return;
    };
    const N: usize = 1 << 16;
    let signals = Signals::new(&device, None, false, LONG).unwrap();
    let mut buf = DeviceBuffer::alloc(&device, N).unwrap();
    let mut dst = DeviceBuffer::alloc(&device, N).unwrap();
    buf.copy_from_host(&[1u8; N]).unwrap();
    dst.copy_from_host(&[2u8; N]).unwrap();
    let bell = Doorbells::new(&device, 1).unwrap();
    // SAFETY: the null handle is the legacy stream of the primary context,
    // which outlives `legacy`.
    let legacy = unsafe { Stream::from_raw(&device, std::ptr::null_mut()) };
    // SAFETY: the doorbell outlives the wait (released below, synchronised
    // before it drops).
    unsafe {
        signals
            .wait_value32(&legacy, bell.device_ptr(0).unwrap(), 1, WaitCondition::Geq)
            .unwrap();
    }
    let stream = Stream::new(&device).unwrap();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            bell.store(0, 1).unwrap();
        });
        buf.fill(7).unwrap();
        // SAFETY: both buffers hold N bytes and outlive the synchronisation.
        unsafe { stream.copy_async(dst.as_raw(), buf.as_raw(), N).unwrap() };
        stream.synchronize_timeout(LONG).unwrap();
    });
    device.synchronize().unwrap();
    let mut got = vec![0u8; N];
    dst.copy_to_host(&mut got).unwrap();
    let stale = got.iter().filter(|&&b| b != 7).count();
    assert_eq!(
        stale, 0,
        "the copy read {stale} bytes before the fill landed"
    );
}

/// Filling (how the direct path zeroes its windows at creation) while
/// another thread captures a *blocking* stream leaves that capture valid: a
/// fill that touched or waited for the legacy default stream would join
/// the capture's stream implicitly and invalidate it. In a process of its
/// own: the other tests of this binary use the legacy stream meanwhile.
#[test]
fn a_fill_leaves_another_threads_capture_on_a_blocking_stream_alone() {
    if common::device_or_skip("a_fill_leaves_another_threads_capture_on_a_blocking_stream_alone")
        .is_none()
    {
        return;
    }
    let proof = streamcomm_testkit::ChildProof::new("fill during a blocking capture");
    let mut child = std::process::Command::new(std::env::current_exe().unwrap());
    child
        .args(streamcomm_testkit::child_args(
            module_path!(),
            "fill_during_a_blocking_capture",
        ))
        .envs([proof.env()]);
    let out = streamcomm_testkit::run_limited(child, LONG);
    assert!(
        out.status.success(),
        "{}",
        streamcomm_testkit::output_text(&out)
    );
    proof.assert_ran(1);
}

/// The body of the test above, in a process of its own.
#[test]
#[ignore = "run by a_fill_leaves_another_threads_capture_on_a_blocking_stream_alone"]
fn fill_during_a_blocking_capture() {
    let device = streamcomm_gpu::Device::open(0).unwrap();
    // SAFETY: the primary context of an open device.
    let bound = unsafe { streamcomm_gpu::driver::sys::cuCtxSetCurrent(device.as_raw()) };
    assert_eq!(bound as u32, 0, "cuCtxSetCurrent");
    let mut raw = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; flags 0 make a blocking stream of the
    // current (primary) context.
    let created = unsafe { streamcomm_gpu::driver::sys::cuStreamCreate(&mut raw, 0) };
    assert_eq!(created as u32, 0, "cuStreamCreate");
    // SAFETY: `raw` is a stream of the primary context, destroyed below
    // after its last use.
    let blocking = unsafe { Stream::from_raw(&device, raw) };
    let (began, ended) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
    let graph = std::thread::scope(|scope| {
        let capture = scope.spawn(|| {
            blocking.begin_capture().unwrap();
            began.wait();
            ended.wait();
            blocking.end_capture()
        });
        began.wait();
        let mut buf = DeviceBuffer::alloc(&device, 1 << 16).unwrap();
        buf.fill(0).unwrap();
        ended.wait();
        capture.join().unwrap()
    });
    assert!(
        graph.is_ok(),
        "the capture survives a fill: {:?}",
        graph.err()
    );
    drop(graph);
    // SAFETY: the stream's last use was the capture above.
    let destroyed = unsafe { streamcomm_gpu::driver::sys::cuStreamDestroy_v2(raw) };
    assert_eq!(destroyed as u32, 0, "cuStreamDestroy");
    streamcomm_testkit::child_ran();
}

/// A batch of stream memory operations runs in order, its wait holding
/// back the writes after it, and reads a 64-bit word whole.
#[test]
fn a_batch_of_memory_operations_runs_in_order() {
    let Some(device) = common::device_or_skip("a_batch_of_memory_operations_runs_in_order") else {
        return;
    };
    let signals = Signals::new(&device, None, false, LONG).unwrap();
    println!("batched stream memory operations: {}", signals.batches());
    let bells = Doorbells::new(&device, 2).unwrap();
    let stream = Stream::new(&device).unwrap();
    let (gate, out) = (bells.device_ptr(0).unwrap(), bells.device_ptr(1).unwrap());
    let ops = [
        MemOp::Wait64 {
            addr: gate,
            value: u64::MAX,
            cond: WaitCondition::And,
        },
        MemOp::Write32 {
            addr: out,
            value: 7,
        },
        MemOp::Write32 {
            addr: gate,
            value: 0,
        },
    ];
    // SAFETY: the doorbells outlive the synchronisation below.
    unsafe { signals.batch(&stream, &ops).unwrap() };
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(bells.load(1).unwrap(), 0, "the write waited for the gate");
    bells.store(0, 1).unwrap();
    stream.synchronize_timeout(LONG).unwrap();
    assert_eq!(bells.load(1).unwrap(), 7, "the write after the wait");
    assert_eq!(bells.load(0).unwrap(), 0, "the gate reset by the batch");
    let misaligned = MemOp::Wait64 {
        addr: gate + 4,
        value: 1,
        cond: WaitCondition::Geq,
    };
    // SAFETY: refused before anything is enqueued.
    let refused = unsafe { signals.batch(&stream, &[misaligned]) }.unwrap_err();
    assert!(refused.to_string().contains("8-byte aligned"), "{refused}");
}

#[test]
fn doorbells_order_streams_on_both_paths() {
    let Some(device) = common::device_or_skip("doorbells_order_streams_on_both_paths") else {
        return;
    };
    let kernels = Kernels::load(&device, &GpuConfig::from_env()).unwrap();
    for force_spin in [false, true] {
        let signals = Signals::new(&device, Some(&kernels), force_spin, LONG).unwrap();
        if force_spin {
            assert_eq!(signals.path(), SignalPath::SpinKernel);
        }
        eprintln!("path {:?}", signals.path());
        let bells = Doorbells::new(&device, 4).unwrap();
        let stream = Stream::new(&device).unwrap();
        for round in 1..=20u32 {
            // SAFETY: the doorbells outlive every synchronisation below.
            unsafe {
                signals
                    .wait_value32(
                        &stream,
                        bells.device_ptr(0).unwrap(),
                        round,
                        WaitCondition::Geq,
                    )
                    .unwrap();
                signals
                    .write_value32(&stream, bells.device_ptr(1).unwrap(), round * 7)
                    .unwrap();
            }
            std::thread::sleep(Duration::from_millis(2));
            assert_eq!(
                bells.load(1).unwrap(),
                (round - 1) * 7,
                "{:?}: ran before the doorbell",
                signals.path()
            );
            assert!(!stream.is_idle().unwrap());
            bells.store(0, round).unwrap();
            stream.synchronize_timeout(LONG).unwrap();
            assert_eq!(bells.load(1).unwrap(), round * 7);
        }
        signals.check_timeouts().unwrap();
    }
}

#[test]
fn a_spin_wait_that_never_rings_times_out() {
    let Some(device) = common::device_or_skip("a_spin_wait_that_never_rings_times_out") else {
        return;
    };
    let kernels = Kernels::load(&device, &GpuConfig::from_env()).unwrap();
    let signals = Signals::new(&device, Some(&kernels), true, Duration::from_millis(20)).unwrap();
    let bells = Doorbells::new(&device, 1).unwrap();
    let stream = Stream::new(&device).unwrap();
    // SAFETY: the doorbell outlives the synchronisation.
    unsafe { signals.wait_value32(&stream, bells.device_ptr(0).unwrap(), 1, WaitCondition::Eq) }
        .unwrap();
    stream.synchronize_timeout(LONG).unwrap();
    assert!(matches!(signals.check_timeouts(), Err(Error::Timeout(_))));
    signals.check_timeouts().unwrap();
}

#[test]
fn host_functions_run_in_stream_order() {
    let Some(device) = common::device_or_skip("host_functions_run_in_stream_order") else {
        return;
    };
    let stream = Stream::new(&device).unwrap();
    let seen = Arc::new(AtomicU32::new(0));
    for i in 1..=50u32 {
        let seen = seen.clone();
        stream
            .launch_host_fn(move || {
                // Runs once, after the previous one: the counter steps by one.
                let _ = seen.compare_exchange(i - 1, i, Ordering::SeqCst, Ordering::SeqCst);
            })
            .unwrap();
    }
    stream.synchronize_timeout(LONG).unwrap();
    assert_eq!(seen.load(Ordering::SeqCst), 50);
}

#[test]
fn a_captured_graph_replays_with_fresh_data() {
    let Some(device) = common::device_or_skip("a_captured_graph_replays_with_fresh_data") else {
        return;
    };
    let kernels = Kernels::load(&device, &GpuConfig::from_env()).unwrap();
    let signals = Signals::new(&device, Some(&kernels), false, LONG).unwrap();
    let bells = Doorbells::new(&device, 1).unwrap();
    let stream = Stream::new(&device).unwrap();
    let n = 65_537usize;
    let mut a = DeviceBuffer::alloc(&device, n * 4).unwrap();
    let mut b = DeviceBuffer::alloc(&device, n * 4).unwrap();
    let mut out = DeviceBuffer::alloc(&device, n * 4).unwrap();
    stream.begin_capture().unwrap();
    assert!(stream.is_capturing().unwrap());
    // A run-once host function would run on every replay: refused, and the
    // capture goes on unharmed.
    let refused = stream.launch_host_fn(|| {}).unwrap_err();
    assert!(refused.to_string().contains("capturing"), "{refused}");
    let (srcs, dsts) = ([a.as_raw(), b.as_raw()], [out.as_raw()]);
    let work = ReduceCopy {
        srcs: &srcs,
        dsts: &dsts,
        count: n,
        avg_divisor: 1,
    };
    // SAFETY: the buffers and doorbell outlive every replay (synchronised below).
    unsafe {
        kernels
            .reduce_copy(&stream, DataType::I32, ReduceOp::Sum, &work)
            .unwrap();
        signals
            .write_value32(&stream, bells.device_ptr(0).unwrap(), 0)
            .unwrap();
    }
    let graph = stream.end_capture().unwrap();
    let exec = graph.instantiate().unwrap();
    let (start, end) = (
        Event::new(&device, true).unwrap(),
        Event::new(&device, true).unwrap(),
    );
    let mut rng = rand::rngs::StdRng::seed_from_u64(streamcomm_testkit::seed());
    for replay in 0..200u32 {
        let x: Vec<i32> = (0..n).map(|_| rng.r#gen()).collect();
        let y: Vec<i32> = (0..n).map(|_| rng.r#gen()).collect();
        a.copy_from_host(bytemuck::cast_slice(&x)).unwrap();
        b.copy_from_host(bytemuck::cast_slice(&y)).unwrap();
        out.fill(0xA5).unwrap();
        bells.store(0, 1).unwrap();
        start.record(&stream).unwrap();
        exec.launch(&stream).unwrap();
        end.record(&stream).unwrap();
        stream.synchronize_timeout(LONG).unwrap();
        assert!(end.is_complete().unwrap());
        assert!(Event::elapsed_ms(&start, &end).unwrap() >= 0.0);
        let mut got = vec![0i32; n];
        out.copy_to_host(bytemuck::cast_slice_mut(&mut got))
            .unwrap();
        for i in 0..n {
            assert_eq!(
                got[i],
                x[i].wrapping_add(y[i]),
                "replay {replay} element {i}"
            );
        }
        assert_eq!(
            bells.load(0).unwrap(),
            0,
            "replay {replay}: the captured write did not run"
        );
    }
}

#[test]
fn ipc_handle_shares_memory_with_a_child_process() {
    if let Ok(hex) = std::env::var("SC_IPC_CHILD_HANDLE") {
        return ipc_child(&hex);
    }
    let Some(device) = common::device_or_skip("ipc_handle_shares_memory_with_a_child_process")
    else {
        return;
    };
    let n = 4096usize;
    let mut buf = DeviceBuffer::alloc(&device, n).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(streamcomm_testkit::seed());
    let data: Vec<u8> = (0..n).map(|_| rng.r#gen()).collect();
    buf.copy_from_host(&data).unwrap();
    let handle = IpcHandle::export(&buf).unwrap();
    let hex: String = handle
        .to_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "ipc_handle_shares_memory_with_a_child_process",
            "--nocapture",
        ])
        .env("SC_IPC_CHILD_HANDLE", hex)
        .status()
        .unwrap();
    assert!(status.success(), "child failed: {status}");
    let mut back = vec![0u8; n];
    buf.copy_to_host(&mut back).unwrap();
    let want: Vec<u8> = data.iter().map(|b| !b).collect();
    assert_eq!(back, want, "the child's inverted bytes did not arrive");
}

/// In the child: open the parent's buffer, invert every byte in place.
fn ipc_child(hex: &str) {
    let device = streamcomm_gpu::Device::open(0).unwrap();
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    let handle = IpcHandle::from_bytes(&bytes).unwrap();
    let mapping = IpcMapping::open(&device, &handle).unwrap();
    let mut tmp = DeviceBuffer::alloc(&device, handle.len()).unwrap();
    let stream = Stream::new(&device).unwrap();
    // SAFETY: both ranges are live device memory of `handle.len()` bytes.
    unsafe { stream.copy_async(tmp.as_raw(), mapping.as_raw(), handle.len()) }.unwrap();
    stream.synchronize_timeout(LONG).unwrap();
    let mut host = vec![0u8; handle.len()];
    tmp.copy_to_host(&mut host).unwrap();
    host.iter_mut().for_each(|b| *b = !*b);
    tmp.copy_from_host(&host).unwrap();
    // SAFETY: as above.
    unsafe { stream.copy_async(mapping.as_raw(), tmp.as_raw(), handle.len()) }.unwrap();
    stream.synchronize_timeout(LONG).unwrap();
}

#[test]
fn dmabuf_export_gives_a_descriptor_or_says_unsupported() {
    let Some(device) =
        common::device_or_skip("dmabuf_export_gives_a_descriptor_or_says_unsupported")
    else {
        return;
    };
    let buf = DeviceBuffer::alloc(&device, 1 << 21).unwrap();
    match buf.export_dmabuf() {
        Ok(fd) => {
            use std::os::fd::AsRawFd;
            assert!(fd.as_raw_fd() >= 0);
            eprintln!("dma-buf fd {}", fd.as_raw_fd());
        }
        Err(Error::Unavailable(why)) => eprintln!("dma-buf unsupported here: {why}"),
        Err(e) => panic!("dma-buf export failed: {e}"),
    }
}

/// Which profile the GPUDirect RDMA test's child runs under.
const GDR_ROLE: &str = "SC_GDR_PROFILE";
const GDR_TEST: &str = "gpudirect_capability_and_flush_follow_the_driver";

/// Per buffer, the NIC may reach `cuMemAlloc` memory and not memory-pool
/// memory (where cudarc allocates on a GPU with pools); after its writes a
/// receiver flushes only where the device does not order them itself. On
/// the stand-in, under its `h200` profile (GPUDirect RDMA, pools, OWNER
/// ordering) and its default one (none of it); on a GPU, as it reports.
#[test]
fn gpudirect_capability_and_flush_follow_the_driver() {
    use streamcomm_gpu::GpuDirectFlush;
    if let Ok(profile) = std::env::var(GDR_ROLE) {
        let device = streamcomm_gpu::Device::open(0).unwrap();
        let buf = DeviceBuffer::alloc(&device, 2 << 20).unwrap();
        let ctx = cudarc::driver::CudaContext::new(0).unwrap();
        let stream = ctx.default_stream();
        let pooled = stream.alloc_zeros::<u8>(1 << 16).unwrap();
        let (pooled_addr, _sync) = cudarc::driver::DevicePtr::device_ptr(&pooled, &stream);
        let (plain, pool) = (
            device.gpudirect_capable(buf.as_raw()).unwrap(),
            device.gpudirect_capable(pooled_addr).unwrap(),
        );
        let flush = device.gpudirect_flush();
        println!("profile {profile}: cuMemAlloc {plain}, pool {pool}, flush {flush:?}");
        match profile.as_str() {
            "h200" => {
                assert!(
                    plain,
                    "cuMemAlloc memory on an H200 is GPUDirect RDMA capable"
                );
                assert!(!pool, "memory-pool memory is not");
                assert_eq!(
                    flush,
                    GpuDirectFlush::NotNeeded,
                    "OWNER ordering needs no flush"
                );
            }
            "default" => {
                assert!(!plain && !pool);
                assert_eq!(flush, GpuDirectFlush::Impossible);
            }
            _ => {
                let supported = device
                    .attribute(
                        streamcomm_gpu::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED,
                    )
                    .unwrap();
                assert_eq!(
                    plain,
                    supported == 1,
                    "cuMemAlloc memory follows the device"
                );
            }
        }
        return;
    }
    let Some(device) = common::device_or_skip(GDR_TEST) else {
        return;
    };
    let profiles: &[&str] = if common::is_stand_in(&device) {
        &["h200", "default"]
    } else {
        &["gpu"]
    };
    for profile in profiles {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap());
        child
            .args(["--exact", GDR_TEST, "--nocapture"])
            .env(GDR_ROLE, profile);
        if *profile != "gpu" {
            child.env("STREAMCOMM_STANDIN_PROFILE", profile);
        }
        let status = child.status().unwrap();
        assert!(status.success(), "profile {profile}: {status}");
    }
}
