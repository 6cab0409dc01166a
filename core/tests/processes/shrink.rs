//! Survival: 4 processes, one SIGKILLed at a random moment (rank 0, which
//! would be the natural coordinator, among them), and the survivors shrink
//! their communicator to the 3 ranks alive: all the same membership, in
//! time, and the collectives after it right. Also: a second death during
//! the shrink; a stopped (SIGSTOP) rank left out after the timeout, whose
//! waking (SIGCONT) leaves the survivors' memory untouched; shrink over tcp,
//! on loopback and across network namespaces.
//!
//! The ranks run under the launcher with `keep_going`, so the survivors run
//! on; the job's outcome still names the killed rank.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::netns;

use rand::{Rng, SeedableRng};
use streamcomm::host::{HostBuffer, HostStream};
use streamcomm::{Communicator, ReduceOp};
use streamcomm_run::local::{LocalLauncher, Outcome};

const SCENARIO: &str = "STREAMCOMM_TEST_SHRINK";
const VICTIM: &str = "STREAMCOMM_TEST_VICTIM";
const SECOND: &str = "STREAMCOMM_TEST_SECOND_VICTIM";
const DELAY_US: &str = "STREAMCOMM_TEST_DELAY_US";
const SEED: &str = "STREAMCOMM_TEST_SEED";
const DIR: &str = "STREAMCOMM_TEST_DIR";
const N: usize = 4;
/// The communicators' timeout in these jobs, in seconds.
const TIMEOUT_S: u64 = 3;

/// Runs one job of `N` ranks; returns its outcome and the proof count.
fn job(scenario: &str, env: &[(&str, String)], dir: &Path) -> (Outcome, usize) {
    let exe = std::env::current_exe().unwrap();
    let proof = streamcomm_testkit::ChildProof::new(scenario);
    let (proof_key, proof_dir) = proof.env();
    let mut launcher = LocalLauncher::new(N, exe)
        .args(streamcomm_testkit::child_args!("child"))
        .env(proof_key, proof_dir)
        .env(SCENARIO, scenario)
        .env(DIR, dir)
        .env("STREAMCOMM_TIMEOUT", TIMEOUT_S.to_string())
        .keep_going(true);
    for (k, v) in env {
        launcher = launcher.env(*k, v);
    }
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(launcher.run());
    });
    let limit = Duration::from_secs(60);
    let outcome = rx
        .recv_timeout(limit)
        .unwrap_or_else(|_| panic!("watchdog: {scenario} did not finish in {limit:?}"))
        .expect("launch");
    (outcome, proof.count())
}

/// Asserts that `outcome` names `rank` as killed by `signal`.
fn killed(outcome: &Outcome, rank: usize, signal: i32, what: &str) {
    match outcome {
        Outcome::RankFailed {
            rank: r, status, ..
        } => {
            assert_eq!(
                (*r, status.signal()),
                (rank, Some(signal)),
                "{what}: {outcome}"
            );
        }
        o => panic!("{what}: the job should report rank {rank} killed, got {o}"),
    }
}

/// A scratch directory for the ranks of one test, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(what: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("streamcomm-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn kill_trials(trials: usize, transport: &str) {
    let seed = streamcomm_testkit::seed();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let dir = TempDir::new(&format!("kill-{transport}"));
    for trial in 0..trials {
        // Rank 0 and the last rank first, then at random.
        let victim = match trial {
            0 => 0,
            1 => N - 1,
            _ => rng.gen_range(0..N),
        };
        let delay_us = rng.gen_range(0..300_000u64);
        let env = [
            (VICTIM, victim.to_string()),
            (DELAY_US, delay_us.to_string()),
            (SEED, (seed ^ trial as u64).to_string()),
            ("STREAMCOMM_TRANSPORT", transport.to_string()),
        ];
        let what =
            format!("trial {trial}: rank {victim} killed after {delay_us} us over {transport}");
        eprintln!("{what}");
        let (outcome, ran) = job("kill", &env, &dir);
        killed(&outcome, victim, libc::SIGKILL, &what);
        assert_eq!(ran, N - 1, "{what}: every survivor must finish its body");
    }
}

