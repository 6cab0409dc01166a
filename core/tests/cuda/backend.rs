//! The CUDA backend on a CUDA driver (a GPU, or the CPU stand-in under
//! `scripts/gpu-check.sh --stand-in`): every collective with 2 and 4 ranks
//! on one GPU (ranks as processes, each with its own stream, their windows
//! crossing through CUDA IPC), five dtypes, in place and out of place,
//! poisoned outputs, exact references; a captured step (collective → user
//! device work → collective → barrier) replayed with fresh data; a p2p
//! ring; two ranks as threads of one process on one GPU refused.
//! `scripts/gpu-check.sh` runs it with `STREAMCOMM_REQUIRE_GPU=1`, which
//! turns "no GPU" into a failure. Each test prints which driver answered.
//!
//! Without a driver, the GPU tests say they are skipped and the first test
//! checks that the backend reports `Error::Unavailable`, without a panic.

use crate::harness;

use std::sync::Arc;
use std::time::Duration;

use half::{bf16, f16};
use rand::Rng;
use streamcomm::bootstrap::UniqueId;
use streamcomm::config::{Config, DEFAULT_CUDA_WINDOW};
use streamcomm::cuda::CudaComm;
use streamcomm::cuda::cudarc::driver::{
    CudaContext, CudaSlice, CudaStream, DeviceRepr, ValidAsZeroBits, sys,
};
use streamcomm::host::Element;
use streamcomm::{Communicator, Error, ReduceOp};

/// Whether the CUDA backend can run here: a driver with a device, and the
/// backend's kernels loadable on it (a cached image, or an NVRTC to compile
/// them). Else the test says it is skipped and why, or fails where
/// `STREAMCOMM_REQUIRE_GPU` is set. The kernels are loaded once a process.
pub(crate) fn gpu_present() -> bool {
    let present = streamcomm_gpu::Device::count().is_ok_and(|n| n > 0);
    if present {
        // Which driver answered: the stand-in's device says it is no GPU.
        let name = streamcomm_gpu::Device::open(0).map(|d| d.name().to_string());
        eprintln!(
            "driver: {} ({})",
            name.unwrap_or_else(|e| e.to_string()),
            streamcomm_gpu::driver::probe::driver_path().unwrap_or("?")
        );
    }
    let missing = if present {
        kernels_missing().map(|e| {
            format!(
                "the CUDA backend's kernels do not load here ({e}); {}",
                streamcomm_testkit::NVRTC_INSTALL
            )
        })
    } else {
        Some(
            "no usable GPU here (`scripts/gpu-check.sh --stand-in` runs it on the CPU stand-in)"
                .into(),
        )
    };
    let Some(why) = missing else {
        return true;
    };
    assert!(
        std::env::var_os("STREAMCOMM_REQUIRE_GPU").is_none(),
        "STREAMCOMM_REQUIRE_GPU is set but the CUDA backend cannot run: {why}"
    );
    streamcomm_testkit::skip(&streamcomm_testkit::current_test(), &why);
    false
}

/// Why the backend's kernels do not load on device 0, if they do not
/// (asked once a process).
fn kernels_missing() -> Option<String> {
    static MISSING: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    MISSING
        .get_or_init(|| {
            let config = streamcomm_gpu::GpuConfig::from_env();
            streamcomm_gpu::Device::open(0)
                .and_then(|d| streamcomm_gpu::Kernels::load(&d, &config))
                .err()
                .map(|e| e.to_string())
        })
        .clone()
}

#[test]
fn without_a_driver_the_cuda_backend_is_unavailable() {
    if streamcomm_gpu::Device::count().is_ok_and(|n| n > 0) {
        streamcomm_testkit::skip(
            "backend::without_a_driver_the_cuda_backend_is_unavailable",
            "a GPU is present, so the no-driver path cannot be reached",
        );
        return;
    }
    let id = UniqueId::new().unwrap();
    let comm = Communicator::init(&id, 0, 1).unwrap();
    let err = CudaComm::on_device(&comm, 0).unwrap_err();
    assert!(matches!(err, Error::Unavailable(_)), "{err}");
    // The communicator itself is unharmed: host collectives still run.
    assert!(comm.async_error().is_none());
}

