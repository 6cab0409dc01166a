//! Barrier latency: `barrier_host` and the stream barrier, timed one by one.
//!
//! A barrier's cost is its tail, not its mean: one rank descheduled for a
//! tick stalls everyone (`docs/design/architecture.md`). So each iteration is timed on its
//! own, and the distribution is reported as percentiles, for rank 0 and for
//! the slowest rank (each percentile's maximum over ranks). The host barrier
//! is run by the calling thread; the stream barrier is enqueued and then
//! waited for with `synchronize`, which is what a program that orders host
//! work after a stream barrier pays.

use std::time::Instant;

use streamcomm::host::HostStream;
use streamcomm::{Communicator, ReduceOp, Transport};

use crate::error::{Context, Fallible};
use crate::stats::{Percentiles, across_ranks};

/// One barrier flavour's figures, in microseconds.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub(crate) struct BarrierStats {
    /// Timed iterations.
    pub iters: u64,
    /// This rank's own distribution (what rank 0 reports as its view).
    pub rank0: Percentiles,
    /// Each percentile's maximum over ranks.
    pub slowest: Percentiles,
}

/// Both flavours, for one algorithm.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct BarrierResult {
    /// The algorithm measured (its full name, e.g. `tree:4`).
    pub algo: String,
    /// `barrier_host()`: blocks the calling thread.
    pub host: BarrierStats,
    /// `barrier(&stream)` followed by `stream.synchronize()`.
    pub stream: BarrierStats,
    /// The multicast barrier's extra datagrams, when it ran.
    pub retransmits: Option<Retransmits>,
}

/// What the multicast barrier sent beyond one arrival per rank and
/// barrier, summed over ranks, per barrier (warm-up included).
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub(crate) struct Retransmits {
    /// `missing` questions multicast, per barrier.
    pub questions_per_barrier: f64,
    /// Arrivals multicast again (answers), per barrier.
    pub resends_per_barrier: f64,
}

/// Warm-up iterations before `iters` timed ones: 1 %, at least `min`.
fn warmup(iters: u64, min: u64) -> u64 {
    (iters / 100).max(min)
}

/// Times `host_iters` host barriers, then `stream_iters` stream barriers,
/// after warming each up (at least `min_warmup` iterations).
///
/// # Errors
/// The first library error.
pub(crate) fn run(
    comm: &Communicator,
    stream: &HostStream,
    host_iters: u64,
    stream_iters: u64,
    min_warmup: u64,
) -> Fallible<BarrierResult> {
    let before = streamcomm::testing::barrier::multicast_stats(comm);
    let host = measure(comm, stream, host_iters, min_warmup, || comm.barrier_host())
        .context("barrier_host")?;
    let stream_stats = measure(comm, stream, stream_iters, min_warmup, || {
        comm.barrier(stream)?;
        stream.synchronize()
    })
    .context("stream barrier")?;
    let retransmits = match (before, streamcomm::testing::barrier::multicast_stats(comm)) {
        (Some(b), Some(a))
            if comm.barrier_algo() == streamcomm::barrier::BarrierAlgo::Multicast =>
        {
            let mine = [(a[1] - b[1]) as f64, (a[2] - b[2]) as f64];
            let all =
                across_ranks(comm, stream, &mine, ReduceOp::Sum).context("sum the retransmits")?;
            let barriers = (a[0] - b[0]).max(1) as f64;
            Some(Retransmits {
                questions_per_barrier: all[0] / barriers,
                resends_per_barrier: all[1] / barriers,
            })
        }
        _ => None,
    };
    Ok(BarrierResult {
        algo: algo_label(comm),
        host,
        stream: stream_stats,
        retransmits,
    })
}

/// The algorithm's full name, with ` (messages)` where some peer is
/// reached over tcp (barriers then send their flags as messages).
fn algo_label(comm: &Communicator) -> String {
    let algo = comm.barrier_algo();
    let tcp = (0..comm.size()).any(|p| comm.transport_to(p) == Some(Transport::Tcp));
    if tcp {
        format!("{algo} (messages)")
    } else {
        algo.to_string()
    }
}

fn measure(
    comm: &Communicator,
    stream: &HostStream,
    iters: u64,
    min_warmup: u64,
    mut barrier: impl FnMut() -> streamcomm::Result<()>,
) -> Fallible<BarrierStats> {
    for _ in 0..warmup(iters, min_warmup) {
        barrier().context("warm-up")?;
    }
    let mut samples = Vec::with_capacity(iters as usize);
    for _ in 0..iters {
        let start = Instant::now();
        barrier().context("timed iteration")?;
        samples.push(start.elapsed().as_secs_f64() * 1e6);
    }
    let mine = Percentiles::of(&mut samples);
    let slowest = across_ranks(comm, stream, &mine.to_array(), ReduceOp::Max)
        .context("combine the percentiles")?;
    Ok(BarrierStats {
        iters,
        rank0: mine,
        slowest: Percentiles::from_array(to4(&slowest)),
    })
}

fn to4(v: &[f64]) -> [f64; 4] {
    let mut a = [0.0; 4];
    for (dst, src) in a.iter_mut().zip(v) {
        *dst = *src;
    }
    a
}
