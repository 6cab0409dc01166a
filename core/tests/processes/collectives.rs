//! Ranks as real processes over real shared memory, started the way
//! `streamcomm-run` starts them (this test binary re-runs itself as each rank).
//!
//! Covers a representative slice of the collective matrix, stream order
//! across user work and collectives, graph capture and replay on fresh data,
//! point-to-point, barriers, and 8 ranks on 2 cores.

use crate::common;
use crate::harness;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use streamcomm::Collective;
use streamcomm::host::{HostBuffer, HostEvent, HostStream};
use streamcomm::{Communicator, DataType, ReduceOp};

use harness::scenario::SCENARIO;

/// Launches `n` copies of this binary running `scenario`; fails on any rank's failure or a hang.
fn launch(n: usize, scenario: &str, buffsize: &str) {
    let extra = [
        ("STREAMCOMM_BUFFSIZE", buffsize),
        ("STREAMCOMM_NSTEPS", "4"),
        ("STREAMCOMM_TIMEOUT", "60"),
    ];
    let limit = Duration::from_secs(300);
    harness::scenario::launch_scenario(module_path!(), n, scenario, &extra, limit);
}

#[test]
#[ignore = "entry point of the child processes"]
fn child() {
    harness::scenario::run_child(
        SCENARIO,
        &[
            ("matrix", matrix_slice),
            ("thin", |comm, stream, seed| {
                harness::run_thin_slice(comm, stream, seed, &[ReduceOp::Sum, ReduceOp::Max])
            }),
            ("order", stream_order),
            ("graph", graph_replay),
            ("p2p", point_to_point),
        ],
    );
}

fn matrix_slice(comm: &Communicator, stream: &HostStream, seed: u64) {
    harness::run_slice(
        comm,
        stream,
        seed,
        &[ReduceOp::Sum, ReduceOp::Max, ReduceOp::Avg],
    );
}

/// User tasks and collectives interleaved on one stream each see the results
/// of the previous ones; a second stream ordered by an event sees them too.
fn stream_order(comm: &Communicator, stream: &HostStream, _seed: u64) {
    let (rank, n) = (comm.rank() as u64, comm.size() as u64);
    let count = 10_000;
    let mut a = HostBuffer::<u64>::zeroed(count);
    let mut b = HostBuffer::<u64>::zeroed(count);
    // a[i] = rank + i, written by a user task on the stream (not by the host).
    a.with_mut_on_stream(stream, move |s| {
        s.iter_mut()
            .enumerate()
            .for_each(|(i, v)| *v = rank + i as u64)
    })
    .unwrap();
    comm.all_reduce(&a, &mut b, ReduceOp::Sum, stream).unwrap();
    // The user task sees the reduced b and derives the next input from it.
    let b2 = b.share();
    a.with_mut_on_stream(stream, move |s| {
        let bv = b2.to_vec();
        s.iter_mut().zip(bv).for_each(|(v, x)| *v = x * 2 + rank);
    })
    .unwrap();
    comm.all_reduce(&a, &mut b, ReduceOp::Sum, stream).unwrap();
    // Second stream: waits on an event recorded after the collectives.
    let other = HostStream::new().unwrap();
    let ev = HostEvent::new();
    ev.record(stream).unwrap();
    other.wait(&ev).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s3 = seen.clone();
    b.with_on_stream(&other, move |s| *s3.lock().unwrap() = s.to_vec())
        .unwrap();
    other.synchronize().unwrap();
    stream.synchronize().unwrap();
    let ranks_sum = n * (n - 1) / 2;
    for (i, &got) in seen.lock().unwrap().iter().enumerate() {
        let first = n * i as u64 + ranks_sum;
        let want = n * (first * 2) + ranks_sum;
        assert_eq!(got, want, "element {i}");
    }
    assert_eq!(seen.lock().unwrap().len(), count);
}