#[test]
fn survivors_shrink_after_a_random_rank_is_killed() {
    kill_trials(20, "shm");
}

#[test]
fn survivors_shrink_over_tcp() {
    kill_trials(4, "tcp");
}

/// Two pretend hosts (network namespaces), 2 ranks each: shared memory
/// inside a host, tcp between them, and the survivors meet across hosts.
/// Rank 0 (whose host's launcher serves the bootstrap root) dies in one
/// trial, rank 3 (on the other host) in the other.
#[test]
fn survivors_shrink_across_network_namespaces() {
    if !netns::ready_or_skip("shrink::survivors_shrink_across_network_namespaces") {
        return;
    }
    let net = netns::Netns::up(2).unwrap_or_else(|e| panic!("{e}"));
    let exe = std::env::current_exe().unwrap();
    let exe = exe.to_str().unwrap().to_string();
    let seed = streamcomm_testkit::seed();
    let dir = TempDir::new("kill-netns");
    for (trial, victim) in [0usize, 3].into_iter().enumerate() {
        let proof = streamcomm_testkit::ChildProof::new("shrink across namespaces");
        let (proof_key, proof_dir) = proof.env();
        let port = crate::common::unused_port().to_string();
        let env = [
            (proof_key, proof_dir),
            (SCENARIO, "kill".to_string()),
            (VICTIM, victim.to_string()),
            (DELAY_US, (100_000 + 50_000 * trial).to_string()),
            (SEED, (seed ^ trial as u64).to_string()),
            (DIR, dir.to_string_lossy().into_owned()),
            ("STREAMCOMM_TIMEOUT", TIMEOUT_S.to_string()),
            (
                "STREAMCOMM_SECRET",
                "0123456789abcdef0123456789abcdef".to_string(),
            ),
        ];
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let child_args = streamcomm_testkit::child_args!("child");
        let out = net
            .run_launchers(
                2,
                &|i| {
                    let mut words: Vec<String> = [
                        "--keep-going",
                        "--nnodes",
                        "2",
                        "--node-rank",
                        &i.to_string(),
                        "--master-addr",
                        &netns::host_addr(0).to_string(),
                        "--master-port",
                        &port,
                        "-n",
                        "2",
                        "--",
                        &exe,
                    ]
                    .map(String::from)
                    .to_vec();
                    words.extend(child_args.iter().cloned());
                    words
                },
                &env,
                Duration::from_secs(60),
            )
            .unwrap_or_else(|e| panic!("{e}"));
        let what = format!("trial {trial}: rank {victim} killed across namespaces");
        let stderr = netns::text(&out.stderr);
        for line in stderr
            .lines()
            .filter(|l| l.contains("shrunk") || l.contains("from the kill"))
        {
            eprintln!("{what}: {line}");
        }
        assert_eq!(
            out.status.code(),
            Some(128 + libc::SIGKILL),
            "{what}: the victim's launcher reports it\n{}\n{}",
            netns::text(&out.stdout),
            netns::text(&out.stderr)
        );
        assert_eq!(
            proof.count(),
            N - 1,
            "{what}: every survivor finishes\n{}",
            netns::text(&out.stderr)
        );
    }
}

