//! What the direct path costs, counted by the CPU stand-in: the bytes each
//! rank's device work reads from other processes' windows (what crosses
//! NVLink on a GPU node), and the driver calls one collective makes. Only
//! the stand-in counts (`streamcomm_standin_counters`); on a GPU these
//! tests skip.
//!
//! The all-reduce above the two-shot threshold reads at most
//! `1.15 x 2 (n - 1) / n` of its bytes from peers for n = 2..8, every
//! element checked (out of place, in place, and captured in a graph and
//! replayed with fresh data); all_gatherv, gather and scatter take the
//! direct path and read each block they receive exactly once.

use std::sync::Arc;

use streamcomm::Communicator;
use streamcomm::ReduceOp;
use streamcomm::cuda::CudaComm;
use streamcomm::cuda::cudarc::driver::{CudaContext, CudaStream, sys};

use crate::backend::{data, download, gpu_present, launch, launch_with, poisoned, upload};

/// The windows of these tests: small, so that a call is many chunks.
const WINDOW: usize = 64 << 10;

/// Chunks per all-reduce (at least 8, as the bound is stated for; 12
/// keeps the two-shot calls, whose chunks fill half a window, above its
/// threshold).
const CHUNKS: usize = 12;

/// Most driver calls of one 8-rank one-chunk all-reduce with batched
/// stream memory operations: the context made current, a copy, one batch
/// per flag round (two, the call's "done" word in the last), the kernel,
/// one capture query (6 measured in every stand-in configuration CI runs;
/// more when freeing what earlier calls left, which the test lets come
/// first).
const ALL_REDUCE_CALLS: u64 = 6;

/// Most driver calls of one 8-rank stream barrier, batched: as above
/// without the copy and the kernel (4 measured).
const BARRIER_CALLS: u64 = 4;

/// The same without batches (a driver that refuses them, or one without
/// stream memory operations, whose spin kernels launch one per operation),
/// one call per operation: per flag round a write to each of 7 peers and,
/// per peer, the awaited word, the wait and the reset (29), and the
/// "done" word alone, for the two batches: 57 more than batched.
const SINGLE_ALL_REDUCE_CALLS: u64 = ALL_REDUCE_CALLS + 57;
/// See [`SINGLE_ALL_REDUCE_CALLS`].
const SINGLE_BARRIER_CALLS: u64 = BARRIER_CALLS + 57;

/// Driver calls cudarc's event tracking adds to a one-chunk all-reduce:
/// the capture query that refuses a capture tracking would break, with
/// the context made current for it, and cudarc's own calls for the two
/// buffers' events (11 measured, batched or not; 12 when the call's queue
/// asked the driver again).
const TRACKED_CALLS: u64 = 11;

/// Set for the run whose driver refuses batched memory operations.
const SINGLE: &str = "SC_TRAFFIC_SINGLE";

#[test]
fn all_reduce_reads_at_most_two_n_minus_one_over_n_of_its_bytes_from_peers() {
    if !gpu_present() || !on_stand_in() {
        return;
    }
    for n in 2..=8 {
        launch(module_path!(), n, WINDOW, "traffic");
    }
    let single = [
        ("STREAMCOMM_STANDIN_REFUSE", "batch-memops".to_string()),
        (SINGLE, "1".to_string()),
    ];
    launch_with(module_path!(), 8, WINDOW, "traffic", &single);
    // No stream memory operations at all: the spin kernels (a 64-bit wait
    // on each flag slot), one launch per operation.
    let spin = [
        ("STREAMCOMM_STANDIN_REFUSE", "memops".to_string()),
        (SINGLE, "1".to_string()),
    ];
    launch_with(module_path!(), 8, WINDOW, "traffic", &spin);
}

/// True on the stand-in, which counts; a skip elsewhere.
fn on_stand_in() -> bool {
    if counters().is_some() {
        return true;
    }
    streamcomm_testkit::skip(
        &streamcomm_testkit::current_test(),
        "only the CPU stand-in counts the bytes read through IPC windows and the driver calls",
    );
    false
}

type Counters = unsafe extern "C" fn(*mut u64, usize) -> usize;
type Reset = unsafe extern "C" fn();

