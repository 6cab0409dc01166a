//! Groups: 8 processes split their communicator into tensor × data grids
//! (2 × 4 and 4 × 2) and run every collective in both groups, interleaved
//! with operations on the world, over shared memory and over tcp (loopback,
//! and across network namespaces); a nested split; ranks with no colour;
//! every rank its own colour; the groups used at once from two threads; and
//! 64 split-and-drop cycles that must leave no descriptor or shared-memory
//! segment behind. Fresh random data (seed printed), f64 references.
//!
//! Misuse: a rank that never calls split makes the others' split time out
//! naming it; a rank that reduces where the others split is named in a
//! mismatch on every rank.

use crate::harness;
use crate::netns;

use std::time::{Duration, Instant};

use streamcomm::{Communicator, Error, ReduceOp};

const SCENARIO: &str = "STREAMCOMM_TEST_GROUPS";
const SEED: &str = "STREAMCOMM_TEST_SEED";
const LIMIT: Duration = Duration::from_secs(240);

fn launch(n: usize, scenario: &str, extra: &[(&str, String)]) {
    let mut env = vec![
        (SCENARIO, scenario.to_string()),
        (SEED, streamcomm_testkit::seed().to_string()),
        // Small rings, so that the slices' large counts take several chunks.
        ("STREAMCOMM_BUFFSIZE", "8K".to_string()),
        ("STREAMCOMM_NSTEPS", "4".to_string()),
        ("STREAMCOMM_TIMEOUT", "60".to_string()),
    ];
    env.extend(extra.iter().cloned());
    harness::launch_children(
        n,
        &streamcomm_testkit::test_path(module_path!(), "child"),
        &env,
        LIMIT,
        &format!("groups: {scenario}"),
    );
}

#[test]
fn grids_of_eight_processes_over_shm() {
    launch(8, "grids", &[("STREAMCOMM_TRANSPORT", "shm".into())]);
}

#[test]
fn grids_of_eight_processes_over_tcp() {
    launch(8, "grids", &[("STREAMCOMM_TRANSPORT", "tcp".into())]);
}

#[test]
fn split_across_network_namespaces() {
    if !netns::ready_or_skip("groups::split_across_network_namespaces") {
        return;
    }
    let net = netns::Netns::up(2).unwrap_or_else(|e| panic!("{e}"));
    let exe = std::env::current_exe().unwrap();
    let seed = streamcomm_testkit::seed().to_string();
    let proof = streamcomm_testkit::ChildProof::new("groups across namespaces");
    let (proof_key, proof_dir) = proof.env();
    let args = streamcomm_testkit::child_args!("child");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let env = [
        (proof_key, proof_dir.as_str()),
        (SCENARIO, "grids"),
        (SEED, seed.as_str()),
        ("STREAMCOMM_SECRET", "00112233445566778899aabbccddeeff"),
        ("STREAMCOMM_BUFFSIZE", "8K"),
        ("STREAMCOMM_NSTEPS", "4"),
        ("STREAMCOMM_TIMEOUT", "60"),
    ];
    let out = net
        .run_job(2, 4, &exe, &args, &env, LIMIT)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        out.status.success(),
        "groups across namespaces failed:\n{}\n{}",
        netns::text(&out.stdout),
        netns::text(&out.stderr)
    );
    proof.assert_ran(8);
}

#[test]
fn a_rank_that_never_splits_is_named_in_the_timeout() {
    launch(4, "absent", &[("STREAMCOMM_TIMEOUT", "2".into())]);
}

#[test]
fn a_rank_that_reduces_instead_is_named_in_a_mismatch() {
    launch(4, "mismatch", &[]);
}

/// Entries of a directory (descriptors of this process, shm segments).
fn entries(dir: &str, prefix: &str) -> usize {
    std::fs::read_dir(dir).map_or(0, |d| {
        d.flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
            .count()
    })
}

