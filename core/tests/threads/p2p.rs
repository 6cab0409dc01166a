//! Point-to-point over shared memory and tcp, ranks as threads and as
//! processes: ring exchanges in groups (either call order), all_to_allv and
//! all_gatherv with random per-peer counts (zeros included), gather and
//! scatter, 10,000 small
//! messages in a row, messages straddling the eager limit, a receiver that
//! posts late while the sender has more messages than slots, zero-byte
//! messages, a receive buffer too small (an error naming both sizes), and the
//! rendezvous path writing straight into the user buffer (checked with
//! `p2p_stats`).
//!
//! Payloads are generated from (seed, source, destination, tag), so the
//! receiver recomputes independently what it must have got; every output
//! element is checked, and everything not written must still hold poison.

use crate::harness;

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use streamcomm::host::{HostBuffer, HostStream};
use streamcomm::{Communicator, Config, Error, Transport};

use harness::p2p::{POISON, payload, ring_exchange};

/// Eager limit in these tests: slots are 2 KiB (harness::small_config), so
/// eager messages span several slots and rendezvous starts at 4 KiB.
const LIMIT: usize = 4096;

fn config(transport: Transport) -> Config {
    {
        let mut c = harness::small_config();
        c.transport = transport.into();
        c.p2p_eager_limit = LIMIT;
        c
    }
}

/// all_to_allv with a random count matrix (the same on every rank), zeros
/// included, and gaps between the receive regions that must stay poisoned.
fn all_to_allv(comm: &Communicator, stream: &HostStream, seed: u64) {
    let (r, n) = (comm.rank(), comm.size());
    for round in 0..4u64 {
        let mut rng = StdRng::seed_from_u64(seed ^ round);
        let counts: Vec<Vec<usize>> = (0..n)
            .map(|_| {
                (0..n)
                    .map(|_| match rng.gen_range(0..4) {
                        0 => 0,
                        1 => rng.gen_range(1..10),
                        2 => rng.gen_range(10..1000),
                        _ => rng.gen_range(1000..3000),
                    })
                    .collect()
            })
            .collect();
        let send_counts = counts[r].clone();
        let recv_counts: Vec<usize> = (0..n).map(|j| counts[j][r]).collect();
        // Displacements with a gap of 3 elements after each block, blocks
        // in reverse rank order on the receive side.
        let displs = |c: &[usize], reverse: bool| {
            let mut d = vec![0; n];
            let mut at = 0;
            let order: Vec<usize> = if reverse {
                (0..n).rev().collect()
            } else {
                (0..n).collect()
            };
            for j in order {
                d[j] = at;
                at += c[j] + 3;
            }
            (d, at)
        };
        let (send_displs, send_len) = displs(&send_counts, false);
        let (recv_displs, recv_len) = displs(&recv_counts, true);
        let mut send = vec![POISON; send_len];
        for j in 0..n {
            let p = payload(seed, r, j, 100 + round, send_counts[j]);
            send[send_displs[j]..send_displs[j] + p.len()].copy_from_slice(&p);
        }
        let send = HostBuffer::from_slice(&send);
        let mut recv = HostBuffer::from_slice(&vec![POISON; recv_len]);
        comm.all_to_allv(
            &send,
            &send_counts,
            &send_displs,
            &mut recv,
            &recv_counts,
            &recv_displs,
            stream,
        )
        .unwrap();
        stream.synchronize().unwrap();
        let got = recv.to_vec();
        let mut want = vec![POISON; recv_len];
        for j in 0..n {
            let p = payload(seed, j, r, 100 + round, recv_counts[j]);
            want[recv_displs[j]..recv_displs[j] + p.len()].copy_from_slice(&p);
        }
        assert_eq!(got, want, "rank {r} round {round}: counts {counts:?}");
    }
}