/// Element types the test runs, with exact conversions of small integers.
pub(crate) trait Num: Element + DeviceRepr + ValidAsZeroBits + Copy + Unpin {
    fn of(x: f64) -> Self;
    fn get(self) -> f64;
}
macro_rules! num {
    ($t:ty, $of:expr, $get:expr) => {
        impl Num for $t {
            fn of(x: f64) -> Self {
                $of(x)
            }
            fn get(self) -> f64 {
                $get(self)
            }
        }
    };
}
num!(f32, |x| x as f32, f64::from);
num!(f64, |x| x, |v| v);
num!(i32, |x| x as i32, f64::from);
num!(f16, f16::from_f64, f16::to_f64);
num!(bf16, bf16::from_f64, bf16::to_f64);

pub(crate) const POISON: f64 = -99.0;

/// Small integers: sums of up to 4 ranks are exact in every dtype here.
pub(crate) fn data(seed: u64, rank: usize, len: usize) -> Vec<f64> {
    use rand::SeedableRng;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ (rank as u64).wrapping_mul(0x9E37_79B9));
    (0..len)
        .map(|_| f64::from(rng.gen_range(-8i32..8)))
        .collect()
}

pub(crate) fn upload<T: Num>(s: &Arc<CudaStream>, v: &[f64]) -> CudaSlice<T> {
    let host: Vec<T> = v.iter().map(|&x| T::of(x)).collect();
    s.clone_htod(&host).unwrap()
}

pub(crate) fn download<T: Num>(s: &Arc<CudaStream>, d: &CudaSlice<T>) -> Vec<f64> {
    s.clone_dtoh(d).unwrap().into_iter().map(Num::get).collect()
}

pub(crate) fn poisoned<T: Num>(s: &Arc<CudaStream>, len: usize) -> CudaSlice<T> {
    upload(s, &vec![POISON; len])
}

/// Every collective of one dtype on this rank; returns mismatches.
pub(crate) fn collectives<T: Num>(cuda: &CudaComm, s: &Arc<CudaStream>, seed: u64) -> Vec<String> {
    const COUNT: usize = 4099;
    let comm = cuda.communicator();
    let (r, n) = (comm.rank(), comm.size());
    let inputs: Vec<Vec<f64>> = (0..n).map(|q| data(seed, q, n * COUNT)).collect();
    let sum = |i: usize| inputs.iter().map(|v| v[i]).sum::<f64>();
    let max = |i: usize| inputs.iter().map(|v| v[i]).fold(f64::MIN, f64::max);
    let send = upload::<T>(s, &inputs[r][..COUNT]);
    let big = upload::<T>(s, &inputs[r]);
    let mut ar = poisoned::<T>(s, COUNT + 5);
    let mut arip = upload::<T>(s, &inputs[r][..COUNT]);
    let mut bc = poisoned::<T>(s, COUNT);
    let mut rd = poisoned::<T>(s, COUNT);
    let mut ag = poisoned::<T>(s, n * COUNT);
    let mut rs = poisoned::<T>(s, COUNT);
    let mut a2a = poisoned::<T>(s, n * COUNT);
    cuda.all_reduce(&send, &mut ar, ReduceOp::Sum, s).unwrap();
    cuda.all_reduce_in_place(&mut arip, ReduceOp::Max, s)
        .unwrap();
    cuda.broadcast(&send, &mut bc, n - 1, s).unwrap();
    cuda.reduce(&send, &mut rd, ReduceOp::Sum, 0, s).unwrap();
    cuda.all_gather(&send, &mut ag, s).unwrap();
    cuda.reduce_scatter(&big, &mut rs, ReduceOp::Sum, s)
        .unwrap();
    cuda.all_to_all(&big, &mut a2a, s).unwrap();
    cuda.barrier(s).unwrap();
    let (ar, arip, bc, rd) = (
        download(s, &ar),
        download(s, &arip),
        download(s, &bc),
        download(s, &rd),
    );
    let (ag, rs, a2a) = (download(s, &ag), download(s, &rs), download(s, &a2a));
    assert!(cuda.async_error().is_none(), "{:?}", cuda.async_error());
    let mut bad = Vec::new();
    let mut check = |what: &str, i: usize, got: f64, want: f64| {
        if got != want && bad.len() < 8 {
            bad.push(format!(
                "{} rank {r}/{n} {what}[{i}]: got {got}, want {want}",
                T::DTYPE
            ));
        }
    };
    for i in 0..COUNT {
        check("all_reduce", i, ar[i], sum(i));
        check("all_reduce_in_place(max)", i, arip[i], max(i));
        check("broadcast", i, bc[i], inputs[n - 1][i]);
        check("reduce", i, rd[i], if r == 0 { sum(i) } else { POISON });
        check("reduce_scatter", i, rs[i], sum(r * COUNT + i));
        for q in 0..n {
            check("all_gather", q * COUNT + i, ag[q * COUNT + i], inputs[q][i]);
            check(
                "all_to_all",
                q * COUNT + i,
                a2a[q * COUNT + i],
                inputs[q][r * COUNT + i],
            );
        }
    }
    for (i, &v) in ar.iter().enumerate().skip(COUNT) {
        check("all_reduce past count", i, v, POISON);
    }
    bad
}