/// A checked all-reduce (sum of `f64`) of `n` values on `comm`: each rank
/// adds its own fresh values; the reference is computed here for all.
fn checked_sum(comm: &Communicator, members: &[usize], seed: u64, n: usize) {
    let value = |parent: usize, i: usize| {
        let x = seed ^ (parent as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ i as u64;
        (x % 1000) as f64 - 500.0
    };
    let me = members[comm.rank()];
    let mut data: Vec<f64> = (0..n).map(|i| value(me, i)).collect();
    comm.all_reduce_in_place_host(&mut data, ReduceOp::Sum)
        .unwrap_or_else(|e| panic!("rank {me}: all_reduce on a group of {members:?}: {e}"));
    for (i, got) in data.iter().enumerate() {
        let want: f64 = members.iter().map(|&m| value(m, i)).sum();
        assert_eq!(*got, want, "rank {me}, group {members:?}, element {i}");
    }
}

/// Bytes of shared memory this process has mapped from streamcomm's
/// segments (unlinked once every peer mapped them: `(deleted)` in the maps).
fn mapped_shm_bytes() -> u64 {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    maps.lines()
        .filter(|l| l.contains("/dev/shm/streamcomm"))
        .filter_map(|l| {
            let (range, _) = l.split_once(' ')?;
            let (a, b) = range.split_once('-')?;
            Some(u64::from_str_radix(b, 16).ok()? - u64::from_str_radix(a, 16).ok()?)
        })
        .sum()
}

/// The same groups as a `tp_size`-wide split, made with `init` from fresh
/// ids (handed out over the world beforehand, not timed): the figure a
/// split is compared with. Shared memory only (the ids' roots listen on
/// loopback).
fn init_from_fresh_ids(world: &Communicator, tp_size: usize, split_took: Duration) {
    // Decided alike on every rank: one host, and shared memory between ranks.
    if world.num_hosts() != 1
        || world.transport_to(1 - world.rank().min(1)) != Some(streamcomm::Transport::Shm)
    {
        return;
    }
    let (rank, n) = (world.rank(), world.size());
    let leaders = |r: usize| [r / tp_size * tp_size, r % tp_size];
    // Each group's first rank serves an id; every rank learns them all.
    let mut words = vec![0u64; n * 2 * 6];
    for (g, leader) in leaders(rank).into_iter().enumerate() {
        if leader == rank {
            let id = streamcomm::bootstrap::UniqueId::new().unwrap().to_bytes();
            for (w, c) in words[(rank * 2 + g) * 6..][..6]
                .iter_mut()
                .zip(id.chunks(8))
            {
                let mut b = [0u8; 8];
                b[..c.len()].copy_from_slice(c);
                *w = u64::from_le_bytes(b);
            }
        }
    }
    world
        .all_reduce_in_place_host(&mut words, ReduceOp::Sum)
        .unwrap();
    let id = |leader: usize, g: usize| {
        let bytes: Vec<u8> = words[(leader * 2 + g) * 6..][..6]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        streamcomm::bootstrap::UniqueId::from_bytes(
            &bytes[..streamcomm::bootstrap::UniqueId::BYTES],
        )
        .unwrap()
    };
    world.barrier_host().unwrap();
    let t0 = Instant::now();
    let [lt, ld] = leaders(rank);
    let tp = Communicator::init(&id(lt, 0), rank % tp_size, tp_size).unwrap();
    let dp = Communicator::init(&id(ld, 1), rank / tp_size, n / tp_size).unwrap();
    let took = t0.elapsed();
    if rank == 0 {
        eprintln!(
            "{tp_size} x {}: init of the same groups from fresh ids in {took:?} (split: {split_took:?})",
            n / tp_size
        );
    }
    drop((tp, dp));
    world.barrier_host().unwrap();
}

/// Splits `world` by `colour` (and key = rank) and checks the group's
/// rank and size against the members computed here.
fn split_checked(
    world: &Communicator,
    colour: impl Fn(usize) -> u32,
) -> (Communicator, Vec<usize>) {
    let rank = world.rank();
    let group = world
        .split(Some(colour(rank)), rank as i32)
        .unwrap_or_else(|e| panic!("rank {rank}: split: {e}"))
        .expect("a group");
    let members: Vec<usize> = (0..world.size())
        .filter(|&r| colour(r) == colour(rank))
        .collect();
    assert_eq!(group.size(), members.len(), "rank {rank}");
    assert_eq!(members[group.rank()], rank, "rank {rank}: group rank");
    (group, members)
}

#[test]
#[ignore = "entry point of the child processes"]
fn child() {
    harness::scenario::run_child(
        SCENARIO,
        &[
            ("grids", |world, _, seed| grids(world, seed)),
            ("absent", |world, _, _| absent(world)),
            ("mismatch", |world, _, _| mismatch(world)),
        ],
    );
}

fn grids(world: &Communicator, seed: u64) {
    let (rank, n) = (world.rank(), world.size());
    let all: Vec<usize> = (0..n).collect();
    let stream = streamcomm::host::HostStream::new().unwrap();
    let ops = [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Avg];
    for (k, tp_size) in [4usize, 2].into_iter().enumerate() {
        let held = (entries("/proc/self/fd", ""), mapped_shm_bytes());
        world.barrier_host().unwrap();
        let t0 = Instant::now();
        let (tp, tp_members) = split_checked(world, |r| (r / tp_size) as u32);
        let (dp, dp_members) = split_checked(world, |r| (r % tp_size) as u32);
        let took = t0.elapsed();
        if rank == 0 {
            let (fds, bytes) = (entries("/proc/self/fd", ""), mapped_shm_bytes());
            eprintln!(
                "{tp_size} x {}: two splits in {took:?}; the two groups hold {} descriptors and {} KiB of shared memory on rank 0",
                n / tp_size,
                fds as i64 - held.0 as i64,
                (bytes as i64 - held.1 as i64) / 1024
            );
        }
        if k == 0 {
            init_from_fresh_ids(world, tp_size, took);
        }
        let s = seed ^ k as u64;
        harness::run_thin_slice(&tp, &stream, s, &ops);
        checked_sum(world, &all, s, 100);
        harness::run_thin_slice(&dp, &stream, s ^ 1, &ops);
        checked_sum(world, &all, s ^ 2, 7);
        // Both groups at once, from two threads, with the world in between.
        std::thread::scope(|sc| {
            sc.spawn(|| checked_sum(&tp, &tp_members, s ^ 3, 3000));
            sc.spawn(|| checked_sum(&dp, &dp_members, s ^ 4, 3000));
        });
        checked_sum(world, &all, s ^ 5, 1);
        // A nested split: the tensor group's halves.
        let (half, half_members) = split_checked(&tp, |r| (r % 2) as u32);
        let half_members: Vec<usize> = half_members.iter().map(|&r| tp_members[r]).collect();
        checked_sum(&half, &half_members, s ^ 6, 50);
        drop(tp);
        // The group outlives its parent's other children and works alone.
        checked_sum(&dp, &dp_members, s ^ 7, 10);
    }
    // No colour for every third rank; the key reverses the order.
    let coloured = |r: usize| !r.is_multiple_of(3);
    let group = world
        .split(coloured(rank).then_some(7), -(rank as i32))
        .unwrap_or_else(|e| panic!("rank {rank}: split with no colour: {e}"));
    let mut members: Vec<usize> = (0..n).filter(|&r| coloured(r)).collect();
    members.reverse();
    match group {
        None => assert!(!coloured(rank), "rank {rank} has a colour but no group"),
        Some(g) => {
            assert!(coloured(rank));
            assert_eq!(members[g.rank()], rank, "key order");
            checked_sum(&g, &members, seed ^ 8, 20);
        }
    }
    // Every rank its own colour: groups of one.
    let (alone, me) = split_checked(world, |r| r as u32);
    assert_eq!(me, [rank]);
    checked_sum(&alone, &me, seed ^ 9, 5);
    drop(alone);
    // 64 split-and-drop cycles leave nothing behind.
    let cycle = || {
        let g = world
            .split(Some((rank % 2) as u32), 0)
            .unwrap()
            .expect("a group");
        g.barrier_host().unwrap();
    };
    cycle();
    world.barrier_host().unwrap();
    // This process's own segments only (named `streamcomm-<pid>-...`): other
    // tests running at the same time create and remove theirs.
    let own_segments = format!("streamcomm-{}-", std::process::id());
    let (fds, shm) = (
        entries("/proc/self/fd", ""),
        entries("/dev/shm", &own_segments),
    );
    let t0 = Instant::now();
    for _ in 0..64 {
        cycle();
    }
    let took = t0.elapsed();
    world.barrier_host().unwrap();
    // A dropped group's threads (its engine, a bootstrap root that its
    // first rank served) close their descriptors as they finish: allow
    // them a moment, but no growth.
    let settle = Instant::now() + Duration::from_secs(3);
    let (mut fds_after, mut shm_after);
    loop {
        (fds_after, shm_after) = (
            entries("/proc/self/fd", ""),
            entries("/dev/shm", &own_segments),
        );
        if (fds_after <= fds && shm_after <= shm) || Instant::now() > settle {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if rank == 0 {
        eprintln!(
            "64 split-and-drop cycles in {took:?}: descriptors {fds} -> {fds_after}, /dev/shm segments {shm} -> {shm_after}"
        );
    }
    assert!(
        fds_after <= fds,
        "rank {rank}: descriptors grew over 64 splits: {fds} -> {fds_after}"
    );
    assert!(
        shm_after <= shm,
        "rank {rank}: /dev/shm grew over 64 splits: {shm} -> {shm_after}"
    );
}

fn absent(world: &Communicator) {
    const ABSENT: usize = 2;
    let rank = world.rank();
    if rank == ABSENT {
        // Stays until the others have given up, then leaves.
        std::thread::sleep(Duration::from_secs(4));
        return;
    }
    let e = world.split(Some(0), 0).expect_err("split without rank 2");
    eprintln!("rank {rank}: {e}");
    assert!(matches!(e, Error::Timeout { .. }), "rank {rank}: {e}");
    assert!(
        e.to_string()
            .contains(&format!("rank {ABSENT} has not called split")),
        "rank {rank}: {e}"
    );
}

fn mismatch(world: &Communicator) {
    const ODD: usize = 1;
    let rank = world.rank();
    let e = if rank == ODD {
        let mut x = [1u64, 2];
        world
            .all_reduce_in_place_host(&mut x, ReduceOp::Sum)
            .expect_err("a reduce where the others split")
    } else {
        world
            .split(Some(0), 0)
            .expect_err("a split where rank 1 reduces")
    };
    eprintln!("rank {rank}: {e}");
    let Error::Mismatch(m) = &e else {
        panic!("rank {rank}: not a mismatch: {e}");
    };
    assert_eq!(m.culprit, ODD, "rank {rank}: {e}");
    let text = e.to_string();
    assert!(text.contains("split("), "rank {rank}: {text}");
    assert!(text.contains("all_reduce("), "rank {rank}: {text}");
}