/// all_gatherv (on the stream and host-blocking) with random counts (the
/// same on every rank), zeros included, blocks in reverse rank order with
/// gaps that must stay poisoned.
fn all_gatherv(comm: &Communicator, stream: &HostStream, seed: u64) {
    let (r, n) = (comm.rank(), comm.size());
    for round in 0..4u64 {
        let mut rng = StdRng::seed_from_u64(seed ^ (round << 16) ^ 0x6a7);
        let counts: Vec<usize> = (0..n)
            .map(|_| match rng.gen_range(0..4) {
                0 => 0,
                1 => rng.gen_range(1..10),
                2 => rng.gen_range(10..1000),
                _ => rng.gen_range(1000..5000),
            })
            .collect();
        let mut displs = vec![0; n];
        let mut len = 0;
        for j in (0..n).rev() {
            displs[j] = len;
            len += counts[j] + 5;
        }
        let send = HostBuffer::from_slice(&payload(seed, r, n, 400 + round, counts[r]));
        let mut recv = HostBuffer::from_slice(&vec![POISON; len]);
        comm.all_gatherv(&send, &mut recv, &counts, &displs, stream)
            .unwrap();
        stream.synchronize().unwrap();
        let mut want = vec![POISON; len];
        for j in 0..n {
            let p = payload(seed, j, n, 400 + round, counts[j]);
            want[displs[j]..displs[j] + p.len()].copy_from_slice(&p);
        }
        // The host-blocking form, around the ring, on the same data.
        let mut blocking = vec![POISON; len];
        comm.all_gatherv_host(&send.to_vec(), &mut blocking, &counts, &displs)
            .unwrap();
        for (what, got) in [("stream", recv.to_vec()), ("host-blocking", blocking)] {
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(
                    g, w,
                    "{what}: rank {r} round {round}: element {i} of {len}, counts {counts:?}"
                );
            }
        }
    }
}

/// Gather to and scatter from every root in turn.
fn gather_scatter(comm: &Communicator, stream: &HostStream, seed: u64) {
    let (r, n) = (comm.rank(), comm.size());
    for root in 0..n {
        let count = 1 + (seed as usize + root * 977) % 3000;
        let mine = HostBuffer::from_slice(&payload(seed, r, root, 200, count));
        let mut all = HostBuffer::from_slice(&vec![POISON; if r == root { n * count } else { 0 }]);
        comm.gather(&mine, &mut all, root, stream).unwrap();
        stream.synchronize().unwrap();
        if r == root {
            let want: Vec<i64> = (0..n)
                .flat_map(|j| payload(seed, j, root, 200, count))
                .collect();
            assert_eq!(all.to_vec(), want, "gather at root {root}");
        }
        let src: Vec<i64> = if r == root {
            (0..n)
                .flat_map(|j| payload(seed, root, j, 300, count))
                .collect()
        } else {
            Vec::new()
        };
        let src = HostBuffer::from_slice(&src);
        let mut part = HostBuffer::from_slice(&vec![POISON; count]);
        comm.scatter(&src, &mut part, root, stream).unwrap();
        stream.synchronize().unwrap();
        assert_eq!(
            part.to_vec(),
            payload(seed, root, r, 300, count),
            "scatter from {root} at {r}"
        );
    }
}

/// 10,000 small messages 0 -> 1 as separate operations: none lost,
/// duplicated or reordered; the receiver starts late.
fn many_small(comm: &Communicator, stream: &HostStream, seed: u64) {
    const MESSAGES: u64 = 10_000;
    match comm.rank() {
        0 => {
            for i in 0..MESSAGES {
                let len = 1 + (i as usize % 3);
                let b = HostBuffer::from_slice(&payload(seed, 0, 1, i, len));
                comm.send(&b, 1, stream).unwrap();
            }
            stream.synchronize().unwrap();
        }
        1 => {
            std::thread::sleep(Duration::from_millis(20));
            let mut bufs: Vec<_> = (0..MESSAGES)
                .map(|_| HostBuffer::from_slice(&[POISON; 4]))
                .collect();
            for b in &mut bufs {
                comm.recv(b, 0, stream).unwrap();
            }
            stream.synchronize().unwrap();
            for (i, b) in bufs.iter().enumerate() {
                let len = 1 + (i % 3);
                let got = b.to_vec();
                assert_eq!(
                    &got[..len],
                    &payload(seed, 0, 1, i as u64, len)[..],
                    "message {i}"
                );
                assert!(
                    got[len..].iter().all(|&v| v == POISON),
                    "message {i} too long"
                );
            }
        }
        _ => {}
    }
    comm.barrier_host().unwrap();
}