/// Direct-path window sizes the tests run with: 0 is the staged path; 4 KiB
/// cuts every call into many chunks; the default takes most in one.
const PATHS: [usize; 3] = [0, 4 << 10, DEFAULT_CUDA_WINDOW];

/// Runs `scenario` (see [`child`]) on `n` ranks as processes on GPU 0,
/// with direct-path windows of `window` bytes (0: the staged path).
fn on_one_gpu(n: usize, window: usize, scenario: &str) {
    launch(module_path!(), n, window, scenario);
}

/// This rank's seed ([`launch`] passes it in `STREAMCOMM_TEST_SEED`) and
/// communicator (from the launcher's environment).
pub(crate) fn child_rank() -> (u64, Communicator) {
    let seed = std::env::var("STREAMCOMM_TEST_SEED")
        .expect("set by the parent test")
        .parse()
        .expect("a number");
    (seed, Communicator::from_env().unwrap())
}

/// Runs the ignored test `child` of `module` (pass `module_path!()`) as `n`
/// ranks (processes) with `SC_CUDA_SCENARIO=scenario` and direct-path
/// windows of `window` bytes; fails unless every rank ran it to the end.
pub(crate) fn launch(module: &str, n: usize, window: usize, scenario: &str) {
    launch_with(module, n, window, scenario, &[]);
}

/// [`launch`] with `extra` environment variables for every rank.
pub(crate) fn launch_with(
    module: &str,
    n: usize,
    window: usize,
    scenario: &str,
    extra: &[(&str, String)],
) {
    let mut env = vec![
        (
            "STREAMCOMM_TEST_SEED",
            streamcomm_testkit::seed().to_string(),
        ),
        ("STREAMCOMM_CUDA_WINDOW", window.to_string()),
        ("SC_CUDA_SCENARIO", scenario.to_string()),
    ];
    env.extend(extra.iter().cloned());
    harness::launch_children(
        n,
        &streamcomm_testkit::test_path(module, "child"),
        &env,
        Duration::from_secs(120),
        &format!("{scenario}, {n} processes on one GPU, window {window}"),
    );
}

#[test]
fn every_collective_and_dtype_on_one_gpu_with_2_and_4_ranks() {
    if !gpu_present() {
        return;
    }
    for (n, window) in [2, 4].into_iter().flat_map(|n| PATHS.map(|w| (n, w))) {
        on_one_gpu(n, window, "collectives");
    }
}

/// Also the first staged call inside a capture, which allocates its
/// pinned staging memory while the stream captures.
#[test]
fn a_captured_step_replays_with_fresh_data() {
    if !gpu_present() {
        return;
    }
    for window in PATHS {
        on_one_gpu(2, window, "captured");
    }
}

/// The driver destroys a graph's user objects on a thread of its own, some
/// time after the graph (the stand-in: after
/// `STREAMCOMM_STANDIN_DESTRUCTOR_DELAY_MS`), and refuses every driver call
/// there (the stand-in's strict mode aborts the process). A `CudaComm`
/// dropped right after its captured graph must still free the graph's
/// resources on an application thread, never on the driver's.
#[test]
fn a_graph_dropped_just_before_its_communicator_frees_nothing_on_a_driver_thread() {
    if !gpu_present() {
        return;
    }
    let delayed = [
        ("STREAMCOMM_STANDIN_STRICT", "1".to_string()),
        ("STREAMCOMM_STANDIN_DESTRUCTOR_DELAY_MS", "100".to_string()),
    ];
    launch_with(module_path!(), 2, DEFAULT_CUDA_WINDOW, "captured", &delayed);
}

