//! What the examples in `examples/examples/` share: each runs as one rank
//! when a launcher started it, and otherwise launches itself as local
//! ranks, so that `cargo run --example NAME` needs nothing else.

use std::error::Error;
use std::process::ExitCode;

use streamcomm::launch::detect_from_process_env;
use streamcomm_run::local::LocalLauncher;

/// A rank's body: what one process of the job does.
pub type RankMain = fn() -> Result<(), Box<dyn Error>>;

/// Runs `rank_main` when a launcher (`streamcomm-run`, torchrun, Slurm,
/// Open MPI, PMI) started this process, and returns its exit code; `None`
/// when no launcher did.
///
/// # Examples
/// ```no_run
/// fn rank_main() -> Result<(), Box<dyn std::error::Error>> {
///     let comm = streamcomm::Communicator::from_env()?;
///     println!("rank {} of {}", comm.rank(), comm.size());
///     Ok(())
/// }
/// if let Some(code) = streamcomm_examples::run_if_rank(rank_main) {
///     std::process::exit(if code == std::process::ExitCode::SUCCESS { 0 } else { 1 });
/// }
/// ```
pub fn run_if_rank(rank_main: RankMain) -> Option<ExitCode> {
    detect_from_process_env().ok()?;
    Some(match rank_main() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    })
}

/// The number of ranks to launch: the program's first argument, else
/// `default`. A usage error names `name`.
///
/// # Examples
/// ```
/// // Run without arguments (as doc tests are), the default applies.
/// assert_eq!(streamcomm_examples::ranks_arg("demo", 4), Ok(4));
/// ```
///
/// # Errors
/// The exit code to return when the argument is not a positive integer
/// (after printing the usage).
pub fn ranks_arg(name: &str, default: usize) -> Result<usize, ExitCode> {
    match std::env::args().nth(1).map(|a| a.parse::<usize>()) {
        None => Ok(default),
        Some(Ok(n)) if n > 0 => Ok(n),
        Some(_) => {
            eprintln!("usage: {name} [RANKS]");
            Err(ExitCode::FAILURE)
        }
    }
}

/// Starts `ranks` copies of this program as the ranks of one job on this
/// machine, printing `{name}: launching {ranks} local ranks {how}` first
/// and `OK` when every rank succeeded.
///
/// # Examples
/// ```no_run
/// use std::process::ExitCode;
/// fn main() -> ExitCode {
///     streamcomm_examples::launch_self("demo", 4, "(processes, host backend)")
/// }
/// ```
pub fn launch_self(name: &str, ranks: usize, how: &str) -> ExitCode {
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{name}: cannot find my own executable: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("{name}: launching {ranks} local ranks {how}");
    match LocalLauncher::new(ranks, exe).run() {
        Ok(outcome) if outcome.exit_code() == 0 => {
            println!("OK");
            ExitCode::SUCCESS
        }
        Ok(outcome) => {
            eprintln!("{name} failed: {outcome:?}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("{name} could not launch its ranks: {e}");
            ExitCode::FAILURE
        }
    }
}

/// An example's whole `main`: `rank_main` when a launcher started this
/// process ([`run_if_rank`]), else [`launch_self`] with the number of ranks
/// from the first argument, or `default_ranks` ([`ranks_arg`]).
///
/// # Examples
/// ```no_run
/// use std::process::ExitCode;
/// fn rank_main() -> Result<(), Box<dyn std::error::Error>> {
///     let comm = streamcomm::Communicator::from_env()?;
///     println!("rank {} of {}", comm.rank(), comm.size());
///     Ok(())
/// }
/// fn main() -> ExitCode {
///     streamcomm_examples::rank_or_launch("demo", 4, "(processes, host backend)", rank_main)
/// }
/// ```
pub fn rank_or_launch(
    name: &str,
    default_ranks: usize,
    how: &str,
    rank_main: RankMain,
) -> ExitCode {
    if let Some(code) = run_if_rank(rank_main) {
        return code;
    }
    match ranks_arg(name, default_ranks) {
        Ok(ranks) => launch_self(name, ranks, how),
        Err(code) => code,
    }
}

/// A data set for a linear model, the same on every rank for a given
/// `seed`: `samples` rows of `F` features in [-1, 1), with targets from a
/// fixed random model (`F` weights and a bias in [-2, 2)) plus noise of at
/// most 0.01.
///
/// # Examples
/// ```
/// let (xs, ys) = streamcomm_examples::linear_data::<4>(7, 100);
/// assert_eq!((xs.len(), ys.len()), (100, 100));
/// assert_eq!(streamcomm_examples::linear_data::<4>(7, 100).1, ys);
/// ```
pub fn linear_data<const F: usize>(seed: u64, samples: usize) -> (Vec<[f32; F]>, Vec<f32>) {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let truth: Vec<f32> = (0..=F).map(|_| rng.gen_range(-2.0..2.0)).collect();
    let mut xs = Vec::with_capacity(samples);
    let mut ys = Vec::with_capacity(samples);
    for _ in 0..samples {
        let mut x = [0f32; F];
        x.iter_mut().for_each(|v| *v = rng.gen_range(-1.0..1.0));
        let y = x.iter().zip(&truth).map(|(a, b)| a * b).sum::<f32>() + truth[F];
        xs.push(x);
        ys.push(y + rng.gen_range(-0.01..0.01));
    }
    (xs, ys)
}