/// Messages of LIMIT - 1, LIMIT and LIMIT + 1 bytes (eager, eager,
/// rendezvous where the transport has it), zero-byte messages, and a receiver
/// that posts late while the sender has more messages than the ring has
/// slots (4): nothing is overwritten.
fn straddle_and_late(comm: &Communicator, stream: &HostStream, seed: u64) {
    let r = comm.rank();
    if r >= 2 {
        comm.barrier_host().unwrap();
        return;
    }
    let peer = 1 - r;
    let sizes = [LIMIT - 1, LIMIT, LIMIT + 1, 0, 2048 + 5, 0, 17, LIMIT + 1];
    let bytes = |tag: usize, len: usize| -> Vec<u8> {
        payload(seed, 0, 1, 400 + tag as u64, len)
            .iter()
            .map(|v| *v as u8)
            .collect()
    };
    let before = comm.p2p_stats();
    if r == 0 {
        for (tag, &len) in sizes.iter().enumerate() {
            comm.send(&HostBuffer::from_slice(&bytes(tag, len)), peer, stream)
                .unwrap();
        }
        stream.synchronize().unwrap();
    } else {
        std::thread::sleep(Duration::from_millis(300));
        let mut bufs: Vec<_> = sizes
            .iter()
            .map(|&l| HostBuffer::from_slice(&vec![0xA5u8; l + 9]))
            .collect();
        for b in &mut bufs {
            comm.recv(b, peer, stream).unwrap();
        }
        stream.synchronize().unwrap();
        for (tag, (b, &len)) in bufs.iter().zip(&sizes).enumerate() {
            let got = b.to_vec();
            assert_eq!(
                &got[..len],
                &bytes(tag, len)[..],
                "message {tag} of {len} bytes"
            );
            assert!(
                got[len..].iter().all(|&v| v == 0xA5),
                "message {tag}: wrote past its end"
            );
        }
    }
    let after = comm.p2p_stats();
    if r == 0 {
        let rdv = after.sent_rendezvous_messages - before.sent_rendezvous_messages;
        let eager = after.sent_eager_messages - before.sent_eager_messages;
        // LIMIT + 1, twice, goes by rendezvous; the rest eagerly.
        assert_eq!((eager, rdv), (6, 2), "protocol choice");
    }
    comm.barrier_host().unwrap();
}

/// A rendezvous message is written straight into the receiver's buffer.
/// Shared memory: one cross-memory copy by the sender, no byte through a
/// slot on either side. tcp: the receiver's progress engine reads the data
/// from the socket into the buffer; only slots that arrived before the
/// receiver granted its buffer (at most a ring's worth) are copied.
fn rendezvous_is_one_copy(comm: &Communicator, stream: &HostStream, seed: u64) {
    let r = comm.rank();
    if r < 2 {
        let shm = comm.transport_to(1 - r) == Some(Transport::Shm);
        let len = 1 << 17;
        let bytes = (len * 8) as u64;
        let before = comm.p2p_stats();
        if r == 0 {
            // Let the receiver post first, so its grant is there early.
            std::thread::sleep(Duration::from_millis(50));
            comm.send(
                &HostBuffer::from_slice(&payload(seed, 0, 1, 500, len)),
                1,
                stream,
            )
            .unwrap();
        } else {
            let mut b = HostBuffer::from_slice(&vec![POISON; len]);
            comm.recv(&mut b, 0, stream).unwrap();
            stream.synchronize().unwrap();
            assert_eq!(b.to_vec(), payload(seed, 0, 1, 500, len));
        }
        stream.synchronize().unwrap();
        let a = comm.p2p_stats();
        let ring = (4 * 2048) as u64;
        if r == 0 {
            assert_eq!(a.sent_eager_bytes, before.sent_eager_bytes);
            let (direct, streamed) = (
                a.sent_direct_bytes - before.sent_direct_bytes,
                a.sent_streamed_bytes - before.sent_streamed_bytes,
            );
            assert_eq!(
                (direct, streamed),
                if shm { (bytes, 0) } else { (0, bytes) }
            );
        } else {
            assert_eq!(a.recv_eager_bytes, before.recv_eager_bytes);
            let placed = a.recv_direct_bytes - before.recv_direct_bytes;
            let copied = a.recv_streamed_bytes - before.recv_streamed_bytes;
            assert_eq!(placed + copied, bytes);
            if shm {
                assert_eq!(copied, 0);
            } else {
                assert!(copied <= ring, "tcp: {copied} bytes copied out of slots");
            }
        }
    }
    comm.barrier_host().unwrap();
}

