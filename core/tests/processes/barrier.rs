//! Barriers between real processes: every algorithm × N in 1..=9, ranks
//! arriving late by random delays, checked through a shared-memory table
//! that every rank writes before barrier k and reads after it (host barrier
//! and stream barrier, whose writes and reads are stream tasks), plus
//! captured barriers replayed 1,000 times, and pretend multi-host layouts
//! for the tree and hierarchical algorithms; the same checks over tcp,
//! where barriers are the dissemination plan's messages. Each size runs
//! 1,000 host barriers per algorithm (10,000 with `STREAMCOMM_TEST_FULL=1`;
//! 300 and 3,000 over tcp). A
//! million-barrier soak is `#[ignore]`d (run it with
//! `cargo test --release --test processes -- --ignored soak_a_million`).

use crate::harness;
use crate::harness::shared::SharedWords;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use streamcomm::barrier::BarrierAlgo;
use streamcomm::host::HostStream;
use streamcomm::{Communicator, Transport};

const SCENARIO: &str = "STREAMCOMM_TEST_SCENARIO";
const TABLE: &str = "STREAMCOMM_TEST_TABLE";
const ITERS: &str = "STREAMCOMM_TEST_ITERS";
const MAX_RANKS: usize = 16;

/// A file in /dev/shm that every rank maps: `slots[r]` = last barrier rank r entered.
struct Table {
    path: String,
}

impl Table {
    fn new() -> Table {
        let path = format!(
            "/dev/shm/streamcomm-test-{}-{:x}",
            std::process::id(),
            rand::random::<u64>()
        );
        std::fs::write(&path, vec![0u8; MAX_RANKS * 64]).unwrap();
        Table { path }
    }
}

impl Drop for Table {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The mapped table in a child.
struct Slots(SharedWords);

impl Slots {
    fn map(path: &str) -> Slots {
        Slots(SharedWords::map(path, MAX_RANKS))
    }

    fn slot(&self, r: usize) -> &AtomicU64 {
        self.0.word(r)
    }

