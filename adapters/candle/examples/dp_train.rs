//! Data-parallel training in candle: every rank holds the same small model,
//! takes its share of every batch, and the ranks average their gradients
//! with one all-reduce per bucket, as PyTorch's DDP does.
//!
//! ```text
//! cargo build --release -p streamcomm-candle --example dp_train
//! streamcomm-run -n 4 -- target/release/examples/dp_train            # 4 ranks
//! target/release/examples/dp_train                                   # 1 rank, alone
//! streamcomm-run -n 4 -- target/release/examples/dp_train --adamw --steps 200
//! ```
//!
//! The model is an MLP (16 inputs, 64 hidden units with tanh, 4 outputs)
//! made with `candle_nn` (a `VarMap` and two `linear` layers). Its starting
//! weights come from a seeded generator of the example's own, not from
//! candle's, so every rank and every world size starts from the same
//! values. The data are made by the example too: a fixed "teacher" function
//! of the seed, plus noise, evaluated at fresh random inputs every step.
//!
//! Each step every rank makes the same global batch of `--batch` rows and
//! keeps rows `[r·B/n, (r+1)·B/n)`; its loss is the mean squared error over
//! those rows. After `loss.backward()`, the gradients are walked in a fixed
//! order (the model's last layer first, the order in which backward makes
//! them and DDP fills its buckets) and packed into flat buckets of at most
//! `--bucket-bytes` each (a gradient is never split: one larger than that
//! makes a bucket of its own, as in DDP). Each bucket is averaged over the
//! ranks with one `all_reduce_in_place(.., ReduceOp::Avg)` on its own
//! storage, and unpacked; then the optimizer (candle_nn's SGD, or AdamW with
//! `--adamw`) steps with the averaged gradients. (DDP starts a bucket's
//! all-reduce while backward still computes the earlier layers' gradients;
//! candle's `backward` hands over all of them at its end, so here the
//! buckets go one after another after it.) As every rank's shard has
//! the same number of rows, the average of the shards' gradients is the
//! gradient of the whole batch's loss: `n` ranks train the same model as
//! one rank on the whole batch, up to rounding. At world size 1 nothing is
//! communicated.
//!
//! Rank 0 prints `step <k> loss <L>` every step, `L` the whole batch's loss
//! (the ranks' losses averaged with one more all-reduce), then the number of
//! buckets per step and the time per step. At the end the ranks check that
//! their weights are identical, and `--dump-weights PATH` has rank 0 write
//! every final weight as text lines `name index value`.
//!
//! Options: `--steps N` (50), `--batch B` (64; a multiple of the number of
//! ranks), `--lr X` (0.1 for SGD, 0.01 for AdamW), `--seed S` (2024),
//! `--bucket-bytes N` (25 MiB, DDP's default), `--adamw`, `--f64` (weights,
//! gradients and all-reduces in f64 instead of f32: for exactness checks
//! of AdamW, which divides every gradient by its own running magnitude and
//! so magnifies the rounding of a gradient near zero), `--dump-weights
//! PATH`.
//!
//! Started without a launcher's variables it runs alone, as one rank; under
//! `streamcomm-run`, torchrun, Slurm or MPI it joins their job.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use candle_core::{DType, Device, Error, Result, Tensor, Var};
use candle_nn::{AdamW, Linear, Module, Optimizer, ParamsAdamW, SGD, VarBuilder, VarMap};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use streamcomm::ReduceOp;
use streamcomm_candle::TensorComm;

/// Inputs of the model.
const INPUTS: usize = 16;
/// Hidden units of the model.
const HIDDEN: usize = 64;
/// Outputs of the model.
const OUTPUTS: usize = 4;
/// Hidden units of the teacher function the model learns.
const TEACHER_HIDDEN: usize = 8;
/// The noise added to the teacher's outputs: uniform in `±NOISE`.
const NOISE: f64 = 0.05;

