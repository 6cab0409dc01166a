//! Point-to-point latency: an 8-byte ping-pong between ranks 0 and 1.
//!
//! The sendrecv sweep measures bandwidth with iterations back to back; the
//! latency of one small message is a different figure, measured the way
//! osu_latency does: rank 0 sends and waits for the reply, rank 1 echoes,
//! each round trip synchronized and timed on its own. One-way latency is
//! half the round trip. Ranks other than 0 and 1 only wait at the barrier
//! that ends the test. Measured twice: with stream operations (enqueue,
//! then `synchronize`) and with the host-blocking `send_host`/`recv_host`.
//! Each round trip is timed with the cycle counter, as perftest does
//! ([`crate::ticks`]): a clock read can cost a system call.

use streamcomm::UntypedBuffer;
use streamcomm::host::HostStream;
use streamcomm::{Communicator, DataType};

use crate::error::{Context, Fallible};
use crate::stats::Percentiles;
use crate::ticks;

/// Bytes per message.
pub(crate) const MESSAGE_BYTES: usize = 8;
/// Untimed round trips before the timed ones.
pub(crate) const WARMUP: u64 = 1000;

/// One-way latency between ranks 0 and 1 (half of each round trip), µs.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub(crate) struct Latency {
    /// Bytes per message.
    pub bytes: usize,
    /// Timed round trips.
    pub iters: u64,
    /// Percentiles of half the round trip, as seen by rank 0.
    pub one_way: Percentiles,
    /// The same with host-blocking calls (`send_host`/`recv_host`: no
    /// stream, the calling thread moves the message).
    pub host_one_way: Percentiles,
}

/// Runs the ping-pong; `Some` on rank 0, `None` elsewhere.
///
/// # Errors
/// The first library error.
pub(crate) fn ping_pong(
    comm: &Communicator,
    stream: &HostStream,
    iters: u64,
) -> Fallible<Option<Latency>> {
    let ping = UntypedBuffer::zeroed(DataType::U8, MESSAGE_BYTES);
    let mut pong = UntypedBuffer::zeroed(DataType::U8, MESSAGE_BYTES);
    comm.barrier_host()
        .context("barrier before the ping-pong")?;
    let mut samples = one_way_us(comm, iters, || {
        stream_round_trip(comm, stream, &ping, &mut pong)
    })?;
    comm.barrier_host()
        .context("barrier between the ping-pongs")?;
    // The host-blocking calls take plain slices.
    let (ping_bytes, mut pong_bytes) = (vec![0u8; MESSAGE_BYTES], vec![0u8; MESSAGE_BYTES]);
    let mut host_samples = one_way_us(comm, iters, || {
        let peer = 1 - comm.rank();
        round_trip(
            comm,
            || comm.send_host(&ping_bytes, peer).context("send_host"),
            || comm.recv_host(&mut pong_bytes, peer).context("recv_host"),
        )
    })?;
    comm.barrier_host().context("barrier after the ping-pong")?;
    Ok((comm.rank() == 0).then(|| Latency {
        bytes: MESSAGE_BYTES,
        iters,
        one_way: Percentiles::of(&mut samples),
        host_one_way: Percentiles::of(&mut host_samples),
    }))
}

/// Half of each of `iters` round trips that `one` makes between ranks 0
/// and 1 (after [`WARMUP`] untimed ones), µs; none on the other ranks.
///
/// # Errors
/// The first error of `one`.
fn one_way_us(
    comm: &Communicator,
    iters: u64,
    mut one: impl FnMut() -> Fallible<()>,
) -> Fallible<Vec<f64>> {
    let mut samples = Vec::with_capacity(iters as usize);
    if comm.rank() <= 1 {
        let span = ticks::Span::start();
        for i in 0..WARMUP + iters {
            let start = ticks::now();
            one()?;
            if i >= WARMUP {
                samples.push(ticks::now().wrapping_sub(start) as f64);
            }
        }
        to_one_way_us(&mut samples, span.us_per_tick());
    }
    Ok(samples)
}

/// One round trip between ranks 0 and 1 with stream operations, then
/// synchronized: rank 0 sends `ping` and receives `pong`, rank 1 the other
/// way round.
///
/// # Errors
/// The first library error.
pub(crate) fn stream_round_trip(
    comm: &Communicator,
    stream: &HostStream,
    ping: &UntypedBuffer,
    pong: &mut UntypedBuffer,
) -> Fallible<()> {
    let peer = 1 - comm.rank();
    round_trip(
        comm,
        || comm.send(ping, peer, stream).context("send"),
        || comm.recv(pong, peer, stream).context("recv"),
    )?;
    stream.synchronize().context("ping-pong")
}

/// One round trip between ranks 0 and 1: rank 0 runs `send`, then
/// `receive`; rank 1 the other way round.
fn round_trip(
    comm: &Communicator,
    send: impl FnOnce() -> Fallible<()>,
    receive: impl FnOnce() -> Fallible<()>,
) -> Fallible<()> {
    if comm.rank() == 0 {
        send()?;
        receive()
    } else {
        receive()?;
        send()
    }
}

/// Turns round-trip tick counts into one-way microseconds.
fn to_one_way_us(samples: &mut [f64], us_per_tick: f64) {
    for s in samples {
        *s *= us_per_tick / 2.0;
    }
}
