//! Failures while tcp links are made on first use, for real: four
//! processes over tcp, none connected to another after creation. Rank 2
//! stops itself (`SIGSTOP`: its kernel still completes connections into
//! its listener's backlog, nobody answers them); rank 0 then sends to it
//! and waits for its reply, so its dial hangs between hello and answer
//! until rank 0 kills rank 2; rank 1 waits for a message from rank 0 that
//! never comes; rank 3 starts waiting for rank 0 only once rank 0 has
//! failed. All three fail naming rank 2 well within the timeout (rank 0
//! from its dial, ranks 1 and 3 from rank 0's abort notice: a rank waiting
//! for a peer connects to it, and a rank that failed tells the peers that
//! connect to it afterwards too), and they shrink to a communicator of
//! three whose all-reduce is checked, though most pairs were never
//! connected.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use streamcomm::Communicator;
use streamcomm_run::local::{LocalLauncher, Outcome};

const CHILD: &str = "STREAMCOMM_TEST_FIRST_CONTACT";
const DIR: &str = "STREAMCOMM_TEST_DIR";
const VICTIM: usize = 2;
/// The communicators' timeout, in seconds: the failures must come long
/// before it.
const TIMEOUT_S: u64 = 60;

#[test]
fn a_rank_killed_while_a_peer_dials_it_is_named_by_every_rank() {
    let dir = std::env::temp_dir().join(format!("streamcomm-first-contact-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let exe = std::env::current_exe().unwrap();
    let proof = streamcomm_testkit::ChildProof::new("first contact");
    let (proof_key, proof_dir) = proof.env();
    let launcher = LocalLauncher::new(4, exe)
        .args(streamcomm_testkit::child_args!("child"))
        .env(proof_key, proof_dir)
        .env(CHILD, "1")
        .env(DIR, &dir)
        .env("STREAMCOMM_TRANSPORT", "tcp")
        .env("STREAMCOMM_TIMEOUT", TIMEOUT_S.to_string())
        .keep_going(true);
    let outcome = streamcomm_testkit::within(Duration::from_secs(90), move || launcher.run())
        .expect("launch");
    let _ = std::fs::remove_dir_all(&dir);
    match &outcome {
        Outcome::RankFailed { rank, .. } => assert_eq!(*rank, VICTIM, "{outcome}"),
        o => panic!("the job should report rank {VICTIM} killed, got {o}"),
    }
    assert_eq!(proof.count(), 3, "every survivor must finish its body");
}

#[test]
#[ignore = "entry point of the child processes"]
fn child() {
    if std::env::var(CHILD).is_err() {
        return;
    }
    let dir = PathBuf::from(std::env::var(DIR).unwrap());
    let world = Communicator::from_env().expect("from_env");
    let rank = world.rank();
    let connected = streamcomm::testing::transport::connected_peers;
    assert!(
        connected(&world).is_empty(),
        "rank {rank}: creation connected a tcp peer"
    );
    // No rank uses a link before every rank has looked (a rank that waits
    // for rank 0 dials it: rank 0 would see that connection).
    all_checked(&dir, rank, world.size());
    if rank == VICTIM {
        std::fs::write(dir.join("victim.pid"), std::process::id().to_string()).unwrap();
        // SAFETY: raise has no memory-safety preconditions.
        unsafe { libc::raise(libc::SIGSTOP) };
        unreachable!("rank {rank} is killed while stopped");
    }
    let t0 = Instant::now();
    let failure = if rank == 0 {
        let pid = stopped_victim(&dir);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        });
        let mut reply = [0u32; 4];
        let e = world
            .send_host(&[1u32, 2, 3, 4], VICTIM)
            .and_then(|()| world.recv_host(&mut reply, VICTIM))
            .expect_err("rank 2 never replies");
        std::fs::write(dir.join("rank0.failed"), b"").unwrap();
        e
    } else {
        if rank == 3 {
            while !dir.join("rank0.failed").exists() {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        let mut got = [0u32; 4];
        world
            .recv_host(&mut got, 0)
            .expect_err("rank 0 never sends")
    };
    let took = t0.elapsed();
    eprintln!("rank {rank}: after {took:?}: {failure}");
    assert_eq!(failure.culprit(), Some(VICTIM), "rank {rank}: {failure}");
    assert!(
        took < Duration::from_secs(TIMEOUT_S / 4),
        "rank {rank}: named rank {VICTIM} only after {took:?}"
    );
    let alive = world
        .shrink()
        .unwrap_or_else(|e| panic!("rank {rank}: shrink: {e}"));
    assert_eq!(alive.size(), 3);
    let mine = [rank as f32 + 0.5; 64];
    let mut sum = [f32::NAN; 64];
    alive
        .all_reduce_host(&mine, &mut sum, streamcomm::ReduceOp::Sum)
        .unwrap();
    assert!(
        sum.iter().all(|&v| v == 0.5 + 1.5 + 3.5),
        "rank {rank}: {sum:?}"
    );
    drop(alive);
    streamcomm_testkit::child_ran();
}

/// Rank 2's pid, once it has stopped itself.
fn stopped_victim(dir: &Path) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(Instant::now() < deadline, "rank {VICTIM} never stopped");
        if let Some(pid) = std::fs::read_to_string(dir.join("victim.pid"))
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok())
        {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // The state follows the command's closing parenthesis.
            let state = stat
                .rsplit(')')
                .next()
                .and_then(|s| s.split_whitespace().next());
            if state == Some("T") {
                return pid;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Says this rank has checked its links after creation, then waits until
/// every rank of `n` has (through files in `dir`: no link is used).
fn all_checked(dir: &Path, rank: usize, n: usize) {
    std::fs::write(dir.join(format!("checked.{rank}")), b"").unwrap();
    let t0 = Instant::now();
    while !(0..n).all(|r| dir.join(format!("checked.{r}")).exists()) {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "rank {rank}: the others never checked their links"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}