fn everything(comm: &Communicator, stream: &HostStream, seed: u64) {
    ring_exchange(comm, stream, seed);
    all_to_allv(comm, stream, seed);
    all_gatherv(comm, stream, seed);
    gather_scatter(comm, stream, seed);
    straddle_and_late(comm, stream, seed);
    rendezvous_is_one_copy(comm, stream, seed);
}

fn on_threads(n: usize, config: Config, scenario: fn(&Communicator, &HostStream, u64)) {
    let seed = streamcomm_testkit::seed();
    harness::run_threads(n, config, Duration::from_secs(240), move |comm| {
        let stream = HostStream::new().unwrap();
        scenario(&comm, &stream, seed);
    });
}

#[test]
fn p2p_over_shm_threads_2_3_4_5() {
    for n in [2, 3, 4, 5] {
        on_threads(n, config(Transport::Shm), everything);
    }
}

#[test]
fn p2p_over_tcp_threads_2_3_4_5() {
    for n in [2, 3, 4, 5] {
        on_threads(n, config(Transport::Tcp), everything);
    }
}

/// Tcp links are made on first use, and in an all-to-all every pair makes
/// its link from both sides at once (the sender as it stages, the
/// receiver as it waits): twenty fresh communicators of six ranks, each
/// first used by an all-to-allv (every element checked, receive gaps
/// poisoned), then a ring exchange over the links made. That a race ends
/// in one link of the lower rank's dial is the connector's unit tests'.
#[test]
fn pairs_that_first_meet_from_both_sides_at_once_carry_every_element_over_tcp() {
    let seed = streamcomm_testkit::seed();
    for trial in 0..20u64 {
        harness::run_threads(
            6,
            config(Transport::Tcp),
            Duration::from_secs(120),
            move |comm| {
                let connected = streamcomm::testing::transport::connected_peers;
                let stream = HostStream::new().unwrap();
                all_to_allv(&comm, &stream, seed ^ trial);
                let others: Vec<usize> = (0..comm.size()).filter(|&p| p != comm.rank()).collect();
                // A pair whose counts were both zero exchanged nothing and
                // may not be connected: the ones that did, are.
                let got = connected(&comm);
                assert!(
                    got.iter().all(|p| others.contains(p)),
                    "trial {trial}, rank {}: {got:?}",
                    comm.rank()
                );
                ring_exchange(&comm, &stream, seed ^ trial);
            },
        );
    }
}

#[test]
fn rendezvous_streams_through_the_ring_when_direct_writes_are_off() {
    let seed = streamcomm_testkit::seed();
    let cfg = {
        let mut c = config(Transport::Shm);
        c.p2p_direct = false;
        c
    };
    harness::run_threads(2, cfg, Duration::from_secs(120), move |comm| {
        let stream = HostStream::new().unwrap();
        ring_exchange(&comm, &stream, seed);
        straddle_and_late(&comm, &stream, seed);
        let s = comm.p2p_stats();
        assert_eq!(s.sent_direct_bytes, 0);
        assert!(
            s.sent_streamed_bytes > 0 && s.recv_streamed_bytes > 0,
            "{s:?}"
        );
    });
}

