//! The verbs transport. Where an RDMA device is active (the Soft-RoCE guest:
//! `scripts/verbs-check.sh`), every collective over verbs with 2 and 4
//! ranks, every barrier algorithm with 2 and 4 ranks, point-to-point (eager
//! and rendezvous sizes, a group ring exchange, many small messages) with 2
//! and 4 ranks, an abort that reaches the peers, a SIGKILLed peer process
//! that the others report, and groups split and shrunk over verbs.
//! Where none is (this host), each test says `SKIPPED`; what a host
//! without a device does is tested in `features/main.rs`.

use crate::harness;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use harness::p2p::{POISON, payload, ring_exchange};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use streamcomm::Transport;
use streamcomm::barrier::BarrierAlgo;
use streamcomm::bootstrap::UniqueId;
use streamcomm::config::HostsOverride;
use streamcomm::host::{HostBuffer, HostStream};
use streamcomm::{Communicator, Config, Error, ReduceOp};

/// Whether an RDMA device can run these tests (a missing one fails them
/// under `STREAMCOMM_REQUIRE_RDMA=1`, as in the guest).
fn rdma_here() -> bool {
    streamcomm_testkit::rdma_device(cfg!(feature = "verbs"))
}

/// True, once the running test said it skipped, where no RDMA device is
/// active (`scripts/verbs-check.sh` runs these tests in a Soft-RoCE guest).
fn no_rdma() -> bool {
    if rdma_here() {
        return false;
    }
    streamcomm_testkit::skip(
        &streamcomm_testkit::current_test(),
        "no active RDMA device on this host (scripts/verbs-check.sh runs it in the Soft-RoCE guest)",
    );
    true
}

fn verbs_config() -> Config {
    {
        let mut c = harness::small_config();
        c.transport = Transport::Verbs.into();
        c.p2p_eager_limit = 4096;
        c
    }
}

/// The collectives over verbs on `n` ranks: the full slice, or a thin
/// one (every collective, one and several chunks), which is what 4 ranks
/// on the guest's 2 emulated cores can afford (the full slice took 40–90 s).
fn matrix(n: usize, thin: bool) {
    if no_rdma() {
        return;
    }
    let base = streamcomm_testkit::seed();
    harness::run_threads(n, verbs_config(), Duration::from_secs(600), move |comm| {
        for p in (0..n).filter(|&p| p != comm.rank()) {
            assert_eq!(comm.transport_to(p), Some(Transport::Verbs));
        }
        let stream = HostStream::new().unwrap();
        let ops = [ReduceOp::Sum, ReduceOp::Max];
        if thin {
            harness::run_thin_slice(&comm, &stream, base, &ops);
        } else {
            harness::run_slice(&comm, &stream, base, &ops);
        }
        stream.synchronize().unwrap();
    });
}

#[test]
fn collectives_over_verbs_2_ranks() {
    matrix(2, false);
}

#[test]
fn collectives_over_verbs_4_ranks() {
    matrix(4, true);
}

/// Every barrier algorithm, 2 and 4 ranks (two per pretend host, so that
/// the tree and hierarchical ones have leaders): nobody leaves barrier k,
/// host or stream, before every rank arrived at it.
#[test]
fn every_barrier_algorithm_over_verbs_2_and_4_ranks() {
    if no_rdma() {
        return;
    }
    const ROUNDS: usize = 20;
    for n in [2, 4] {
        for &algo in BarrierAlgo::ALL {
            // Over verbs a peer's flag memory is written by RDMA, never
            // read; the central counter fetch-adds the root's counter with
            // RDMA atomics (Soft-RoCE has them: ATOMIC_HCA) and the root
            // releases each rank in its own area.
            let config = {
                let mut c = verbs_config();
                c.barrier_algo = Some(algo);
                c.hosts_override = Some(HostsOverride::RanksPerHost(2));
                c
            };
            let arrived = Arc::new(AtomicUsize::new(0));
            let seed = streamcomm_testkit::seed();
            harness::run_threads(n, config, Duration::from_secs(120), move |comm| {
                // The flag algorithm itself runs, not a stand-in.
                assert_eq!(comm.barrier_algo(), algo);
                let stream = HostStream::new().unwrap();
                let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ (comm.rank() as u64) << 32);
                for k in 0..2 * ROUNDS {
                    if rng.gen_ratio(1, 8) {
                        std::thread::sleep(Duration::from_micros(rng.gen_range(0..500)));
                    }
                    arrived.fetch_add(1, Ordering::SeqCst);
                    // The first on the stream: a job on the engine's
                    // thread makes the pairs' queue pairs.
                    if k % 2 == 1 {
                        comm.barrier_host().unwrap();
                    } else {
                        comm.barrier(&stream).unwrap();
                        stream.synchronize().unwrap();
                    }
                    let seen = arrived.load(Ordering::SeqCst);
                    assert!(
                        seen >= n * (k + 1),
                        "{algo:?}, {n} ranks: rank {} left barrier {k} after {seen} arrivals",
                        comm.rank()
                    );
                }
            });
            eprintln!("{algo:?} on {n} ranks: ok");
        }
    }
}

