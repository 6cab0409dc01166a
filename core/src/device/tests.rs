//! The staged device path end to end, on the emulated device: real
//! communicators (ranks as threads over shared memory), fresh random data,
//! f64 references, poisoned outputs, graph capture and replay.

use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, SeedableRng};

use super::call::{DeviceBuffers, DeviceCall, DeviceP2p, DeviceRange};
use super::direct::Direct;
use super::emulated::{
    raise_words, EmulatedQueue, EmulatedSignal, EmulatedStaging, EmulatedWindows,
};
use super::DeviceShared;
use crate::bootstrap::UniqueId;
use crate::comm::p2p::Dir;
use crate::host::HostStream;
use crate::plan::Collective;
use crate::{Backend, Communicator, DataType, Error, ReduceOp, Result};

pub(in crate::device) const POISON: f32 = f32::NAN;

/// One rank's view of the emulated device.
pub(in crate::device) struct Rank {
    pub comm: Communicator,
    pub stream: HostStream,
    pub shared: DeviceShared<EmulatedStaging, EmulatedSignal>,
}

impl Rank {
    /// Enqueues `call` on this rank's emulated device stream.
    pub(in crate::device) fn call(&self, call: DeviceCall) -> Result<()> {
        let queue = EmulatedQueue {
            stream: &self.stream,
        };
        self.comm.enqueue_device(&queue, &self.shared, &call)
    }
}

pub(in crate::device) fn range(v: &[f32]) -> DeviceRange {
    DeviceRange {
        addr: v.as_ptr() as u64,
        len: v.len(),
    }
}

pub(in crate::device) fn separate(
    collective: Collective,
    op: ReduceOp,
    send: &[f32],
    recv: &[f32],
) -> DeviceCall {
    DeviceCall {
        collective,
        dtype: DataType::F32,
        op,
        buffers: DeviceBuffers::Separate {
            send: range(send),
            recv: range(recv),
        },
    }
}

pub(in crate::device) fn in_place(collective: Collective, op: ReduceOp, buf: &[f32]) -> DeviceCall {
    DeviceCall {
        collective,
        dtype: DataType::F32,
        op,
        buffers: DeviceBuffers::InPlace(range(buf)),
    }
}

/// Which device path the ranks of a test use.
#[derive(Clone, Copy, Debug)]
pub(in crate::device) enum Path {
    /// Staged through host memory and the host backend's tasks.
    Staged,
    /// Direct, over windows of this many data bytes.
    Direct(usize),
}

/// Runs `body` on `n` ranks as threads (staged path) and returns their results.
fn on_ranks<T: Send + 'static>(
    n: usize,
    body: impl Fn(&Rank) -> T + Send + Sync + 'static,
) -> Vec<T> {
    on_ranks_with(n, Path::Staged, body)
}

/// Runs `body` on `n` ranks as threads using `path`, with every peer alive.
pub(in crate::device) fn on_ranks_with<T: Send + 'static>(
    n: usize,
    path: Path,
    body: impl Fn(&Rank) -> T + Send + Sync + 'static,
) -> Vec<T> {
    on_ranks_watched(n, path, |_| true, body)
}