/// The model's variables in the model's order: name and shape.
const PARAMS: [(&str, &[usize]); 4] = [
    ("fc1.weight", &[HIDDEN, INPUTS]),
    ("fc1.bias", &[HIDDEN]),
    ("fc2.weight", &[OUTPUTS, HIDDEN]),
    ("fc2.bias", &[OUTPUTS]),
];

/// The usage text (`--help`, and after a usage error).
const USAGE: &str = "usage: dp_train [--steps N] [--batch B] [--lr X] [--seed S] \
[--bucket-bytes N] [--adamw] [--f64] [--dump-weights PATH]
  --steps N          optimizer steps (default 50)
  --batch B          rows of every step's global batch, a multiple of the ranks (default 64)
  --lr X             learning rate (default 0.1 for SGD, 0.01 for AdamW)
  --seed S           seed of the weights, the teacher and the data (default 2024)
  --bucket-bytes N   most bytes of gradients per all-reduce (default 26214400, DDP's 25 MiB)
  --adamw            AdamW instead of plain SGD
  --f64              compute (and all-reduce) in f64 instead of f32
  --dump-weights P   rank 0 writes every final weight to P as lines `name index value`
run as many ranks as wanted with `streamcomm-run -n 4 -- dp_train ...`";

/// What the command line asks for.
#[derive(Debug)]
struct Options {
    steps: usize,
    batch: usize,
    lr: f64,
    seed: u64,
    bucket_bytes: usize,
    adamw: bool,
    dtype: DType,
    dump_weights: Option<PathBuf>,
}

/// A usage error: `msg`, then the usage.
fn usage_error(msg: String) -> Error {
    Error::Msg(format!("{msg}\n{USAGE}"))
}

/// `value` of option `name` as a number.
fn number<T: std::str::FromStr>(name: &str, value: &str) -> Result<T> {
    value
        .parse()
        .map_err(|_| usage_error(format!("{name} {value:?} is not a valid number")))
}

/// The options in `args` (without the program's name); `None` for `--help`.
fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Option<Options>> {
    let mut o = Options {
        steps: 50,
        batch: 64,
        lr: f64::NAN,
        seed: 2024,
        bucket_bytes: 25 << 20,
        adamw: false,
        dtype: DType::F32,
        dump_weights: None,
    };
    let mut lr = None;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        // `--name value` or `--name=value`.
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        match name.as_str() {
            "-h" | "--help" => return Ok(None),
            "--adamw" | "--f64" => {
                if inline.is_some() {
                    return Err(usage_error(format!("{name} takes no value")));
                }
                match name.as_str() {
                    "--adamw" => o.adamw = true,
                    _ => o.dtype = DType::F64,
                }
                continue;
            }
            _ => {}
        }
        let mut value = || {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| usage_error(format!("{name} needs a value")))
        };
        match name.as_str() {
            "--steps" => o.steps = number(&name, &value()?)?,
            "--batch" => o.batch = number(&name, &value()?)?,
            "--lr" => lr = Some(number::<f64>(&name, &value()?)?),
            "--seed" => o.seed = number(&name, &value()?)?,
            "--bucket-bytes" => o.bucket_bytes = number(&name, &value()?)?,
            "--dump-weights" => o.dump_weights = Some(PathBuf::from(value()?)),
            _ => return Err(usage_error(format!("unknown argument {arg:?}"))),
        }
    }
    o.lr = lr.unwrap_or(if o.adamw { 0.01 } else { 0.1 });
    if o.steps == 0 {
        return Err(usage_error("--steps must be at least 1".into()));
    }
    if o.batch == 0 {
        return Err(usage_error("--batch must be at least 1".into()));
    }
    if o.bucket_bytes == 0 {
        return Err(usage_error("--bucket-bytes must be at least 1".into()));
    }
    if !(o.lr.is_finite() && o.lr > 0.0) {
        return Err(usage_error(format!(
            "--lr {} is not a positive learning rate",
            o.lr
        )));
    }
    Ok(Some(o))
}

