//! A rank killed during the bootstrap's all-gather, for real: six
//! processes join one root; rank 3 joins and then stays away from the
//! all-gather until this test kills it (`SIGKILL`), and every other rank's
//! all-gather fails naming rank 3 (its peers see the connection reset,
//! the others learn it from the root), well within the timeout.

use std::time::{Duration, Instant};

use streamcomm::Error;
use streamcomm::bootstrap::UniqueId;
use streamcomm::testing::bootstrap::{Bootstrap, RootOptions, RootServer};

const CHILD: &str = "STREAMCOMM_TEST_BOOTSTRAP_KILL_CHILD";
const RANKS: usize = 6;
const VICTIM: usize = 3;

#[test]
#[ignore = "entry point of the child processes"]
fn child() {
    let Ok(id) = std::env::var(CHILD) else {
        return;
    };
    let id: UniqueId = id.parse().expect("the unique id");
    let rank: usize = std::env::var("RANK").unwrap().parse().unwrap();
    let mut boot = Bootstrap::connect(&id, rank, RANKS, Duration::from_secs(60)).expect("connect");
    streamcomm_testkit::child_ran();
    if rank == VICTIM {
        println!("victim joined");
        std::thread::sleep(Duration::from_secs(120));
        return;
    }
    let start = Instant::now();
    let err = boot.all_gather(b"x").expect_err("rank 3 never gathers");
    match err {
        Error::RemoteFailed { peer, .. } => {
            println!("rank {rank}: peer {peer} after {:?}", start.elapsed())
        }
        other => println!("rank {rank}: {other}"),
    }
}

#[test]
fn a_rank_killed_during_the_bootstrap_all_gather_is_named_by_every_rank() {
    let root = RootServer::start(
        "127.0.0.1:0".parse().unwrap(),
        UniqueId::random_secret().unwrap(),
        RootOptions::default(),
    )
    .expect("root");
    let id = root.id().to_string();
    let exe = std::env::current_exe().unwrap();
    let proof = streamcomm_testkit::ChildProof::new("bootstrap kill");
    let children: Vec<_> = (0..RANKS)
        .map(|rank| {
            std::process::Command::new(&exe)
                .args(streamcomm_testkit::child_args!("child"))
                .env(CHILD, &id)
                .env("RANK", rank.to_string())
                .envs([proof.env()])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut children: Vec<_> = children.into_iter().map(Some).collect();
    // Once everyone has joined (the victim says so), the others are in
    // their all-gather, waiting on it; then it dies.
    let mut victim = children[VICTIM].take().unwrap();
    let out = std::io::BufReader::new(victim.stdout.take().unwrap());
    let joined = std::io::BufRead::lines(out)
        .map_while(Result::ok)
        .any(|line| line.contains("victim joined"));
    assert!(joined, "the victim never joined");
    std::thread::sleep(Duration::from_millis(300));
    victim.kill().expect("kill the victim");
    let _ = victim.wait();
    for (rank, child) in children.into_iter().enumerate() {
        let Some(child) = child else { continue };
        // Each child ends on its own within its 60 s bootstrap timeout.
        let out = streamcomm_testkit::within(Duration::from_secs(90), move || {
            child.wait_with_output().expect("wait for a rank")
        });
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "rank {rank}: {text}");
        assert!(
            text.contains(&format!("rank {rank}: peer {VICTIM} after")),
            "rank {rank} should name rank {VICTIM}: {text}"
        );
    }
    proof.assert_ran(RANKS);
}