/// The stand-in's counters, if the loaded libcuda is the stand-in.
fn counters() -> Option<(Counters, Reset)> {
    let name = c"libcuda.so.1";
    // SAFETY: RTLD_NOLOAD only looks up a library already loaded.
    let lib = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    if lib.is_null() {
        return None;
    }
    // SAFETY: a live handle; the symbols' types are the stand-in's.
    unsafe {
        let read = libc::dlsym(lib, c"streamcomm_standin_counters".as_ptr());
        let reset = libc::dlsym(lib, c"streamcomm_standin_reset_counters".as_ptr());
        (!read.is_null() && !reset.is_null()).then(|| {
            (
                std::mem::transmute::<*mut libc::c_void, Counters>(read),
                std::mem::transmute::<*mut libc::c_void, Reset>(reset),
            )
        })
    }
}

/// Runs `f` with the counters cleared first; returns (driver calls, bytes
/// read through imported windows) during `f`.
fn counted(f: impl FnOnce()) -> (u64, u64) {
    let (read, reset) = counters().expect("the stand-in");
    // SAFETY: the stand-in's functions, as declared.
    unsafe { reset() };
    f();
    let mut out = [0u64; 2];
    // SAFETY: two writable slots.
    let n = unsafe { read(out.as_mut_ptr(), out.len()) };
    assert_eq!(n, 2);
    (out[0], out[1])
}

/// One rank of the tests above.
#[test]
#[ignore = "a rank of the tests above"]
fn child() {
    let seed = streamcomm_testkit::seed();
    let comm = Communicator::from_env().unwrap();
    let ctx = CudaContext::new(0).unwrap();
    let cuda = CudaComm::new(&comm, ctx.clone()).unwrap();
    assert!(cuda.uses_direct_path(), "{:?}", cuda.direct_path_off());
    let s = ctx.new_stream().unwrap();
    let (r, n) = (comm.rank(), comm.size());
    // Whole chunks of the plan the size takes, then an odd tail (two-shot
    // chunks fill half a window: the plan is pipelined over the halves).
    let chunk = if n > 2 {
        WINDOW / 2 / 256 * 256 / 4 * n / (n + 1) / (16 * n) * (16 * n)
    } else {
        WINDOW / 4 / 16 * 16
    };
    let count = CHUNKS * chunk + 1003;
    let bytes = 4 * count;
    let bound = 1.15 * 2.0 * (n - 1) as f64 / n as f64 * bytes as f64;
    let inputs: Vec<Vec<f64>> = (0..n).map(|q| data(seed ^ 7, q, count)).collect();
    let send = upload::<f32>(&s, &inputs[r]);
    let mut recv = poisoned::<f32>(&s, count);
    s.synchronize().unwrap();
    let (_, read) = counted(|| {
        cuda.all_reduce(&send, &mut recv, ReduceOp::Sum, &s)
            .unwrap();
        s.synchronize().unwrap();
    });
    check(&download(&s, &recv), &inputs, "out of place", r);
    println!(
        "rank {r}/{n}: all_reduce of {bytes} bytes ({CHUNKS}+ chunks of {} bytes) read {read} \
         bytes from peers, {:.3} x S; bound {:.3} x S",
        4 * chunk,
        read as f64 / bytes as f64,
        bound / bytes as f64
    );
    assert!(
        read as f64 <= bound,
        "rank {r}/{n}: {read} bytes read from peers, more than {bound:.0}"
    );
    // In place, with fresh data.
    let fresh: Vec<Vec<f64>> = (0..n).map(|q| data(seed ^ 11, q, count)).collect();
    let mut both = upload::<f32>(&s, &fresh[r]);
    let (_, read) = counted(|| {
        cuda.all_reduce_in_place(&mut both, ReduceOp::Sum, &s)
            .unwrap();
        s.synchronize().unwrap();
    });
    check(&download(&s, &both), &fresh, "in place", r);
    assert!(read as f64 <= bound, "in place: {read} bytes from peers");
    if n == 8 {
        tracked_driver_calls(&cuda, &s);
    }
    captured(&cuda, &s, count, seed);
    gatherv(&cuda, &s, seed);
    gather_scatter(&cuda, &s, seed);
    if n == 8 {
        driver_calls(&cuda, &s);
    }
    assert!(cuda.async_error().is_none(), "{:?}", cuda.async_error());
    streamcomm_testkit::child_ran();
}