/// A group ring exchange (either call order), then rank 0 sending single
/// messages to every other rank, eager and rendezvous sizes and zero bytes.
fn p2p_scenario(comm: &Communicator, stream: &HostStream, seed: u64) {
    let (r, n) = (comm.rank(), comm.size());
    ring_exchange(comm, stream, seed);
    for (tag, len) in [(10u64, 0usize), (11, 7), (12, 4096 / 8 + 1), (13, 33_333)] {
        if r == 0 {
            for p in 1..n {
                let b = HostBuffer::from_slice(&payload(seed, 0, p, tag, len));
                comm.send(&b, p, stream).unwrap();
            }
        } else {
            let mut b = HostBuffer::from_slice(&vec![POISON; len + 3]);
            comm.recv(&mut b, 0, stream).unwrap();
            stream.synchronize().unwrap();
            let got = b.to_vec();
            assert_eq!(&got[..len], &payload(seed, 0, r, tag, len)[..]);
            assert!(got[len..].iter().all(|&v| v == POISON));
        }
        stream.synchronize().unwrap();
    }
    // Rendezvous into fresh buffers of one size, each dropped after use:
    // the allocator tends to hand out the same address again, where a
    // stale cached registration would put the data into the old pages.
    for round in 0..6u64 {
        let len = 40_000 + 8 * (round as usize % 2);
        if r == 0 {
            for p in 1..n {
                let b = HostBuffer::from_slice(&payload(seed, 0, p, 200 + round, len));
                comm.send(&b, p, stream).unwrap();
            }
        } else {
            let mut b = HostBuffer::from_slice(&vec![POISON; len]);
            comm.recv(&mut b, 0, stream).unwrap();
            stream.synchronize().unwrap();
            assert_eq!(b.to_vec(), payload(seed, 0, r, 200 + round, len));
        }
        stream.synchronize().unwrap();
    }
    // Many small messages in a row: credits must keep coming back.
    let mut rng = StdRng::seed_from_u64(seed ^ 77);
    let lens: Vec<usize> = (0..500).map(|_| rng.gen_range(0..40)).collect();
    if r == 0 && n > 1 {
        for (i, &len) in lens.iter().enumerate() {
            let b = HostBuffer::from_slice(&payload(seed, 0, 1, 100 + i as u64, len));
            comm.send(&b, 1, stream).unwrap();
        }
    } else if r == 1 {
        for (i, &len) in lens.iter().enumerate() {
            let mut b = HostBuffer::from_slice(&vec![POISON; len]);
            comm.recv(&mut b, 0, stream).unwrap();
            stream.synchronize().unwrap();
            assert_eq!(b.to_vec(), payload(seed, 0, 1, 100 + i as u64, len));
        }
    }
    stream.synchronize().unwrap();
}