#[test]
fn ten_thousand_small_messages_shm_and_tcp() {
    on_threads(2, config(Transport::Shm), many_small);
    on_threads(2, config(Transport::Tcp), many_small);
}

#[test]
fn a_receive_buffer_too_small_names_both_sizes() {
    let rendezvous = [10usize, 1000];
    for len in rendezvous {
        let results = harness::run_threads(
            2,
            config(Transport::Shm),
            Duration::from_secs(60),
            move |comm| {
                let stream = HostStream::new().unwrap();
                let r = if comm.rank() == 0 {
                    comm.send(&HostBuffer::from_slice(&vec![1i64; len]), 1, &stream)
                        .and_then(|()| stream.synchronize())
                } else {
                    comm.recv(&mut HostBuffer::<i64>::zeroed(len - 1), 0, &stream)
                        .and_then(|()| stream.synchronize())
                };
                r.err().map(|e| e.to_string())
            },
        );
        let recv_err = results[1].clone().expect("the receiver must fail");
        let both = |m: &str| {
            m.contains(&format!("send(i64, {len})"))
                && m.contains(&format!("recv(i64, up to {})", len - 1))
        };
        assert!(both(&recv_err), "{recv_err}");
        // Rendezvous: the sender waits for a grant that never comes and is
        // released by the receiver's failure, which tells both calls.
        if len * 8 > LIMIT {
            let send_err = results[0].clone().expect("the sender must fail");
            assert!(both(&send_err), "{send_err}");
        }
    }
}

/// A receive of another element type fails on the receiver, naming both
/// calls, whether the message is eager or rendezvous (5,000 f32 sent, and
/// received as i32: the same bytes, above the eager limit), over shared
/// memory and tcp; the receive buffer keeps its poison.
#[test]
fn a_receive_of_another_type_is_a_mismatch_eager_or_rendezvous() {
    for transport in [Transport::Shm, Transport::Tcp] {
        for len in [10usize, 5000] {
            let results =
                harness::run_threads(2, config(transport), Duration::from_secs(60), move |comm| {
                    let stream = HostStream::new().unwrap();
                    if comm.rank() == 0 {
                        let r = comm
                            .send(&HostBuffer::from_slice(&vec![1.5f32; len]), 1, &stream)
                            .and_then(|()| stream.synchronize());
                        return (r.err().map(|e| e.to_string()), true);
                    }
                    let mut buf = HostBuffer::from_slice(&vec![-7i32; len]);
                    let r = comm
                        .recv(&mut buf, 0, &stream)
                        .and_then(|()| stream.synchronize());
                    let poisoned = buf.to_vec().iter().all(|&x| x == -7);
                    (r.err().map(|e| e.to_string()), poisoned)
                });
            let what = format!("{len} f32 received as i32 over {transport:?}");
            let (recv_err, poisoned) = results[1].clone();
            let recv_err = recv_err.unwrap_or_else(|| panic!("{what}: the receive must fail"));
            assert!(
                recv_err.contains(&format!("send(f32, {len})")) && recv_err.contains("recv(i32"),
                "{what}: {recv_err}"
            );
            assert!(poisoned, "{what}: the receive buffer was written");
        }
    }
}