/// Kernels that do not load turn the direct path off; under
/// `STREAMCOMM_REQUIRE_GPU=1` (what the GPU check sets) that is an error
/// naming why, not a quiet fall-back to staging. Here: no NVRTC and an
/// empty kernel cache.
#[test]
fn kernels_that_do_not_load_are_an_error_when_the_gpu_is_required() {
    if !gpu_present() {
        return;
    }
    let empty = std::env::temp_dir().join(format!("sc-no-kernels-{}", std::process::id()));
    let env = [
        ("STREAMCOMM_NVRTC_LIB", "off".to_string()),
        ("STREAMCOMM_KERNEL_CACHE", empty.display().to_string()),
        ("STREAMCOMM_REQUIRE_GPU", "1".to_string()),
    ];
    launch_with(module_path!(), 1, DEFAULT_CUDA_WINDOW, "no-kernels", &env);
}

/// A driver that refuses CUDA IPC (and has no virtual memory management
/// to share windows by descriptor), or host-memory registration, turns the
/// direct path off: each rank says why on stderr and in
/// `direct_path_off()`, and collectives stage, checked; under
/// `STREAMCOMM_REQUIRE_GPU=1` creation fails naming the reason instead.
/// Only the stand-in can be told to refuse (`STREAMCOMM_STANDIN_REFUSE`).
#[test]
fn a_refused_window_mapping_is_visible_and_an_error_when_the_gpu_is_required() {
    if !gpu_present() {
        return;
    }
    if !streamcomm_gpu::Device::open(0).is_ok_and(|d| d.name().contains("stand-in")) {
        streamcomm_testkit::skip(
            &streamcomm_testkit::current_test(),
            "only the CPU stand-in can be told to refuse IPC or host registration",
        );
        return;
    }
    // Without the virtual memory management windows, whose descriptors
    // need no CUDA IPC.
    for (refuse, why) in [
        ("ipc,vmm", "cuIpcGetMemHandle"),
        ("host-register", "cuMemHostRegister"),
    ] {
        for require in ["0", "1"] {
            let env = [
                ("STREAMCOMM_STANDIN_REFUSE", refuse.to_string()),
                ("STREAMCOMM_REQUIRE_GPU", require.to_string()),
                ("SC_REFUSED_WHY", why.to_string()),
            ];
            launch_with(module_path!(), 2, DEFAULT_CUDA_WINDOW, "refused", &env);
        }
    }
}

/// A rank of the test above.
fn refused(comm: &Communicator) {
    let why = std::env::var("SC_REFUSED_WHY").unwrap();
    let required = std::env::var("STREAMCOMM_REQUIRE_GPU").is_ok_and(|v| v == "1");
    let made = CudaComm::on_device(comm, 0);
    if required {
        let Err(e) = made else {
            panic!("an error under STREAMCOMM_REQUIRE_GPU=1");
        };
        let msg = e.to_string();
        assert!(
            matches!(e, Error::Unavailable(_))
                && msg.contains("STREAMCOMM_REQUIRE_GPU=1, and the CUDA direct path is off"),
            "{msg}"
        );
        return;
    }
    let cuda = made.unwrap();
    assert!(!cuda.uses_direct_path());
    let off = cuda.direct_path_off().expect("a reason").to_string();
    // The rank that met the refusal names it; the other says who could not.
    assert!(
        off.contains(&why) || off.contains("could not take part"),
        "rank {}: {off}",
        comm.rank()
    );
    let ctx = CudaContext::new(0).unwrap();
    let s = ctx.new_stream().unwrap();
    let (r, n) = (comm.rank(), comm.size());
    let seed = streamcomm_testkit::seed();
    let inputs: Vec<Vec<f64>> = (0..n).map(|q| data(seed, q, 1000)).collect();
    let send = upload::<f32>(&s, &inputs[r]);
    let mut recv = poisoned::<f32>(&s, 1000);
    cuda.all_reduce(&send, &mut recv, ReduceOp::Sum, &s)
        .unwrap();
    let got = download(&s, &recv);
    for (i, g) in got.iter().enumerate() {
        let want: f64 = inputs.iter().map(|v| v[i]).sum();
        assert_eq!(*g, want, "rank {r} element {i}");
    }
}