/// An independent generator for one use (`what`) of the seed.
fn stream(seed: u64, what: u64) -> StdRng {
    StdRng::seed_from_u64(seed ^ what.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// `len` values uniform in `±bound`.
fn uniform(rng: &mut StdRng, len: usize, bound: f64) -> Vec<f64> {
    (0..len).map(|_| rng.gen_range(-bound..bound)).collect()
}

/// The model: `fc2(tanh(fc1(x)))`.
struct Mlp {
    fc1: Linear,
    fc2: Linear,
}

impl Module for Mlp {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.fc2.forward(&self.fc1.forward(x)?.tanh()?)
    }
}

/// The model, its variables in [`PARAMS`]' order, and the `VarMap` holding
/// them. The starting values are drawn from `seed` here (uniform in
/// `±1/√fan_in`, PyTorch's default for linear layers) and put into the
/// `VarMap` before the layers ask for them, so candle's own generator is
/// never used: the same on every rank, for any number of ranks.
fn build_model(seed: u64, dtype: DType) -> Result<(Mlp, Vec<Var>, VarMap)> {
    let varmap = VarMap::new();
    let mut rng = stream(seed, 0);
    let mut vars = Vec::with_capacity(PARAMS.len());
    {
        let mut data = varmap
            .data()
            .lock()
            .map_err(|_| Error::Msg("the VarMap's lock is poisoned".into()))?;
        for (name, shape) in PARAMS {
            let fan_in = if name.starts_with("fc1") {
                INPUTS
            } else {
                HIDDEN
            };
            let len = shape.iter().product();
            let values = uniform(&mut rng, len, 1.0 / (fan_in as f64).sqrt());
            let t = Tensor::from_vec(values, shape, &Device::Cpu)?.to_dtype(dtype)?;
            let var = Var::from_tensor(&t)?;
            data.insert(name.to_string(), var.clone());
            vars.push(var);
        }
    }
    let vb = VarBuilder::from_varmap(&varmap, dtype, &Device::Cpu);
    let model = Mlp {
        fc1: candle_nn::linear(INPUTS, HIDDEN, vb.pp("fc1"))?,
        fc2: candle_nn::linear(HIDDEN, OUTPUTS, vb.pp("fc2"))?,
    };
    Ok((model, vars, varmap))
}

/// The function the model learns: `y = B · sin(A · x)`, `A` and `B` drawn
/// from the seed.
struct Teacher {
    a: Vec<f64>,
    b: Vec<f64>,
}

impl Teacher {
    fn new(seed: u64) -> Teacher {
        let mut rng = stream(seed, 1);
        Teacher {
            a: uniform(&mut rng, TEACHER_HIDDEN * INPUTS, 0.5),
            b: uniform(&mut rng, OUTPUTS * TEACHER_HIDDEN, 1.0),
        }
    }

    /// The teacher's outputs at `x`.
    fn eval(&self, x: &[f64]) -> [f64; OUTPUTS] {
        let h: Vec<f64> = self
            .a
            .chunks(INPUTS)
            .map(|row| row.iter().zip(x).map(|(w, v)| w * v).sum::<f64>().sin())
            .collect();
        let mut y = [0.0; OUTPUTS];
        for (yj, row) in y.iter_mut().zip(self.b.chunks(TEACHER_HIDDEN)) {
            *yj = row.iter().zip(&h).map(|(w, v)| w * v).sum();
        }
        y
    }
}

/// Rows `rows` of step `step`'s global batch of `batch` rows: inputs
/// uniform in ±1, targets the teacher's plus noise. Every rank draws the
/// whole batch (it is small) and keeps its rows, so the batch is the same
/// whatever the number of ranks. In `dtype`, rounded from f64.
fn batch_rows(
    dtype: DType,
    seed: u64,
    step: usize,
    batch: usize,
    rows: std::ops::Range<usize>,
    teacher: &Teacher,
) -> Result<(Tensor, Tensor)> {
    let mut rng = stream(seed, 2 + step as u64);
    let (mut xs, mut ys) = (Vec::<f64>::new(), Vec::<f64>::new());
    for row in 0..batch {
        let x = uniform(&mut rng, INPUTS, 1.0);
        let y = teacher.eval(&x);
        let noise = uniform(&mut rng, OUTPUTS, NOISE);
        if rows.contains(&row) {
            xs.extend(&x);
            ys.extend(y.iter().zip(&noise).map(|(y, e)| y + e));
        }
    }
    let n = rows.len();
    Ok((
        Tensor::from_vec(xs, (n, INPUTS), &Device::Cpu)?.to_dtype(dtype)?,
        Tensor::from_vec(ys, (n, OUTPUTS), &Device::Cpu)?.to_dtype(dtype)?,
    ))
}

/// The buckets: runs of consecutive variables of `walk` (indices into
/// `vars`), each of at most `cap` bytes of gradients unless a single
/// variable is larger, which then makes a bucket of its own.
fn plan_buckets(vars: &[Var], walk: &[usize], cap: usize) -> Vec<Vec<usize>> {
    let mut buckets: Vec<Vec<usize>> = Vec::new();
    let mut filled = 0;
    for &i in walk {
        let bytes = vars[i].elem_count() * vars[i].dtype().size_in_bytes();
        match buckets.last_mut() {
            Some(last) if filled + bytes <= cap => {
                last.push(i);
                filled += bytes;
            }
            _ => {
                buckets.push(vec![i]);
                filled = bytes;
            }
        }
    }
    buckets
}

/// The optimizer the options choose.
enum Opt {
    Sgd(SGD),
    AdamW(AdamW),
}

impl Opt {
    fn step(&mut self, grads: &candle_core::backprop::GradStore) -> Result<()> {
        match self {
            Opt::Sgd(o) => o.step(grads),
            Opt::AdamW(o) => o.step(grads),
        }
    }
}

/// Writes every weight of `vars` (named as in [`PARAMS`]) to `path`.
fn dump_weights(path: &PathBuf, vars: &[Var]) -> Result<()> {
    let fail = |e: std::io::Error| Error::Msg(format!("--dump-weights {}: {e}", path.display()));
    let file = std::fs::File::create(path).map_err(fail)?;
    let mut out = std::io::BufWriter::new(file);
    for ((name, _), var) in PARAMS.iter().zip(vars) {
        // Every digit an f64 needs: an f32's value is written exactly too.
        let values: Vec<f64> = var.flatten_all()?.to_dtype(DType::F64)?.to_vec1()?;
        for (i, v) in values.iter().enumerate() {
            writeln!(out, "{name} {i} {v:.16e}").map_err(fail)?;
        }
    }
    out.flush().map_err(fail)
}

fn main() -> Result<()> {
    let Some(o) = parse_args(std::env::args().skip(1))? else {
        println!("{USAGE}");
        return Ok(());
    };
    let comm = TensorComm::from_env_or_alone()?;
    let (rank, n) = (comm.rank(), comm.size());
    if !o.batch.is_multiple_of(n) {
        return Err(usage_error(format!(
            "--batch {} does not divide among {n} ranks: give a multiple of {n}",
            o.batch
        )));
    }
    let local = o.batch / n;
    let rows = rank * local..(rank + 1) * local;

    let (model, vars, _varmap) = build_model(o.seed, o.dtype)?;
    let teacher = Teacher::new(o.seed);
    // The gradients' walk: the last layer first, as backward makes them.
    let walk: Vec<usize> = (0..vars.len()).rev().collect();
    let buckets = plan_buckets(&vars, &walk, o.bucket_bytes);
    let mut opt = if o.adamw {
        let params = ParamsAdamW {
            lr: o.lr,
            ..ParamsAdamW::default()
        };
        Opt::AdamW(AdamW::new(vars.clone(), params)?)
    } else {
        Opt::Sgd(SGD::new(vars.clone(), o.lr)?)
    };
    if rank == 0 {
        let params: usize = vars.iter().map(|v| v.elem_count()).sum();
        println!(
            "dp_train: {n} rank(s), global batch {} ({local} rows per rank), MLP \
             {INPUTS}-{HIDDEN}-{OUTPUTS} ({params} parameters, {:?}), {} lr {}, seed {}, {} \
             steps",
            o.batch,
            o.dtype,
            if o.adamw { "AdamW" } else { "SGD" },
            o.lr,
            o.seed,
            o.steps
        );
    }

    let mut comm_time = Duration::ZERO;
    let start = Instant::now();
    for step in 1..=o.steps {
        let (x, y) = batch_rows(o.dtype, o.seed, step, o.batch, rows.clone(), &teacher)?;
        let loss = candle_nn::loss::mse(&model.forward(&x)?, &y)?;
        let mut grads = loss.backward()?;

        let t0 = Instant::now();
        for bucket in &buckets {
            // Pack: this bucket's gradients, flat, one after the other, in
            // a buffer of its own (a variable without a gradient adds zeros,
            // so that every rank's buckets keep the same layout).
            let parts = bucket
                .iter()
                .map(|&i| match grads.get(&vars[i]) {
                    Some(g) => g.flatten_all(),
                    None => Tensor::zeros(vars[i].elem_count(), vars[i].dtype(), &Device::Cpu),
                })
                .collect::<Result<Vec<_>>>()?;
            let flat = match parts.as_slice() {
                // `Tensor::cat` of one tensor returns it, not a copy.
                [one] => one.copy()?,
                _ => Tensor::cat(&parts, 0)?,
            };
            comm.all_reduce_in_place(&flat, ReduceOp::Avg)?;
            // Unpack: each variable's share of the bucket, in its shape.
            let mut at = 0;
            for &i in bucket {
                let len = vars[i].elem_count();
                let g = flat.narrow(0, at, len)?.reshape(vars[i].shape())?;
                grads.insert(&vars[i], g);
                at += len;
            }
        }
        comm_time += t0.elapsed();
        opt.step(&grads)?;

        // The whole batch's loss, for printing: the shards' losses averaged.
        let global = comm.all_reduce(&loss.reshape(1)?, ReduceOp::Avg)?;
        let global = global.to_dtype(DType::F64)?.sum_all()?.to_scalar::<f64>()?;
        if rank == 0 {
            // Every digit of the type: 9 significant ones for f32, 17 for f64.
            let digits = if o.dtype == DType::F64 { 16 } else { 8 };
            println!("step {step} loss {global:.digits$e}");
        }
    }
    let per_step = start.elapsed() / o.steps as u32;

    // Data parallelism keeps the replicas identical: check it, every
    // weight against the ranks' largest and smallest value of it.
    let all = Tensor::cat(
        &vars
            .iter()
            .map(|v| v.flatten_all())
            .collect::<Result<Vec<_>>>()?,
        0,
    )?;
    let max = comm.all_reduce(&all, ReduceOp::Max)?;
    let min = comm.all_reduce(&all, ReduceOp::Min)?;
    let differ = max.ne(&min)?.to_dtype(DType::U32)?.sum_all()?;
    let differ = differ.to_scalar::<u32>()?;
    if differ != 0 {
        return Err(Error::Msg(format!(
            "rank {rank}: {differ} weights differ between the ranks after training"
        )));
    }

    if rank == 0 {
        let sizes: Vec<usize> = buckets
            .iter()
            .map(|b| {
                b.iter()
                    .map(|&i| vars[i].elem_count() * vars[i].dtype().size_in_bytes())
                    .sum()
            })
            .collect();
        println!(
            "buckets per step {} (bytes {sizes:?}, at most {} each)",
            buckets.len(),
            o.bucket_bytes
        );
        println!(
            "time per step {:.3} ms (gradient all-reduces {:.3} ms)",
            per_step.as_secs_f64() * 1e3,
            comm_time.as_secs_f64() * 1e3 / o.steps as f64
        );
        println!("weights identical on every rank");
        if let Some(path) = &o.dump_weights {
            dump_weights(path, &vars)?;
            println!("weights written to {}", path.display());
        }
    }
    Ok(())
}
