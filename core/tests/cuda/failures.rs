//! The CUDA backend's failure paths and path choices on a CUDA driver (the
//! CPU stand-in under `scripts/gpu-check.sh --stand-in`, or a GPU): bad
//! arguments refused before anything is enqueued, a peer that aborts or
//! dies releasing the waiting streams with the error kept, a rank with
//! another window size sending every rank down the staged path, reductions
//! over nine ranks falling back to staging while copies stay direct, and the
//! refusals of device groups. Ranks are processes on GPU 0 (one rank per
//! GPU per process).

use std::sync::Arc;
use std::time::{Duration, Instant};

use streamcomm::RawSpan;
use streamcomm::config::Config;
use streamcomm::cuda::cudarc::driver::{CudaContext, CudaStream, result, sys};
use streamcomm::cuda::{CudaComm, RawP2p};
use streamcomm::{Communicator, DataType, Error, ReduceOp};

use crate::backend::{alone, data, download, gpu_present, launch, launch_with, poisoned, upload};

/// A small window: every call in several chunks.
const SMALL: usize = 4 << 10;

#[test]
fn bad_arguments_fail_at_enqueue_naming_what_was_wrong() {
    if !gpu_present() {
        return;
    }
    for window in [0, SMALL] {
        launch(module_path!(), 2, window, "bad-args");
    }
}

#[test]
fn a_peer_that_aborts_releases_the_device_stream_with_the_error_kept() {
    if !gpu_present() {
        return;
    }
    for window in [0, SMALL] {
        launch(module_path!(), 2, window, "abort");
    }
}

/// The direct path's watchdog: a peer process that exits without leaving
/// cleanly releases the streams waiting for it, with the error kept.
#[test]
fn a_dead_peer_releases_waiting_streams_with_the_error_kept() {
    if !gpu_present() {
        return;
    }
    launch(module_path!(), 3, SMALL, "dead");
}

/// The same with one hardware queue per context, as Megatron sets it
/// (`CUDA_DEVICE_MAX_CONNECTIONS=1`): every stream of a rank shares the
/// queue its parked wait holds, so the release must not go through a
/// stream (the flags are raised from the host).
#[test]
fn a_dead_peer_releases_waiting_streams_on_one_hardware_queue() {
    if !gpu_present() {
        return;
    }
    let one_queue = [("CUDA_DEVICE_MAX_CONNECTIONS", "1".to_string())];
    launch_with(module_path!(), 3, SMALL, "dead", &one_queue);
}

/// The direct path's watch: a peer that leaves cleanly, alive, while this
/// rank's stream waits for it on the device, is an error naming it.
#[test]
fn a_peer_that_leaves_while_a_device_wait_needs_it_is_an_error() {
    if !gpu_present() {
        return;
    }
    launch(module_path!(), 2, SMALL, "left");
}

/// The direct path's clock: a peer that is alive, keeps its communicator,
/// and never calls the collective the others wait for on the device. Every
/// rank that waits ends with a timeout naming it, within
/// `STREAMCOMM_TIMEOUT` of its stream reaching the wait (plus the watch's
/// period); the absent rank finds the communicator failed when it returns.
#[test]
fn a_live_peer_that_never_arrives_times_out_naming_it() {
    if !gpu_present() {
        return;
    }
    let timeout = [("STREAMCOMM_TIMEOUT", ABSENT_TIMEOUT.as_secs().to_string())];
    launch_with(module_path!(), 3, SMALL, "absent", &timeout);
}

/// A window shared by descriptor (the driver's virtual memory management)
/// is held by each process that maps it: a rank drops its `CudaComm` at
/// once while a peer still maps its window. Shared through CUDA IPC (where
/// the driver has no such descriptors), the drop waits until the peer has
/// closed its mapping, bounded. Only the stand-in can be told to refuse
/// the descriptors; on a GPU the first case runs as the driver allows.
#[test]
fn a_window_mapped_by_a_peer_is_freed_at_once_when_shared_by_descriptor() {
    if !gpu_present() {
        return;
    }
    let device = streamcomm_gpu::Device::open(0).unwrap();
    let stand_in = device.name().contains("stand-in");
    // What this driver offers decides how the windows are shared.
    let by_descriptor = streamcomm_gpu::VmmBuffer::supported(&device);
    let held = [(HELD, u8::from(by_descriptor).to_string())];
    launch_with(module_path!(), 2, SMALL, "drop-mapped", &held);
    if stand_in && by_descriptor {
        let ipc = [
            (HELD, "0".to_string()),
            ("STREAMCOMM_STANDIN_REFUSE", "vmm".to_string()),
        ];
        launch_with(module_path!(), 2, SMALL, "drop-mapped", &ipc);
    }
}

