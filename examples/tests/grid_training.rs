//! The `grid_training` example under `streamcomm-run -n 8`: a 2 × 4 grid
//! whose loss falls, the same on every rank; and under `--keep-going` with
//! rank 5 killed at step 20, the survivors shrink, train on as a 2 × 3 grid,
//! and the loss still falls, while the launcher reports the dead rank.

use std::process::Command;

mod support;

use support::{example, losses, run};

/// Runs the example on 8 ranks with `launcher_args` before `-n 8` and
/// `args` after the program (`what` names the run's output files); its
/// exit status and stdout.
fn run_example(
    what: &str,
    launcher_args: &[&str],
    args: &[&str],
) -> (std::process::ExitStatus, String) {
    let path = example("grid_training");
    let mut cmd = Command::new(streamcomm_testkit::launcher_binary());
    cmd.args(launcher_args)
        .args(["-n", "8", "--"])
        .arg(&path)
        .args(args)
        .env("STREAMCOMM_TIMEOUT", "20");
    let out = run(cmd, what);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{stdout}");
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    (out.status, stdout)
}

/// The first and last loss rank 0 printed, checking that every rank in
/// `ranks` printed the same losses from step `from` on.
fn agreed_losses(stdout: &str, ranks: &[usize], from: usize) -> (f64, f64) {
    let all = losses(stdout);
    let after = |r: usize| -> Vec<(usize, String)> {
        all.get(&r)
            .unwrap_or_else(|| panic!("rank {r} printed no loss:\n{stdout}"))
            .iter()
            .filter(|(s, _)| *s >= from)
            .cloned()
            .collect()
    };
    let first = after(ranks[0]);
    assert!(first.len() >= 2, "at least two losses printed:\n{stdout}");
    for &r in ranks {
        assert_eq!(
            after(r),
            first,
            "rank {r} printed other losses than rank {}",
            ranks[0]
        );
    }
    let value = |s: &str| -> f64 { s.parse().expect("a loss is a number") };
    let (start, end) = (value(&first[0].1), value(&first[first.len() - 1].1));
    assert!(start.is_finite() && end.is_finite(), "{start} -> {end}");
    (start, end)
}

#[test]
fn a_two_by_four_grid_trains_and_every_rank_agrees() {
    let (status, stdout) = run_example("grid_training", &[], &[]);
    assert!(status.success(), "the job failed: {status:?}");
    assert!(stdout.contains("grid 2 x 4 of 8 ranks"), "{stdout}");
    let (start, end) = agreed_losses(&stdout, &(0..8).collect::<Vec<_>>(), 0);
    assert!(end < start / 100.0, "the loss must fall: {start} -> {end}");
}

#[test]
fn after_a_rank_dies_the_survivors_shrink_and_train_on() {
    let (status, stdout) =
        run_example("grid_training_kill", &["--keep-going"], &["--kill", "5@20"]);
    // The launcher reports the killed rank (128 + SIGKILL), after the others ran on.
    assert_eq!(status.code(), Some(128 + 9), "{status:?}\n{stdout}");
    assert!(
        stdout.contains("7 ranks alive, grid 2 x 3"),
        "the survivors must recover:\n{stdout}"
    );
    // Old ranks 0-4 and 6 train on in the new grid (old rank 7 is left over).
    let (start, end) = agreed_losses(&stdout, &[0, 1, 2, 3, 4, 6], 30);
    assert!(
        end < start,
        "the loss must keep falling after the recovery: {start} -> {end}"
    );
    let (first, _) = agreed_losses(&stdout, &[0, 1, 2, 3, 4, 6], 0);
    assert!(
        end < first / 100.0,
        "the loss must fall overall: {first} -> {end}"
    );
}
