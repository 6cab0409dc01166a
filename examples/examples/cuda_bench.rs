//! CUDA backend benchmark: ranks as processes (default 2), one per GPU
//! where the host has a GPU for each, else all on GPU 0; each with its own
//! stream (one rank per GPU per process: see `streamcomm::cuda`).
//!
//! ```text
//! cargo run --release --example cuda_bench [RANKS [MAX_BYTES]]
//! STREAMCOMM_CUDA_WINDOW=0 cargo run --release --example cuda_bench 2 16777216   # staged path
//! ```
//!
//! Started without a launcher environment, the program launches itself as
//! RANKS local processes (as the quick start does). The communicator takes
//! the direct path (device copies and reductions over IPC-mapped windows)
//! unless `STREAMCOMM_CUDA_WINDOW=0` selects the staged path (through
//! pinned host memory and the host backend); the header and the JSON say
//! which ran, and which device (so which driver) answered.
//!
//! Measures, in one run: a device-to-device copy of 256 MiB (the yardstick,
//! timed by rank 0 alone while the others wait, so that ranks sharing a GPU
//! do not split it), the stream-ordered barrier (p50/p99/p99.9/max of one
//! barrier, timed on the host around enqueue + synchronize, plain and as a
//! replayed CUDA graph), all_reduce (f32 sum, out of place) from 8 B to
//! MAX_BYTES (default 256 MiB), and all_reduce captured once in a CUDA graph
//! and replayed (8 B and 256 KiB, sizes of the sweep), each with a check of
//! every element of the last iteration. Prints a table; writes
//! `$OUT/cuda_bench.json` when `OUT` is set. Without a GPU it says so and
//! exits successfully.
//!
//! Bytes are counted as nccl-tests counts them: `algbw` is the buffer's
//! size over the time of one call, `busbw` is `algbw * 2 (n - 1) / n`; the
//! yardstick, too, is the bytes copied over the time (each byte once, not
//! read plus write). `gpu_bench` counts its "GB/s" the same way.
//!
//! Rank `r` runs on GPU `r` where the host has at least RANKS GPUs (what
//! NCCL programs do, and what `scripts/torch-nccl-baseline.py` measures
//! PyTorch's NCCL on, in the same GPU check): then this measures the
//! interconnect. With fewer GPUs every rank runs on GPU 0: ranks sharing one
//! GPU take turns on it, so this measures context switching on one GPU, not
//! an interconnect (the header says which).

use std::sync::Arc;
use std::time::Instant;

use streamcomm::cuda::CudaComm;
use streamcomm::cuda::cudarc::driver::{CudaContext, CudaGraph, CudaStream, sys};
use streamcomm::launch::detect_from_process_env;
use streamcomm::{Communicator, ReduceOp};
use streamcomm_run::local::LocalLauncher;

const BARRIER_ITERS: usize = 2000;

fn main() {
    let ranks: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2);
    let max_bytes: usize = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(256 << 20);
    if detect_from_process_env().is_ok() {
        if let Err(e) = run_rank(max_bytes) {
            eprintln!("cuda_bench failed: {e}");
            std::process::exit(1);
        }
        return;
    }
    if !streamcomm_gpu::Device::count().is_ok_and(|n| n > 0) {
        println!("skipped: no usable GPU here");
        return;
    }
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("cuda_bench: cannot find my own executable: {e}");
            std::process::exit(1);
        }
    };
    let launched = LocalLauncher::new(ranks, exe)
        .args([ranks.to_string(), max_bytes.to_string()])
        .run();
    match launched {
        Ok(outcome) if outcome.exit_code() == 0 => {}
        Ok(outcome) => {
            eprintln!("cuda_bench failed: {outcome:?}");
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("cuda_bench could not launch its ranks: {e}");
            std::process::exit(1);
        }
    }
}