#[test]
fn a_second_death_during_the_shrink_is_survived() {
    let seed = streamcomm_testkit::seed();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let dir = TempDir::new("double");
    for trial in 0..4 {
        let victim = rng.gen_range(0..N);
        let second = (victim + rng.gen_range(1..N)) % N;
        let env = [
            (VICTIM, victim.to_string()),
            (SECOND, second.to_string()),
            (DELAY_US, rng.gen_range(0..100_000u64).to_string()),
            (SEED, (seed ^ trial).to_string()),
        ];
        let what =
            format!("trial {trial}: rank {victim} killed, then rank {second} during the shrink");
        eprintln!("{what}");
        let (outcome, ran) = job("double", &env, &dir);
        assert!(
            matches!(outcome, Outcome::RankFailed { rank, .. } if rank == victim || rank == second),
            "{what}: {outcome}"
        );
        assert_eq!(ran, N - 2, "{what}: both survivors must finish");
    }
}

#[test]
fn a_stopped_rank_is_left_out_and_its_waking_touches_nothing() {
    let scratch = TempDir::new("stop");
    let dir = scratch.to_path_buf();
    let seed = streamcomm_testkit::seed();
    let env = [(VICTIM, "3".to_string()), (SEED, seed.to_string())];
    // The victim stops itself; it is resumed here once the survivors have
    // shrunk, and they check their memory after it has run again.
    let waker = {
        let dir = dir.clone();
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(40);
            while Instant::now() < deadline {
                let pid = std::fs::read_to_string(dir.join("victim.pid")).ok();
                let shrunk = (0..N - 1).all(|r| dir.join(format!("shrunk.{r}")).exists());
                if let (Some(pid), true) = (pid, shrunk) {
                    let pid: i32 = pid.trim().parse().unwrap();
                    // SAFETY: kill has no memory-safety preconditions.
                    unsafe { libc::kill(pid, libc::SIGCONT) };
                    std::fs::write(dir.join("resumed"), b"").unwrap();
                    return true;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            false
        })
    };
    let (outcome, ran) = job("stop", &env, &dir);
    assert!(waker.join().unwrap(), "the survivors never all shrank");
    assert_eq!(
        outcome,
        Outcome::Success,
        "the resumed rank exits cleanly too"
    );
    assert_eq!(ran, N, "every rank, the resumed one too, finishes its body");
}

