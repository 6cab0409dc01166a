//! The `dp_train` example (data-parallel training in candle) checked
//! against itself: the same training run on 4 ranks under `streamcomm-run`,
//! each rank on a quarter of every batch with its gradients averaged in
//! buckets, and on 1 rank with the whole batch, must print the same losses
//! and end with the same weights, and the loss must fall. With plain SGD in
//! f32 (50 steps, small buckets so that every step makes several
//! all-reduces), and with AdamW in f64 on 2 ranks against 1 (10 steps).
//!
//! "The same" is `|a − b| ≤ max(rel · max(|a|, |b|), abs)` for every loss
//! and every weight: the ranks' gradients are sums in another order than
//! one rank's, so their last bits differ. SGD in f32: `rel` 1e-5 and an
//! absolute floor `abs` of 1e-7 for values near zero (over 600 seeds the
//! largest difference of an element beyond 1e-5 relative was 3.2e-8).
//! AdamW in f64: `rel` 1e-8, `abs` 1e-10 (the largest relative difference
//! over 200 seeds was 4.6e-11). AdamW is run in f64 because it divides
//! every gradient by its own running magnitude: a gradient near zero turns
//! f32 rounding into differences of up to 4e-5 after 10 steps (seen at 1
//! seed of 200), as large as what a bug makes: a sum in place of the
//! average, which misses by orders of magnitude under SGD, moves AdamW's
//! weights by only some 1e-5 relative (AdamW scales most of it away), in
//! f64 a thousand times the tolerance.
//!
//! The seed is random and printed (`STREAMCOMM_TEST_SEED` replays one).

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

/// How close a loss or weight of the ranks must be to one rank's: within
/// `rel` of the larger, or within `abs` (values near zero).
#[derive(Clone, Copy, Debug)]
struct Tolerance {
    rel: f64,
    abs: f64,
}

/// For SGD in f32.
const F32_SGD: Tolerance = Tolerance {
    rel: 1e-5,
    abs: 1e-7,
};
/// For AdamW in f64.
const F64_ADAMW: Tolerance = Tolerance {
    rel: 1e-8,
    abs: 1e-10,
};
/// Bucket cap of the tests: the model's 4 gradients (16 to 4096 bytes in
/// f32) make 4 buckets.
const BUCKET_BYTES: &str = "1024";
/// The most a launched job may take before it is stopped.
const JOB_LIMIT: Duration = Duration::from_secs(120);

/// `target/<profile>/examples/dp_train`, beside this test's `deps/`.
fn example() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>");
    let path = profile_dir.join("examples").join("dp_train");
    assert!(
        path.exists(),
        "{} is missing: `cargo test` builds the examples before it runs tests \
         (with `--test dp_train` alone it does not: run `cargo test -p streamcomm-candle`, \
         or `cargo build -p streamcomm-candle --example dp_train --profile test` first)",
        path.display()
    );
    // A binary older than its source runs old code: say so rather than
    // test it.
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/dp_train.rs");
    let modified = |p: &std::path::Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    if let (Some(built), Some(written)) = (modified(&path), modified(source.as_ref())) {
        assert!(
            built >= written,
            "{} is older than {source}: rebuild it (`cargo test -p streamcomm-candle`, or \
             `cargo build -p streamcomm-candle --example dp_train --profile test`)",
            path.display()
        );
    }
    path
}

/// Runs `cmd` to its end (killed after [`JOB_LIMIT`], its ranks with it:
/// the launcher's children die with it).
fn run(cmd: Command) -> Output {
    streamcomm_testkit::run_limited(cmd, JOB_LIMIT)
}

/// What one training run printed and wrote.
struct Trained {
    /// `(step, loss)` of every `step <k> loss <L>` line, in order.
    losses: Vec<(usize, f64)>,
    /// From `buckets per step <k> ...`.
    buckets: usize,
    /// `(name, index, value)` of every line of the weights file.
    weights: Vec<(String, usize, f64)>,
    /// Everything the job printed, for messages.
    stdout: String,
}