/// Set to 1 where windows are shared by descriptor, 0 by CUDA IPC.
const HELD: &str = "SC_WINDOWS_HELD";

/// How long rank 0 keeps mapping rank 1's window in `drop_mapped`.
const KEEP_MAPPED: Duration = Duration::from_secs(2);

/// Rank 1 drops its `CudaComm` while rank 0 still maps its window.
fn drop_queued(cuda: CudaComm, comm: &Communicator, s: &Arc<CudaStream>) {
    assert!(cuda.uses_direct_path(), "{:?}", cuda.direct_path_off());
    comm.barrier_host().unwrap();
    if comm.rank() == 1 {
        // Never calls: rank 0's all-reduce waits for it until dropped.
        std::thread::sleep(Duration::from_secs(2));
        drop(cuda);
        return;
    }
    let send = upload::<f32>(s, &[1.0; 4096]);
    let mut recv = poisoned::<f32>(s, 4096);
    cuda.all_reduce(&send, &mut recv, ReduceOp::Sum, s)
        .expect("enqueued: the peer is alive");
    std::thread::sleep(Duration::from_millis(50));
    let start = Instant::now();
    drop(cuda);
    let took = start.elapsed();
    let synced = s.synchronize();
    eprintln!("rank 0: dropped in {took:?} with the call queued; the stream: {synced:?}");
    assert!(
        synced.is_ok(),
        "the stream drains without a fault: {synced:?}"
    );
    // Windows shared through CUDA IPC are freed once rank 1 unmaps them
    // (its drop, after 2 s); a call never released would hold the drop
    // for the 10 s bound.
    assert!(took < Duration::from_secs(5), "the drop waited {took:?}");
    // The context is still usable.
    let again = upload::<f32>(s, &[3.0; 16]);
    assert_eq!(download(s, &again), vec![3.0; 16]);
}

fn drop_mapped(cuda: CudaComm, comm: &Communicator, s: &Arc<CudaStream>) {
    assert!(cuda.uses_direct_path(), "{:?}", cuda.direct_path_off());
    let send = upload::<f32>(s, &[1.0; 1000]);
    let mut recv = poisoned::<f32>(s, 1000);
    cuda.all_reduce(&send, &mut recv, ReduceOp::Sum, s).unwrap();
    assert!(download(s, &recv).iter().all(|&x| x == 2.0));
    comm.barrier_host().unwrap();
    if comm.rank() == 0 {
        std::thread::sleep(KEEP_MAPPED);
        drop(cuda);
        return;
    }
    let start = Instant::now();
    drop(cuda);
    let took = start.elapsed();
    let held = std::env::var(HELD).is_ok_and(|v| v == "1");
    eprintln!("rank 1 dropped its CudaComm in {took:?} (windows held by importers: {held})");
    if held {
        assert!(
            took < KEEP_MAPPED / 2,
            "the drop waited for the peer: {took:?}"
        );
    } else {
        assert!(
            took >= KEEP_MAPPED / 2,
            "a CUDA IPC window was freed while the peer mapped it: {took:?}"
        );
    }
}

/// A `CudaComm` dropped while its stream still waits in a call (as
/// `ncclCommAbort` after an error, with work queued): the drop abandons
/// the call (its waits released) and frees the windows and flag areas
/// only once the stream is past it, so the stream drains without a device
/// fault and the context stays usable. Freed at once, the stream's next
/// access faulted (the stand-in: error 700, the context unusable; once in
/// eight runs of NCCL's abort test under load, a SIGSEGV).
#[test]
fn a_comm_dropped_with_a_call_queued_frees_nothing_under_the_stream() {
    if !gpu_present() {
        return;
    }
    launch(module_path!(), 2, SMALL, "drop-queued");
}

#[test]
fn one_rank_with_another_window_sends_every_rank_down_the_staged_path() {
    if !gpu_present() {
        return;
    }
    // A deliberate fall-back: not an error even where the GPU check
    // requires the direct path.
    let allowed = [("STREAMCOMM_REQUIRE_GPU", "0".to_string())];
    launch_with(module_path!(), 3, SMALL, "odd-window", &allowed);
}

