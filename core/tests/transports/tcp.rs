//! The tcp transport on this host (loopback): every collective and the
//! barrier with `STREAMCOMM_TRANSPORT=tcp`, ranks as threads and as
//! processes, multi-chunk messages, several sockets per peer, and a peer
//! that dies mid-collective.

use crate::harness;

use std::time::{Duration, Instant};

use harness::{run_threads, small_config};
use streamcomm::Transport;
use streamcomm::host::{HostBuffer, HostStream};
use streamcomm::{Config, Error, ReduceOp};

fn tcp_config(nchannels: usize) -> Config {
    {
        let mut c = small_config();
        c.transport = Transport::Tcp.into();
        c.nchannels = nchannels;
        c
    }
}

fn matrix(n: usize, nchannels: usize) {
    let base = streamcomm_testkit::seed();
    run_threads(
        n,
        tcp_config(nchannels),
        Duration::from_secs(300),
        move |comm| {
            for p in 0..n {
                if p != comm.rank() {
                    assert_eq!(comm.transport_to(p), Some(Transport::Tcp));
                }
            }
            let stream = HostStream::new().unwrap();
            harness::run_slice(
                &comm,
                &stream,
                base,
                &[ReduceOp::Sum, ReduceOp::Min, ReduceOp::Avg],
            );
            // Barriers over tcp run message dissemination.
            for _ in 0..200 {
                comm.barrier_host().unwrap();
                comm.barrier(&stream).unwrap();
            }
            stream.synchronize().unwrap();
            assert_eq!(
                comm.barrier_algo(),
                streamcomm::barrier::BarrierAlgo::Dissemination
            );
            assert!(matches!(
                comm.set_barrier_algo(streamcomm::barrier::BarrierAlgo::Chain),
                Err(Error::Unavailable(_))
            ));
        },
    );
}

#[test]
fn collectives_over_tcp_2_ranks() {
    matrix(2, 1);
}

#[test]
fn collectives_over_tcp_3_ranks_two_sockets() {
    matrix(3, 2);
}

#[test]
fn collectives_over_tcp_4_ranks_three_sockets() {
    matrix(4, 3);
}

#[test]
fn collectives_over_tcp_6_ranks() {
    matrix(6, 2);
}

const SCENARIO: &str = "STREAMCOMM_TEST_SCENARIO";

#[test]
#[ignore = "entry point of the child processes"]
fn child() {
    let Ok(scenario) = std::env::var(SCENARIO) else {
        return;
    };
    let comm = streamcomm::Communicator::from_env().unwrap();
    let stream = HostStream::new().unwrap();
    match scenario.as_str() {
        "die" => {
            // Rank 1 dies (SIGKILL) in the middle of a long all_reduce loop.
            let buf = HostBuffer::<f32>::zeroed(1 << 20);
            let mut out = HostBuffer::<f32>::zeroed(1 << 20);
            comm.barrier_host().unwrap();
            let t0 = Instant::now();
            for i in 0.. {
                if comm.rank() == 1 && i == 20 {
                    // SAFETY: raising SIGKILL on ourselves.
                    unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
                }
                if let Err(e) = comm
                    .all_reduce(&buf, &mut out, ReduceOp::Sum, &stream)
                    .and_then(|()| stream.synchronize())
                {
                    let waited = t0.elapsed();
                    eprintln!("rank {} got: {e} after {waited:?}", comm.rank());
                    // Stay alive a moment so that no survivor sees another
                    // survivor's exit before rank 1's death.
                    std::thread::sleep(Duration::from_secs(2));
                    let named = matches!(
                        e,
                        Error::Transport { peer: 1, .. } | Error::RemoteFailed { peer: 1, .. }
                    );
                    std::process::exit(if named { 42 } else { 43 });
                }
            }
        }
        other => panic!("unknown scenario {other}"),
    }
    streamcomm_testkit::child_ran();
}

/// Rank 1 of 3 is SIGKILLed mid all_reduce loop; ranks 0 and 2 must fail
/// with an error naming rank 1, well within the timeout (30 s here). Ranks
/// are started by hand (not by the launcher, which would stop the survivors
/// as soon as rank 1 dies).
#[test]
fn a_peer_that_dies_mid_collective_fails_the_others_naming_it() {
    use std::os::unix::process::ExitStatusExt;
    let exe = std::env::current_exe().unwrap();
    let id = streamcomm::bootstrap::UniqueId::new().unwrap();
    let t0 = Instant::now();
    let mut children: Vec<_> = (0..3)
        .map(|rank| {
            std::process::Command::new(&exe)
                .args(streamcomm_testkit::child_args!("child"))
                .env(SCENARIO, "die")
                .env("STREAMCOMM_UNIQUE_ID", id.to_string())
                .env("RANK", rank.to_string())
                .env("WORLD_SIZE", "3")
                .env("STREAMCOMM_TRANSPORT", "tcp")
                .env("STREAMCOMM_TIMEOUT", "30")
                .spawn()
                .unwrap()
        })
        .collect();
    let mut status = vec![None; 3];
    while status.iter().any(Option::is_none) {
        assert!(t0.elapsed() < Duration::from_secs(60), "a rank hangs");
        for (r, c) in children.iter_mut().enumerate() {
            if status[r].is_none() {
                status[r] = c.try_wait().unwrap();
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = t0.elapsed();
    assert_eq!(
        status[1].unwrap().signal(),
        Some(libc::SIGKILL),
        "{status:?}"
    );
    for r in [0, 2] {
        assert_eq!(
            status[r].unwrap().code(),
            Some(42),
            "rank {r} must fail naming rank 1: {status:?}"
        );
    }
    assert!(
        took < Duration::from_secs(32),
        "took {took:?} (timeout 30 s + 2 s)"
    );
}

/// A rank whose collective fails (a peer called a different count) tells
/// its tcp peers at once: nobody waits for the timeout.
#[test]
fn a_mismatch_fails_every_rank_promptly_over_tcp() {
    let config = {
        let mut c = tcp_config(1);
        c.timeout = Duration::from_secs(30);
        c
    };
    let results = run_threads(3, config, Duration::from_secs(60), |comm| {
        harness::mismatched_all_reduce(&comm)
    });
    for (rank, (e, took)) in results.into_iter().enumerate() {
        assert!(
            took < Duration::from_secs(20),
            "rank {rank} waited {took:?}: {e}"
        );
        assert!(
            matches!(
                e,
                Error::Mismatch(_) | Error::RemoteFailed { .. } | Error::Transport { .. }
            ),
            "rank {rank}: {e}"
        );
    }
}

/// `abort()` on one rank releases the others' waits over tcp, naming it.
#[test]
fn abort_reaches_tcp_peers() {
    run_threads(3, tcp_config(2), Duration::from_secs(60), |comm| {
        if comm.rank() == 0 {
            std::thread::sleep(Duration::from_millis(100));
            comm.abort();
            assert!(comm.barrier_host().is_err());
        } else {
            let t0 = Instant::now();
            let e = comm.barrier_host().unwrap_err();
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "rank {} took {:?}: {e}",
                comm.rank(),
                t0.elapsed()
            );
            assert!(
                matches!(e, Error::RemoteFailed { peer: 0, .. }),
                "rank {}: {e}",
                comm.rank()
            );
        }
    });
}
