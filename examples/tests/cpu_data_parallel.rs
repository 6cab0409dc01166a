//! The `cpu_data_parallel` example under `streamcomm-run -n 4`: its loss
//! must fall well below where it started, every rank printing the same
//! losses; and the heart of it (a `Vec<f32>` all-reduced in place through
//! `HostBuffer::from_vec` / `into_vec`) checked element by element, with
//! the allocation coming back the same.

use std::process::Command;

mod support;

use support::{example, losses, run};

#[test]
fn the_loss_falls_and_every_rank_prints_the_same() {
    let path = example("cpu_data_parallel");
    let mut cmd = Command::new(streamcomm_testkit::launcher_binary());
    cmd.args(["-n", "4", "--"]).arg(&path);
    let out = run(cmd, "cpu_data_parallel");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the job failed: {:?}", out.status);
    let losses = losses(&stdout);
    assert_eq!(
        losses.keys().copied().collect::<Vec<_>>(),
        vec![0, 1, 2, 3],
        "every rank prints its losses:\n{stdout}"
    );
    let first = &losses[&0];
    assert!(first.len() >= 2, "at least two losses printed:\n{stdout}");
    for (rank, l) in &losses {
        assert_eq!(l, first, "rank {rank} printed other losses than rank 0");
    }
    let value = |s: &str| -> f64 { s.parse().expect("a loss is a number") };
    let (start, end) = (value(&first[0].1), value(&first[first.len() - 1].1));
    assert!(start.is_finite() && end.is_finite(), "{start} -> {end}");
    assert!(
        end < start / 100.0,
        "the loss must fall well below where it started: {start} -> {end}"
    );
}

const CHILD: &str = "STREAMCOMM_TEST_VEC_ALL_REDUCE_CHILD";
const LEN: usize = 1 << 20;

#[test]
#[ignore = "entry point of the ranks started by the launcher"]
fn vec_all_reduce_rank() {
    if std::env::var(CHILD).is_err() {
        return;
    }
    let stream = streamcomm::host::HostStream::new().unwrap();
    // The program's core, as users write it:
    let comm = streamcomm::Communicator::from_env().unwrap();
    let data: Vec<f32> = vec![comm.rank() as f32; LEN];
    let at = data.as_ptr() as usize;
    let mut buf = streamcomm::host::HostBuffer::from_vec(data);
    comm.all_reduce_in_place(&mut buf, streamcomm::ReduceOp::Sum, &stream)
        .unwrap();
    stream.synchronize().unwrap();
    let data: Vec<f32> = buf.into_vec().unwrap();
    // Checked: the same allocation, every element the sum 0 + 1 + ... + n-1.
    assert_eq!(data.as_ptr() as usize, at, "the Vec was copied");
    let n = comm.size();
    let want = (n * (n - 1) / 2) as f64;
    assert_eq!(data.len(), LEN);
    for (i, x) in data.iter().enumerate() {
        assert_eq!(f64::from(*x), want, "rank {}, element {i}", comm.rank());
    }
    println!(
        "rank {} of {n}: sum {want} in the same allocation",
        comm.rank()
    );
    streamcomm_testkit::child_ran();
}

#[test]
fn a_vec_is_all_reduced_in_place_under_the_launcher_without_a_copy() {
    let proof = streamcomm_testkit::ChildProof::new("vec_all_reduce");
    let mut cmd = Command::new(streamcomm_testkit::launcher_binary());
    cmd.args(["-n", "4", "--"])
        .arg(std::env::current_exe().expect("test executable"))
        .args(streamcomm_testkit::child_args!("vec_all_reduce_rank"))
        .env(CHILD, "1")
        .envs([proof.env()]);
    let out = run(cmd, "vec_all_reduce");
    println!("{}", String::from_utf8_lossy(&out.stdout));
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the job failed: {:?}", out.status);
    proof.assert_ran(4);
}