/// One rank (a process); rank 0 writes the JSON.
fn run_rank(max_bytes: usize) -> Res<()> {
    let comm = Communicator::from_env()?;
    let lines = rank(&comm, max_bytes)?;
    if let (Some(lines), Some(out)) = (lines, std::env::var_os("OUT")) {
        let json = format!("[\n  {}\n]\n", lines.join(",\n  "));
        let path = std::path::Path::new(&out).join("cuda_bench.json");
        std::fs::write(&path, json).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn percentiles(mut v: Vec<f64>) -> [f64; 4] {
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    [at(0.5), at(0.99), at(0.999), v[v.len() - 1]]
}

/// One rank; rank 0 returns the JSON lines.
fn rank(comm: &Communicator, max_bytes: usize) -> Res<Option<Vec<String>>> {
    let (r, n) = (comm.rank(), comm.size());
    // One GPU per rank where there are enough (the launcher starts every
    // rank on this host, so the rank is the local rank).
    let gpus = streamcomm_gpu::Device::count()?;
    let ordinal = if gpus >= n { r } else { 0 };
    let cuda = CudaComm::on_device(comm, ordinal)?;
    let path = if cuda.uses_direct_path() {
        "direct"
    } else {
        "staged"
    };
    let ctx = CudaContext::new(ordinal)?;
    let s: Arc<CudaStream> = ctx.new_stream()?;
    let mut json = Vec::new();
    comm.barrier_host()?;

    // Yardstick: device-to-device copy bandwidth, bytes copied per second,
    // timed by rank 0 alone (ranks sharing the GPU would split it).
    let big = 256usize << 20;
    let d2d = if r == 0 { copy_gbs(&s, big)? } else { 0.0 };
    comm.barrier_host()?;

    // Barrier, plain.
    let plain = each_call_us(&s, || Ok(cuda.barrier(&s)?))?;
    // Barrier, captured once, replayed.
    let graph = captured(&s, || Ok(cuda.barrier(&s)?))?;
    let replayed = each_call_us(&s, || Ok(graph.launch()?))?;
    drop(graph);
    if r == 0 {
        println!(
            "CUDA backend, {path} path, {n} ranks (processes) on {}; d2d copy {d2d:.1} GB/s (256 MiB, rank 0 alone)",
            cuda.device_name()
        );
        if n > 1 && gpus >= n {
            println!("{ONE_PER_GPU}");
            json.push(format!(
                r#"{{"what": "note", "device": "{}", "ranks": {n}, "note": "{ONE_PER_GPU}"}}"#,
                cuda.device_name()
            ));
        } else if n > 1 {
            println!("{ONE_GPU}");
            json.push(format!(
                r#"{{"what": "note", "device": "{}", "ranks": {n}, "note": "{ONE_GPU}"}}"#,
                cuda.device_name()
            ));
        }
        println!("{BYTES}");
        println!(
            "{:<22} {:>9} {:>9} {:>9} {:>9}",
            "barrier (us)", "p50", "p99", "p99.9", "max"
        );
        for (name, v) in [
            ("stream barrier", plain),
            ("graph-replayed barrier", replayed),
        ] {
            let [p50, p99, p999, max] = percentiles(v);
            println!("{name:<22} {p50:>9.2} {p99:>9.2} {p999:>9.2} {max:>9.2}");
            json.push(format!(
                r#"{{"what": "{name}", "device": "{}", "path": "{path}", "ranks": {n}, "p50_us": {p50:.3}, "p99_us": {p99:.3}, "p999_us": {p999:.3}, "max_us": {max:.3}}}"#,
                cuda.device_name()
            ));
        }
        Row::print_header("");
    }

    // Each all_reduce measurement: rank 0 prints it and keeps its JSON.
    let mut record = |what, bytes, secs, wrong| {
        let row = Row {
            what,
            path,
            n,
            bytes,
            secs,
            d2d,
            wrong,
        };
        row.record(r, &cuda, &mut json)
    };

    // all_reduce sweep, 8 B .. 256 MiB, x8.
    let mut bytes = 8usize;
    while bytes <= max_bytes.min(big) {
        let count = bytes / 4;
        let iters = if bytes >= 16 << 20 { 5 } else { 20 };
        let send = s.clone_htod(&SWEEP.input(r, count))?;
        let mut recv = s.clone_htod(&vec![f32::NAN; count])?;
        let secs = seconds_per_call(&s, iters, || {
            Ok(cuda.all_reduce(&send, &mut recv, ReduceOp::Sum, &s)?)
        })?;
        let wrong = SWEEP.wrong(&s.clone_dtoh(&recv)?, n);
        record("all_reduce", bytes, secs, wrong)?;
        bytes *= 8;
    }

    // all_reduce captured once in a CUDA graph and replayed. Inside a graph
    // cudarc's per-buffer events would be captured too: the buffers below
    // are made without them, and order is the one stream's alone.
    // SAFETY: one stream per rank; every access to these buffers is
    // ordered on it.
    unsafe { ctx.disable_event_tracking() };
    if r == 0 {
        Row::print_header("   graph-replayed all_reduce");
    }
    for bytes in [8usize, 256 << 10] {
        if bytes > max_bytes {
            continue;
        }
        let count = bytes / 4;
        let iters = 200;
        let send = s.clone_htod(&REPLAYED.input(r, count))?;
        let mut recv = s.clone_htod(&vec![f32::NAN; count])?;
        s.synchronize()?;
        let graph = captured(&s, || {
            Ok(cuda.all_reduce(&send, &mut recv, ReduceOp::Sum, &s)?)
        })?;
        let secs = seconds_per_call(&s, iters, || Ok(graph.launch()?))?;
        let got = s.clone_dtoh(&recv)?;
        drop(graph);
        let wrong = REPLAYED.wrong(&got, n);
        record("graph-replayed all_reduce", bytes, secs, wrong)?;
    }
    comm.barrier_host()?;
    Ok((r == 0).then_some(json))
}

/// The all-reduce test data: rank `r`'s element `i` is `(a·i + b·r) mod m`,
/// small integers whose sum over the ranks is exact in f32.
#[derive(Clone, Copy)]
struct Pattern {
    a: usize,
    b: usize,
    m: usize,
}

/// The sweep's data and the graph-replayed all-reduce's (another pattern,
/// so that a replay of stale data shows).
const SWEEP: Pattern = Pattern { a: 7, b: 3, m: 13 };
const REPLAYED: Pattern = Pattern { a: 5, b: 11, m: 17 };

impl Pattern {
    /// Rank `r`'s `count` elements.
    fn input(self, r: usize, count: usize) -> Vec<f32> {
        (0..count).map(|i| self.input_at(i, r) as f32).collect()
    }

    /// Elements of an all-reduce (sum over `n` ranks) that are wrong.
    fn wrong(self, got: &[f32], n: usize) -> usize {
        got.iter()
            .enumerate()
            .filter(|&(i, &g)| {
                let want: f64 = (0..n).map(|q| self.input_at(i, q)).sum();
                f64::from(g) != want
            })
            .count()
    }

    /// Element `i` of rank `r`.
    fn input_at(self, i: usize, r: usize) -> f64 {
        ((i * self.a + r * self.b) % self.m) as f64
    }
}

/// One all-reduce measurement, as a table row and a JSON record.
struct Row<'a> {
    what: &'a str,
    path: &'a str,
    n: usize,
    bytes: usize,
    secs: f64,
    d2d: f64,
    wrong: usize,
}

impl Row<'_> {
    /// Prints the table's column names, then `title`.
    fn print_header(title: &str) {
        println!(
            "{:>12} {:>10} {:>10} {:>10} {:>10} {:>7}{title}",
            "bytes", "time_us", "algbw", "busbw", "/d2d", "wrong"
        );
    }

    /// Rank `r`'s row: rank 0 prints it and adds its JSON record to
    /// `json`. An error where `cuda` reports one, or where elements were
    /// wrong.
    fn record(&self, r: usize, cuda: &CudaComm, json: &mut Vec<String>) -> Res<()> {
        if let Some(e) = cuda.async_error() {
            return Err(e.into());
        }
        if r == 0 {
            json.push(self.report());
        }
        if self.wrong > 0 {
            let (what, wrong, bytes) = (self.what, self.wrong, self.bytes);
            return Err(format!("rank {r}: {what} of {bytes} B: {wrong} wrong elements").into());
        }
        Ok(())
    }

    /// Prints the row and returns its JSON record.
    fn report(&self) -> String {
        let (what, path, n, bytes) = (self.what, self.path, self.n, self.bytes);
        let (secs, d2d, wrong) = (self.secs, self.d2d, self.wrong);
        let algbw = bytes as f64 / secs / 1e9;
        let busbw = algbw * 2.0 * (n - 1) as f64 / n as f64;
        println!(
            "{bytes:>12} {:>10.1} {algbw:>10.3} {busbw:>10.3} {:>10.3} {wrong:>7}",
            secs * 1e6,
            busbw / d2d
        );
        format!(
            r#"{{"what": "{what}", "path": "{path}", "ranks": {n}, "bytes": {bytes}, "time_us": {:.3}, "algbw_gbs": {algbw:.4}, "busbw_gbs": {busbw:.4}, "d2d_gbs": {d2d:.2}, "wrong": {wrong}}}"#,
            secs * 1e6
        )
    }
}