/// Host-blocking send/recv: a ping-pong with fresh data each way, ordered
/// with stream operations of the same communicator.
fn host_calls(comm: &Communicator, stream: &HostStream, seed: u64) {
    let r = comm.rank();
    if r < 2 {
        let peer = 1 - r;
        for i in 0..500u64 {
            let len = 1 + (i as usize * 37) % 700;
            if (i as usize + r).is_multiple_of(2) {
                comm.send_host(&payload(seed, r, peer, 600 + i, len), peer)
                    .unwrap();
            } else {
                let mut b = vec![POISON; len];
                comm.recv_host(&mut b, peer).unwrap();
                assert_eq!(b, payload(seed, peer, r, 600 + i, len), "message {i}");
            }
        }
        // A stream send, then a host recv: the host call waits its turn.
        let big = 3 * LIMIT;
        if r == 0 {
            comm.send(
                &HostBuffer::from_slice(&payload(seed, 0, 1, 700, big)),
                1,
                stream,
            )
            .unwrap();
            let mut b = [POISON; 5];
            comm.recv_host(&mut b, 1).unwrap();
            assert_eq!(b.to_vec(), payload(seed, 1, 0, 701, 5));
            stream.synchronize().unwrap();
        } else {
            // Into a HostBuffer's elements.
            let mut b = HostBuffer::from_slice(&vec![POISON; big]);
            comm.recv_host(&mut b.write(), 0).unwrap();
            assert_eq!(b.to_vec(), payload(seed, 0, 1, 700, big));
            comm.send_host(&payload(seed, 1, 0, 701, 5), 0).unwrap();
        }
    }
    comm.barrier_host().unwrap();
}

#[test]
fn host_blocking_send_recv_shm_and_tcp() {
    on_threads(2, config(Transport::Shm), host_calls);
    on_threads(3, config(Transport::Tcp), host_calls);
}

#[test]
fn bad_arguments_are_refused_at_enqueue() {
    harness::run_threads(2, config(Transport::Shm), Duration::from_secs(60), |comm| {
        let stream = HostStream::new().unwrap();
        let mut b = HostBuffer::<f32>::zeroed(8);
        let msg = |e: Error| e.to_string();
        assert!(msg(comm.send(&b, 2, &stream).unwrap_err()).contains("peer 2"));
        assert!(msg(comm.send(&b, comm.rank(), &stream).unwrap_err()).contains("to this rank"));
        let e = comm
            .group(&stream, |g| {
                // The same memory through a shared handle and its owner.
                g.send(&b.share(), 1 - comm.rank())?;
                g.recv(&mut b, 1 - comm.rank())
            })
            .unwrap_err();
        assert!(msg(e).contains("both sent from and received into"));
        let mut out = HostBuffer::<f32>::zeroed(8);
        let e = comm.all_to_allv(&b, &[1, 1], &[0, 1], &mut out, &[4, 4], &[0, 2], &stream);
        assert!(msg(e.unwrap_err()).contains("overlap"));
        let e = comm.all_to_allv(&b, &[1], &[0, 1], &mut out, &[1, 1], &[0, 1], &stream);
        assert!(msg(e.unwrap_err()).contains("send_counts has 1 entries"));
        let e = comm.all_to_allv(&b, &[9, 0], &[0, 0], &mut out, &[1, 1], &[0, 1], &stream);
        assert!(msg(e.unwrap_err()).contains("send region 0..0+9 lies outside its 8 elements"));
        let mine = HostBuffer::<f32>::zeroed(2);
        let e = comm.all_gatherv(&mine, &mut out, &[2, 2], &[0, 1], &stream);
        assert!(msg(e.unwrap_err()).contains("overlap"));
        let e = comm.all_gatherv(&mine, &mut out, &[2, 2, 2], &[0, 2, 4], &stream);
        assert!(msg(e.unwrap_err()).contains("all_gatherv: counts has 3 entries"));
        let e = comm.all_gatherv(&mine, &mut out, &[3, 3], &[0, 4], &stream);
        assert!(msg(e.unwrap_err()).contains("send holds 2 elements, counts["));
        let e = comm.all_gatherv(&mine, &mut out, &[2, 2], &[0, 7], &stream);
        assert!(msg(e.unwrap_err()).contains("recv region 7..7+2 lies outside its 8 elements"));
        let mut whole = [0, 0];
        whole[comm.rank()] = 8;
        let e = comm.all_gatherv(&out, &mut out.share(), &whole, &[0, 0], &stream);
        assert!(msg(e.unwrap_err()).contains("the same buffer"));
        assert!(msg(comm.gather(&b, &mut out, 5, &stream).unwrap_err()).contains("root 5"));
        assert!(msg(comm.send_host(&b.read(), 9).unwrap_err()).contains("peer 9"));
        assert!(
            msg(comm.recv_host(&mut out.write(), comm.rank()).unwrap_err()).contains("this rank")
        );
        // Nothing was enqueued: the communicator still works.
        ring_exchange(&comm, &stream, 7);
    });
}