/// As [`on_ranks_with`], the direct path's watchdog asking `alive(rank)`
/// whether a peer lives.
pub(in crate::device) fn on_ranks_watched<T: Send + 'static>(
    n: usize,
    path: Path,
    alive: impl Fn(usize) -> bool + Send + Sync + 'static,
    body: impl Fn(&Rank) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let id = UniqueId::new().unwrap();
    let (body, alive) = (Arc::new(body), Arc::new(alive));
    let handles: Vec<_> = (0..n)
        .map(|r| {
            let (body, alive) = (body.clone(), alive.clone());
            std::thread::spawn(move || {
                let comm = Communicator::init(&id, r, n, Backend::Host).unwrap();
                let shared = DeviceShared::new().unwrap();
                if let Path::Direct(capacity) = path {
                    // Threads share one pid: the test's own notion of
                    // liveness stands in for the process check.
                    let ranks_alive = move |q: usize, _pid: u32| alive(q);
                    let direct = Direct::establish(
                        &comm,
                        Some(&EmulatedWindows),
                        capacity,
                        Box::new(ranks_alive),
                        Box::new(raise_words),
                        Duration::from_millis(20),
                    )
                    .unwrap()
                    .expect("threads of one process can share windows");
                    let _ = shared.direct.set(direct);
                }
                let rank = Rank {
                    comm,
                    stream: HostStream::new().unwrap(),
                    shared,
                };
                body(&rank)
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

/// Fails listing every rank's mismatches, if any.
pub(in crate::device) fn assert_no_errors(per_rank: Vec<Vec<String>>) {
    let errors: Vec<String> = per_rank.into_iter().flatten().collect();
    assert!(errors.is_empty(), "{errors:#?}");
}

pub(in crate::device) fn random(n: usize) -> Vec<f32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(streamcomm_testkit::seed());
    (0..n).map(|_| rng.gen_range(-4.0f32..4.0)).collect()
}

/// Data rank `r` contributes in round `round` (so every rank can compute
/// every other rank's input for its reference).
pub(in crate::device) fn input(seed: u64, r: usize, len: usize) -> Vec<f32> {
    use rand::SeedableRng;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ (r as u64 * 0x9E37_79B9));
    (0..len).map(|_| rng.gen_range(-4.0f32..4.0)).collect()
}

pub(in crate::device) fn close(got: f32, want: f64) -> bool {
    (f64::from(got) - want).abs() <= 1e-5 * want.abs().max(1.0)
}

#[test]
fn every_collective_runs_staged_with_fresh_data() {
    every_collective(3, Path::Staged);
}

#[test]
fn every_collective_runs_direct_in_chunks_with_fresh_data() {
    // 1 KiB windows: 1000 f32 take 4 chunks, reduce_scatter's 3 blocks 13.
    every_collective(3, Path::Direct(1 << 10));
}

#[test]
fn every_collective_runs_direct_in_one_chunk_with_4_ranks() {
    every_collective(4, Path::Direct(1 << 20));
}

/// Every collective (both buffer layouts where they differ) on `n` ranks.
fn every_collective(n: usize, path: Path) {
    const COUNT: usize = 1000;
    let seed: u64 = streamcomm_testkit::seed();
    let errors = on_ranks_with(n, path, move |rk| {
        let n = rk.comm.size();
        let r = rk.comm.rank();
        let mut bad = Vec::new();
        let inputs: Vec<Vec<f32>> = (0..n).map(|q| input(seed, q, n * COUNT)).collect();
        let mine = inputs[r].clone();
        let sum = |i: usize| inputs.iter().map(|v| f64::from(v[i])).sum::<f64>();

        // all_reduce, out of place, with 7 extra recv elements that must stay poisoned.
        let send = mine[..COUNT].to_vec();
        let recv = vec![POISON; COUNT + 7];
        rk.call(separate(Collective::AllReduce, ReduceOp::Sum, &send, &recv))
            .unwrap();
        // in place, max
        let buf = mine[..COUNT].to_vec();
        rk.call(in_place(Collective::AllReduce, ReduceOp::Max, &buf))
            .unwrap();
        // broadcast from rank 1, reduce to rank 2
        let bsend = mine[..COUNT].to_vec();
        let brecv = vec![POISON; COUNT];
        rk.call(separate(
            Collective::Broadcast { root: 1 },
            ReduceOp::Sum,
            &bsend,
            &brecv,
        ))
        .unwrap();
        let rrecv = vec![POISON; COUNT];
        rk.call(separate(
            Collective::Reduce { root: 2 },
            ReduceOp::Sum,
            &send,
            &rrecv,
        ))
        .unwrap();
        // all_gather, reduce_scatter, all_to_all
        let grecv = vec![POISON; n * COUNT];
        rk.call(separate(
            Collective::AllGather,
            ReduceOp::Sum,
            &send,
            &grecv,
        ))
        .unwrap();
        let ssend = mine.clone();
        let srecv = vec![POISON; COUNT];
        rk.call(separate(
            Collective::ReduceScatter,
            ReduceOp::Sum,
            &ssend,
            &srecv,
        ))
        .unwrap();
        let arecv = vec![POISON; n * COUNT];
        rk.call(separate(
            Collective::AllToAll,
            ReduceOp::Sum,
            &ssend,
            &arecv,
        ))
        .unwrap();
        // in-place all_gather: this rank's block at rank * COUNT
        let mut gbuf = vec![POISON; n * COUNT];
        gbuf[r * COUNT..(r + 1) * COUNT].copy_from_slice(&mine[..COUNT]);
        rk.call(in_place(Collective::AllGather, ReduceOp::Sum, &gbuf))
            .unwrap();
        // in-place reduce_scatter with avg: this rank's block at rank * COUNT
        let sbuf = mine.clone();
        rk.call(in_place(Collective::ReduceScatter, ReduceOp::Avg, &sbuf))
            .unwrap();
        rk.call(DeviceCall::barrier()).unwrap();
        rk.stream.synchronize().unwrap();
        assert!(rk.comm.async_error().is_none());
        if let Path::Direct(_) = path {
            // Nothing was staged through host memory.
            assert_eq!(rk.shared.pool.allocations(), 0);
        }

        let mut check = |what: &str, got: f32, want: f64| {
            if !close(got, want) && bad.len() < 5 {
                bad.push(format!("rank {r} {what}: got {got}, want {want}"));
            }
        };
        for i in 0..COUNT {
            check("all_reduce", recv[i], sum(i));
            let max = inputs
                .iter()
                .map(|v| f64::from(v[i]))
                .fold(f64::MIN, f64::max);
            check("all_reduce_in_place max", buf[i], max);
            check("broadcast", brecv[i], f64::from(inputs[1][i]));
            if r == 2 {
                check("reduce", rrecv[i], sum(i));
            } else if !rrecv[i].is_nan() {
                check("reduce non-root untouched", rrecv[i], f64::NAN);
            }
            for q in 0..n {
                check("all_gather", grecv[q * COUNT + i], f64::from(inputs[q][i]));
                check(
                    "all_gather_in_place",
                    gbuf[q * COUNT + i],
                    f64::from(inputs[q][i]),
                );
                check(
                    "all_to_all",
                    arecv[q * COUNT + i],
                    f64::from(inputs[q][r * COUNT + i]),
                );
            }
            check("reduce_scatter", srecv[i], sum(r * COUNT + i));
            let avg = sum(r * COUNT + i) / n as f64;
            check("reduce_scatter_in_place avg", sbuf[r * COUNT + i], avg);
        }
        if recv[COUNT..].iter().any(|x| !x.is_nan()) {
            bad.push(format!("rank {r}: all_reduce wrote past count"));
        }
        bad
    });
    assert_no_errors(errors);
}

#[test]
fn a_captured_step_replays_with_fresh_data_and_releases_on_drop() {
    captured_step(Path::Staged);
}

#[test]
fn a_captured_direct_step_replays_with_fresh_data_and_releases_on_drop() {
    captured_step(Path::Direct(1 << 10));
}

/// A captured "kernel, all_reduce, kernel, barrier" step replayed with fresh data.
fn captured_step(path: Path) {
    const N: usize = 2;
    const COUNT: usize = 300;
    const REPLAYS: u64 = 40;
    let seed: u64 = streamcomm_testkit::seed();
    let errors = on_ranks_with(N, path, move |rk| {
        let r = rk.comm.rank();
        let mut bad = Vec::new();
        let x = vec![0f32; COUNT];
        let y = vec![POISON; COUNT];
        let (xa, ya) = (x.as_ptr() as usize, y.as_ptr() as usize);
        rk.stream.begin_capture().unwrap();
        // "kernel": x *= 2
        rk.stream
            .host_fn(move || {
                // SAFETY: `x` outlives the graph; the stream orders accesses.
                let x = unsafe { std::slice::from_raw_parts_mut(xa as *mut f32, COUNT) };
                x.iter_mut().for_each(|v| *v *= 2.0);
            })
            .unwrap();
        rk.call(separate(Collective::AllReduce, ReduceOp::Sum, &x, &y))
            .unwrap();
        // "kernel": y += 1
        rk.stream
            .host_fn(move || {
                // SAFETY: as above.
                let y = unsafe { std::slice::from_raw_parts_mut(ya as *mut f32, COUNT) };
                y.iter_mut().for_each(|v| *v += 1.0);
            })
            .unwrap();
        rk.call(DeviceCall::barrier()).unwrap();
        let graph = rk.stream.end_capture().unwrap();
        for round in 0..REPLAYS {
            let fresh = input(seed ^ round, r, COUNT);
            // SAFETY: the stream is idle (synchronized after every launch),
            // so nothing else touches `x` and `y` now.
            let (xs, ys) = unsafe {
                (
                    std::slice::from_raw_parts_mut(xa as *mut f32, COUNT),
                    std::slice::from_raw_parts_mut(ya as *mut f32, COUNT),
                )
            };
            xs.copy_from_slice(&fresh);
            ys.fill(POISON);
            graph.launch(&rk.stream).unwrap();
            rk.stream.synchronize().unwrap();
            let all: Vec<Vec<f32>> = (0..N).map(|q| input(seed ^ round, q, COUNT)).collect();
            for (i, &got) in y.iter().enumerate() {
                let want = all.iter().map(|v| 2.0 * f64::from(v[i])).sum::<f64>() + 1.0;
                if !close(got, want) && bad.len() < 5 {
                    bad.push(format!("rank {r} replay {round} [{i}]: {got} vs {want}"));
                }
            }
        }
        // The graph holds the operations' resources; dropping it releases them.
        let before = rk.shared.graveyard.bury();
        drop(graph);
        let after = rk.shared.graveyard.bury();
        if before != 0 || after != 2 {
            bad.push(format!(
                "rank {r}: released {before} before and {after} after the drop"
            ));
        }
        bad
    });
    assert_no_errors(errors);
}

#[test]
fn bad_arguments_fail_at_enqueue_naming_what_was_wrong() {
    let errs = on_ranks(2, |rk| {
        let send = random(10);
        let small = vec![0f32; 9];
        let e1 = rk
            .call(separate(
                Collective::AllReduce,
                ReduceOp::Sum,
                &send,
                &small,
            ))
            .unwrap_err();
        let e2 = rk
            .call(separate(Collective::AllReduce, ReduceOp::Sum, &send, &send))
            .unwrap_err();
        let odd = vec![0f32; 7];
        let e3 = rk
            .call(in_place(Collective::AllGather, ReduceOp::Sum, &odd))
            .unwrap_err();
        // Nothing was enqueued: the stream is idle and nothing was released.
        rk.stream.synchronize().unwrap();
        (
            e1.to_string(),
            e2.to_string(),
            e3.to_string(),
            rk.shared.graveyard.bury(),
        )
    });
    for (e1, e2, e3, released) in errs {
        assert!(
            e1.contains("recv holds 9 elements, the call needs 10"),
            "{e1}"
        );
        assert!(e2.contains("same buffer"), "{e2}");
        assert!(e3.contains("not divisible"), "{e3}");
        assert_eq!(released, 0);
    }
}

#[test]
fn a_failed_peer_releases_the_device_stream_with_the_error_kept() {
    let results = on_ranks(2, |rk| {
        let send = random(64);
        let recv = vec![POISON; 64];
        if rk.comm.rank() == 1 {
            rk.comm.abort();
            return None;
        }
        // Rank 0's all-reduce can never complete: its device stream must not
        // hang on the completion word, and the error must be kept.
        let r = rk.call(separate(Collective::AllReduce, ReduceOp::Sum, &send, &recv));
        let sync = rk.stream.synchronize();
        let kept = rk.comm.async_error();
        let later = rk.call(separate(Collective::AllReduce, ReduceOp::Sum, &send, &recv));
        Some((r.is_ok(), sync, kept, later))
    });
    let (enqueued, sync, kept, later) = results[0].clone().unwrap();
    if enqueued {
        assert!(sync.is_ok(), "the device stream itself completes: {sync:?}");
    }
    let kept = kept.expect("the communicator keeps the error");
    assert!(
        matches!(
            kept,
            Error::RemoteFailed { .. } | Error::Aborted(_) | Error::Timeout { .. }
        ),
        "{kept}"
    );
    assert!(later.is_err(), "later calls return the error");
}

#[test]
fn staging_memory_and_completion_words_are_reused() {
    const CALLS: usize = 30;
    let allocations = on_ranks(2, |rk| {
        let send = random(5000);
        let recv = vec![POISON; 5000];
        for _ in 0..CALLS {
            rk.call(separate(Collective::AllReduce, ReduceOp::Sum, &send, &recv))
                .unwrap();
            rk.stream.synchronize().unwrap();
        }
        rk.shared.pool.allocations()
    });
    for a in allocations {
        // Two staging buffers and one word for the first call, and at most
        // as many again while the first call's resources are on their way back.
        assert!(a <= 6, "{a} allocations for {CALLS} calls");
    }
}

pub(in crate::device) fn p2p(dir: Dir, peer: usize, v: &[f32]) -> DeviceP2p {
    DeviceP2p {
        dir,
        peer,
        dtype: DataType::F32,
        range: range(v),
    }
}

impl Rank {
    /// Enqueues a p2p group on this rank's emulated device stream.
    pub(in crate::device) fn group(&self, ops: &[DeviceP2p]) -> Result<()> {
        let queue = EmulatedQueue {
            stream: &self.stream,
        };
        self.comm.enqueue_device_group(&queue, &self.shared, ops)
    }
}

/// Checks that `inb` starts with `want` (from rank `left`) and keeps its
/// poison after it, adding what differs to `bad`.
pub(in crate::device) fn check_received(
    bad: &mut Vec<String>,
    r: usize,
    left: usize,
    inb: &[f32],
    want: &[f32],
) {
    let len = want.len();
    if inb[..len] != *want {
        bad.push(format!("rank {r}: {len} elements from {left} differ"));
    }
    if inb[len..].iter().any(|x| !x.is_nan()) {
        bad.push(format!("rank {r}: the receive wrote past the message"));
    }
}

#[test]
fn device_groups_exchange_around_a_ring_eager_and_rendezvous() {
    const N: usize = 3;
    let seed: u64 = streamcomm_testkit::seed();
    let errors = on_ranks(N, move |rk| {
        let r = rk.comm.rank();
        let (right, left) = ((r + 1) % N, (r + N - 1) % N);
        let mut bad = Vec::new();
        // 100 elements (eager) and 150,000 (600 KB: rendezvous).
        for len in [100usize, 150_000] {
            let out = input(seed ^ len as u64, r, len);
            let mine_again = out.clone();
            // Longer than the message: the tail must keep its poison.
            let inb = vec![POISON; len + 9];
            let self_in = vec![POISON; len];
            rk.group(&[
                p2p(Dir::Recv, left, &inb),
                p2p(Dir::Send, right, &out),
                p2p(Dir::Send, r, &mine_again),
                p2p(Dir::Recv, r, &self_in),
            ])
            .unwrap();
            rk.stream.synchronize().unwrap();
            let want = input(seed ^ len as u64, left, len);
            check_received(&mut bad, r, left, &inb, &want);
            if self_in != out {
                bad.push(format!("rank {r}: the send to itself differs"));
            }
        }
        if let Some(e) = rk.comm.async_error() {
            bad.push(format!("rank {r}: {e}"));
        }
        bad
    });
    assert_no_errors(errors);
}

#[test]
fn a_device_group_refuses_overlapping_receives_and_unpaired_self_sends() {
    let errs = on_ranks(2, |rk| {
        let a = vec![0f32; 64];
        let overlap = rk
            .group(&[
                p2p(Dir::Recv, 1 - rk.comm.rank(), &a),
                p2p(Dir::Send, 0, &a[8..]),
            ])
            .unwrap_err();
        let unpaired = rk.group(&[p2p(Dir::Send, rk.comm.rank(), &a)]).unwrap_err();
        let empty = rk.group(&[]);
        rk.stream.synchronize().unwrap();
        (overlap.to_string(), unpaired.to_string(), empty.is_ok())
    });
    for (overlap, unpaired, empty) in errs {
        assert!(overlap.contains("overlaps"), "{overlap}");
        assert!(unpaired.contains("send(s) to this rank"), "{unpaired}");
        assert!(empty);
    }
}