/// An all_gatherv of uneven blocks (one of them empty, some of several
/// windows) by the direct path: every element checked, and each peer's
/// block read exactly once through its window.
fn gatherv(cuda: &CudaComm, s: &Arc<CudaStream>, seed: u64) {
    let (r, n) = (cuda.communicator().rank(), cuda.communicator().size());
    let counts: Vec<usize> = (0..n).map(|p| [0, 5000, 40_001, 100][p % 4]).collect();
    let displs: Vec<usize> = counts
        .iter()
        .scan(0, |at, &c| {
            let here = *at + 2;
            *at = here + c;
            Some(here)
        })
        .collect();
    let len = displs[n - 1] + counts[n - 1] + 2;
    let inputs: Vec<Vec<f64>> = (0..n).map(|q| data(seed ^ 0x6a7, q, counts[q])).collect();
    let padded: Vec<f64> = inputs[r].iter().copied().chain([0.0]).collect();
    let send = upload::<f32>(s, &padded);
    let mut recv = poisoned::<f32>(s, len);
    s.synchronize().unwrap();
    let (_, read) = counted(|| {
        cuda.all_gatherv(&send.slice(..counts[r]), &mut recv, &counts, &displs, s)
            .unwrap();
        s.synchronize().unwrap();
    });
    let got = download(s, &recv);
    let mut want = vec![crate::backend::POISON; len];
    for q in 0..n {
        want[displs[q]..displs[q] + counts[q]].copy_from_slice(&inputs[q]);
    }
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "rank {r}/{n}: all_gatherv element {i} of {len}");
    }
    let others: usize = (0..n).filter(|&q| q != r).map(|q| 4 * counts[q]).sum();
    println!("rank {r}/{n}: all_gatherv read {read} bytes from peers, their blocks hold {others}");
    assert_eq!(
        read as usize, others,
        "rank {r}/{n}: all_gatherv's reads from peers"
    );
}

/// A gather to the last rank and a scatter from rank 0, of blocks of
/// several windows' parts, by the direct path: every element checked, the
/// root of the gather reads each peer's block once through its window,
/// each rank of the scatter its own block once through the root's.
fn gather_scatter(cuda: &CudaComm, s: &Arc<CudaStream>, seed: u64) {
    let (r, n) = (cuda.communicator().rank(), cuda.communicator().size());
    let count = 3 * WINDOW / 4 / n + 77;
    let inputs: Vec<Vec<f64>> = (0..n).map(|q| data(seed ^ 0x6a8, q, count)).collect();
    let send = upload::<f32>(s, &inputs[r]);
    let mut all = poisoned::<f32>(s, n * count);
    s.synchronize().unwrap();
    let root = n - 1;
    let (_, read) = counted(|| {
        cuda.gather(&send, &mut all, root, s).unwrap();
        s.synchronize().unwrap();
    });
    let want_read = if r == root { 4 * count * (n - 1) } else { 0 };
    println!("rank {r}/{n}: gather read {read} bytes from peers, expected {want_read}");
    assert_eq!(
        read as usize, want_read,
        "rank {r}/{n}: gather's reads from peers"
    );
    if r == root {
        let got = download(s, &all);
        assert_eq!(got, inputs.concat(), "rank {r}/{n}: gathered blocks");
    }
    // Scatter: rank 0's blocks, of its own inputs.
    let blocks: Vec<f64> = (0..n * count)
        .map(|i| inputs[0][i % count] + (i / count) as f64)
        .collect();
    let src = upload::<f32>(s, &blocks);
    let mut mine = poisoned::<f32>(s, count);
    s.synchronize().unwrap();
    let (_, read) = counted(|| {
        cuda.scatter(&src, &mut mine, 0, s).unwrap();
        s.synchronize().unwrap();
    });
    let want_read = if r == 0 { 0 } else { 4 * count };
    println!("rank {r}/{n}: scatter read {read} bytes from peers, expected {want_read}");
    assert_eq!(
        read as usize, want_read,
        "rank {r}/{n}: scatter's reads from peers"
    );
    assert_eq!(
        download(s, &mine),
        blocks[r * count..][..count],
        "rank {r}/{n}: scattered block"
    );
}

/// Every element of `got` against the f64 sum of `inputs`.
fn check(got: &[f64], inputs: &[Vec<f64>], what: &str, r: usize) {
    for (i, g) in got.iter().enumerate() {
        let want: f64 = inputs.iter().map(|v| v[i]).sum();
        assert_eq!(*g, want, "rank {r}, {what}: element {i} of {}", got.len());
    }
}