/// What a run of several ranks on one GPU measures.
const ONE_GPU: &str = "every rank on GPU 0: ranks sharing one GPU take turns on it, so this \
    measures context switching on one GPU, not an interconnect";

/// What a run of one rank per GPU measures.
const ONE_PER_GPU: &str = "rank r on GPU r: this measures the interconnect between the GPUs";

/// How bytes are counted.
const BYTES: &str = "GB/s as nccl-tests counts them: algbw = bytes / time, busbw = algbw * \
    2(n-1)/n; d2d = bytes copied / time (each byte once)";

/// Device-to-device copy bandwidth of `bytes`-byte buffers: bytes copied
/// per second, in GB/s (the mean of 5 copies after one warm-up).
fn copy_gbs(s: &Arc<CudaStream>, bytes: usize) -> Res<f64> {
    let a = s.alloc_zeros::<u8>(bytes)?;
    let mut b = s.alloc_zeros::<u8>(bytes)?;
    let secs = seconds_per_call(s, 5, || Ok(s.memcpy_dtod(&a, &mut b)?))?;
    Ok(bytes as f64 / secs / 1e9)
}

/// Mean seconds per call of `call`: one untimed call, then `iters` calls
/// enqueued back to back on `s` and timed to one synchronize.
fn seconds_per_call(s: &CudaStream, iters: usize, mut call: impl FnMut() -> Res<()>) -> Res<f64> {
    call()?;
    s.synchronize()?;
    let t = Instant::now();
    for _ in 0..iters {
        call()?;
    }
    s.synchronize()?;
    Ok(t.elapsed().as_secs_f64() / iters as f64)
}

/// What `call` enqueues on `s`, captured into a CUDA graph to replay.
fn captured(s: &Arc<CudaStream>, call: impl FnOnce() -> Res<()>) -> Res<CudaGraph> {
    s.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
    call()?;
    let graph = s
        .end_capture(
            sys::CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH,
        )?
        .ok_or("empty capture")?;
    Ok(graph)
}

/// Microseconds of each of `BARRIER_ITERS` calls of `call`, each
/// synchronized on `s` on its own (after 100 untimed ones).
fn each_call_us(s: &CudaStream, mut call: impl FnMut() -> Res<()>) -> Res<Vec<f64>> {
    let mut times = Vec::with_capacity(BARRIER_ITERS);
    for i in 0..BARRIER_ITERS + 100 {
        let t = Instant::now();
        call()?;
        s.synchronize()?;
        if i >= 100 {
            times.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    Ok(times)
}
