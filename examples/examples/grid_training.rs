//! Tensor × data parallel training on CPUs, and going on after a rank dies.
//!
//! ```text
//! cargo run --release --example grid_training                       # 8 ranks: a 2 x 4 grid
//! streamcomm-run -n 8 -- target/release/examples/grid_training      # the same, launched
//! streamcomm-run --keep-going -n 8 -- target/release/examples/grid_training --kill 5@20
//! ```
//!
//! The ranks form a grid of `TP` tensor-parallel ranks by `size / TP`
//! data-parallel replicas, with two [`Communicator::split`]s of the world:
//! a tensor group (one replica's `TP` ranks) and a data group (the ranks
//! that hold the same slice of the model). The model is linear: each rank of
//! a tensor group holds one slice of the weights, computes its slice's part
//! of every prediction, and the tensor group all-reduces the parts. Each
//! replica trains on its own shard of the samples, and the data group
//! all-reduces the gradients of its slice. Every rank prints the loss over
//! the whole data set, which falls, the same on every rank.
//!
//! With `--kill R@S`, rank R dies (SIGKILL) at step S. Under `streamcomm-run
//! --keep-going` the others run on: their next operation fails, every
//! survivor calls [`Communicator::shrink`], and they form a smaller grid
//! from the ranks alive (a rank left over sits out). Each slice of the
//! weights survives on some replica, which broadcasts it to the new grid;
//! training goes on from the step it reached.

use std::process::ExitCode;

use streamcomm::{Communicator, ReduceOp};

/// Tensor-parallel ranks per replica.
const TP: usize = 2;
/// Features of the model (split between the `TP` ranks), plus a bias.
const FEATURES: usize = 32;
const SLICE: usize = FEATURES / TP;
/// Samples in the whole data set: shards evenly for 1 to 4 replicas, and 6.
const SAMPLES: usize = 8184;
const STEPS: usize = 60;
const LEARNING_RATE: f32 = 0.3;
const SEED: u64 = 2025;

fn main() -> ExitCode {
    streamcomm_examples::rank_or_launch(
        "grid_training",
        8,
        "(processes, a tensor x data grid)",
        run_rank,
    )
}

/// `--kill R@S`: the rank to kill and the step to kill it at.
fn kill_arg() -> Result<Option<(usize, usize)>, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(i) = args.iter().position(|a| a == "--kill") else {
        return Ok(None);
    };
    let spec = args.get(i + 1).ok_or("--kill needs R@S")?;
    let (r, s) = spec.split_once('@').ok_or("--kill needs R@S")?;
    let parse = |v: &str| {
        v.parse::<usize>()
            .map_err(|_| format!("--kill {spec}: not R@S"))
    };
    Ok(Some((parse(r)?, parse(s)?)))
}

/// This rank's place: the grid's groups and which slice and shard it has.
struct Grid {
    tensor: Communicator,
    data: Communicator,
    /// This rank's slice of the weights (its rank in the tensor group).
    slice: usize,
    /// This replica's shard of the samples, and the number of replicas.
    shard: usize,
    replicas: usize,
}

/// Splits `world` into a grid of `TP` × `world.size() / TP` (rank `r` holds
/// slice `r % TP` of replica `r / TP`); `None` for a rank left over.
fn grid(world: &Communicator) -> Result<Option<Grid>, streamcomm::Error> {
    let (rank, replicas) = (world.rank(), world.size() / TP);
    let used = rank < replicas * TP;
    let (slice, shard) = (rank % TP, rank / TP);
    // Both splits are collective over the world: a rank left over joins none.
    let tensor = world.split(used.then_some(shard as u32), rank as i32)?;
    let data = world.split(used.then_some(slice as u32), rank as i32)?;
    Ok(match (tensor, data) {
        (Some(tensor), Some(data)) => Some(Grid {
            tensor,
            data,
            slice,
            shard,
            replicas,
        }),
        _ => None,
    })
}

/// The model's state every rank of a grid keeps: its slice of the weights,
/// the bias, and the step reached.
struct State {
    weights: Vec<f32>,
    bias: f32,
    step: usize,
}

