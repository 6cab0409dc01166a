//! Quick start: four local ranks all-reduce random data and run barriers.
//!
//! ```text
//! cargo run --release --example quickstart            # 4 ranks
//! cargo run --release --example quickstart -- 8       # 8 ranks
//! streamcomm-run -n 4 -- target/release/examples/quickstart   # any launcher works too
//! ```
//!
//! Started without a launcher environment, the program launches itself as N
//! ranks (separate processes, like torchrun) and waits for them. Each rank
//! joins the communicator, all-gathers everyone's input (to compute the
//! expected result independently, in f64), all-reduces, checks every element,
//! runs host and stream barriers, and reports. The job prints `OK` when every
//! rank agrees.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use rand::Rng;
use streamcomm::host::{HostBuffer, HostStream};
use streamcomm::{Communicator, ReduceOp};

mod gpu;

const COUNT: usize = 1 << 20;
const BARRIERS: u32 = 2000;

fn main() -> ExitCode {
    streamcomm_examples::rank_or_launch("quickstart", 4, "(processes, host backend)", run_rank)
}

fn run_rank() -> Result<(), Box<dyn std::error::Error>> {
    let comm = Communicator::from_env()?;
    // The GPU when one is usable (device rank % devices),
    // else the host backend; the communicator is the same either way.
    match gpu::open(&comm) {
        Ok(cuda) => gpu::run_rank(&cuda),
        Err(why) => {
            if comm.rank() == 0 {
                println!("backend: host (CPU streams over shared memory); no GPU used: {why}");
            }
            run_host_rank(&comm)
        }
    }
}

fn run_host_rank(comm: &Communicator) -> Result<(), Box<dyn std::error::Error>> {
    let (rank, size) = (comm.rank(), comm.size());
    let stream = HostStream::new()?;

    // Fresh random input on every rank.
    let mut rng = rand::thread_rng();
    let input: Vec<f32> = (0..COUNT).map(|_| rng.gen_range(-1.0..1.0)).collect();
    let send = HostBuffer::from_slice(&input);
    let mut everyone = HostBuffer::<f32>::zeroed(COUNT * size);
    let mut result = HostBuffer::<f32>::zeroed(COUNT);
    result.fill_bytes(0xff); // poison: NaN everywhere until written

    // Enqueue: gather all inputs (for the reference), then the all-reduce.
    comm.all_gather(&send, &mut everyone, &stream)?;
    stream.synchronize()?;
    let t0 = Instant::now();
    comm.all_reduce(&send, &mut result, ReduceOp::Sum, &stream)?;
    stream.synchronize()?;
    let all_reduce_time = t0.elapsed();

    // Reference in f64, independent of the library's arithmetic.
    let worst = check_sum(rank, size, &everyone.to_vec(), &result.to_vec())?;

    let (host_barrier, stream_barrier) =
        time_barriers(comm, || comm.barrier(&stream), || stream.synchronize())?;

    report(
        rank,
        size,
        all_reduce_time,
        worst,
        host_barrier,
        stream_barrier,
    );
    Ok(())
}

/// Mean time of a barrier blocking the thread, then of one enqueued on a
/// stream (`enqueue`, then `sync` once at the end), over `BARRIERS` each.
fn time_barriers<E1, E2>(
    comm: &Communicator,
    mut enqueue: impl FnMut() -> Result<(), E1>,
    sync: impl FnOnce() -> Result<(), E2>,
) -> Result<(Duration, Duration), Box<dyn std::error::Error>>
where
    E1: std::error::Error + 'static,
    E2: std::error::Error + 'static,
{
    comm.barrier_host()?;
    let t0 = Instant::now();
    for _ in 0..BARRIERS {
        comm.barrier_host()?;
    }
    let host = t0.elapsed() / BARRIERS;
    let t0 = Instant::now();
    for _ in 0..BARRIERS {
        enqueue()?;
    }
    sync()?;
    Ok((host, t0.elapsed() / BARRIERS))
}

/// One line per rank.
fn report(
    rank: usize,
    size: usize,
    all_reduce_time: Duration,
    worst: f64,
    host_barrier: Duration,
    stream_barrier: Duration,
) {
    let mb = (COUNT * 4) as f64 / 1e6;
    println!(
        "rank {rank}/{size}: all_reduce of {COUNT} f32 ({mb:.1} MB) in {} (max error {worst:.1e}); barrier_host {} avg, stream barrier {} avg over {BARRIERS}",
        fmt_duration(all_reduce_time),
        fmt_duration(host_barrier),
        fmt_duration(stream_barrier),
    );
}

/// Largest error of `got` against the f64 sum of `everyone`'s blocks.
fn check_sum(rank: usize, size: usize, everyone: &[f32], got: &[f32]) -> Result<f64, String> {
    let mut worst = 0.0f64;
    for (i, &g) in got.iter().enumerate() {
        let want: f64 = (0..size).map(|r| everyone[r * COUNT + i] as f64).sum();
        let err = (g as f64 - want).abs();
        if err.is_nan() || err > 1e-5 * size as f64 {
            return Err(format!("rank {rank}: element {i} is {g}, expected {want}"));
        }
        worst = worst.max(err);
    }
    Ok(worst)
}

fn fmt_duration(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us >= 1000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{us:.2} us")
    }
}
