//! The host-blocking slice calls: ranks as threads, random data (seed
//! printed), an f64 reference, every element checked, outputs poisoned.

use std::sync::atomic::Ordering;
use std::time::Duration;

use rand::{Rng, SeedableRng};

use crate::bootstrap::UniqueId;
use crate::config::{Transport, TransportChoice};
use crate::{Communicator, Config, Error, ReduceOp, Result};

/// Runs `f(comm)` on `n` ranks (threads) over `transport`; its results by rank.
pub(in crate::comm) fn on_ranks<R: Send + 'static>(
    n: usize,
    transport: TransportChoice,
    f: impl Fn(Communicator) -> Result<R> + Send + Sync + Copy + 'static,
) -> Vec<R> {
    let config = Config {
        transport,
        buffsize: 8 << 10,
        nsteps: 4,
        timeout: Duration::from_secs(60),
        ..Config::default()
    };
    on_ranks_with(n, config, f)
}

/// As [`on_ranks`], every rank with `config`.
pub(in crate::comm) fn on_ranks_with<R: Send + 'static>(
    n: usize,
    config: Config,
    f: impl Fn(Communicator) -> Result<R> + Send + Sync + Copy + 'static,
) -> Vec<R> {
    let id = UniqueId::new().unwrap();
    let ranks: Vec<_> = (0..n)
        .map(|rank| {
            let config = config.clone();
            std::thread::spawn(move || {
                f(Communicator::builder()
                    .unique_id(&id)
                    .rank(rank)
                    .size(n)
                    .config(config)
                    .build()?)
            })
        })
        .collect();
    ranks
        .into_iter()
        .enumerate()
        .map(|(rank, t)| {
            t.join()
                .unwrap_or_else(|_| panic!("rank {rank} panicked"))
                .unwrap_or_else(|e| panic!("rank {rank}: {e}"))
        })
        .collect()
}

/// Rank `rank`'s input: `len` small integers as f32 (exact in any order).
fn input(seed: u64, rank: usize, len: usize) -> Vec<f32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ ((rank as u64 + 1) * 0x9e37));
    (0..len).map(|_| rng.gen_range(-64i32..64) as f32).collect()
}

fn check(rank: usize, got: &[f32], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "rank {rank}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(f64::from(*g), *w, "rank {rank}, element {i}");
    }
}

#[test]
fn all_reduce_host_out_of_place_and_in_place_on_3_and_4_ranks() {
    let seed = streamcomm_testkit::seed();
    for n in [3, 4] {
        // Eager-sized and larger than the ring many times over.
        for len in [1usize, 1000, 100_003] {
            let inputs: Vec<Vec<f32>> = (0..n).map(|r| input(seed, r, len)).collect();
            let sum: Vec<f64> = (0..len)
                .map(|i| inputs.iter().map(|v| f64::from(v[i])).sum())
                .collect();
            let max: Vec<f64> = (0..len)
                .map(|i| {
                    inputs
                        .iter()
                        .map(|v| f64::from(v[i]))
                        .fold(f64::MIN, f64::max)
                })
                .collect();
            let got = on_ranks(n, TransportChoice::Auto, move |comm| {
                let send = input(seed, comm.rank(), len);
                let mut recv = vec![f32::NAN; len]; // poisoned
                comm.all_reduce_host(&send, &mut recv, ReduceOp::Sum)?;
                let mut in_place = send.clone();
                comm.all_reduce_in_place_host(&mut in_place, ReduceOp::Max)?;
                assert_eq!(send, input(seed, comm.rank(), len), "send was written");
                Ok((recv, in_place))
            });
            for (rank, (recv, in_place)) in got.iter().enumerate() {
                check(rank, recv, &sum);
                check(rank, in_place, &max);
            }
        }
    }
}

#[test]
fn broadcast_host_copies_the_roots_slice_to_3_ranks() {
    let seed = streamcomm_testkit::seed();
    let (n, len) = (3, 70_001);
    let root = (seed % n as u64) as usize;
    let want: Vec<f64> = input(seed, root, len)
        .iter()
        .map(|&x| f64::from(x))
        .collect();
    let got = on_ranks(n, TransportChoice::Auto, move |comm| {
        let mut data = if comm.rank() == root {
            input(seed, root, len)
        } else {
            vec![f32::NAN; len] // poisoned
        };
        comm.broadcast_host(&mut data, root)?;
        Ok(data)
    });
    for (rank, data) in got.iter().enumerate() {
        check(rank, data, &want);
    }
}