/// One training step on `g`; the loss over the whole data set.
fn step(
    g: &Grid,
    s: &mut State,
    xs: &[[f32; FEATURES]],
    ys: &[f32],
) -> Result<f32, streamcomm::Error> {
    let n = SAMPLES / g.replicas;
    let (xs, ys) = (&xs[g.shard * n..][..n], &ys[g.shard * n..][..n]);
    let cols = g.slice * SLICE..(g.slice + 1) * SLICE;
    // Forward: this slice's part of every prediction, summed over the tensor group.
    let mut pred: Vec<f32> = xs
        .iter()
        .map(|x| {
            x[cols.clone()]
                .iter()
                .zip(&s.weights)
                .map(|(a, b)| a * b)
                .sum()
        })
        .collect();
    g.tensor
        .all_reduce_in_place_host(&mut pred, ReduceOp::Sum)?;
    // Backward: this slice's gradient, the bias's, and the squared error,
    // summed over the replicas by the data group.
    let mut grads = vec![0f32; SLICE + 2];
    for ((x, y), p) in xs.iter().zip(ys).zip(&pred) {
        let err = p + s.bias - y;
        for (gi, xi) in grads.iter_mut().zip(&x[cols.clone()]) {
            *gi += 2.0 * err * xi;
        }
        grads[SLICE] += 2.0 * err;
        grads[SLICE + 1] += err * err;
    }
    g.data.all_reduce_in_place_host(&mut grads, ReduceOp::Sum)?;
    let total = (n * g.replicas) as f32;
    for (w, gi) in s.weights.iter_mut().zip(&grads) {
        *w -= LEARNING_RATE * gi / total;
    }
    s.bias -= LEARNING_RATE * grads[SLICE] / total;
    Ok(grads[SLICE + 1] / total)
}

/// After a shrink: every rank of `world` (the survivors) learns the state,
/// each slice of the weights from the first survivor that held it.
/// `held`: the slice this rank held, if it was in the grid.
fn reshare(
    world: &Communicator,
    held: Option<usize>,
    s: &mut State,
) -> Result<Vec<Vec<f32>>, Box<dyn std::error::Error>> {
    // Which slice each survivor holds (0: none), summed into one table.
    let mut table = vec![0u32; world.size()];
    table[world.rank()] = held.map_or(0, |h| h as u32 + 1);
    world.all_reduce_in_place_host(&mut table, ReduceOp::Sum)?;
    let mut slices = Vec::with_capacity(TP);
    for slice in 0..TP {
        let root = table
            .iter()
            .position(|&h| h == slice as u32 + 1)
            .ok_or_else(|| format!("no survivor holds slice {slice} of the weights"))?;
        let mut w = match held {
            Some(h) if h == slice => s.weights.clone(),
            _ => vec![0f32; SLICE],
        };
        world.broadcast_host(&mut w, root)?;
        slices.push(w);
    }
    // The bias and the step, from the same first holder of slice 0.
    let root = table.iter().position(|&h| h == 1).unwrap_or(0);
    let mut rest = [s.bias, s.step as f32];
    world.broadcast_host(&mut rest, root)?;
    (s.bias, s.step) = (rest[0], rest[1] as usize);
    Ok(slices)
}

fn run_rank() -> Result<(), Box<dyn std::error::Error>> {
    let kill = kill_arg()?;
    let mut world = Communicator::from_env()?;
    let me = world.rank();
    let (xs, ys) = streamcomm_examples::linear_data::<FEATURES>(SEED, SAMPLES);
    let mut grid_now = grid(&world)?;
    if let Some(g) = &grid_now
        && world.rank() == 0
    {
        println!("grid {TP} x {} of {} ranks", g.replicas, world.size());
    }
    let mut state = State {
        weights: vec![0f32; SLICE],
        bias: 0.0,
        step: 0,
    };
    while state.step <= STEPS {
        if kill == Some((me, state.step)) {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
        let outcome = match &grid_now {
            Some(g) => step(g, &mut state, &xs, &ys),
            // Left over: wait on the world for the next failure, if any.
            None => world.barrier_host().map(|()| f32::NAN),
        };
        match outcome {
            Ok(loss) if loss.is_nan() => return Ok(()),
            Ok(loss) => {
                if state.step.is_multiple_of(10) {
                    println!("step {} loss {loss:.4e}", state.step);
                }
                state.step += 1;
            }
            Err(e) => {
                // A rank died: the survivors shrink and form a new grid.
                // Aborting the groups wakes the ranks still waiting in them.
                let held = grid_now.as_ref().map(|g| g.slice);
                if let Some(g) = &grid_now {
                    g.tensor.abort();
                    g.data.abort();
                }
                drop(grid_now);
                world = world.shrink()?;
                let slices = reshare(&world, held, &mut state)?;
                grid_now = grid(&world)?;
                if let Some(g) = &grid_now {
                    state.weights = slices[g.slice].clone();
                }
                if world.rank() == 0 {
                    println!(
                        "recovered at step {} ({e}): {} ranks alive, grid {TP} x {}",
                        state.step,
                        world.size(),
                        world.size() / TP
                    );
                }
            }
        }
    }
    // A rank left over waits for the grid's last step, then all leave.
    world.barrier_host()?;
    Ok(())
}
