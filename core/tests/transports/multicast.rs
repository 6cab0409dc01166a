//! The multicast barrier over verbs (the Soft-RoCE guest of
//! `scripts/verbs-check.sh`; elsewhere each test says `SKIPPED`):
//! - ranks as processes run barriers with arrivals dropped and duplicated
//!   by the fault injector on receive, and a counter in a shared-memory
//!   word, outside the barrier, catches any rank that leaves early;
//! - total loss, and a killed rank, end in an error on every survivor
//!   within the timeout;
//! - stream barriers, captured in a graph and replayed, driven by the
//!   proxy thread, order the work around them;
//! - the default selection prefers multicast for 4 ranks on 4 (pretend)
//!   hosts, and falls back with the reason where the join is refused; a
//!   request for it then fails with that reason.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::harness;
use crate::harness::shared::{SharedWords, checked_stream_barrier};
use streamcomm::barrier::BarrierAlgo;
use streamcomm::bootstrap::UniqueId;
use streamcomm::config::HostsOverride;
use streamcomm::config::Progress;
use streamcomm::host::HostStream;
use streamcomm::{Communicator, Config, Error, Transport};

const SCENARIO: &str = "MCAST_TEST_SCENARIO";
const COUNTER: &str = "MCAST_TEST_COUNTER";
const ROUNDS: &str = "MCAST_TEST_ROUNDS";
const NO_DEVICE: &str =
    "no active RDMA device on this host (scripts/verbs-check.sh runs it in the Soft-RoCE guest)";

fn rdma_here(test: &str) -> bool {
    let here = streamcomm_testkit::rdma_device(cfg!(feature = "verbs"));
    if !here {
        streamcomm_testkit::skip(test, NO_DEVICE);
    }
    here
}

/// Spawns `n` ranks of scenario `scenario` with `env`.
fn spawn(n: usize, scenario: &str, env: &[(&str, String)]) -> Vec<Child> {
    let exe = std::env::current_exe().unwrap();
    let id = UniqueId::new().unwrap();
    (0..n)
        .map(|rank| {
            let mut c = Command::new(&exe);
            c.args(streamcomm_testkit::child_args!("multicast_child"))
                .env(SCENARIO, scenario)
                .env("STREAMCOMM_UNIQUE_ID", id.to_string())
                .env("RANK", rank.to_string())
                .env("WORLD_SIZE", n.to_string())
                .env("STREAMCOMM_TRANSPORT", "verbs")
                .env("STREAMCOMM_BARRIER_ALGO", "multicast")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            for (k, v) in env {
                c.env(k, v);
            }
            c.spawn().unwrap()
        })
        .collect()
}