/// Host-blocking ping-pong between partner ranks (0-1, 2-3): 8-byte
/// messages (the immediate path where it applies) and one rendezvous-size
/// message each way, every element checked.
fn host_blocking_pairs(comm: &streamcomm::Communicator, seed: u64) {
    let partner = comm.rank() ^ 1;
    let first = comm.rank().is_multiple_of(2);
    for len in [1usize, 1, 1, 100_000] {
        for round in 0..50u64 {
            let mine: Vec<u64> = (0..len as u64)
                .map(|i| seed ^ (round << 40) ^ ((comm.rank() as u64) << 32) ^ i)
                .collect();
            let theirs: Vec<u64> = (0..len as u64)
                .map(|i| seed ^ (round << 40) ^ ((partner as u64) << 32) ^ i)
                .collect();
            let mut got = vec![u64::MAX; len];
            if first {
                comm.send_host(&mine, partner).unwrap();
                comm.recv_host(&mut got, partner).unwrap();
            } else {
                comm.recv_host(&mut got, partner).unwrap();
                comm.send_host(&mine, partner).unwrap();
            }
            assert_eq!(
                got,
                theirs,
                "rank {}: round {round}, {len} elements",
                comm.rank()
            );
            if len > 1 {
                break; // one rendezvous round is enough
            }
        }
    }
}

#[test]
fn p2p_over_verbs_2_and_4_ranks() {
    if no_rdma() {
        return;
    }
    for n in [2, 4] {
        let seed = streamcomm_testkit::seed();
        harness::run_threads(n, verbs_config(), Duration::from_secs(600), move |comm| {
            let stream = HostStream::new().unwrap();
            p2p_scenario(&comm, &stream, seed);
            host_blocking_pairs(&comm, seed);
            // Every rendezvous byte went by RDMA straight into the receive
            // buffer: none through the slots.
            let s = comm.p2p_stats();
            assert_eq!(
                (s.sent_streamed_bytes, s.recv_streamed_bytes),
                (0, 0),
                "{s:?}"
            );
            assert!(s.sent_rendezvous_messages > 0, "{s:?}");
            assert!(s.recv_direct_bytes > 0, "rank {}: {s:?}", comm.rank());
            assert_eq!(s.sent_direct_bytes > 0, s.sent_rendezvous_messages > 0);
        });
    }
    // STREAMCOMM_P2P_DIRECT=0: rendezvous bytes follow through the slots.
    let seed = streamcomm_testkit::seed();
    let config = {
        let mut c = verbs_config();
        c.p2p_direct = false;
        c
    };
    harness::run_threads(2, config, Duration::from_secs(300), move |comm| {
        let stream = HostStream::new().unwrap();
        ring_exchange(&comm, &stream, seed);
        let s = comm.p2p_stats();
        assert_eq!((s.sent_direct_bytes, s.recv_direct_bytes), (0, 0), "{s:?}");
        assert!(
            s.sent_streamed_bytes > 0 && s.recv_streamed_bytes > 0,
            "{s:?}"
        );
    });
}

/// `n` ranks as threads (after a barrier, with `barrier_first`); the last
/// aborts after 300 ms without sending, the others receive from it: each
/// must fail naming it within `within`, well under its `timeout`.
fn receivers_of_an_aborting_rank(n: usize, barrier_first: bool, timeout: u64, within: u64) {
    let config = {
        let mut c = verbs_config();
        c.timeout = Duration::from_secs(timeout);
        c
    };
    let last = n - 1;
    let results = harness::run_threads(n, config, Duration::from_secs(100), move |comm| {
        if barrier_first {
            comm.barrier_host().unwrap();
        }
        if comm.rank() == last {
            std::thread::sleep(Duration::from_millis(300));
            comm.abort();
            return None;
        }
        let stream = HostStream::new().unwrap();
        let mut b = HostBuffer::<i64>::zeroed(16);
        let t = std::time::Instant::now();
        let r = comm
            .recv(&mut b, last, &stream)
            .and_then(|_| stream.synchronize());
        Some((r, t.elapsed()))
    });
    for (rank, r) in results.into_iter().enumerate().take(last) {
        let (r, took) = r.unwrap();
        eprintln!("rank {rank}: {r:?} after {took:?}");
        let e = r.expect_err("the receive from an aborted rank succeeded");
        assert!(
            e.to_string().contains(&last.to_string()),
            "rank {rank}: {e}"
        );
        assert!(
            took < Duration::from_secs(within),
            "rank {rank} took {took:?}"
        );
    }
}

/// An abort reaches the verbs peers that wait on the aborting rank (3
/// ranks, the pairs made by a barrier first), instead of their timeout.
#[test]
fn an_abort_reaches_verbs_peers_instead_of_a_timeout() {
    if no_rdma() {
        return;
    }
    receivers_of_an_aborting_rank(3, true, 120, 60);
}