#[test]
fn reductions_over_nine_ranks_fall_back_to_staging_and_copies_stay_direct() {
    if !gpu_present() {
        return;
    }
    launch(module_path!(), 9, SMALL, "nine");
}

#[test]
fn a_device_group_refuses_overlapping_receives_and_unpaired_self_sends() {
    if !gpu_present() {
        return;
    }
    let (overlap, unpaired, empty) = alone(|cuda, s| {
        let a = poisoned::<f32>(s, 64);
        let (base, _guard) = streamcomm::cuda::DevicePtr::device_ptr(&a, s);
        let buf = |off: u64, len: usize| RawSpan {
            ptr: base + 4 * off,
            len,
        };
        let op = |send: bool, b: RawSpan| RawP2p {
            send,
            peer: 0,
            dtype: DataType::F32,
            buf: b,
        };
        // SAFETY: (all three) the ranges lie inside `a`, which outlives the
        // synchronisation below; refused groups enqueue nothing.
        let overlap = unsafe {
            cuda.group_raw(
                &[op(false, buf(0, 64)), op(true, buf(8, 56))],
                s.cu_stream(),
            )
        };
        // SAFETY: as above.
        let unpaired = unsafe { cuda.group_raw(&[op(true, buf(0, 64))], s.cu_stream()) };
        // SAFETY: as above.
        let empty = unsafe { cuda.group_raw(&[], s.cu_stream()) };
        s.synchronize().unwrap();
        (
            overlap.unwrap_err().to_string(),
            unpaired.unwrap_err().to_string(),
            empty.is_ok(),
        )
    });
    assert!(overlap.contains("overlaps"), "{overlap}");
    assert!(unpaired.contains("send(s) to this rank"), "{unpaired}");
    assert!(empty);
}

/// The checks of gather, scatter and all_to_allv, before anything is
/// enqueued; then a valid call of each on the one rank, checked.
#[test]
fn gather_scatter_all_to_allv_and_all_gatherv_refuse_bad_arguments() {
    if !gpu_present() {
        return;
    }
    let errors = alone(|cuda, s| {
        let ten = upload::<f32>(s, &data(7, 0, 10));
        let mut nine = poisoned::<f32>(s, 9);
        let mut out = poisoned::<f32>(s, 10);
        let errors = [
            cuda.gather(&ten, &mut out, 1, s),
            cuda.gather(&ten, &mut nine, 0, s),
            cuda.scatter(&nine, &mut out, 0, s),
            cuda.all_to_allv(&ten, &[1, 1], &[0], &mut out, &[1], &[0], s),
            cuda.all_to_allv(&ten, &[11], &[0], &mut out, &[10], &[0], s),
            cuda.all_to_allv(&ten, &[10], &[0], &mut out, &[10], &[1], s),
            cuda.all_gatherv(&ten, &mut out, &[9], &[0], s),
            cuda.all_gatherv(&ten, &mut out, &[10], &[1], s),
        ]
        .map(|r| r.unwrap_err().to_string());
        // Nothing was enqueued; valid calls on one rank copy to itself.
        cuda.gather(&ten, &mut out, 0, s).unwrap();
        assert_eq!(download(s, &out), data(7, 0, 10), "gather");
        let mut back = poisoned::<f32>(s, 10);
        cuda.scatter(&out, &mut back, 0, s).unwrap();
        assert_eq!(download(s, &back), data(7, 0, 10), "scatter");
        let mut moved = poisoned::<f32>(s, 12);
        cuda.all_to_allv(&ten, &[4], &[3], &mut moved, &[6], &[5], s)
            .unwrap();
        let mut want = vec![crate::backend::POISON; 12];
        want[5..9].copy_from_slice(&data(7, 0, 10)[3..7]);
        assert_eq!(download(s, &moved), want, "all_to_allv");
        let mut gathered = poisoned::<f32>(s, 12);
        cuda.all_gatherv(&ten, &mut gathered, &[10], &[2], s)
            .unwrap();
        let mut want = vec![crate::backend::POISON; 12];
        want[2..].copy_from_slice(&data(7, 0, 10));
        assert_eq!(download(s, &gathered), want, "all_gatherv");
        assert!(cuda.async_error().is_none(), "{:?}", cuda.async_error());
        errors
    });
    let wanted = [
        "gather: root 1 is out of range for 1 ranks",
        "gather: recv holds 9 elements, the root needs size x count = 1 x 10 = 10",
        "scatter: send holds 9 elements, the root needs size x count = 1 x 10 = 10",
        "all_to_allv: send_counts has 2 entries, needs one per rank (1)",
        "all_to_allv: send region 0..0+11 lies outside its 10 elements",
        "all_to_allv: recv region 1..1+10 lies outside its 10 elements",
        "all_gatherv: send holds 10 elements, counts[0] says 9",
        "all_gatherv: recv region 1..1+10 lies outside its 10 elements",
    ];
    for (got, want) in errors.iter().zip(wanted) {
        assert!(got.contains(want), "{got:?} should say {want:?}");
    }
}