/// A captured step on this rank, replayed with fresh data; returns mismatches.
fn captured_step(cuda: &CudaComm, s: &Arc<CudaStream>, seed: u64) -> Vec<String> {
    const COUNT: usize = 1 << 12;
    let replays = streamcomm_testkit::reps(100, 1000) as u64;
    let (r, n) = (cuda.communicator().rank(), cuda.communicator().size());
    let mut x = poisoned::<f32>(s, COUNT);
    let mut y = poisoned::<f32>(s, COUNT);
    let mut z = poisoned::<f32>(s, COUNT);
    s.synchronize().unwrap();
    // Inside a graph, cudarc's per-buffer events would be captured too:
    // order is the stream's alone here.
    // SAFETY: one stream per rank; every access is ordered on it.
    unsafe { s.context().disable_event_tracking() };
    s.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .unwrap();
    cuda.all_reduce(&x, &mut y, ReduceOp::Sum, s).unwrap();
    s.memcpy_dtod(&y, &mut z).unwrap(); // device work between collectives
    cuda.all_reduce_in_place(&mut z, ReduceOp::Sum, s).unwrap();
    cuda.barrier(s).unwrap();
    let graph = s
        .end_capture(sys::CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH)
        .unwrap()
        .expect("the capture recorded work");
    let mut bad = Vec::new();
    for round in 0..replays {
        let fresh: Vec<Vec<f64>> = (0..n).map(|q| data(seed ^ round, q, COUNT)).collect();
        let mine: Vec<f32> = fresh[r].iter().map(|&v| v as f32).collect();
        s.memcpy_htod(&mine, &mut x).unwrap();
        s.memcpy_htod(&vec![POISON as f32; COUNT], &mut z).unwrap();
        graph.launch().unwrap();
        let got = download(s, &z);
        for (i, &g) in got.iter().enumerate() {
            let want = n as f64 * fresh.iter().map(|v| v[i]).sum::<f64>();
            if g != want && bad.len() < 8 {
                bad.push(format!(
                    "rank {r} replay {round} z[{i}]: got {g}, want {want}"
                ));
            }
        }
        if !bad.is_empty() {
            break;
        }
    }
    assert!(cuda.async_error().is_none(), "{:?}", cuda.async_error());
    drop(graph);
    bad
}

/// cudarc's event tracking makes a capturing stream wait on events its
/// buffers recorded before the capture, which the driver refuses and
/// which invalidates the capture: the call says so, and names the fix,
/// before it touches the buffers.
#[test]
fn a_capture_with_cudarc_event_tracking_on_is_refused_with_the_fix_named() {
    if !gpu_present() {
        return;
    }
    alone(|cuda, s| {
        // A second stream: cudarc tracks events only with several.
        let other = cuda.context().new_stream().unwrap();
        let x = upload::<f32>(&other, &[1.0; 64]);
        let mut y = poisoned::<f32>(&other, 64);
        other.synchronize().unwrap();
        s.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .unwrap();
        let e = cuda
            .all_reduce(&x, &mut y, ReduceOp::Sum, s)
            .expect_err("refused");
        assert!(
            e.to_string().contains("disable_event_tracking"),
            "the error names the fix: {e}"
        );
        let graph = s
            .end_capture(
                sys::CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH,
            )
            .expect("the capture is still valid after the refusal");
        drop(graph);
    });
}