/// A rank that only receives from a peer, on a pair nobody used yet,
/// connects the pair while it waits: two ranks, no call before, rank 0
/// receives from rank 1, which aborts without sending. Rank 0 must fail
/// naming rank 1 well within its timeout (60 s), not at it: only a first
/// slot connected a pair before, so the abort had no way to rank 0.
#[test]
fn a_rank_that_only_receives_connects_the_pair_and_hears_an_abort() {
    if no_rdma() {
        return;
    }
    receivers_of_an_aborting_rank(2, false, 60, 20);
}

/// Split and shrink over verbs: 4 ranks split into two groups of 2 whose
/// connections are verbs too, each group all-reduces fresh data (checked
/// against an f64 reference); then rank 3 leaves and the others shrink the
/// world without it, and all-reduce on the 3 ranks.
#[test]
fn split_and_shrink_over_verbs() {
    if no_rdma() {
        return;
    }
    let seed = streamcomm_testkit::seed();
    let value = move |r: usize, i: usize| ((seed ^ (r as u64) << 32 ^ i as u64) % 1009) as f64;
    let checked = move |comm: &Communicator, members: &[usize], me: usize| {
        let mut x: Vec<f64> = (0..3000).map(|i| value(me, i)).collect();
        comm.all_reduce_in_place_host(&mut x, ReduceOp::Sum)
            .unwrap();
        for (i, got) in x.iter().enumerate() {
            let want: f64 = members.iter().map(|&m| value(m, i)).sum();
            assert_eq!(*got, want, "rank {me}, group {members:?}, element {i}");
        }
    };
    harness::run_threads(4, verbs_config(), Duration::from_secs(100), move |world| {
        let me = world.rank();
        let group = world
            .split(Some((me % 2) as u32), 0)
            .unwrap()
            .expect("a colour");
        let members: Vec<usize> = (0..4).filter(|r| r % 2 == me % 2).collect();
        assert_eq!(group.transport_to(1 - group.rank()), Some(Transport::Verbs));
        checked(&group, &members, me);
        world.barrier_host().unwrap();
        if me == 0 {
            // Eight communicators in this process (four ranks, a group
            // each): one device context.
            assert_eq!(
                open_device_contexts(),
                1,
                "one RDMA device context a process"
            );
        }
        if me == 3 {
            return;
        }
        let rest = world.shrink_excluding(&[3]).unwrap();
        assert_eq!((rest.rank(), rest.size()), (me, 3));
        checked(&rest, &[0, 1, 2], me);
    });
}

