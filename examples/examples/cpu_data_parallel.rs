//! Data-parallel training on CPUs: four processes fit one linear model,
//! each on its own shard of the data, and all-reduce their gradients.
//!
//! ```text
//! cargo run --release --example cpu_data_parallel                  # 4 ranks
//! streamcomm-run -n 4 -- target/release/examples/cpu_data_parallel # any launcher works too
//! ```
//!
//! Every rank generates the same data set from a fixed seed (deterministic),
//! keeps its quarter, and at every step computes the gradient of the mean
//! squared error over its shard. The gradients (and the shard's loss, in
//! the same vector) are summed across ranks with one all-reduce that works
//! on the `Vec<f32>` itself: `HostBuffer::from_vec` moves the allocation in,
//! `all_reduce_in_place` runs on a host stream, `into_vec` hands the same
//! allocation back. Every rank then takes the same step, and prints the
//! loss over the whole data set, which falls.

use std::process::ExitCode;

use streamcomm::host::{HostBuffer, HostStream};
use streamcomm::{Communicator, ReduceOp};

/// Features of the model (plus a bias).
const FEATURES: usize = 16;
/// Samples in the whole data set, split evenly between the ranks.
const SAMPLES: usize = 8192;
const STEPS: usize = 60;
const LEARNING_RATE: f32 = 0.3;
const SEED: u64 = 2024;

fn main() -> ExitCode {
    streamcomm_examples::rank_or_launch(
        "cpu_data_parallel",
        4,
        "(processes, host backend)",
        run_rank,
    )
}

/// `w · x + bias` (the bias is the last weight).
fn predict(w: &[f32], x: &[f32; FEATURES]) -> f32 {
    x.iter().zip(w).map(|(a, b)| a * b).sum::<f32>() + w[FEATURES]
}

/// The sums over one shard of the squared error's gradient (one entry per
/// weight) and, in the last entry, of the squared error itself.
fn gradient(w: &[f32], xs: &[[f32; FEATURES]], ys: &[f32]) -> Vec<f32> {
    let mut g = vec![0f32; FEATURES + 2];
    for (x, &y) in xs.iter().zip(ys) {
        let err = predict(w, x) - y;
        for (gi, xi) in g.iter_mut().zip(x) {
            *gi += 2.0 * err * xi;
        }
        g[FEATURES] += 2.0 * err;
        g[FEATURES + 1] += err * err;
    }
    g
}

fn run_rank() -> Result<(), Box<dyn std::error::Error>> {
    let comm = Communicator::from_env()?;
    let stream = HostStream::new()?;
    let (rank, size) = (comm.rank(), comm.size());
    if !SAMPLES.is_multiple_of(size) {
        return Err(format!("{SAMPLES} samples do not split evenly between {size} ranks").into());
    }
    let (xs, ys) = streamcomm_examples::linear_data::<FEATURES>(SEED, SAMPLES);
    let shard = SAMPLES / size;
    let (xs, ys) = (&xs[rank * shard..][..shard], &ys[rank * shard..][..shard]);
    let mut w = vec![0f32; FEATURES + 1];
    for step in 0..=STEPS {
        let grads = gradient(&w, xs, ys);
        // Sum over the ranks, on the Vec's own memory: no copy in or out.
        let mut buf = HostBuffer::from_vec(grads);
        comm.all_reduce_in_place(&mut buf, ReduceOp::Sum, &stream)?;
        stream.synchronize()?;
        let grads = buf.into_vec()?;
        // (Without a stream: `comm.all_reduce_in_place_host(&mut grads, ReduceOp::Sum)`.)
        let loss = grads[FEATURES + 1] / SAMPLES as f32;
        if step % 10 == 0 {
            println!("step {step} loss {loss:.4e}");
        }
        for (wi, gi) in w.iter_mut().zip(&grads[..=FEATURES]) {
            *wi -= LEARNING_RATE * gi / SAMPLES as f32;
        }
    }
    Ok(())
}
