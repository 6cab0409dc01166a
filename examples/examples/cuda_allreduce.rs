//! Data-parallel all-reduce on CUDA with cudarc buffers: every rank fills a
//! device buffer with its "gradients", all-reduces it in place on its own
//! cudarc stream, checks every element of the sum and prints it.
//!
//! ```text
//! cargo run --release --example cuda_allreduce            # 4 ranks
//! cargo run --release --example cuda_allreduce -- 2       # 2 ranks
//! streamcomm-run -n 4 -- target/release/examples/cuda_allreduce
//! ```
//!
//! Started without a launcher environment, the program launches itself as
//! N ranks (processes) on this machine, rank `r` on CUDA device `r %
//! devices` (ranks as processes may share a GPU), and prints `OK` when every
//! rank's sum was right. Without a usable CUDA driver it prints `SKIPPED:`
//! and why, and exits successfully. `CUDA_VISIBLE_DEVICES` and the driver
//! decide which GPUs; the CPU stand-in libcuda (`gpu/standin`) on
//! `LD_LIBRARY_PATH` runs it without one (`examples/tests/cuda_allreduce.rs`).

use std::process::ExitCode;

use streamcomm::cuda::cudarc::driver::CudaContext;
use streamcomm::cuda::{self, CudaComm};
use streamcomm::{Communicator, ReduceOp};

/// Elements per rank.
const COUNT: usize = 1 << 20;

/// Rank `rank`'s element `i`: small integers, so every sum is exact in f32.
fn gradient(rank: usize, i: usize) -> f32 {
    ((rank + 1) * (i % 13 + 1)) as f32
}

fn main() -> ExitCode {
    if let Some(code) = streamcomm_examples::run_if_rank(run_rank) {
        return code;
    }
    let ranks = match streamcomm_examples::ranks_arg("cuda_allreduce", 4) {
        Ok(n) => n,
        Err(code) => return code,
    };
    // Probe before launching: cudarc's calls panic where no driver loads.
    match cuda::device_count() {
        Ok(n) => streamcomm_examples::launch_self(
            "cuda_allreduce",
            ranks,
            &format!("on {n} CUDA device(s)"),
        ),
        Err(e) => {
            println!("SKIPPED: {e}");
            ExitCode::SUCCESS
        }
    }
}

fn run_rank() -> Result<(), Box<dyn std::error::Error>> {
    let comm = Communicator::from_env()?;
    let (rank, size) = (comm.rank(), comm.size());
    let devices = cuda::device_count()?;

    // The context a cudarc program holds anyway; the communicator binds to it.
    let ctx = CudaContext::new(rank % devices)?;
    let cuda = CudaComm::new(&comm, ctx.clone())?;
    let stream = ctx.new_stream()?;

    // This rank's gradients, on the device.
    let mine: Vec<f32> = (0..COUNT).map(|i| gradient(rank, i)).collect();
    let mut grads = stream.clone_htod(&mine)?;

    // Sum them over every rank, in place, on the stream: enqueued, returns at once.
    cuda.all_reduce_in_place(&mut grads, ReduceOp::Sum, &stream)?;
    let summed = stream.clone_dtoh(&grads)?; // waits for the stream
    if let Some(e) = cuda.async_error() {
        return Err(e.into());
    }

    // Every element against a reference in f64.
    for (i, &got) in summed.iter().enumerate() {
        let want: f64 = (0..size).map(|r| f64::from(gradient(r, i))).sum();
        if f64::from(got) != want {
            return Err(format!("rank {rank}: element {i} is {got}, want {want}").into());
        }
    }
    let total: f64 = summed.iter().map(|&x| f64::from(x)).sum();
    let want: f64 = (0..COUNT)
        .map(|i| (0..size).map(|r| f64::from(gradient(r, i))).sum::<f64>())
        .sum();
    if rank == 0 {
        let path = if cuda.uses_direct_path() {
            "direct path: device copies and reductions over CUDA IPC windows"
        } else {
            "staged path: through pinned host memory"
        };
        println!(
            "device {} ({}); {path}",
            cuda.device_ordinal(),
            cuda.device_name()
        );
    }
    println!(
        "rank {rank}/{size}: all_reduce of {COUNT} f32 checked, sum of all elements {total} \
         (want {want})"
    );
    comm.barrier_host()?;
    Ok(())
}