/// A captured all_reduce + barrier replayed 100 times on fresh input.
fn graph_replay(comm: &Communicator, stream: &HostStream, seed: u64) {
    let (rank, n) = (comm.rank(), comm.size());
    let count = 3 * comm.config().buffsize / 4 + 5; // several chunks
    let mut send = HostBuffer::<f32>::zeroed(count);
    let mut recv = HostBuffer::<f32>::zeroed(count);
    stream.begin_capture().unwrap();
    comm.all_reduce(&send, &mut recv, ReduceOp::Sum, stream)
        .unwrap();
    comm.barrier(stream).unwrap();
    let graph = stream.end_capture().unwrap();
    stream.synchronize().unwrap();
    for iter in 0..100u64 {
        let inputs = common::gen_inputs(
            Collective::AllReduce,
            DataType::F32,
            ReduceOp::Sum,
            n,
            count,
            seed ^ iter,
        );
        let want = common::expected(
            Collective::AllReduce,
            DataType::F32,
            ReduceOp::Sum,
            n,
            count,
            &inputs,
        );
        let mine: Vec<f32> = bytemuck_f32(&inputs[rank]);
        send.copy_from(&mine).unwrap();
        recv.fill_bytes(0xA5);
        graph.launch(stream).unwrap();
        stream.synchronize().unwrap();
        let got: Vec<u8> = recv.to_vec().iter().flat_map(|v| v.to_ne_bytes()).collect();
        common::check(
            DataType::F32,
            ReduceOp::Sum,
            &got,
            want[rank].as_ref().unwrap(),
        )
        .unwrap_or_else(|e| panic!("replay {iter}: {e}"));
    }
}

fn bytemuck_f32(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Ring exchange, many ordered small messages between ranks 0 and 1, and a
/// receiver that posts late while the sender has more messages than slots.
fn point_to_point(comm: &Communicator, stream: &HostStream, seed: u64) {
    let (rank, n) = (comm.rank(), comm.size());
    let (next, prev) = ((rank + 1) % n, (rank + n - 1) % n);
    // Ring: fits in the slot ring, so send-then-recv cannot deadlock.
    let msg = HostBuffer::from_slice(&vec![rank as u32 * 7 + 1; 100]);
    let mut got = HostBuffer::<u32>::zeroed(100);
    comm.send(&msg, next, stream).unwrap();
    comm.recv(&mut got, prev, stream).unwrap();
    stream.synchronize().unwrap();
    assert_eq!(got.to_vec(), vec![prev as u32 * 7 + 1; 100]);
    // 2000 small messages 0 -> 1, in order, nothing lost or duplicated.
    if n >= 2 && rank < 2 {
        let slow = (seed % 2) as usize; // pick who is late
        if rank == 0 {
            for i in 0..2000u32 {
                comm.send(&HostBuffer::from_slice(&[i, i ^ 0xdead]), 1, stream)
                    .unwrap();
            }
            stream.synchronize().unwrap();
        } else {
            if slow == 1 {
                std::thread::sleep(Duration::from_millis(50));
            }
            let mut bufs: Vec<_> = (0..2000).map(|_| HostBuffer::<u32>::zeroed(2)).collect();
            for b in &mut bufs {
                comm.recv(b, 0, stream).unwrap();
            }
            stream.synchronize().unwrap();
            for (i, b) in bufs.iter().enumerate() {
                assert_eq!(b.to_vec(), vec![i as u32, i as u32 ^ 0xdead], "message {i}");
            }
        }
    }
    comm.barrier_host().unwrap();
}

#[test]
fn matrix_slice_on_2_3_and_5_processes() {
    for n in [2, 3, 5] {
        launch(n, "matrix", "8K");
    }
}

#[test]
fn stream_order_across_processes() {
    launch(3, "order", "8K");
}

#[test]
fn graph_replay_100_times_on_fresh_input() {
    launch(2, "graph", "8K");
    launch(3, "graph", "8K");
}

#[test]
fn point_to_point_across_processes() {
    launch(2, "p2p", "8K");
    launch(4, "p2p", "8K");
}

#[test]
fn eight_ranks_on_two_cores_finish_promptly() {
    let t0 = Instant::now();
    // The thin slice: the full one is the threads matrix's job on 8 ranks.
    launch(8, "thin", "16K");
    let took = t0.elapsed();
    // Not a timing test (that is the benchmark's job): only that oversubscribed
    // ranks make progress in seconds, not minutes.
    assert!(took < Duration::from_secs(240), "8 ranks took {took:?}");
}