/// The all-reduce captured in a graph, replayed twice with fresh inputs.
fn captured(cuda: &CudaComm, s: &Arc<CudaStream>, count: usize, seed: u64) {
    let (r, n) = (cuda.communicator().rank(), cuda.communicator().size());
    let mut send = poisoned::<f32>(s, count);
    let mut recv = poisoned::<f32>(s, count);
    s.synchronize().unwrap();
    // SAFETY: one stream; every access is ordered on it.
    unsafe { s.context().disable_event_tracking() };
    s.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .unwrap();
    cuda.all_reduce(&send, &mut recv, ReduceOp::Sum, s).unwrap();
    let graph = s
        .end_capture(sys::CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH)
        .unwrap()
        .expect("a graph");
    for replay in 0..2u64 {
        let inputs: Vec<Vec<f64>> = (0..n)
            .map(|q| data(seed ^ (100 + replay), q, count))
            .collect();
        s.memcpy_htod(
            &inputs[r].iter().map(|&x| x as f32).collect::<Vec<_>>(),
            &mut send,
        )
        .unwrap();
        graph.launch().unwrap();
        s.synchronize().unwrap();
        check(&download(s, &recv), &inputs, "captured and replayed", r);
    }
}

/// The driver calls cudarc's event tracking adds to a one-chunk
/// all-reduce (tracking is cudarc's default; this turns it off, as
/// `captured` after it does), held to [`TRACKED_CALLS`]: the same call
/// counted with tracking on, then off, in one process.
fn tracked_driver_calls(cuda: &CudaComm, s: &Arc<CudaStream>) {
    let r = cuda.communicator().rank();
    assert!(s.context().is_managing_stream_synchronization());
    let send = upload::<f32>(s, &[1.0; 1024]);
    let mut recv = poisoned::<f32>(s, 1024);
    cuda.all_reduce(&send, &mut recv, ReduceOp::Sum, s).unwrap();
    s.synchronize().unwrap();
    let (tracked, _) = counted(|| {
        cuda.all_reduce(&send, &mut recv, ReduceOp::Sum, s).unwrap();
    });
    s.synchronize().unwrap();
    // SAFETY: one stream; every access is ordered on it.
    unsafe { s.context().disable_event_tracking() };
    let (untracked, _) = counted(|| {
        cuda.all_reduce(&send, &mut recv, ReduceOp::Sum, s).unwrap();
    });
    s.synchronize().unwrap();
    check(&download(s, &recv), &vec![vec![1.0; 1024]; 8], "tracked", r);
    println!(
        "rank {r}/8: driver calls to enqueue a one-chunk all_reduce with cudarc's event \
         tracking on {tracked}, off {untracked}"
    );
    assert!(
        tracked <= untracked + TRACKED_CALLS,
        "all_reduce: {tracked} driver calls with tracking on, {untracked} off"
    );
}

/// The driver calls of one-chunk all-reduce and of a stream barrier, held
/// to ceilings (8 ranks, stream memory operations batched or not).
fn driver_calls(cuda: &CudaComm, s: &Arc<CudaStream>) {
    let r = cuda.communicator().rank();
    let send = upload::<f32>(s, &[1.0; 1024]);
    let mut recv = poisoned::<f32>(s, 1024);
    // Before counting: first-use allocations are not the steady state, and
    // what the graph of `captured` held comes back to be freed (by the
    // driver's thread, some time after the graph went): let it come, and a
    // call free it, so that the counted calls have nothing to free.
    cuda.all_reduce(&send, &mut recv, ReduceOp::Sum, s).unwrap();
    cuda.barrier(s).unwrap();
    s.synchronize().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    cuda.barrier(s).unwrap();
    s.synchronize().unwrap();
    let (calls, _) = counted(|| {
        cuda.all_reduce(&send, &mut recv, ReduceOp::Sum, s).unwrap();
    });
    let (barrier, _) = counted(|| cuda.barrier(s).unwrap());
    s.synchronize().unwrap();
    let single = std::env::var_os(SINGLE).is_some();
    println!(
        "rank {r}/8: driver calls to enqueue a one-chunk all_reduce {calls}, a stream barrier \
         {barrier} ({})",
        if single {
            "one per operation"
        } else {
            "batched"
        }
    );
    let (most, most_barrier) = if single {
        (SINGLE_ALL_REDUCE_CALLS, SINGLE_BARRIER_CALLS)
    } else {
        (ALL_REDUCE_CALLS, BARRIER_CALLS)
    };
    assert!(calls <= most, "all_reduce: {calls} driver calls");
    assert!(barrier <= most_barrier, "barrier: {barrier} driver calls");
}