// --- ranks as processes -------------------------------------------------

use harness::scenario::SCENARIO;

fn launch(n: usize, scenario: &str, transport: &str) {
    let limit = LIMIT.to_string();
    let extra = [
        ("STREAMCOMM_BUFFSIZE", "8K"),
        ("STREAMCOMM_NSTEPS", "4"),
        ("STREAMCOMM_P2P_EAGER_LIMIT", limit.as_str()),
        ("STREAMCOMM_TRANSPORT", transport),
        ("STREAMCOMM_TIMEOUT", "60"),
    ];
    let within = Duration::from_secs(240);
    harness::scenario::launch_scenario(module_path!(), n, scenario, &extra, within);
}

#[test]
#[ignore = "entry point of the child processes"]
fn child() {
    harness::scenario::run_child(
        SCENARIO,
        &[("everything", everything), ("many_small", many_small)],
    );
}

#[test]
fn p2p_across_processes_shm() {
    launch(2, "everything", "shm");
    launch(4, "everything", "shm");
    launch(2, "many_small", "shm");
}

#[test]
fn p2p_across_processes_tcp() {
    launch(3, "everything", "tcp");
}

/// A receive enqueued on a stream holds its buffer's lock only while it
/// moves bytes, never across its wait for the sender, as a collective's
/// step does: a program that reads the buffer before synchronizing gets
/// the old values at once instead of blocking (here the sender waits for
/// that read, so a lock held across the wait would stall both ranks until
/// the timeout). Eager and rendezvous sizes, alone and in a group, over
/// shared memory and tcp.
#[test]
fn a_pending_receive_does_not_hold_its_buffer_across_the_wait() {
    let seed = streamcomm_testkit::seed();
    for (transport, len, grouped) in [Transport::Shm, Transport::Tcp]
        .into_iter()
        .flat_map(|t| [16usize, 3 * LIMIT].map(|len| (t, len)))
        .flat_map(|(t, len)| [false, true].map(|g| (t, len, g)))
    {
        {
            let mut cfg = config(transport);
            cfg.timeout = Duration::from_secs(20);
            let (tx, rx) = std::sync::mpsc::channel::<()>();
            let rx = std::sync::Arc::new(std::sync::Mutex::new(rx));
            harness::run_threads(2, cfg, Duration::from_secs(60), move |comm| {
                let stream = HostStream::new().unwrap();
                if comm.rank() == 0 {
                    let mut buf = HostBuffer::from_slice(&vec![POISON; len]);
                    if grouped {
                        comm.group(&stream, |g| g.recv(&mut buf, 1)).unwrap();
                    } else {
                        comm.recv(&mut buf, 1, &stream).unwrap();
                    }
                    // Let the stream reach the receive's wait.
                    std::thread::sleep(Duration::from_millis(50));
                    let start = std::time::Instant::now();
                    let seen = buf.to_vec();
                    let took = start.elapsed();
                    tx.send(()).unwrap();
                    assert!(
                        took < Duration::from_secs(5),
                        "{transport:?}, {len} B (grouped {grouped}): reading the buffer waited {took:?} for the receive"
                    );
                    assert!(
                        seen.iter().all(|&b| b == POISON),
                        "stale values are the old ones"
                    );
                    stream.synchronize().unwrap();
                    assert_eq!(
                        buf.to_vec(),
                        payload(seed, 1, 0, 0, len),
                        "{len} B arrived whole"
                    );
                } else {
                    rx.lock().unwrap().recv().unwrap();
                    comm.send(
                        &HostBuffer::from_slice(&payload(seed, 1, 0, 0, len)),
                        0,
                        &stream,
                    )
                    .unwrap();
                    stream.synchronize().unwrap();
                }
            });
        }
    }
}