/// A pair's queue pairs are made at its first use and its rings
/// registered at its first slot: after creation and a chain barrier, the
/// queue pairs made are the barrier's neighbours' only (its flags need
/// them), no pair's rings are registered (flags are not slots) and the
/// process has pinned less than one pair's rings; a send from rank 0 to
/// rank 2, a pair the barrier never used, makes that pair's queue pairs
/// and registers its four rings only; an all-to-all makes every pair.
/// Four ranks as threads, 1 MiB rings, eager messages (no user buffer
/// registered); every element checked; the process's pinned memory
/// (`VmPin`) printed. The barrier area and the fetch-add sink are
/// registered once a rank.
#[test]
fn rings_are_registered_at_a_pairs_first_slot() {
    if no_rdma() {
        return;
    }
    const MIB: u64 = 1 << 10; // in kB, as VmPin counts
    let seed = streamcomm_testkit::seed();
    let value = move |from: usize, to: usize, i: usize| {
        (seed ^ (from as u64) << 40 ^ (to as u64) << 32 ^ i as u64) % 1_000_003
    };
    let mut config = verbs_config();
    config.buffsize = 1 << 20;
    // The chain barrier writes flags between neighbours only (0-1, 1-2,
    // 2-3): the pairs it makes are known.
    config.barrier_algo = Some(BarrierAlgo::Chain);
    harness::run_threads(4, config, Duration::from_secs(100), move |comm| {
        use streamcomm::testing::transport::{connected_peers as connected, made_peers as made};
        let me = comm.rank();
        let others = |ranks: &[usize]| -> Vec<usize> {
            ranks.iter().copied().filter(|&p| p != me).collect()
        };
        let neighbours = others(&[me.saturating_sub(1), (me + 1).min(3)]);
        // Under the eager limit: through the rings only.
        let len = 400;
        comm.barrier_host().unwrap();
        assert_eq!(
            connected(&comm),
            Vec::<usize>::new(),
            "rank {me}: rings after creation and a barrier"
        );
        let created = pinned_kb();
        comm.barrier_host().unwrap();
        assert_eq!(
            made(&comm),
            neighbours,
            "rank {me}: the queue pairs the chain barrier made, no more"
        );
        if me == 0 {
            eprintln!("after creation and a barrier: VmPin {created} kB");
            assert!(
                created < 2 * MIB,
                "{created} kB pinned: rings registered at creation?"
            );
            // Each rank: a control block a made pair (at most two pages),
            // and its barrier area and fetch-add sink once (a page each
            // here), not once a peer.
            assert!(
                created <= 4 * (2 * 8 + 2 * 4),
                "{created} kB pinned at creation"
            );
        }
        comm.barrier_host().unwrap();
        // A pair no barrier used: its queue pairs and rings are made now.
        if me == 0 {
            let mine: Vec<u64> = (0..len).map(|i| value(0, 2, i)).collect();
            comm.send_host(&mine, 2).unwrap();
        } else if me == 2 {
            let mut got = vec![u64::MAX; len];
            comm.recv_host(&mut got, 0).unwrap();
            for (i, g) in got.iter().enumerate() {
                assert_eq!(*g, value(0, 2, i), "element {i} from rank 0");
            }
        }
        comm.barrier_host().unwrap();
        let (pair, made_now): (&[usize], Vec<usize>) = match me {
            0 => (&[2], vec![1, 2]),
            2 => (&[0], vec![0, 1, 3]),
            _ => (&[], neighbours.clone()),
        };
        assert_eq!(connected(&comm), pair, "rank {me}: rings after one send");
        assert_eq!(
            made(&comm),
            made_now,
            "rank {me}: queue pairs after one send"
        );
        if me == 0 {
            let one = pinned_kb() - created;
            eprintln!("after rank 0 sent to rank 2: VmPin +{one} kB");
            assert!(
                (4 * MIB..6 * MIB).contains(&one),
                "one pair's four rings: {one} kB"
            );
        }
        comm.barrier_host().unwrap();
        let send: Vec<u64> = (0..4 * len).map(|i| value(me, i / len, i % len)).collect();
        let mut recv = vec![u64::MAX; 4 * len];
        comm.all_to_all_host(&send, &mut recv).unwrap();
        for (i, g) in recv.iter().enumerate() {
            assert_eq!(*g, value(i / len, me, i % len), "rank {me}, element {i}");
        }
        comm.barrier_host().unwrap();
        let all = others(&[0, 1, 2, 3]);
        assert_eq!(
            connected(&comm),
            all,
            "rank {me}: rings after an all-to-all"
        );
        assert_eq!(
            made(&comm),
            all,
            "rank {me}: queue pairs after an all-to-all"
        );
        if me == 0 {
            let all = pinned_kb() - created;
            eprintln!("after an all-to-all: VmPin +{all} kB");
            assert!(all >= 24 * MIB, "six pairs' 24 rings: {all} kB");
        }
        comm.barrier_host().unwrap();
    });
}