#[test]
#[ignore = "entry point of the child processes"]
fn child() {
    let Ok(scenario) = std::env::var(SCENARIO) else {
        return;
    };
    let var = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    let victim = var(VICTIM).unwrap() as usize;
    let seed = var(SEED).unwrap();
    let dir = PathBuf::from(std::env::var(DIR).unwrap());
    let world = Communicator::from_env().expect("from_env");
    let rank = world.rank();
    match scenario.as_str() {
        "kill" => {
            let delay = Duration::from_micros(var(DELAY_US).unwrap());
            if rank == victim {
                die_after(delay, &dir);
            }
            let e = run_until_failure(&world, seed);
            let t0 = Instant::now();
            let alive = world
                .shrink()
                .unwrap_or_else(|err| panic!("rank {rank}: shrink after {e}: {err}"));
            let took = t0.elapsed();
            eprintln!(
                "rank {rank}: failure ({e}); shrunk to {} ranks in {took:?}",
                alive.size()
            );
            assert!(
                took < Duration::from_secs(TIMEOUT_S + 2),
                "rank {rank}: shrink took {took:?}"
            );
            check_members(&alive, rank, &[victim], seed);
            let since_kill = std::fs::read_to_string(dir.join("killed_at"))
                .ok()
                .and_then(|t| t.trim().parse::<u64>().ok())
                .map(|t| Duration::from_micros(now_us().saturating_sub(t)));
            let t1 = Instant::now();
            drop(world);
            let dropped = t1.elapsed();
            eprintln!(
                "rank {rank}: from the kill to a shrunk communicator that reduced right: {since_kill:?}; the failed parent dropped in {dropped:?}"
            );
            assert!(
                dropped < Duration::from_secs(TIMEOUT_S),
                "rank {rank}: dropping the failed parent took {dropped:?}"
            );
            streamcomm_testkit::child_ran();
            return;
        }
        "double" => {
            let second = var(SECOND).unwrap() as usize;
            if rank == victim {
                die_after(Duration::from_micros(var(DELAY_US).unwrap()), &dir);
            }
            let e = run_until_failure(&world, seed);
            if rank == second {
                die_after(Duration::from_micros(seed % 20_000), &dir);
            }
            // The second death may come after a shrink that kept it: then
            // the next collective fails, and the survivors shrink again.
            let mut comm = world
                .shrink()
                .unwrap_or_else(|err| panic!("rank {rank}: shrink after {e}: {err}"));
            // Probe until the second death is seen and shrunk away: at
            // most 3 shrinks more, and (the kill's thread may be starved on
            // a busy machine) within the timeout while the rank lives on.
            let mut shrinks = 0;
            let settle_by = Instant::now() + Duration::from_secs(TIMEOUT_S);
            loop {
                assert!(
                    shrinks < 3,
                    "rank {rank}: still not settled after 3 shrinks"
                );
                let mut probe = [1u32];
                match comm.all_reduce_in_place_host(&mut probe, ReduceOp::Sum) {
                    Ok(()) if comm.size() == N - 2 => break,
                    Ok(()) => {
                        assert!(
                            Instant::now() < settle_by,
                            "rank {rank}: rank {second} still a member after {TIMEOUT_S} s"
                        );
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    Err(e) => {
                        eprintln!("rank {rank}: after shrink {shrinks}: {e}");
                        shrinks += 1;
                        comm = comm
                            .shrink()
                            .unwrap_or_else(|err| panic!("rank {rank}: shrink again: {err}"));
                    }
                }
            }
            check_members(&comm, rank, &[victim, second], seed);
        }
        "stop" => stop_scenario(&world, victim, &dir, seed),
        s => panic!("unknown scenario {s}"),
    }
    streamcomm_testkit::child_ran();
}

/// Microseconds since the epoch: the clock every process here shares.
fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// SIGKILLs this process after `delay`, from a thread of its own, noting
/// the moment in `dir/killed_at`.
fn die_after(delay: Duration, dir: &Path) {
    let at = dir.join("killed_at");
    std::thread::spawn(move || {
        std::thread::sleep(delay);
        let _ = std::fs::write(&at, now_us().to_string());
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    });
}

/// Checked all-reduces on `world` until one fails; the error.
fn run_until_failure(world: &Communicator, seed: u64) -> streamcomm::Error {
    let deadline = Instant::now() + Duration::from_secs(20);
    let n = world.size();
    let mut i = 0u64;
    loop {
        assert!(
            Instant::now() < deadline,
            "rank {}: no failure seen",
            world.rank()
        );
        let mut x: Vec<f64> = (0..64)
            .map(|k| (seed ^ i ^ k) as u32 as f64 + world.rank() as f64)
            .collect();
        match world.all_reduce_in_place_host(&mut x, ReduceOp::Sum) {
            Ok(()) => {
                for (k, got) in x.iter().enumerate() {
                    let v = (seed ^ i ^ k as u64) as u32 as f64;
                    let want = n as f64 * v + (0..n).sum::<usize>() as f64;
                    assert_eq!(
                        *got,
                        want,
                        "rank {}: all-reduce {i} element {k}",
                        world.rank()
                    );
                }
            }
            Err(e) => return e,
        }
        i += 1;
    }
}

/// Checks that `comm` holds exactly the parent ranks other than `dead`,
/// ranked in parent order, and that a collective on it is right.
fn check_members(comm: &Communicator, parent_rank: usize, dead: &[usize], seed: u64) {
    let alive: Vec<usize> = (0..N).filter(|r| !dead.contains(r)).collect();
    assert_eq!(comm.size(), alive.len(), "rank {parent_rank}: size");
    assert_eq!(
        alive[comm.rank()],
        parent_rank,
        "rank {parent_rank}: renumbered in parent order"
    );
    // Every member says which parent rank it is: the same list everywhere.
    let mut seen = vec![0u32; N];
    seen[parent_rank] = 1;
    comm.all_reduce_in_place_host(&mut seen, ReduceOp::Sum)
        .unwrap();
    let want: Vec<u32> = (0..N).map(|r| u32::from(alive.contains(&r))).collect();
    assert_eq!(seen, want, "rank {parent_rank}: membership");
    // A collective on fresh data, checked against an f64 reference.
    let value = |r: usize, k: usize| ((seed ^ (r as u64) << 20 ^ k as u64) % 997) as f64;
    let mut x: Vec<f32> = (0..1000).map(|k| value(parent_rank, k) as f32).collect();
    comm.all_reduce_in_place_host(&mut x, ReduceOp::Sum)
        .unwrap();
    for (k, got) in x.iter().enumerate() {
        let want: f64 = alive.iter().map(|&r| value(r, k)).sum();
        assert_eq!(*got as f64, want, "rank {parent_rank}: element {k}");
    }
}

/// The victim streams large messages to rank 0 and stops itself in the
/// middle; the survivors shrink without it; it is resumed (by the test)
/// and runs on; rank 0's receive buffers must not change after the shrink.
fn stop_scenario(world: &Communicator, victim: usize, dir: &Path, seed: u64) {
    const LEN: usize = 1 << 18; // 1 MiB of f32: rendezvous
    let rank = world.rank();
    let stream = HostStream::new().unwrap();
    if rank == victim {
        std::fs::write(dir.join("victim.pid"), std::process::id().to_string()).unwrap();
        let send = HostBuffer::from_slice(&vec![7.0f32; LEN]);
        std::thread::spawn(|| {
            std::thread::sleep(Duration::from_millis(30));
            // SAFETY: raise has no memory-safety preconditions.
            unsafe { libc::raise(libc::SIGSTOP) };
        });
        // Sends until stopped; once resumed, its sends fail (the survivors
        // have left), and it leaves.
        for _ in 0..100_000 {
            if world
                .send(&send, 0, &stream)
                .and_then(|()| stream.synchronize())
                .is_err()
            {
                break;
            }
        }
        while !dir.join("resumed").exists() {
            std::thread::sleep(Duration::from_millis(10));
        }
        return;
    }
    // Rank 0 receives into poisoned buffers, larger than the message, and
    // keeps each; the others wait for the failure.
    let mut kept: Vec<HostBuffer<f32>> = Vec::new();
    let failure = loop {
        if rank != 0 {
            break world.barrier_host().expect_err("the victim never arrives");
        }
        let mut buf = HostBuffer::from_slice(&vec![-1.0f32; LEN + 1024]);
        let r = world
            .recv(&mut buf, victim, &stream)
            .and_then(|()| stream.synchronize());
        kept.push(buf);
        if let Err(e) = r {
            break e;
        }
    };
    let t0 = Instant::now();
    let alive = world
        .shrink()
        .unwrap_or_else(|e| panic!("rank {rank}: shrink after {failure}: {e}"));
    eprintln!(
        "rank {rank}: {failure}; shrunk to {} in {:?}",
        alive.size(),
        t0.elapsed()
    );
    check_members(&alive, rank, &[victim], seed);
    let before: Vec<Vec<f32>> = kept.iter().map(|b| b.to_vec()).collect();
    std::fs::write(dir.join(format!("shrunk.{rank}")), b"").unwrap();
    // The victim runs again: give it time to write whatever it would.
    while !dir.join("resumed").exists() {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(500));
    for (i, (b, was)) in kept.iter().zip(&before).enumerate() {
        assert!(
            b.to_vec() == *was,
            "rank {rank}: receive buffer {i} changed after the shrink"
        );
        assert!(
            b.to_vec()[LEN..].iter().all(|&x| x == -1.0),
            "rank {rank}: poison past the message"
        );
    }
    alive.barrier_host().unwrap();
}
