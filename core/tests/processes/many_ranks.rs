//! Many ranks on one host as real processes: 16 over shared memory and 8
//! over tcp run every collective (the thin slice: one element and several
//! slots each, every element checked) and point-to-point (a ring, small
//! and large messages); 32 and 64 over shared memory create, all-reduce
//! and all-to-all, every element checked. Each rank checks its resident
//! shared memory and open descriptors from `/proc/self` against the
//! ceilings the design promises: descriptors at most two per tcp peer
//! plus 16, shared memory at 32 and 64 ranks at most 16 MB after the
//! all-reduce and 64 MB after the all-to-all (1 MiB per pair at 32 ranks:
//! every ring both ways used; the budget shrinks the rings, where a full
//! mesh of 4 MiB rings would hold 248 MiB). Tcp peers are connected on
//! first use: 16 ranks over tcp that only pass a message around a ring
//! hold sockets to their two neighbours only. Ranks that start with a
//! soft limit of 16 open files connect every pair over tcp all the same
//! (an all-to-all): the library raises the limit to the hard one when it
//! runs out.

use crate::harness;
use crate::harness::scenario::{SCENARIO, checked_all_reduce, launch_scenario, status_kb};

use std::time::Duration;

use streamcomm::host::{HostBuffer, HostStream};
use streamcomm::{Communicator, ReduceOp};

fn launch(n: usize, scenario: &str, extra: &[(&str, &str)]) {
    let mut env = vec![("STREAMCOMM_TIMEOUT", "120")];
    env.extend_from_slice(extra);
    launch_scenario(module_path!(), n, scenario, &env, Duration::from_secs(400));
}

#[test]
fn sixteen_ranks_over_shared_memory_run_every_collective_and_a_ring() {
    launch(
        16,
        "slice",
        &[
            ("STREAMCOMM_TRANSPORT", "shm"),
            ("STREAMCOMM_BUFFSIZE", "8K"),
        ],
    );
}

#[test]
fn eight_ranks_over_tcp_run_every_collective_and_a_ring() {
    launch(
        8,
        "slice",
        &[
            ("STREAMCOMM_TRANSPORT", "tcp"),
            ("STREAMCOMM_BUFFSIZE", "8K"),
        ],
    );
}

#[test]
fn sixteen_ranks_over_tcp_that_use_a_ring_connect_only_their_neighbours() {
    launch(16, "neighbours", &[("STREAMCOMM_TRANSPORT", "tcp")]);
}

/// This process's soft and hard limits on open files.
fn fd_limits() -> (u64, u64) {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `l` is a valid rlimit for getrlimit to fill.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) }, 0);
    (l.rlim_cur, l.rlim_max)
}

#[test]
fn ranks_that_start_under_a_low_descriptor_limit_raise_it_and_connect() {
    // Each rank lowers its own soft limit to 16 before creating its
    // communicator: 8 tcp ranks need more (two sockets per peer).
    if fd_limits().1 < 256 {
        streamcomm_testkit::skip(
            "many_ranks::ranks_that_start_under_a_low_descriptor_limit_raise_it_and_connect",
            "the hard limit on open files is under 256 here",
        );
        return;
    }
    launch(8, "low_fd_limit", &[("STREAMCOMM_TRANSPORT", "tcp")]);
}

#[test]
fn thirty_two_and_sixty_four_ranks_create_all_reduce_and_all_to_all() {
    for n in [32, 64] {
        launch(n, "crowd", &[("STREAMCOMM_TRANSPORT", "shm")]);
    }
}

/// Open descriptors of this process (the listing's own left out).
fn open_fds() -> usize {
    let listed = std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count();
    listed - 1
}

/// The value rank `from` sends rank `to` at index `i` (seeded).
fn value(seed: u64, from: usize, to: usize, i: usize) -> u32 {
    let x = seed ^ ((from as u64) << 40) ^ ((to as u64) << 20) ^ i as u64;
    (x.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 33) as u32
}

/// Every rank sends right and receives from the left in one group,
/// `len` elements, the receive buffer poisoned past them.
fn ring(comm: &Communicator, stream: &HostStream, seed: u64, len: usize) {
    let (rank, n) = (comm.rank(), comm.size());
    let (right, left) = ((rank + 1) % n, (rank + n - 1) % n);
    let out: Vec<u32> = (0..len).map(|i| value(seed, rank, right, i)).collect();
    let out = HostBuffer::from_slice(&out);
    let mut inb = HostBuffer::from_slice(&vec![u32::MAX; len + 5]);
    comm.group(stream, |g| {
        g.send(&out, right)?;
        g.recv(&mut inb, left)
    })
    .unwrap();
    stream.synchronize().unwrap();
    let got = inb.to_vec();
    for (i, &v) in got[..len].iter().enumerate() {
        assert_eq!(
            v,
            value(seed, left, rank, i),
            "rank {rank}: element {i} from {left}"
        );
    }
    assert!(
        got[len..].iter().all(|&v| v == u32::MAX),
        "rank {rank}: wrote past the message"
    );
}