/// Rank 0 sends each other rank a message (eager and rendezvous sizes)
/// into a larger, poisoned receive slice; each sends it back doubled.
fn send_and_recv_host(transport: TransportChoice) {
    let seed = streamcomm_testkit::seed();
    let n = 3;
    let got = on_ranks(n, transport, move |comm| {
        let mut results = Vec::new();
        for len in [5usize, 150_000] {
            if comm.rank() == 0 {
                for peer in 1..n {
                    comm.send_host(&input(seed, peer, len), peer)?;
                }
                for peer in 1..n {
                    let mut back = vec![f32::NAN; len];
                    comm.recv_host(&mut back, peer)?;
                    results.push(back);
                }
            } else {
                // Larger than the message: the tail must stay as it was.
                let mut inbox = vec![f32::NAN; len + 3];
                inbox[len..].copy_from_slice(&[7.0, 8.0, 9.0]);
                let pull_only = || {
                    comm.inner
                        .p2p
                        .state
                        .pull_only_grants
                        .load(Ordering::Relaxed)
                };
                let before = pull_only();
                comm.recv_host(&mut inbox, 0)?;
                assert_eq!(&inbox[len..], &[7.0, 8.0, 9.0], "the tail was written");
                // A rendezvous into the lent slice over shared memory gave
                // the sender nothing to write; elsewhere grants are normal.
                let rendezvous = len * 4 > comm.config().p2p_eager_limit;
                let shm = comm.transport_to(0) == Some(Transport::Shm);
                assert_eq!(pull_only() - before, u64::from(rendezvous && shm));
                let doubled: Vec<f32> = inbox[..len].iter().map(|x| x * 2.0).collect();
                comm.send_host(&doubled, 0)?;
                results.push(inbox[..len].to_vec());
            }
        }
        Ok(results)
    });
    for (i, len) in [5usize, 150_000].into_iter().enumerate() {
        for peer in 1..n {
            let sent: Vec<f64> = input(seed, peer, len)
                .iter()
                .map(|&x| f64::from(x))
                .collect();
            check(peer, &got[peer][i], &sent);
            let doubled: Vec<f64> = sent.iter().map(|x| x * 2.0).collect();
            check(0, &got[0][i * (n - 1) + peer - 1], &doubled);
        }
    }
}

#[test]
fn send_and_recv_host_over_shared_memory_pulled() {
    send_and_recv_host(Transport::Shm.into());
}

#[test]
fn send_and_recv_host_over_tcp_in_place() {
    send_and_recv_host(Transport::Tcp.into());
}

#[test]
fn bad_slices_are_refused_and_the_communicator_still_works() {
    let got = on_ranks(3, TransportChoice::Auto, |comm| {
        let send = vec![1.0f32; 10];
        let mut recv = vec![f32::NAN; 9];
        let e = comm
            .all_reduce_host(&send, &mut recv, ReduceOp::Sum)
            .unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
        let m = e.to_string();
        assert!(
            m.contains("all_reduce_host") && m.contains("10") && m.contains('9'),
            "{m}"
        );
        assert!(recv.iter().all(|x| x.is_nan()), "recv written on an error");
        let e = comm.broadcast_host(&mut recv, 3).unwrap_err();
        assert!(e.to_string().contains('3'), "{e}");
        let e = comm.send_host(&send, 5).unwrap_err();
        assert!(e.to_string().contains("peer 5"), "{e}");
        let e = comm.recv_host(&mut recv, comm.rank()).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
        // Nothing ran: the communicator still works.
        let mut data = vec![comm.rank() as u64; 4];
        comm.all_reduce_in_place_host(&mut data, ReduceOp::Sum)?;
        Ok(data)
    });
    for data in got {
        assert_eq!(data, vec![3; 4]);
    }
}