/// A stream of another device's context is refused before anything is
/// enqueued, naming both devices. Needs two devices (the stand-in under
/// `gpu-check.sh --stand-in` has two).
#[test]
fn a_stream_of_another_context_is_refused() {
    if !gpu_present() {
        return;
    }
    if streamcomm_gpu::Device::count().unwrap_or(0) < 2 {
        streamcomm_testkit::skip(
            &streamcomm_testkit::current_test(),
            "needs two CUDA devices (a stream of device 1, a CudaComm of device 0)",
        );
        return;
    }
    let err = alone(|cuda, s| {
        let other = CudaContext::new(1).unwrap().new_stream().unwrap();
        let send = upload::<f32>(s, &[1.0; 10]);
        let mut recv = poisoned::<f32>(s, 10);
        let err = cuda
            .all_reduce(&send, &mut recv, ReduceOp::Sum, &other)
            .unwrap_err();
        // The communicator is unharmed: the same call on its own stream runs.
        cuda.all_reduce(&send, &mut recv, ReduceOp::Sum, s).unwrap();
        assert_eq!(download(s, &recv), vec![1.0; 10]);
        err
    });
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("all_reduce: the stream belongs to CUDA device 1, this CudaComm to device 0"),
        "{msg}"
    );
}

/// A driver call that fails surfaces as `Error::Cuda` with the driver's
/// `CUresult` and the CUDA layer's error as `source()`. Provoked the way a
/// real driver fails it: synchronising a capturing stream is refused and
/// invalidates the capture, after which the stream refuses all work with
/// `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED` (901).
#[test]
fn a_failed_driver_call_carries_its_curesult_and_a_source() {
    if !gpu_present() {
        return;
    }
    let (err, ended) = alone(|cuda, s| {
        // cudarc's per-buffer events would fail inside the invalidated
        // capture too, and cudarc would keep that error for its next call:
        // buffers without events (made after this), ordered by the stream.
        // SAFETY: one stream; every access is ordered on it.
        unsafe { s.context().disable_event_tracking() };
        let send = upload::<f32>(s, &[1.0; 64]);
        let mut recv = poisoned::<f32>(s, 64);
        s.synchronize().unwrap();
        s.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .unwrap();
        let refused = s.synchronize().unwrap_err();
        assert_eq!(refused.0 as u32, 900, "cuStreamSynchronize while capturing");
        let err = cuda
            .all_reduce(&send, &mut recv, ReduceOp::Sum, s)
            .unwrap_err();
        // SAFETY: the stream is live and captures; ending the capture (with
        // the driver's own error) is what its owner must do.
        let ended = unsafe { result::stream::end_capture(s.cu_stream()) };
        (err, ended.map(|g| g.is_null()))
    });
    eprintln!("the failed call: {err}");
    match &err {
        Error::Cuda {
            call, code, name, ..
        } => {
            assert_eq!(*code, 901, "{err}");
            assert_eq!(*name, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED");
            assert!(call.starts_with("cu"), "a driver function: {call}");
        }
        other => panic!("not Error::Cuda: {other:?}"),
    }
    // The CUDA layer's error is next in the chain (behind the Arc that
    // keeps `Error` cheap to clone).
    let source = std::error::Error::source(&err).expect("a source");
    assert!(
        source
            .to_string()
            .ends_with("failed: CUDA_ERROR_STREAM_CAPTURE_INVALIDATED (901)"),
        "{source}"
    );
    let layer = source
        .downcast_ref::<Arc<dyn std::error::Error + Send + Sync>>()
        .and_then(|e| e.downcast_ref::<streamcomm_gpu::Error>());
    assert!(
        matches!(layer, Some(streamcomm_gpu::Error::Driver { code: 901, .. })),
        "{layer:?}"
    );
    assert!(ended.is_err(), "the invalidated capture ends with an error");
}

/// One rank of the tests above, as a process: runs `SC_CUDA_SCENARIO`.
#[test]
#[ignore = "a rank of the tests above"]
fn child() {
    let scenario = std::env::var("SC_CUDA_SCENARIO").expect("set by the parent test");
    let mut config = Config::from_env().unwrap();
    let rank: usize = std::env::var("RANK").unwrap().parse().unwrap();
    if scenario == "odd-window" && rank == 1 {
        config.cuda_window *= 2;
    }
    let window = config.cuda_window;
    let comm = Communicator::builder().config(config).build().unwrap();
    let ctx = CudaContext::new(0).unwrap();
    let cuda = CudaComm::new(&comm, ctx.clone()).unwrap();
    let s = ctx.new_stream().unwrap();
    match scenario.as_str() {
        "bad-args" => bad_args(&cuda, &s),
        "abort" => abort(&cuda, &s),
        "dead" => dead(&cuda, &s),
        "left" => {
            left(cuda, comm, &s);
            streamcomm_testkit::child_ran();
            return;
        }
        "absent" => absent(&cuda, &s),
        "drop-mapped" => {
            drop_mapped(cuda, &comm, &s);
            streamcomm_testkit::child_ran();
            return;
        }
        "drop-queued" => {
            drop_queued(cuda, &comm, &s);
            streamcomm_testkit::child_ran();
            return;
        }
        "odd-window" => {
            assert!(!cuda.uses_direct_path(), "rank {rank}, window {window}");
            let why = cuda.direct_path_off().expect("a reason");
            assert!(
                why.contains("set the same STREAMCOMM_CUDA_WINDOW everywhere"),
                "rank {rank}: {why}"
            );
            let bad = sums(&cuda, &s, 1000);
            assert!(bad.is_empty(), "{bad:#?}");
        }
        "nine" => {
            assert!(cuda.uses_direct_path());
            assert_eq!(cuda.direct_path_off(), None);
            let bad = sums(&cuda, &s, 333);
            assert!(bad.is_empty(), "{bad:#?}");
        }
        other => panic!("unknown scenario {other}"),
    }
    streamcomm_testkit::child_ran();
}

fn bad_args(cuda: &CudaComm, s: &Arc<CudaStream>) {
    let send = upload::<f32>(s, &[1.0; 10]);
    let mut small = poisoned::<f32>(s, 9);
    let short = cuda
        .all_reduce(&send, &mut small, ReduceOp::Sum, s)
        .unwrap_err()
        .to_string();
    let root = cuda
        .broadcast(&send, &mut small, 2, s)
        .unwrap_err()
        .to_string();
    let mut odd = poisoned::<f32>(s, 7);
    let indivisible = cuda
        .all_gather_in_place(&mut odd, s)
        .unwrap_err()
        .to_string();
    let (addr, _guard) = streamcomm::cuda::DevicePtr::device_ptr(&send, s);
    let same = RawSpan { ptr: addr, len: 10 };
    // SAFETY: `send` holds 10 f32 and outlives the synchronisation below; the
    // call is refused before anything is enqueued.
    let aliased = unsafe {
        cuda.collective_raw(
            streamcomm::Collective::AllReduce,
            DataType::F32,
            ReduceOp::Sum,
            streamcomm::RawBuffers::Separate {
                send: same,
                recv: same,
            },
            s.cu_stream(),
        )
    }
    .unwrap_err()
    .to_string();
    // Nothing was enqueued: a barrier still lines up on both ranks.
    cuda.barrier(s).unwrap();
    s.synchronize().unwrap();
    assert!(
        short.contains("recv holds 9 elements, the call needs 10"),
        "{short}"
    );
    assert!(root.contains("root 2"), "{root}");
    assert!(indivisible.contains("not divisible"), "{indivisible}");
    assert!(aliased.contains("same buffer"), "{aliased}");
    assert!(cuda.async_error().is_none(), "{:?}", cuda.async_error());
}

fn abort(cuda: &CudaComm, s: &Arc<CudaStream>) {
    let comm = cuda.communicator();
    comm.barrier_host().unwrap();
    if comm.rank() == 1 {
        comm.abort();
        return;
    }
    let send = upload::<f32>(s, &[1.0; 64]);
    let mut recv = poisoned::<f32>(s, 64);
    // Rank 0's all-reduce can never complete: its stream must not hang on a
    // wait, and the error must be kept.
    let enqueued = cuda.all_reduce(&send, &mut recv, ReduceOp::Sum, s);
    let synced = s.synchronize();
    if enqueued.is_ok() {
        assert!(synced.is_ok(), "the stream drains: {synced:?}");
    }
    let kept = cuda.async_error().expect("the error is kept");
    assert!(
        matches!(
            kept,
            Error::RemoteFailed { .. } | Error::Aborted(_) | Error::Timeout { .. }
        ),
        "{kept}"
    );
    assert!(
        cuda.all_reduce(&send, &mut recv, ReduceOp::Sum, s).is_err(),
        "later calls return the error"
    );
}

fn dead(cuda: &CudaComm, s: &Arc<CudaStream>) {
    let comm = cuda.communicator();
    comm.barrier_host().unwrap();
    if comm.rank() == 2 {
        // Never joins the all-reduce; exits (no clean leave) once the
        // others have had time to enqueue theirs.
        std::thread::sleep(Duration::from_millis(300));
        streamcomm_testkit::child_ran();
        std::process::exit(0);
    }
    // DEAD_CHUNKS chunks: the stream must drain at once after the
    // failure, not one flag round per watch period (which would take
    // 2 x DEAD_CHUNKS x 100 ms).
    let count = DEAD_CHUNKS * SMALL / 4;
    let send = upload::<f32>(s, &vec![1.0; count]);
    let mut recv = poisoned::<f32>(s, count);
    cuda.all_reduce(&send, &mut recv, ReduceOp::Sum, s)
        .expect("enqueued before the peer died");
    let start = Instant::now();
    s.synchronize().expect("the stream drains");
    let waited = start.elapsed();
    eprintln!(
        "rank {}: {DEAD_CHUNKS} chunks drained {waited:?} after the call",
        comm.rank()
    );
    assert!(
        waited < Duration::from_secs(10),
        "released after {waited:?}"
    );
    let kept = cuda.async_error().expect("the error is kept");
    assert!(
        matches!(kept, Error::RemoteFailed { peer: 2, .. }),
        "{kept}"
    );
    assert!(cuda.barrier(s).is_err(), "later calls return the error");
    // Alive a while, so that the other survivor does not see this process
    // gone before it has read its own error.
    std::thread::sleep(Duration::from_millis(500));
}

/// Chunks of the all-reduce that `dead` leaves waiting.
const DEAD_CHUNKS: usize = 256;

/// Rank 1 takes part in one all-reduce, then leaves cleanly (drops its
/// communicator) and lingers, alive, without calling the second: rank 0's
/// second all-reduce, which waits for it on the device, must end with an
/// error naming it soon after it left, not wait for ever (its stream's wait
/// has no clock; the "departed cleanly" rule alone would never fire).
fn left(cuda: CudaComm, comm: Communicator, s: &Arc<CudaStream>) {
    assert!(cuda.uses_direct_path(), "the direct path");
    let rank = comm.rank();
    let send = upload::<f32>(s, &[1.0; 1000]);
    let mut recv = poisoned::<f32>(s, 1000);
    cuda.all_reduce(&send, &mut recv, ReduceOp::Sum, s).unwrap();
    assert!(download(s, &recv).iter().all(|&x| x == 2.0));
    if rank == 1 {
        drop(cuda);
        drop(comm);
        // Alive, but gone from the communicator: rank 0 must not wait for
        // this process to exit.
        std::thread::sleep(LINGER);
        return;
    }
    cuda.all_reduce(&send, &mut recv, ReduceOp::Sum, s)
        .expect("enqueued before the peer left");
    let start = Instant::now();
    let _ = s.synchronize();
    let waited = start.elapsed();
    let kept = cuda.async_error().expect("the error is kept");
    eprintln!("rank 0: {kept} after {waited:?}");
    assert!(
        matches!(kept, Error::RemoteFailed { peer: 1, .. }),
        "{kept}"
    );
    assert!(
        waited < LINGER / 2,
        "released after {waited:?}, not soon after rank 1 left"
    );
    // Rank 1 still lingers: leave it behind, as a program whose peer left
    // would.
    streamcomm_testkit::child_ran();
    std::process::exit(0);
}

/// The timeout of `absent`.
const ABSENT_TIMEOUT: Duration = Duration::from_secs(3);

/// Rank 2 joins one all-reduce, then stays away (alive, communicator kept)
/// while ranks 0 and 1 enqueue a second one and wait for it on the device.
fn absent(cuda: &CudaComm, s: &Arc<CudaStream>) {
    assert!(cuda.uses_direct_path(), "the direct path");
    let rank = cuda.communicator().rank();
    let send = upload::<f32>(s, &[1.0; 1000]);
    let mut recv = poisoned::<f32>(s, 1000);
    cuda.all_reduce(&send, &mut recv, ReduceOp::Sum, s).unwrap();
    assert!(download(s, &recv).iter().all(|&x| x == 3.0));
    if rank == 2 {
        // Away for longer than the others may wait.
        std::thread::sleep(ABSENT_TIMEOUT * 3);
        let enqueued = cuda.all_reduce(&send, &mut recv, ReduceOp::Sum, s);
        let start = Instant::now();
        let _ = s.synchronize();
        assert!(
            start.elapsed() < ABSENT_TIMEOUT * 2,
            "the absent rank's late call drains: {:?}",
            start.elapsed()
        );
        let kept = enqueued.err().or_else(|| cuda.async_error());
        let kept = kept.expect("the absent rank finds the communicator failed");
        eprintln!("rank 2 (absent): {kept}");
        assert!(kept.to_string().contains("this rank"), "{kept}");
        return;
    }
    cuda.all_reduce(&send, &mut recv, ReduceOp::Sum, s)
        .expect("enqueued while the peer is away");
    let start = Instant::now();
    let _ = s.synchronize();
    let waited = start.elapsed();
    let kept = cuda.async_error().expect("the error is kept");
    eprintln!("rank {rank}: {kept} after {waited:?}");
    assert!(kept.to_string().contains("rank 2"), "names rank 2: {kept}");
    // Within the timeout of the stream reaching the wait, give or take the
    // watch's period and this loaded machine.
    assert!(
        waited >= ABSENT_TIMEOUT - Duration::from_millis(500)
            && waited < ABSENT_TIMEOUT * 2 + Duration::from_secs(2),
        "rank {rank} released after {waited:?}, timeout {ABSENT_TIMEOUT:?}"
    );
    assert!(cuda.barrier(s).is_err(), "later calls return the error");
    // Alive until the absent rank has come back and read its error (which
    // would otherwise be this process's exit, should that come first).
    std::thread::sleep(ABSENT_TIMEOUT * 3);
}

/// How long the rank that left stays alive in `left`.
const LINGER: Duration = Duration::from_secs(12);

/// An all_gather then an all_reduce of `count` f32 per rank, checked.
fn sums(cuda: &CudaComm, s: &Arc<CudaStream>, count: usize) -> Vec<String> {
    let seed: u64 = 0x5eed;
    let (r, n) = (cuda.communicator().rank(), cuda.communicator().size());
    let inputs: Vec<Vec<f64>> = (0..n).map(|q| data(seed, q, count)).collect();
    let send = upload::<f32>(s, &inputs[r]);
    let mut gathered = poisoned::<f32>(s, n * count);
    let mut summed = poisoned::<f32>(s, count);
    cuda.all_gather(&send, &mut gathered, s).unwrap();
    cuda.all_reduce(&send, &mut summed, ReduceOp::Sum, s)
        .unwrap();
    let (gathered, summed) = (download(s, &gathered), download(s, &summed));
    assert!(cuda.async_error().is_none(), "{:?}", cuda.async_error());
    let mut bad = Vec::new();
    for i in 0..count {
        let want: f64 = inputs.iter().map(|v| v[i]).sum();
        if summed[i] != want && bad.len() < 5 {
            bad.push(format!("rank {r} all_reduce[{i}]: {} vs {want}", summed[i]));
        }
        for q in 0..n {
            let got = gathered[q * count + i];
            if got != inputs[q][i] && bad.len() < 5 {
                bad.push(format!("rank {r} all_gather[{q}][{i}]: {got}"));
            }
        }
    }
    bad
}
