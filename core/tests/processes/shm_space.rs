//! A /dev/shm too small for every ring, for real: `streamcomm-run` starts
//! 8 ranks in a private mount namespace whose /dev/shm is a 24 MiB tmpfs
//! (root only: elsewhere the test skips, which CI does not allow), with
//! rings of 1 MiB: 56 MiB for every rank's 7 inbound rings. Creation
//! allocates the rings' headers and the ring neighbours' rings (16 MiB)
//! and succeeds, and a ring exchange with the neighbours runs, every
//! element checked; an all-to-all then needs every ring: a rank whose ring
//! cannot be had fails with an error naming /dev/shm, the others fail
//! naming a rank or succeed with every element right, and no rank dies of
//! a SIGBUS. (Had every ring been allocated at creation, creation itself
//! would fail; had rings been touched without allocating first, the
//! all-to-all would kill a rank with SIGBUS.)

use std::process::Command;
use std::time::{Duration, Instant};

use streamcomm::Communicator;

const CHILD: &str = "STREAMCOMM_TEST_SHM_SPACE";
const RANKS: usize = 8;

#[test]
fn a_dev_shm_too_small_for_every_ring_is_an_error_at_first_use_not_at_creation_nor_a_sigbus() {
    const TEST: &str = "processes::shm_space";
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        streamcomm_testkit::skip(TEST, "needs root for a private mount namespace");
        return;
    }
    if Command::new("unshare").arg("--version").output().is_err() {
        streamcomm_testkit::skip(TEST, "no unshare (util-linux)");
        return;
    }
    let seed = streamcomm_testkit::seed();
    let exe = std::env::current_exe().unwrap();
    let proof = streamcomm_testkit::ChildProof::new("shm space");
    let (proof_key, proof_dir) = proof.env();
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg("mount -t tmpfs -o size=24m tmpfs /dev/shm && exec \"$@\"")
        .arg("sh")
        .arg(streamcomm_testkit::launcher_binary())
        .args(["-n", &RANKS.to_string(), "--"])
        .arg(exe)
        .args(streamcomm_testkit::child_args!("child"))
        .env(proof_key, proof_dir)
        .env(CHILD, "1")
        .env("STREAMCOMM_TEST_SEED", seed.to_string())
        .env("STREAMCOMM_TRANSPORT", "shm")
        .env("STREAMCOMM_BUFFSIZE", "1M")
        .env("STREAMCOMM_TIMEOUT", "30");
    let out = streamcomm_testkit::within(Duration::from_secs(120), move || cmd.output())
        .expect("run the launcher");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    let outcomes: Vec<&str> = text.lines().filter(|l| l.contains("all_to_all:")).collect();
    eprintln!("{}", outcomes.join("\n"));
    assert!(
        out.status.success(),
        "a rank died or failed (SIGBUS?): {}\n{text}",
        out.status
    );
    assert_eq!(
        outcomes.len(),
        RANKS,
        "every rank reports its all-to-all:\n{text}"
    );
    assert!(
        outcomes.iter().any(|l| l.contains("/dev/shm")),
        "no rank named /dev/shm:\n{text}"
    );
    assert_eq!(proof.count(), RANKS, "every rank must finish its body");
}

#[test]
#[ignore = "entry point of the child processes"]
fn child() {
    if std::env::var(CHILD).is_err() {
        return;
    }
    let comm = Communicator::from_env().expect("creation fits: headers and neighbours only");
    let (rank, n) = (comm.rank(), comm.size());
    let seed = streamcomm_testkit::seed();
    let value = |from: usize, to: usize, i: usize| {
        ((seed ^ ((from as u64) << 40) ^ ((to as u64) << 20) ^ i as u64)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            >> 40) as u32
    };
    // The neighbours' rings were allocated at creation: a ring exchange
    // of two slots' worth runs.
    let (right, left) = ((rank + 1) % n, (rank + n - 1) % n);
    let len = 1 << 18;
    let out: Vec<u32> = (0..len).map(|i| value(rank, right, i)).collect();
    let mut got = vec![u32::MAX; len];
    if rank % 2 == 0 {
        comm.send_host(&out, right).unwrap();
        comm.recv_host(&mut got, left).unwrap();
    } else {
        comm.recv_host(&mut got, left).unwrap();
        comm.send_host(&out, right).unwrap();
    }
    for (i, &v) in got.iter().enumerate() {
        assert_eq!(
            v,
            value(left, rank, i),
            "rank {rank}: element {i} from {left}"
        );
    }
    // Every ring, each way: more than /dev/shm holds.
    let pair = 1 << 17;
    let send: Vec<u32> = (0..n * pair)
        .map(|i| value(rank, i / pair, i % pair))
        .collect();
    let mut recv = vec![u32::MAX; n * pair];
    let t0 = Instant::now();
    match comm.all_to_all_host(&send, &mut recv) {
        Ok(()) => {
            for (i, &v) in recv.iter().enumerate() {
                assert_eq!(
                    v,
                    value(i / pair, rank, i % pair),
                    "rank {rank}: element {i}"
                );
            }
            println!("rank {rank}: all_to_all: ok");
        }
        Err(e) => {
            assert!(
                t0.elapsed() < Duration::from_secs(15),
                "rank {rank}: failed only after {:?}: {e}",
                t0.elapsed()
            );
            println!("rank {rank}: all_to_all: {e}");
        }
    }
    drop(comm);
    streamcomm_testkit::child_ran();
}