/// A line of the job's output without the launcher's `[rank i] ` prefix,
/// and that rank (0 without a prefix).
fn unprefixed(line: &str) -> (usize, &str) {
    if let Some(rest) = line.strip_prefix("[rank ")
        && let Some((rank, text)) = rest.split_once("] ")
        && let Ok(rank) = rank.parse()
    {
        return (rank, text);
    }
    (0, line)
}

/// Trains with `dp_train` on `ranks` ranks under the launcher, with `seed`
/// and `args`, rank 0 dumping the final weights; what it printed.
fn train(ranks: usize, seed: u64, args: &[&str], what: &str) -> Trained {
    let weights_path =
        std::env::temp_dir().join(format!("dp_train-{what}-{}.weights", std::process::id()));
    let mut cmd = Command::new(streamcomm_testkit::launcher_binary());
    cmd.args(["-n", &ranks.to_string(), "--"])
        .arg(example())
        .args(["--seed", &seed.to_string(), "--bucket-bytes", BUCKET_BYTES])
        .args(args)
        .arg("--dump-weights")
        .arg(&weights_path);
    let out = run(cmd);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{what}: the job failed ({:?}):\n{stdout}\n{stderr}",
        out.status
    );
    let mut losses = Vec::new();
    let mut buckets = None;
    for line in stdout.lines() {
        let (rank, text) = unprefixed(line);
        let words: Vec<&str> = text.split_whitespace().collect();
        match words[..] {
            ["step", k, "loss", l] => {
                assert_eq!(rank, 0, "{what}: only rank 0 prints losses: {line}");
                let k = k.parse().expect("a step number");
                let l: f64 = l.parse().expect("a loss is a number");
                losses.push((k, l));
            }
            ["buckets", "per", "step", k, ..] => {
                buckets = Some(k.parse().expect("a number of buckets"));
            }
            _ => {}
        }
    }
    if ranks > 1 {
        assert!(
            stdout.contains("weights identical on every rank"),
            "{what}: the ranks' weights were not found identical:\n{stdout}"
        );
    }
    let text = std::fs::read_to_string(&weights_path)
        .unwrap_or_else(|e| panic!("{what}: {}: {e}", weights_path.display()));
    let _ = std::fs::remove_file(&weights_path);
    let weights = text
        .lines()
        .map(
            |line| match line.split_whitespace().collect::<Vec<_>>()[..] {
                [name, i, v] => (
                    name.to_string(),
                    i.parse().expect("an index"),
                    v.parse().expect("a weight is a number"),
                ),
                _ => panic!("{what}: not a `name index value` line: {line:?}"),
            },
        )
        .collect();
    Trained {
        losses,
        buckets: buckets.unwrap_or_else(|| panic!("{what}: no bucket count printed:\n{stdout}")),
        weights,
        stdout,
    }
}

/// Whether `a` and `b` agree within `tol`.
fn close(a: f64, b: f64, tol: Tolerance) -> bool {
    a.is_finite() && b.is_finite() && (a - b).abs() <= (tol.rel * a.abs().max(b.abs())).max(tol.abs)
}

/// `|a − b| / max(|a|, |b|)`, 0 for two zeros.
fn relative(a: f64, b: f64) -> f64 {
    let scale = a.abs().max(b.abs());
    if scale == 0.0 {
        0.0
    } else {
        (a - b).abs() / scale
    }
}

