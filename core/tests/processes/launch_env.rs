//! `Communicator::from_env()` under each launcher's variables, for real:
//! two processes get only torchrun, Slurm, Open MPI or PMI variables (plus a
//! root address), form a communicator and all-reduce.

use crate::common;

use std::time::{Duration, Instant};

use common::unused_port as free_port;

use streamcomm::host::{HostBuffer, HostStream};
use streamcomm::{Communicator, ReduceOp};

const CHILD: &str = "STREAMCOMM_TEST_LAUNCH_CHILD";

#[test]
#[ignore = "entry point of the child processes"]
fn child() {
    if std::env::var(CHILD).is_err() {
        return;
    }
    let comm = Communicator::from_env().expect("from_env");
    let stream = HostStream::new().unwrap();
    let n = comm.size() as u64;
    let send = HostBuffer::from_slice(&[comm.rank() as u64 + 1; 64]);
    let mut recv = HostBuffer::<u64>::zeroed(64);
    comm.all_reduce(&send, &mut recv, ReduceOp::Sum, &stream)
        .unwrap();
    stream.synchronize().unwrap();
    assert_eq!(recv.to_vec(), vec![n * (n + 1) / 2; 64]);
    comm.barrier_host().unwrap();
    println!("launch child rank {} of {} OK", comm.rank(), comm.size());
    streamcomm_testkit::child_ran();
}

/// Runs 2 children with `vars(rank)` plus a root address; both must succeed.
fn run(name: &str, vars: impl Fn(usize) -> Vec<(&'static str, String)>) {
    let exe = std::env::current_exe().unwrap();
    // The root listens on MASTER_PORT, or MASTER_PORT + 1 under torchrun
    // (whose agent owns MASTER_PORT): make the port the root binds the one
    // known to be free.
    let free = free_port();
    let torchrun = vars(0).iter().any(|(k, _)| *k == "TORCHELASTIC_RUN_ID");
    let port = if torchrun { free - 1 } else { free }.to_string();
    let proof = streamcomm_testkit::ChildProof::new(name);
    let mut children: Vec<_> = (0..2)
        .map(|rank| {
            let mut cmd = std::process::Command::new(&exe);
            cmd.args(streamcomm_testkit::child_args!("child"))
                .env(CHILD, "1")
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", &port)
                .env("STREAMCOMM_TIMEOUT", "30");
            cmd.envs([proof.env()]);
            for var in [
                "RANK",
                "WORLD_SIZE",
                "LOCAL_RANK",
                "LOCAL_WORLD_SIZE",
                "STREAMCOMM_UNIQUE_ID",
                "TORCHELASTIC_RUN_ID",
            ] {
                cmd.env_remove(var);
            }
            for (k, v) in vars(rank) {
                cmd.env(k, v);
            }
            cmd.spawn().unwrap()
        })
        .collect();
    let t0 = Instant::now();
    for (rank, c) in children.iter_mut().enumerate() {
        loop {
            if let Some(status) = c.try_wait().unwrap() {
                assert!(status.success(), "{name}: rank {rank} failed: {status:?}");
                break;
            }
            if t0.elapsed() > Duration::from_secs(60) {
                let _ = c.kill();
                panic!("{name}: rank {rank} hangs");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    proof.assert_ran(2);
}

#[test]
fn torchrun_variables() {
    run("torchrun", |r| {
        vec![
            ("RANK", r.to_string()),
            ("WORLD_SIZE", "2".into()),
            ("LOCAL_RANK", r.to_string()),
            ("LOCAL_WORLD_SIZE", "2".into()),
            ("TORCHELASTIC_RUN_ID", "test".into()),
        ]
    });
}

#[test]
fn slurm_variables() {
    run("slurm", |r| {
        vec![
            ("SLURM_PROCID", r.to_string()),
            ("SLURM_NTASKS", "2".into()),
            ("SLURM_LOCALID", r.to_string()),
            ("SLURM_NTASKS_PER_NODE", "2".into()),
        ]
    });
}

#[test]
fn open_mpi_variables() {
    run("open mpi", |r| {
        vec![
            ("OMPI_COMM_WORLD_RANK", r.to_string()),
            ("OMPI_COMM_WORLD_SIZE", "2".into()),
            ("OMPI_COMM_WORLD_LOCAL_RANK", r.to_string()),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2".into()),
        ]
    });
}

#[test]
fn pmi_variables() {
    run("pmi", |r| {
        vec![("PMI_RANK", r.to_string()), ("PMI_SIZE", "2".into())]
    });
}