/// Waits for every child (killing all past `limit`): exit codes, and
/// standard output followed by standard error.
fn wait_all(children: Vec<Child>, limit: Duration) -> Vec<(Option<i32>, String)> {
    let t0 = Instant::now();
    let mut children: Vec<Option<Child>> = children.into_iter().map(Some).collect();
    let mut out = vec![None; children.len()];
    while out.iter().any(Option::is_none) {
        if t0.elapsed() > limit {
            for c in children.iter_mut().flatten() {
                let _ = c.kill();
            }
            panic!("ranks still running after {limit:?}: {out:?}");
        }
        for (r, c) in children.iter_mut().enumerate() {
            if let Some(child) = c
                && child.try_wait().unwrap().is_some()
            {
                let o = c.take().unwrap().wait_with_output().unwrap();
                let text = format!(
                    "{}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                );
                out[r] = Some((o.status.code(), text));
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    out.into_iter().map(Option::unwrap).collect()
}

/// Barriers per run: 10,000 (the full matrix), or fewer in the quick run
/// (`STREAMCOMM_TEST_FULL` unset), whose guest time CI pays.
fn rounds(n: usize) -> usize {
    if streamcomm_testkit::full() {
        10_000
    } else {
        match n {
            2 => 10_000,
            4 => 2_000,
            _ => 500,
        }
    }
}

/// 2, 4 and 8 ranks, 0, 1 and 10 % of the datagrams dropped on receive
/// and 1 % of the rest duplicated: every rank leaves barrier e only after
/// all n ranks added to the shared counter for e.
#[test]
fn no_rank_leaves_early_under_loss_and_duplicates() {
    if !rdma_here("multicast::no_rank_leaves_early_under_loss_and_duplicates") {
        return;
    }
    let seed = streamcomm_testkit::seed();
    println!("seed {seed}");
    for n in [2, 4, 8] {
        for drop in [0, 1, 10] {
            let path = std::env::temp_dir().join(format!(
                "streamcomm-mcast-{}-{n}-{drop}",
                std::process::id()
            ));
            let _ = std::fs::remove_file(&path);
            let rounds = rounds(n);
            let t0 = Instant::now();
            let faults = format!("mcast:drop={drop}%:dup=1%:seed={seed}");
            let out = wait_all(
                spawn(
                    n,
                    "loss",
                    &[
                        (COUNTER, path.display().to_string()),
                        (ROUNDS, rounds.to_string()),
                        ("STREAMCOMM_FAULTS", faults.clone()),
                    ],
                ),
                Duration::from_secs(600),
            );
            let took = t0.elapsed();
            let _ = std::fs::remove_file(&path);
            let mut questions = 0u64;
            let mut resends = 0u64;
            for (r, (code, stdout)) in out.iter().enumerate() {
                assert_eq!(
                    *code,
                    Some(0),
                    "{faults}, {n} ranks: rank {r} failed:\n{stdout}"
                );
                let stats: Vec<u64> = stdout
                    .lines()
                    .find_map(|l| l.strip_prefix("stats "))
                    .unwrap_or_else(|| panic!("rank {r} printed no stats:\n{stdout}"))
                    .split(' ')
                    .map(|x| x.parse().unwrap())
                    .collect();
                assert_eq!(stats[0], rounds as u64 + 1, "barriers run (probe included)");
                questions += stats[1];
                resends += stats[2];
            }
            println!(
                "multicast {n} ranks, drop {drop}% dup 1%: {rounds} barriers in {:.1} s, \
                 {:.3} questions and {:.3} re-sends per barrier (all ranks)",
                took.as_secs_f64(),
                questions as f64 / rounds as f64,
                resends as f64 / rounds as f64
            );
        }
    }
}

/// Every datagram of the barriers lost (the creation's probe passes): each
/// rank's first barrier ends in an error within the timeout: the timeout
/// naming the ranks it missed, or the failure of a rank that timed out
/// first (which aborts the communicator).
#[test]
fn total_loss_ends_in_an_error_on_every_rank() {
    if !rdma_here("multicast::total_loss_ends_in_an_error_on_every_rank") {
        return;
    }
    let t0 = Instant::now();
    let out = wait_all(
        spawn(
            3,
            "lost",
            &[
                ("STREAMCOMM_FAULTS", "mcast:drop=100%".into()),
                ("STREAMCOMM_TIMEOUT", "5".into()),
            ],
        ),
        Duration::from_secs(120),
    );
    let took = t0.elapsed();
    for (r, (code, stdout)) in out.iter().enumerate() {
        assert_eq!(*code, Some(42), "rank {r}: {stdout}");
        print!("{stdout}");
    }
    assert!(
        out.iter()
            .any(|(_, o)| o.contains("multicast") && o.contains("the arrivals of ranks [")),
        "no rank timed out naming the ranks it missed: {out:?}"
    );
    println!("total loss: every rank failed after {took:?} (timeout 5 s)");
    assert!(took < Duration::from_secs(60), "{took:?}");
}

/// Rank 1 of 3 is SIGKILLed between barriers: ranks 0 and 2 end in an
/// error within the timeout.
#[test]
fn a_killed_rank_ends_in_an_error_on_the_survivors() {
    if !rdma_here("multicast::a_killed_rank_ends_in_an_error_on_the_survivors") {
        return;
    }
    let t0 = Instant::now();
    let children = spawn(3, "die", &[("STREAMCOMM_TIMEOUT", "20".into())]);
    let out = wait_all(children, Duration::from_secs(120));
    let took = t0.elapsed();
    // A process killed by a signal has no exit code.
    assert_eq!(out[1].0, None, "rank 1 was killed: {:?}", out[1]);
    for r in [0, 2] {
        assert_eq!(out[r].0, Some(42), "rank {r}: {}", out[r].1);
    }
    println!("killed rank: survivors failed after {took:?} (timeout 20 s)");
    assert!(took < Duration::from_secs(60), "{took:?}");
}

#[test]
#[ignore = "entry point of the child processes"]
fn multicast_child() {
    let Ok(scenario) = std::env::var(SCENARIO) else {
        return;
    };
    let comm = Communicator::from_env().unwrap();
    assert_eq!(comm.barrier_algo(), BarrierAlgo::Multicast);
    let (rank, n) = (comm.rank(), comm.size() as u64);
    let stream = HostStream::new().unwrap();
    match scenario.as_str() {
        "loss" => {
            let counter = SharedWords::map(&std::env::var(COUNTER).unwrap(), 1);
            let rounds: u64 = std::env::var(ROUNDS).unwrap().parse().unwrap();
            for e in 0..rounds {
                counter.word(0).fetch_add(1, Ordering::SeqCst);
                if e % 8 == 7 {
                    comm.barrier(&stream).unwrap();
                    stream.synchronize().unwrap();
                } else {
                    comm.barrier_host().unwrap();
                }
                let seen = counter.word(0).load(Ordering::SeqCst);
                if seen < n * (e + 1) {
                    println!("rank {rank} left barrier {e} having seen {seen} arrivals");
                    std::process::exit(3);
                }
            }
            let s = streamcomm::testing::barrier::multicast_stats(&comm).unwrap();
            println!("stats {} {} {}", s[0], s[1], s[2]);
        }
        "lost" => match comm.barrier_host() {
            Err(e) => {
                println!("rank {rank} got: {e}");
                std::process::exit(42);
            }
            Ok(()) => std::process::exit(44),
        },
        "die" => {
            for i in 0.. {
                if rank == 1 && i == 50 {
                    // SAFETY: raising SIGKILL on ourselves.
                    unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
                }
                if let Err(e) = comm.barrier_host() {
                    println!("rank {rank} got: {e}");
                    // Stay a moment, so that no survivor sees the other's exit first.
                    std::thread::sleep(Duration::from_secs(2));
                    std::process::exit(42);
                }
            }
        }
        other => panic!("unknown scenario {other}"),
    }
}

fn pretend_hosts(faults: Option<&str>, algo: Option<BarrierAlgo>) -> Config {
    let mut c = harness::small_config();
    c.transport = Transport::Verbs.into();
    c.hosts_override = Some(HostsOverride::RanksPerHost(1));
    c.barrier_algo = algo;
    match faults {
        Some(f) => c
            .with_vars(|name| (name == "STREAMCOMM_FAULTS").then(|| f.to_string()))
            .unwrap(),
        None => c,
    }
}

/// 4 ranks on 4 (pretend) hosts, all on verbs: the default prefers
/// multicast and runs it; with rank 2's join refused, everyone keeps the
/// flag algorithm the default chose and says why; asking for multicast
/// then fails with that reason on every rank.
#[test]
fn the_default_prefers_multicast_and_falls_back_with_the_reason() {
    if !rdma_here("multicast::the_default_prefers_multicast_and_falls_back_with_the_reason") {
        return;
    }
    harness::run_threads(
        4,
        pretend_hosts(None, None),
        Duration::from_secs(120),
        |comm| {
            assert_eq!(comm.barrier_algo(), BarrierAlgo::Multicast);
            assert_eq!(comm.barrier_fallback(), None);
            for _ in 0..20 {
                comm.barrier_host().unwrap();
            }
            // Switching away and back keeps the group.
            comm.set_barrier_algo(BarrierAlgo::Tree { fanout: 2 })
                .unwrap();
            comm.barrier_host().unwrap();
            comm.set_barrier_algo(BarrierAlgo::Multicast).unwrap();
            comm.barrier_host().unwrap();
        },
    );
    let refused = Some("mcast:rank=2:refuse");
    harness::run_threads(
        4,
        pretend_hosts(refused, None),
        Duration::from_secs(120),
        |comm| {
            let algo = comm.barrier_algo();
            assert_ne!(algo, BarrierAlgo::Multicast);
            let why = comm.barrier_fallback().expect("a reason").to_string();
            assert!(
                why.contains("rank 2")
                    && why.contains("refused")
                    && why.contains(&algo.to_string()),
                "{why}"
            );
            comm.barrier_host().unwrap();
            let err = comm.set_barrier_algo(BarrierAlgo::Multicast).unwrap_err();
            assert!(
                matches!(&err, Error::Unavailable(m) if m.contains("rank 2") && m.contains("refused")),
                "{err}"
            );
            println!("rank {}: {why}", comm.rank());
        },
    );
    // Asked for explicitly, creation fails with the reason on every rank.
    let config = pretend_hosts(refused, Some(BarrierAlgo::Multicast));
    let id = UniqueId::new().unwrap();
    let errors: Vec<String> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|rank| {
                let (id, config) = (&id, config.clone());
                s.spawn(move || {
                    Communicator::builder()
                        .unique_id(id)
                        .rank(rank)
                        .size(4)
                        .config(config)
                        .build()
                        .err()
                        .map(|e| e.to_string())
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap().expect("creation must fail"))
            .collect()
    });
    for e in &errors {
        assert!(
            e.contains("multicast") && e.contains("rank 2") && e.contains("refused"),
            "{e}"
        );
    }
}

/// 3 ranks (threads), the multicast barrier driven by the proxy thread:
/// a graph of three stream barriers, each between a task that counts the
/// arrival and one that checks every rank arrived, replayed 100 times,
/// then 100 barriers enqueued one by one.
#[test]
fn captured_stream_barriers_through_the_proxy() {
    if !rdma_here("multicast::captured_stream_barriers_through_the_proxy") {
        return;
    }
    let n = 3;
    let mut config = harness::small_config();
    config.transport = Transport::Verbs.into();
    config.barrier_algo = Some(BarrierAlgo::Multicast);
    config.progress = Progress::Proxy;
    let arrived = Arc::new(AtomicUsize::new(0));
    harness::run_threads(n, config, Duration::from_secs(300), move |comm| {
        assert_eq!(comm.barrier_algo(), BarrierAlgo::Multicast);
        let stream = HostStream::new().unwrap();
        let done = Arc::new(AtomicUsize::new(0));
        let round = |s: &HostStream| checked_stream_barrier(&comm, s, n, &arrived, &done);
        stream.begin_capture().unwrap();
        for _ in 0..3 {
            round(&stream);
        }
        let graph = stream.end_capture().unwrap();
        for _ in 0..100 {
            graph.launch(&stream).unwrap();
        }
        for _ in 0..100 {
            round(&stream);
        }
        stream.synchronize().unwrap();
        assert_eq!(done.load(Ordering::SeqCst), 400);
    });
}