/// A buffer sent by rendezvous over a communicator and then over its split
/// child is registered once: the registration cache is the device's, not
/// the communicator's. Two ranks as threads, 64 KiB rings, 4 MiB buffers;
/// the child's send pins its pair's rings only, not the two buffers again
/// (8 MiB). Every element checked.
#[test]
fn a_buffer_used_by_a_communicator_and_its_child_is_registered_once() {
    if no_rdma() {
        return;
    }
    let seed = streamcomm_testkit::seed();
    let mut config = verbs_config();
    config.buffsize = 64 << 10;
    harness::run_threads(2, config, Duration::from_secs(100), move |world| {
        let me = world.rank();
        let child = world.split(Some(0), 0).unwrap().expect("a colour");
        let stream = HostStream::new().unwrap();
        let len = 1 << 19;
        let want: Vec<u64> = (0..len as u64)
            .map(|i| seed ^ i.wrapping_mul(0x9e37))
            .collect();
        let send = HostBuffer::from_slice(&want);
        let mut recv = HostBuffer::<u64>::zeroed(len);
        let exchange = |comm: &Communicator, recv: &mut HostBuffer<u64>| {
            if me == 0 {
                comm.send(&send, 1, &stream).unwrap();
            } else {
                recv.with_mut(|r| r.fill(u64::MAX));
                comm.recv(recv, 0, &stream).unwrap();
            }
            stream.synchronize().unwrap();
            if me == 1 {
                assert!(recv.to_vec() == want, "rank 1 received other data");
            }
        };
        exchange(&world, &mut recv);
        world.barrier_host().unwrap();
        let before = pinned_kb();
        world.barrier_host().unwrap();
        exchange(&child, &mut recv);
        world.barrier_host().unwrap();
        if me == 0 {
            let more = pinned_kb() - before;
            eprintln!("the child's send pinned {more} kB more");
            assert!(more < 2 << 10, "{more} kB: the buffers registered again?");
        }
        world.barrier_host().unwrap();
    });
}

/// The memory this process has pinned (`VmPin` of `/proc/self/status`, kB):
/// what RDMA registrations hold.
fn pinned_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmPin:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The RDMA device contexts this process holds open: its descriptors on
/// `/dev/infiniband/uverbs*`.
fn open_device_contexts() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter(|target| {
            target
                .to_string_lossy()
                .starts_with("/dev/infiniband/uverbs")
        })
        .count()
}

const SCENARIO: &str = "STREAMCOMM_TEST_SCENARIO";

#[test]
#[ignore = "entry point of the child processes"]
fn child() {
    let Ok(scenario) = std::env::var(SCENARIO) else {
        return;
    };
    if scenario == "unlinked" {
        // Nothing has asked for a device yet: libibverbs must not be loaded.
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        assert!(
            !maps.contains("libibverbs"),
            "libibverbs is mapped before any verbs use: the binary links it"
        );
        streamcomm_testkit::child_ran();
        return;
    }
    assert_eq!(scenario, "die", "unknown scenario");
    let kill_at: u32 = std::env::var(KILL_AT).unwrap().parse().unwrap();
    let signal = match std::env::var(KILL_SIGNAL).as_deref() {
        Ok("STOP") => libc::SIGSTOP,
        _ => libc::SIGKILL,
    };
    let comm = Communicator::from_env().unwrap();
    let stream = HostStream::new().unwrap();
    // Rank 1 dies (SIGKILL) before its `kill_at`-th all_reduce: in the
    // middle of the loop, or before any slot (no pair's rings are made).
    let buf = HostBuffer::<f32>::zeroed(1 << 14);
    let mut out = HostBuffer::<f32>::zeroed(1 << 14);
    comm.barrier_host().unwrap();
    for i in 0.. {
        if comm.rank() == 1 && i == kill_at {
            // SAFETY: raising SIGKILL (or SIGSTOP) on ourselves.
            unsafe { libc::kill(libc::getpid(), signal) };
        }
        if let Err(e) = comm
            .all_reduce(&buf, &mut out, ReduceOp::Sum, &stream)
            .and_then(|()| stream.synchronize())
        {
            eprintln!("rank {} got: {e}", comm.rank());
            // Stay alive a moment so that no survivor sees another
            // survivor's exit before rank 1's death.
            std::thread::sleep(Duration::from_secs(2));
            let named = match &e {
                Error::Transport { peer: 1, .. } | Error::RemoteFailed { peer: 1, .. } => true,
                // Waiting on a stopped rank's data (its process alive).
                Error::Timeout { what, .. } => what.contains("rank 1 "),
                _ => false,
            };
            std::process::exit(if named { 42 } else { 43 });
        }
    }
}

/// A binary built with `verbs` does not link libibverbs (it is loaded at run
/// time), so it starts where the library is missing: a fresh process of
/// this test binary has not mapped it.
#[test]
fn libibverbs_is_not_linked() {
    let proof = streamcomm_testkit::ChildProof::new("libibverbs_is_not_linked");
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(streamcomm_testkit::child_args!("child"))
        .envs([proof.env()])
        .env(SCENARIO, "unlinked")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    proof.assert_ran(1);
}

