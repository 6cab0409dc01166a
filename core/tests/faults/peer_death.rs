//! A rank sharing memory with the others is SIGKILLed at a random point of
//! a long all-reduce loop, 20 times over: every survivor fails with an error
//! naming it, well within the timeout, and no shared-memory segment is left
//! behind. A round takes about 0.3 s here (process start included; the
//! figures are printed). A rank that drops its communicator cleanly and
//! exits, on the other hand, is no failure for the ranks still running. A
//! tcp peer killed while a rank waits to receive from it fails that rank at
//! once (the closed socket), not at its timeout.

use rand::{Rng, SeedableRng};
use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use streamcomm::host::{HostBuffer, HostStream};
use streamcomm::{Communicator, Error, ReduceOp};

const CHILD: &str = "STREAMCOMM_TEST_DEATH_CHILD";
const LEAVER: &str = "STREAMCOMM_TEST_LEAVER_CHILD";
const TCP_EOF: &str = "STREAMCOMM_TEST_TCP_EOF_CHILD";
const VICTIM: usize = 2;

#[test]
#[ignore = "entry point of the child processes"]
fn child() {
    let Ok(kill_at) = std::env::var(CHILD) else {
        return;
    };
    let kill_at: u64 = kill_at.parse().unwrap();
    let comm = Communicator::from_env().unwrap();
    let stream = HostStream::new().unwrap();
    let buf = HostBuffer::<f32>::from_slice(&vec![1.0; 300_000]);
    let mut out = HostBuffer::<f32>::zeroed(300_000);
    let t0 = Instant::now();
    for i in 0u64.. {
        if comm.rank() == VICTIM && i == kill_at {
            // SAFETY: raising SIGKILL on ourselves.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
        let r = comm
            .all_reduce(&buf, &mut out, ReduceOp::Sum, &stream)
            .and_then(|()| stream.synchronize());
        if let Err(e) = r {
            eprintln!("rank {} after {:?}: {e}", comm.rank(), t0.elapsed());
            // Stay a moment, so that no survivor hears of this one's exit
            // before it has its own error (they get it within milliseconds).
            std::thread::sleep(Duration::from_millis(200));
            let named = matches!(e, Error::RemoteFailed { peer: VICTIM, .. });
            std::process::exit(if named { 42 } else { 43 });
        }
    }
}

/// Two ranks over tcp: rank 1 is SIGKILLed while rank 0 waits in a
/// receive from it. The closed socket (EOF without a goodbye) must fail
/// rank 0 at once, naming rank 1, not at its timeout (60 s here).
#[test]
#[ignore = "entry point of the child processes"]
fn tcp_eof_child() {
    if std::env::var(TCP_EOF).is_err() {
        return;
    }
    let comm = Communicator::from_env().unwrap();
    comm.barrier_host().unwrap();
    if comm.rank() == 1 {
        std::thread::sleep(Duration::from_millis(300));
        // SAFETY: raising SIGKILL on ourselves.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    }
    let t0 = Instant::now();
    let mut b = [0u64; 4];
    let e = comm
        .recv_host(&mut b, 1)
        .expect_err("a receive from a killed rank");
    let took = t0.elapsed();
    eprintln!("rank 0 after {took:?}: {e}");
    let named = matches!(
        e,
        Error::Transport { peer: 1, .. } | Error::RemoteFailed { peer: 1, .. }
    );
    std::process::exit(if named && took < Duration::from_secs(5) {
        42
    } else {
        43
    });
}

#[test]
fn a_tcp_peer_killed_mid_receive_fails_the_receiver_at_once() {
    let exe = std::env::current_exe().unwrap();
    let id = streamcomm::bootstrap::UniqueId::new().unwrap();
    let mut children: Vec<_> = (0..2)
        .map(|rank| {
            std::process::Command::new(&exe)
                .args(streamcomm_testkit::child_args!("tcp_eof_child"))
                .env(TCP_EOF, "1")
                .env("STREAMCOMM_UNIQUE_ID", id.to_string())
                .env("RANK", rank.to_string())
                .env("WORLD_SIZE", "2")
                .env("STREAMCOMM_TRANSPORT", "tcp")
                .env("STREAMCOMM_TIMEOUT", "60")
                .spawn()
                .unwrap()
        })
        .collect();
    let t0 = Instant::now();
    let mut status = [None, None];
    while status.iter().any(Option::is_none) {
        if t0.elapsed() > Duration::from_secs(30) {
            children.iter_mut().for_each(|c| drop(c.kill()));
            panic!("a rank hangs: rank 0 waits for a killed tcp peer");
        }
        for (r, c) in children.iter_mut().enumerate() {
            if status[r].is_none() {
                status[r] = c.try_wait().unwrap();
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        status[1].unwrap().signal(),
        Some(libc::SIGKILL),
        "{status:?}"
    );
    assert_eq!(
        status[0].unwrap().code(),
        Some(42),
        "rank 0 must fail within 5 s naming rank 1: {status:?}"
    );
}

fn segments_of(pids: &[u32]) -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| {
                    pids.iter()
                        .any(|p| n.starts_with(&format!("streamcomm-{p}-")))
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn killing_a_shm_rank_fails_the_others_naming_it() {
    let exe = std::env::current_exe().unwrap();
    let mut rounds = Vec::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(streamcomm_testkit::seed());
    for round in 0..20u64 {
        let id = streamcomm::bootstrap::UniqueId::new().unwrap();
        let kill_at = rng.gen_range(3..43u64);
        let t0 = Instant::now();
        let mut children: Vec<_> = (0..4)
            .map(|rank| {
                std::process::Command::new(&exe)
                    .args(streamcomm_testkit::child_args!("child"))
                    .env(CHILD, kill_at.to_string())
                    .env("STREAMCOMM_UNIQUE_ID", id.to_string())
                    .env("RANK", rank.to_string())
                    .env("WORLD_SIZE", "4")
                    .env("STREAMCOMM_TIMEOUT", "30")
                    .env("STREAMCOMM_BUFFSIZE", "256K")
                    .spawn()
                    .unwrap()
            })
            .collect();
        let pids: Vec<u32> = children.iter().map(|c| c.id()).collect();
        let mut status = vec![None; 4];
        while status.iter().any(Option::is_none) {
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "round {round}: a rank hangs"
            );
            for (r, c) in children.iter_mut().enumerate() {
                if status[r].is_none() {
                    status[r] = c.try_wait().unwrap();
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let took = t0.elapsed();
        rounds.push(took);
        assert_eq!(
            status[VICTIM].unwrap().signal(),
            Some(libc::SIGKILL),
            "round {round}: {status:?}"
        );
        for r in [0, 1, 3] {
            assert_eq!(
                status[r].unwrap().code(),
                Some(42),
                "round {round}: rank {r} must fail naming rank {VICTIM}: {status:?}"
            );
        }
        // Timeout 30 s + 2 s is the bound; the watchdog does it in ~100 ms.
        assert!(
            took < Duration::from_secs(32),
            "round {round} took {took:?}"
        );
        assert_eq!(
            segments_of(&pids),
            Vec::<String>::new(),
            "round {round}: segments left in /dev/shm"
        );
    }
    let total: Duration = rounds.iter().sum();
    eprintln!(
        "20 rounds in {total:?}: mean {:?}, max {:?} per round",
        total / 20,
        rounds.iter().max().unwrap()
    );
}

#[test]
#[ignore = "entry point of the child processes"]
fn leaver_child() {
    if std::env::var(LEAVER).is_err() {
        return;
    }
    let comm = Communicator::from_env().unwrap();
    comm.barrier_host().unwrap();
    if comm.rank() == 0 {
        drop(comm);
        streamcomm_testkit::child_ran();
        return; // the process exits at once
    }
    // Several watchdog periods after rank 0 has gone.
    std::thread::sleep(Duration::from_millis(500));
    if let Some(e) = comm.async_error() {
        eprintln!("rank {}: {e}", comm.rank());
        std::process::exit(44);
    }
    streamcomm_testkit::child_ran();
}

#[test]
fn a_rank_that_leaves_cleanly_is_not_a_failure() {
    let exe = std::env::current_exe().unwrap();
    let id = streamcomm::bootstrap::UniqueId::new().unwrap();
    let proof = streamcomm_testkit::ChildProof::new("a rank that leaves cleanly");
    let children: Vec<_> = (0..3)
        .map(|rank| {
            std::process::Command::new(&exe)
                .args(streamcomm_testkit::child_args!("leaver_child"))
                .envs([proof.env()])
                .env(LEAVER, "1")
                .env("STREAMCOMM_UNIQUE_ID", id.to_string())
                .env("RANK", rank.to_string())
                .env("WORLD_SIZE", "3")
                .env("STREAMCOMM_TIMEOUT", "30")
                .spawn()
                .unwrap()
        })
        .collect();
    for (rank, mut c) in children.into_iter().enumerate() {
        let status = c.wait().unwrap();
        assert!(status.success(), "rank {rank}: {status:?}");
    }
    proof.assert_ran(3);
}