/// Small messages take the immediate path while the ring has credit and the
/// message is already there, and fall back to the full path (under the same
/// turn) when it has none: rank 0 sends 3 rings' worth of 8-byte messages
/// while rank 1 is not yet receiving; every message arrives, in order.
#[test]
fn small_messages_take_the_immediate_path_and_fall_back_without_credit() {
    let seed = streamcomm_testkit::seed();
    for transport in [Transport::Shm, Transport::Tcp] {
        let got = on_ranks(2, transport.into(), move |comm| {
            let immediate = || comm.inner.p2p.state.immediate_calls.load(Ordering::Relaxed);
            let slots = comm.config().nsteps as u64;
            let messages = 3 * slots;
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let want: Vec<u64> = (0..messages).map(|_| rng.r#gen()).collect();
            if comm.rank() == 0 {
                for m in &want {
                    comm.send_host(std::slice::from_ref(m), 1)?;
                }
                let sent = comm.p2p_stats().sent_eager_messages;
                assert_eq!(sent, messages, "{transport}: every message eager");
                // The first ring's worth had credit. Over shared memory the
                // later ones waited for the receiver's (the full path); over
                // tcp the socket takes them, returning credit at once.
                let taken = immediate();
                let expected = match transport {
                    Transport::Shm => slots..messages,
                    _ => slots..messages + 1,
                };
                assert!(
                    expected.contains(&taken),
                    "{transport}: {taken} of {messages} sends were immediate"
                );
                Ok(Vec::new())
            } else {
                std::thread::sleep(Duration::from_millis(100));
                let mut got = Vec::new();
                for _ in 0..messages {
                    let mut m = [u64::MAX; 1];
                    comm.recv_host(&mut m, 0)?;
                    got.push(m[0]);
                }
                assert_eq!(got, want, "{transport}: messages out of order or wrong");
                // Over shared memory the first ring's worth was waiting.
                if transport == Transport::Shm {
                    assert!(immediate() >= 1, "no receive was immediate");
                }
                Ok(got)
            }
        });
        assert_eq!(got[1].len(), 3 * 4);
    }
}

/// Over shared memory a `recv_host` posted before its message spins for it
/// and takes it by the immediate path, instead of setting up the full
/// path's operation first: rank 0 sends 20 messages, each 2 ms after the
/// last, and every one of rank 1's receives counts as immediate (before
/// the spin, none did).
#[test]
fn a_receive_that_spins_for_its_message_takes_the_immediate_path() {
    if crate::wait::available_cores() < 2 {
        streamcomm_testkit::skip(
            &streamcomm_testkit::current_test(),
            "one core: with more ranks than cores the spin budget is zero",
        );
        return;
    }
    let seed = streamcomm_testkit::seed();
    const MESSAGES: u64 = 20;
    let config = Config {
        transport: Transport::Shm.into(),
        // Long enough to outlast the sender's pause on any machine (a spin
        // ends as soon as the message is there).
        spin: 200_000_000,
        timeout: Duration::from_secs(60),
        ..Config::default()
    };
    let got = on_ranks_with(2, config, move |comm| {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let want: Vec<u64> = (0..MESSAGES).map(|_| rng.r#gen()).collect();
        if comm.rank() == 0 {
            for m in &want {
                std::thread::sleep(Duration::from_millis(2));
                comm.send_host(std::slice::from_ref(m), 1)?;
            }
            return Ok(0);
        }
        for (i, w) in want.iter().enumerate() {
            let mut m = [u64::MAX; 1];
            comm.recv_host(&mut m, 0)?;
            assert_eq!(m[0], *w, "message {i}");
        }
        Ok(comm.inner.p2p.state.immediate_calls.load(Ordering::Relaxed))
    });
    assert_eq!(got[1], MESSAGES, "receives taken by the immediate path");
}

/// A message of another type waiting in the ring is not taken by the
/// immediate path: the full path reports the mismatch, naming both calls.
#[test]
fn a_mismatched_small_message_is_left_to_the_full_path() {
    let got = on_ranks(2, Transport::Shm.into(), |comm| {
        if comm.rank() == 0 {
            comm.send_host(&[1.5f32], 1)?;
            return Ok(String::new());
        }
        std::thread::sleep(Duration::from_millis(50));
        let mut m = [0i32; 1];
        let e = comm.recv_host(&mut m, 0).unwrap_err();
        assert!(matches!(e, Error::Mismatch(_)), "{e:?}");
        assert_eq!(m, [0], "the slice was written on a mismatch");
        Ok(e.to_string())
    });
    assert!(
        got[1].contains("f32") && got[1].contains("i32"),
        "{}",
        got[1]
    );
}

/// A single small send or receive on a stream takes the immediate path
/// when its turn comes (no operation built): a ping-pong of 8-byte
/// messages through streams, every message checked, counts them.
#[test]
fn stream_sends_and_receives_of_one_slot_take_the_immediate_path() {
    let seed = streamcomm_testkit::seed();
    let got = on_ranks(2, Transport::Shm.into(), move |comm| {
        let stream = crate::host::HostStream::new()?;
        let peer = 1 - comm.rank();
        let rounds = 20u64;
        let mut out = crate::host::HostBuffer::<u64>::zeroed(1);
        let mut inbox = crate::host::HostBuffer::<u64>::zeroed(1);
        for round in 0..rounds {
            out.write()[0] = seed ^ (round << 8) ^ comm.rank() as u64;
            inbox.write()[0] = u64::MAX;
            if comm.rank() == 0 {
                comm.send(&out, peer, &stream)?;
                comm.recv(&mut inbox, peer, &stream)?;
            } else {
                comm.recv(&mut inbox, peer, &stream)?;
                comm.send(&out, peer, &stream)?;
            }
            stream.synchronize()?;
            assert_eq!(inbox.read()[0], seed ^ (round << 8) ^ peer as u64);
        }
        // Every send found credit; a receive whose message was not there
        // yet waited on the full path.
        Ok(comm.inner.p2p.state.immediate_calls.load(Ordering::Relaxed))
    });
    for (rank, immediate) in got.into_iter().enumerate() {
        assert!(
            immediate >= 20,
            "rank {rank}: {immediate} of 40 stream operations were immediate"
        );
    }
}