/// Rank 1 of 3 processes is SIGKILLed mid all_reduce loop: its QPs vanish,
/// and ranks 0 and 2 must fail naming it well within the timeout (their
/// writes to it, heartbeats included, exhaust their retries).
#[test]
fn a_killed_peer_fails_the_others_naming_it() {
    if no_rdma() {
        return;
    }
    killed_peer(10, false);
}

/// As [`a_killed_peer_fails_the_others_naming_it`], rank 1 killed before
/// its first slot: the others' first slots to it (which would make the
/// pair's rings) fail naming it, not a wait for its answer.
#[test]
fn a_peer_killed_before_the_pairs_first_slot_fails_the_others_naming_it() {
    if no_rdma() {
        return;
    }
    killed_peer(0, false);
}

/// As [`a_peer_killed_before_the_pairs_first_slot_fails_the_others_naming_it`],
/// rank 1 stopped (SIGSTOP: alive, its listener's backlog still accepting
/// connections, but nobody answering) instead of killed: the others'
/// handshakes (and waits for its data) get no answer and fail within the
/// timeout (10 s here), both naming it (the first to time out blames the
/// rank it waited for, and aborts the other naming it), instead of
/// waiting for ever.
/// The test kills rank 1 once the others are done.
#[test]
fn a_stopped_peer_fails_the_others_naming_it_within_the_timeout() {
    if no_rdma() {
        return;
    }
    killed_peer(0, true);
}

/// The all_reduce before which rank 1 of `killed_peer` kills itself.
const KILL_AT: &str = "STREAMCOMM_TEST_KILL_AT";
/// `STOP`: rank 1 of `killed_peer` stops itself instead.
const KILL_SIGNAL: &str = "STREAMCOMM_TEST_KILL_SIGNAL";

/// Three processes; rank 1 kills (or, with `stop`, stops) itself before
/// its `kill_at`-th all_reduce; ranks 0 and 2 must fail naming it within
/// the timeout (60 s, or 10 s for a stopped rank, which the test kills
/// once the others are done).
fn killed_peer(kill_at: u32, stop: bool) {
    use std::os::unix::process::ExitStatusExt;
    let exe = std::env::current_exe().unwrap();
    let id = UniqueId::new().unwrap();
    let t0 = std::time::Instant::now();
    let mut children: Vec<_> = (0..3)
        .map(|rank| {
            std::process::Command::new(&exe)
                .args(streamcomm_testkit::child_args!("child"))
                .env(SCENARIO, "die")
                .env(KILL_AT, kill_at.to_string())
                .env(KILL_SIGNAL, if stop { "STOP" } else { "KILL" })
                .env("STREAMCOMM_UNIQUE_ID", id.to_string())
                .env("RANK", rank.to_string())
                .env("WORLD_SIZE", "3")
                .env("STREAMCOMM_TRANSPORT", "verbs")
                .env("STREAMCOMM_TIMEOUT", if stop { "10" } else { "60" })
                .spawn()
                .unwrap()
        })
        .collect();
    let mut status = vec![None; 3];
    while status.iter().any(Option::is_none) {
        if t0.elapsed() > Duration::from_secs(120) {
            for c in &mut children {
                let _ = c.kill();
            }
            panic!("a rank hangs: {status:?}");
        }
        for (r, c) in children.iter_mut().enumerate() {
            if status[r].is_none() {
                status[r] = c.try_wait().unwrap();
            }
        }
        if stop && status[0].is_some() && status[2].is_some() && status[1].is_none() {
            // The others are done: the stopped rank is ours to end.
            let _ = children[1].kill();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = t0.elapsed();
    eprintln!("killed-peer scenario took {took:?}");
    assert_eq!(
        status[1].unwrap().signal(),
        Some(libc::SIGKILL),
        "{status:?}"
    );
    let codes = [0, 2].map(|r| status[r].unwrap().code());
    // A stopped rank: the survivor that times out first blames it, so the
    // other, aborted by that survivor, names it too.
    assert_eq!(
        codes,
        [Some(42); 2],
        "ranks 0 and 2 must fail naming rank 1: {status:?}"
    );
    assert!(
        took < Duration::from_secs(60),
        "took {took:?} (timeout 60 s, 10 s for a stopped rank)"
    );
}