/// An all-to-all of `pair` elements per pair, every element checked.
fn all_to_all(comm: &Communicator, seed: u64, pair: usize) {
    let (rank, n) = (comm.rank(), comm.size());
    let send: Vec<u32> = (0..n * pair)
        .map(|i| value(seed, rank, i / pair, i % pair))
        .collect();
    let mut recv = vec![u32::MAX; n * pair];
    comm.all_to_all_host(&send, &mut recv).unwrap();
    for (i, &got) in recv.iter().enumerate() {
        let want = value(seed, i / pair, rank, i % pair);
        assert_eq!(
            got,
            want,
            "rank {rank}: element {} from rank {}",
            i % pair,
            i / pair
        );
    }
}

/// Tcp peers of this rank: every other rank when the transport is tcp.
fn tcp_peers(comm: &Communicator) -> usize {
    let tcp = std::env::var("STREAMCOMM_TRANSPORT").is_ok_and(|t| t == "tcp");
    if tcp { comm.size() - 1 } else { 0 }
}

#[test]
#[ignore = "entry point of the child processes"]
fn child() {
    let Ok(scenario) = std::env::var(SCENARIO) else {
        return;
    };
    let seed = streamcomm_testkit::seed();
    if scenario == "low_fd_limit" {
        let l = libc::rlimit {
            rlim_cur: 16,
            rlim_max: fd_limits().1,
        };
        // SAFETY: lowering this process's own soft limit needs no privilege.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &l) }, 0);
    }
    let comm = Communicator::from_env().unwrap();
    let rank = comm.rank();
    let stream = HostStream::new().unwrap();
    match scenario.as_str() {
        "slice" => {
            harness::run_thin_slice(&comm, &stream, seed, &[ReduceOp::Sum, ReduceOp::Max]);
            // Small (in the rings) and large (rendezvous) messages.
            ring(&comm, &stream, seed, 100);
            ring(&comm, &stream, seed ^ 1, 300_000);
        }
        "neighbours" => {
            let connected = streamcomm::testing::transport::connected_peers;
            let n = comm.size();
            let mut neighbours = vec![(rank + 1) % n, (rank + n - 1) % n];
            neighbours.sort();
            // Creation connects nobody (a neighbour already in its ring
            // may have connected since).
            let early = connected(&comm);
            assert!(
                early.iter().all(|p| neighbours.contains(p)),
                "rank {rank}: connected to {early:?} before using any link"
            );
            ring(&comm, &stream, seed, 100);
            ring(&comm, &stream, seed ^ 1, 300_000);
            assert_eq!(
                connected(&comm),
                neighbours,
                "rank {rank}: not its neighbours only"
            );
            // The losing dials of pairs that dialed each other at once
            // close as the engines see them.
            let ceiling = 2 * comm.config().nchannels + 16;
            let t0 = std::time::Instant::now();
            let mut fds = open_fds();
            while fds > ceiling && t0.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(10));
                fds = open_fds();
            }
            eprintln!("rank {rank}: {fds} descriptors after the ring");
            assert!(
                fds <= ceiling,
                "rank {rank}: {fds} open descriptors, more than 2 per connected peer + 16"
            );
        }
        "low_fd_limit" => {
            checked_all_reduce(&comm, 1 << 16);
            // Every pair connected: 2 sockets each to 7 peers.
            all_to_all(&comm, seed, 1024);
            let (soft, _) = fd_limits();
            assert!(soft > 16, "rank {rank}: the soft limit stayed at {soft}");
        }
        "crowd" => {
            checked_all_reduce(&comm, 1 << 18);
            let shmem = status_kb("RssShmem");
            eprintln!("rank {rank}: RssShmem {shmem} kB after the all-reduce");
            assert!(
                shmem <= 16_000,
                "rank {rank}: {shmem} kB of shared memory resident after an all-reduce \
                 (ceiling 16 MB)"
            );
            // 1 MiB per pair at 32 ranks: every ring both ways is used.
            let pair = if comm.size() <= 32 { 1 << 18 } else { 1024 };
            all_to_all(&comm, seed, pair);
            let shmem = status_kb("RssShmem");
            eprintln!("rank {rank}: RssShmem {shmem} kB after the all-to-all");
            assert!(
                shmem <= 64_000,
                "rank {rank}: {shmem} kB of shared memory resident after an all-to-all \
                 (ceiling 64 MB)"
            );
        }
        other => panic!("unknown scenario {other}"),
    }
    // The neighbours' scenario ends without one: a barrier connects more.
    if scenario != "neighbours" {
        comm.barrier_host().unwrap();
    }
    let fds = open_fds();
    let ceiling = 2 * tcp_peers(&comm) + 16;
    assert!(
        fds <= ceiling,
        "rank {rank}: {fds} open descriptors, more than 2 per tcp peer + 16 ({ceiling})"
    );
    drop(comm);
    streamcomm_testkit::child_ran();
}