/// PyTorch captures in global mode: another thread's `CudaComm::new`
/// (which allocates and zeroes its windows) must neither fail nor
/// invalidate that capture.
#[test]
fn a_communicator_made_while_another_thread_captures_in_global_mode() {
    if !gpu_present() {
        return;
    }
    let ctx = CudaContext::new(0).unwrap();
    let s = ctx.new_stream().unwrap();
    s.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL)
        .unwrap();
    let made = std::thread::spawn({
        let ctx = ctx.clone();
        move || {
            let id = UniqueId::new().unwrap();
            let comm = Communicator::init(&id, 0, 1).unwrap();
            CudaComm::new(&comm, ctx).map(|cuda| cuda.uses_direct_path())
        }
    })
    .join()
    .unwrap();
    let graph = s.end_capture(
        sys::CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH,
    );
    assert!(
        made.is_ok(),
        "CudaComm::new during a global capture: {made:?}"
    );
    assert!(
        graph.is_ok(),
        "the other thread's capture was invalidated: {:?}",
        graph.err()
    );
}

/// Runs `body` on one rank (a communicator of one) on GPU 0.
pub(crate) fn alone<T>(body: impl FnOnce(&CudaComm, &Arc<CudaStream>) -> T) -> T {
    let id = UniqueId::new().unwrap();
    let comm = Communicator::init(&id, 0, 1).unwrap();
    let ctx = CudaContext::new(0).unwrap();
    let cuda = CudaComm::new(&comm, ctx.clone()).unwrap();
    let stream = ctx.new_stream().unwrap();
    body(&cuda, &stream)
}

/// Ranks as threads of one process on one GPU share the context's
/// hardware queues, where one rank's stream wait can sit in front of its
/// peer's signal: refused on every rank, as NCCL does.
#[test]
fn two_ranks_as_threads_on_one_gpu_are_refused() {
    if !gpu_present() {
        return;
    }
    let id = UniqueId::new().unwrap();
    let threads: Vec<_> = (0..2)
        .map(|r| {
            std::thread::spawn(move || {
                let comm = Communicator::init(&id, r, 2).unwrap();
                CudaComm::on_device(&comm, 0).map(|_| ()).unwrap_err()
            })
        })
        .collect();
    for t in threads {
        let err = t.join().unwrap();
        assert!(
            matches!(&err, Error::InvalidUsage(m) if m.contains("one rank per GPU per process")),
            "{err}"
        );
    }
}

/// A rank thread that panics (its process lives on, so no process watchdog
/// sees it gone) fails the communicator for its peers: their device waits,
/// which never time out, are released with an error instead of hanging.
/// Ranks as threads need a GPU each (see the test above): two devices.
#[test]
fn a_rank_thread_that_panics_fails_its_peer_instead_of_hanging() {
    if !gpu_present() {
        return;
    }
    if streamcomm_gpu::Device::count().unwrap_or(0) < 2 {
        streamcomm_testkit::skip(
            &streamcomm_testkit::current_test(),
            "needs two CUDA devices (ranks as threads take one each)",
        );
        return;
    }
    let id = UniqueId::new().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let survivor = std::thread::spawn(move || {
        let comm = Communicator::init(&id, 0, 2).unwrap();
        let ctx = CudaContext::new(0).unwrap();
        let cuda = CudaComm::new(&comm, ctx.clone()).unwrap();
        let s = ctx.new_stream().unwrap();
        let send = upload::<f32>(&s, &[1.0; 1000]);
        let mut recv = poisoned::<f32>(&s, 1000);
        let called = cuda.all_reduce(&send, &mut recv, ReduceOp::Sum, &s);
        let synced = s.synchronize();
        let _ = tx.send((called.err(), synced.is_ok(), cuda.async_error()));
    });
    let doomed = std::thread::spawn(move || {
        let comm = Communicator::init(&id, 1, 2).unwrap();
        let _cuda = CudaComm::on_device(&comm, 1).unwrap();
        panic!("rank 1 fails before its collective (on purpose)");
    });
    assert!(doomed.join().is_err(), "rank 1 panicked");
    let (called, synced, async_error) = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("rank 0's stream still waits for the rank whose thread panicked");
    survivor.join().unwrap();
    let err = called
        .or(async_error)
        .expect("rank 0 is told of the failure");
    assert!(synced, "the stream drained");
    eprintln!("rank 0 was told: {err}");
}

#[test]
fn a_stream_of_another_device_or_a_short_buffer_is_refused() {
    if !gpu_present() {
        return;
    }
    let err = alone(|cuda, s| {
        let send = upload::<f32>(s, &[1.0; 10]);
        let mut small = poisoned::<f32>(s, 9);
        cuda.all_reduce(&send, &mut small, ReduceOp::Sum, s)
            .unwrap_err()
            .to_string()
    });
    assert!(
        err.contains("recv holds 9 elements, the call needs 10"),
        "{err}"
    );
}