/// Checks `many` (on several ranks) against `one` (on one rank), both of
/// `steps` steps: every loss and every weight agree within `tol`, the loss
/// fell to below half, and the gradients went in at least 3 buckets.
fn check(many: &Trained, one: &Trained, steps: usize, tol: Tolerance, what: &str) {
    for (run, name) in [(many, "the ranks"), (one, "one rank")] {
        let numbered: Vec<usize> = run.losses.iter().map(|&(k, _)| k).collect();
        assert_eq!(
            numbered,
            (1..=steps).collect::<Vec<_>>(),
            "{what}: {name} must print the loss of every step:\n{}",
            run.stdout
        );
        assert!(
            run.buckets >= 3,
            "{what}: {name}: {} bucket(s) per step; --bucket-bytes {BUCKET_BYTES} must make at \
             least 3",
            run.buckets
        );
    }
    let mut worst_loss = 0f64;
    for (&(k, a), &(_, b)) in many.losses.iter().zip(&one.losses) {
        assert!(
            close(a, b, tol),
            "{what}: the loss of step {k} is {a:e} on the ranks, {b:e} on one rank"
        );
        worst_loss = worst_loss.max(relative(a, b));
    }
    assert_eq!(
        many.weights.len(),
        one.weights.len(),
        "{what}: as many weights"
    );
    let (mut worst_rel, mut worst_abs) = (0f64, 0f64);
    for (a, b) in many.weights.iter().zip(&one.weights) {
        assert_eq!(
            (&a.0, a.1),
            (&b.0, b.1),
            "{what}: the same weights in order"
        );
        assert!(
            close(a.2, b.2, tol),
            "{what}: weight {} {} is {:e} after training on the ranks, {:e} on one rank",
            a.0,
            a.1,
            a.2,
            b.2
        );
        worst_rel = worst_rel.max(relative(a.2, b.2));
        worst_abs = worst_abs.max((a.2 - b.2).abs());
    }
    let (first, last) = (one.losses[0].1, one.losses[steps - 1].1);
    println!(
        "{what}: loss {first:.6e} -> {last:.6e}, {} buckets per step; largest differences of \
         the ranks from one rank: losses {worst_loss:.2e} relative, weights {worst_rel:.2e} \
         relative, {worst_abs:.2e} absolute (allowed: {:e} relative or {:e} absolute)",
        many.buckets, tol.rel, tol.abs
    );
    assert!(
        last < first / 2.0,
        "{what}: the loss must fall below half of where it started: {first:e} -> {last:e}"
    );
}

#[test]
fn four_ranks_with_sgd_train_as_one_rank_does() {
    let seed = streamcomm_testkit::seed();
    println!("seed {seed}");
    let steps = 50;
    let args = ["--steps", "50"];
    let many = train(4, seed, &args, "sgd-4-ranks");
    let one = train(1, seed, &args, "sgd-1-rank");
    check(&many, &one, steps, F32_SGD, "SGD, 4 ranks against 1");
}

#[test]
fn two_ranks_with_adamw_train_as_one_rank_does() {
    let seed = streamcomm_testkit::seed();
    println!("seed {seed}");
    // In f64: see the module's docs.
    let args = ["--steps", "10", "--adamw", "--f64"];
    let many = train(2, seed, &args, "adamw-2-ranks");
    let one = train(1, seed, &args, "adamw-1-rank");
    check(&many, &one, 10, F64_ADAMW, "AdamW (f64), 2 ranks against 1");
}

#[test]
fn without_a_launcher_it_runs_alone_and_bad_arguments_are_refused() {
    let launcher_vars = [
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "SLURM_PROCID",
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "PMI_RANK",
        "PMI_SIZE",
        "STREAMCOMM_UNIQUE_ID",
        "MASTER_ADDR",
        "MASTER_PORT",
    ];
    let alone = |args: &[&str]| {
        let mut cmd = Command::new(example());
        cmd.args(args);
        for v in launcher_vars {
            cmd.env_remove(v);
        }
        run(cmd)
    };
    let out = alone(&["--steps", "3"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{:?}", out.stderr);
    assert!(stdout.contains("dp_train: 1 rank(s)"), "{stdout}");
    let steps = stdout.lines().filter(|l| l.starts_with("step ")).count();
    assert_eq!(steps, 3, "{stdout}");

    for (args, says) in [
        (
            &["--steps", "many"][..],
            "--steps \"many\" is not a valid number",
        ),
        (&["--bogus"][..], "unknown argument \"--bogus\""),
        (&["--lr"][..], "--lr needs a value"),
        (
            &["--bucket-bytes", "0"][..],
            "--bucket-bytes must be at least 1",
        ),
    ] {
        let out = alone(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} must be refused");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }

    // A batch the ranks cannot share evenly, on every rank.
    let mut cmd = Command::new(streamcomm_testkit::launcher_binary());
    cmd.args(["-n", "4", "--"])
        .arg(example())
        .args(["--batch", "6", "--steps", "1"]);
    let out = run(cmd);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "--batch 6 on 4 ranks must be refused"
    );
    assert!(
        stderr.contains("--batch 6 does not divide among 4 ranks"),
        "{stderr}"
    );
}