    /// Every rank's entered count is at least `k`.
    fn check_all(&self, n: usize, k: u64, who: &str) {
        for r in 0..n {
            let seen = self.slot(r).load(Ordering::SeqCst);
            assert!(
                seen >= k,
                "{who} left barrier {k} while rank {r} had only entered {seen}"
            );
        }
    }
}

fn launch(n: usize, scenario: &str, iters: u64, extra_env: &[(&str, &str)]) {
    let table = Table::new();
    let mut env = vec![
        (SCENARIO, scenario.to_string()),
        (TABLE, table.path.clone()),
        (ITERS, iters.to_string()),
        (
            "STREAMCOMM_TEST_SEED",
            streamcomm_testkit::seed().to_string(),
        ),
        ("STREAMCOMM_TIMEOUT", "60".to_string()),
        ("STREAMCOMM_BUFFSIZE", "64K".to_string()),
    ];
    env.extend(extra_env.iter().map(|(k, v)| (*k, v.to_string())));
    harness::launch_children(
        n,
        &streamcomm_testkit::test_path(module_path!(), "child"),
        &env,
        Duration::from_secs(600),
        &format!("barrier scenario {scenario} on {n} ranks"),
    );
}

#[test]
#[ignore = "entry point of the child processes"]
fn child() {
    let Ok(scenario) = std::env::var(SCENARIO) else {
        return;
    };
    let iters: u64 = std::env::var(ITERS).unwrap().parse().unwrap();
    let slots = Arc::new(Slots::map(&std::env::var(TABLE).unwrap()));
    let comm = Communicator::from_env().unwrap();
    // `None`: the communicator's own choice (over tcp, message dissemination).
    let algos: Vec<Option<BarrierAlgo>> = match scenario.as_str() {
        "all" => BarrierAlgo::ALL.iter().copied().map(Some).collect(),
        "messages" => vec![None],
        one => vec![Some(BarrierAlgo::parse(one).unwrap())],
    };
    let (rank, n) = (comm.rank(), comm.size());
    let mut rng =
        rand::rngs::StdRng::seed_from_u64(streamcomm_testkit::seed() ^ (rank as u64) << 32);
    let mut entered = 0u64;
    let stream = HostStream::new().unwrap();
    for choice in algos {
        match choice {
            // Shared memory has no multicast group (the verbs tests run it).
            Some(BarrierAlgo::Multicast) => {
                let refused = comm.set_barrier_algo(BarrierAlgo::Multicast);
                assert!(
                    matches!(&refused, Err(streamcomm::Error::Unavailable(m)) if m.contains("multicast")),
                    "{refused:?}"
                );
                continue;
            }
            Some(algo) => comm.set_barrier_algo(algo).unwrap(),
            // Messages: some peer over tcp, dissemination, no switching.
            None if n > 1 => {
                let rank = comm.rank();
                assert!((0..n).any(|p| comm.transport_to(p) == Some(Transport::Tcp)));
                assert_eq!(comm.barrier_algo(), BarrierAlgo::Dissemination);
                let refused = comm.set_barrier_algo(BarrierAlgo::Chain);
                assert!(refused.is_err(), "rank {rank}: {refused:?}");
            }
            None => {}
        }
        let algo = comm.barrier_algo();
        // Host barriers with random late arrivals.
        for _ in 0..iters {
            if rng.gen_ratio(1, 100) {
                std::thread::sleep(Duration::from_micros(rng.gen_range(0..200)));
            }
            entered += 1;
            slots.slot(rank).store(entered, Ordering::SeqCst);
            comm.barrier_host().unwrap();
            slots.check_all(n, entered, &format!("rank {rank} ({algo}, host)"));
        }
        // Stream barriers: the write before and the check after are stream tasks.
        let stream_iters = iters / 10;
        for _ in 0..stream_iters {
            entered += 1;
            let (s, k) = (slots.clone(), entered);
            stream
                .host_fn(move || s.slot(rank).store(k, Ordering::SeqCst))
                .unwrap();
            comm.barrier(&stream).unwrap();
            let (s, label) = (slots.clone(), format!("rank {rank} ({algo}, stream)"));
            stream.host_fn(move || s.check_all(n, k, &label)).unwrap();
        }
        stream.synchronize().unwrap();
        // Three captured barriers, replayed: every replay keeps the guarantee.
        let replays = (iters / 30).max(1);
        let counter = Arc::new(AtomicU64::new(entered));
        stream.begin_capture().unwrap();
        for _ in 0..3 {
            let (s, c) = (slots.clone(), counter.clone());
            stream
                .host_fn(move || {
                    let k = c.fetch_add(1, Ordering::SeqCst) + 1;
                    s.slot(rank).store(k, Ordering::SeqCst);
                })
                .unwrap();
            comm.barrier(&stream).unwrap();
            let (s, c, label) = (
                slots.clone(),
                counter.clone(),
                format!("rank {rank} ({algo}, graph)"),
            );
            stream
                .host_fn(move || s.check_all(n, c.load(Ordering::SeqCst), &label))
                .unwrap();
        }
        let graph = stream.end_capture().unwrap();
        for _ in 0..replays {
            graph.launch(&stream).unwrap();
        }
        stream.synchronize().unwrap();
        entered = counter.load(Ordering::SeqCst);
        assert_eq!(entered, slots.slot(rank).load(Ordering::SeqCst));
    }
    streamcomm_testkit::child_ran();
}

#[test]
fn every_algorithm_on_1_to_9_processes() {
    let iters = streamcomm_testkit::reps(1_000, 10_000) as u64;
    for n in 1..=9 {
        launch(n, "all", iters, &[]);
    }
}

/// Communicators whose ranks talk over tcp run the message form of
/// dissemination (the flag plan's notifies and waits as zero-byte
/// messages): the same checks, between processes.
#[test]
fn message_barriers_over_tcp_on_1_to_9_processes() {
    let iters = streamcomm_testkit::reps(300, 3_000) as u64;
    for n in 1..=9 {
        launch(n, "messages", iters, &[("STREAMCOMM_TRANSPORT", "tcp")]);
    }
}

#[test]
fn tree_and_hierarchical_with_pretend_hosts() {
    for algo in [
        "tree:2",
        "hierarchical:dissemination",
        "hierarchical:tree:2",
    ] {
        launch(6, algo, 2_000, &[("STREAMCOMM_HOSTS_OVERRIDE", "2")]);
        launch(
            5,
            algo,
            2_000,
            &[("STREAMCOMM_HOSTS_OVERRIDE", "a,a,b,b,c")],
        );
    }
}

#[test]
#[ignore = "soak: a million barriers per algorithm on 4 processes (minutes)"]
fn soak_a_million_barriers() {
    launch(4, "all", 1_000_000, &[]);
}