#[test]
fn a_group_exchanges_around_a_ring_on_one_gpu() {
    if !gpu_present() {
        return;
    }
    on_one_gpu(4, DEFAULT_CUDA_WINDOW, "group");
}

/// A p2p ring on this rank; returns mismatches.
fn ring(cuda: &CudaComm, s: &Arc<CudaStream>, seed: u64) -> Vec<String> {
    let (r, n) = (cuda.communicator().rank(), cuda.communicator().size());
    let (right, left) = ((r + 1) % n, (r + n - 1) % n);
    let mut bad = Vec::new();
    for len in [100usize, 300_000] {
        let out = upload::<f32>(s, &data(seed ^ len as u64, r, len));
        let mut inb = poisoned::<f32>(s, len + 3);
        cuda.group(s, |g| {
            g.recv(&mut inb, left)?;
            g.send(&out, right)
        })
        .unwrap();
        let got = download(s, &inb);
        let want = data(seed ^ len as u64, left, len);
        if got[..len] != want[..] || got[len..].iter().any(|&v| v != POISON) {
            bad.push(format!("rank {r}: {len} elements from {left} differ"));
        }
    }
    assert!(cuda.async_error().is_none(), "{:?}", cuda.async_error());
    bad
}

/// One rank of the tests above, as a process: runs `SC_CUDA_SCENARIO`
/// (`collectives`, `captured` or `group`) with the communicator of the
/// launcher's environment, on GPU 0.
#[test]
#[ignore = "a rank of the tests above"]
fn child() {
    let (seed, comm) = child_rank();
    let scenario = std::env::var("SC_CUDA_SCENARIO").expect("set by the parent test");
    let window = Config::from_env().unwrap().cuda_window;
    if scenario == "no-kernels" {
        let e = CudaComm::on_device(&comm, 0).expect_err("no kernels under REQUIRE_GPU");
        let msg = e.to_string();
        assert!(
            matches!(e, Error::Unavailable(_))
                && msg.contains("STREAMCOMM_REQUIRE_GPU")
                && msg.contains("kernels"),
            "{msg}"
        );
        streamcomm_testkit::child_ran();
        return;
    }
    if scenario == "refused" {
        refused(&comm);
        streamcomm_testkit::child_ran();
        return;
    }
    let cuda = CudaComm::on_device(&comm, 0).unwrap();
    assert_eq!(cuda.uses_direct_path(), window > 0, "window {window}");
    let why = cuda.direct_path_off();
    assert_eq!(
        why,
        (window == 0).then_some("STREAMCOMM_CUDA_WINDOW=0"),
        "{why:?}"
    );
    // Ranks of one host talk over shared memory: no NIC to probe.
    assert_eq!(cuda.gpudirect(), None);
    if comm.rank() == 0 {
        println!("driver: {}", cuda.device_name());
    }
    let s = cuda.context().new_stream().unwrap();
    let bad = match scenario.as_str() {
        "collectives" => {
            let mut bad = collectives::<f32>(&cuda, &s, seed);
            bad.extend(collectives::<f64>(&cuda, &s, seed ^ 1));
            bad.extend(collectives::<i32>(&cuda, &s, seed ^ 2));
            bad.extend(collectives::<f16>(&cuda, &s, seed ^ 3));
            bad.extend(collectives::<bf16>(&cuda, &s, seed ^ 4));
            bad
        }
        "captured" => captured_step(&cuda, &s, seed),
        "group" => ring(&cuda, &s, seed),
        other => panic!("unknown scenario {other}"),
    };
    assert!(bad.is_empty(), "{scenario}, window {window}: {bad:#?}");
    if scenario == "captured" {
        // The graph is gone; the driver may run its user objects'
        // destructors later, on a thread of its own: drop the CudaComm
        // now and give them time to run, so that a release that would free
        // memory there (a driver call from a driver thread) happens inside
        // this test.
        drop(s);
        drop(cuda);
        std::thread::sleep(Duration::from_millis(300));
    }
    streamcomm_testkit::child_ran();
}
