//! The point-to-point sweep (`streamcomm-bench sendrecv`): for every size,
//! the ping-pong latency between ranks 0 and 1 (p50/p99 of half the round
//! trip, as osu_latency) and the unidirectional bandwidth (a window of
//! back-to-back messages 0 -> 1 closed by a one-byte acknowledgement, as
//! osu_bw), each row marked with the protocol the library used (eager or
//! rendezvous; [`streamcomm::P2pStats`] tells, so the mark is measured,
//! not assumed). The last message of every size is checked byte by byte
//! against a pattern the receiver recomputes, into a poisoned buffer.
//!
//! Sweep 1 B to 1 GiB in powers of two (`-b 1 -e 1G -f 2`) to see where the
//! eager and rendezvous curves cross; iterations shrink with the size so
//! that every size takes a fraction of a second.

use std::time::Instant;

use streamcomm::UntypedBuffer;
use streamcomm::host::HostStream;
use streamcomm::{Communicator, DataType};

use crate::cli::Cli;
use crate::error::{Context, Fallible};
use crate::latency;
use crate::stats::Percentiles;
use crate::sweep;

/// Bytes moved per size for timing (iterations shrink above this).
const BUDGET_BYTES: u64 = 256 << 20;
const POISON: u8 = 0xA5;

/// One size of the sweep, as measured on rank 0.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct P2pRow {
    /// Message size in bytes.
    pub bytes: u64,
    /// `eager` or `rendezvous` (what the library did for this size).
    pub protocol: &'static str,
    /// Timed ping-pong round trips.
    pub latency_iters: u64,
    /// One-way latency (half a round trip), µs.
    pub latency: Percentiles,
    /// Messages per bandwidth window and windows timed.
    pub window: u64,
    /// Windows timed (the median is reported).
    pub windows: u64,
    /// Unidirectional bandwidth, GB/s (median window).
    pub bandwidth_gbps: f64,
    /// Bandwidth per tcp socket (`null` unless the ranks talk tcp over
    /// several sockets).
    pub per_channel_gbps: Option<f64>,
    /// Wrong bytes in the checked message (counted on rank 1).
    pub wrong: u64,
}

/// The byte `i` of a message of `bytes` bytes (never the poison).
fn pattern(bytes: u64, i: usize) -> u8 {
    let v = ((i as u64).wrapping_mul(131) ^ bytes.wrapping_mul(7)) % 251;
    if v as u8 == POISON { 0 } else { v as u8 }
}

/// Runs the sweep on every rank (ranks other than 0 and 1 only join the
/// barriers); returns the rows on rank 0, and calls `on_row` there.
///
/// # Errors
/// The first library error.
pub(crate) fn run(
    comm: &Communicator,
    stream: &HostStream,
    cli: &Cli,
    on_row: impl FnMut(&P2pRow),
) -> Fallible<Vec<P2pRow>> {
    sweep::rows_by_size(cli, on_row, |size| {
        one_size(comm, stream, cli, size).with_context(|| format!("sendrecv of {size} bytes"))
    })
}

fn one_size(
    comm: &Communicator,
    stream: &HostStream,
    cli: &Cli,
    size: u64,
) -> Fallible<Option<P2pRow>> {
    let rank = comm.rank();
    let len = usize::try_from(size).map_err(|_| format!("{size} bytes do not fit in memory"))?;
    comm.barrier_host().context("barrier before the size")?;
    if rank > 1 {
        comm.barrier_host().context("barrier after the size")?;
        return Ok(None);
    }
    let peer = 1 - rank;
    let send = UntypedBuffer::zeroed(DataType::U8, len);
    let mut recv = UntypedBuffer::zeroed(DataType::U8, len);
    let bytes: Vec<u8> = (0..len).map(|i| pattern(size, i)).collect();
    send.copy_from_bytes(&bytes)
        .context("fill the send buffer")?;
    let before = comm.p2p_stats();

    // Ping-pong.
    // At least 3 samples (percentiles), at most what was asked (never below 3).
    let lat_iters = (BUDGET_BYTES / size.max(1) / 4).clamp(3, cli.latency_iters.clamp(3, 2000));
    let warm = (lat_iters / 10).max(1);
    let mut samples = Vec::with_capacity(lat_iters as usize);
    for i in 0..warm + lat_iters {
        let t = Instant::now();
        latency::stream_round_trip(comm, stream, &send, &mut recv)?;
        if i >= warm {
            samples.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
        }
    }

    // Bandwidth: windows of back-to-back messages 0 -> 1, acknowledged.
    let window = (BUDGET_BYTES / 8 / size.max(1)).clamp(1, 64);
    let windows = (BUDGET_BYTES / (window * size.max(1))).clamp(2, 20);
    let ack = UntypedBuffer::zeroed(DataType::U8, 1);
    let mut ack_in = UntypedBuffer::zeroed(DataType::U8, 1);
    let mut times = Vec::with_capacity(windows as usize);
    for w in 0..windows + 1 {
        let t = Instant::now();
        if rank == 0 {
            for _ in 0..window {
                comm.send(&send, peer, stream).context("send")?;
            }
            comm.recv(&mut ack_in, peer, stream).context("recv ack")?;
        } else {
            for _ in 0..window {
                comm.recv(&mut recv, peer, stream).context("recv")?;
            }
            comm.send(&ack, peer, stream).context("send ack")?;
        }
        stream.synchronize().context("bandwidth window")?;
        if w > 0 {
            times.push(t.elapsed().as_secs_f64());
        }
    }
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];

    // One checked message into a poisoned buffer.
    let mut wrong = 0;
    if rank == 0 {
        comm.send(&send, peer, stream)
            .context("send the checked message")?;
        stream.synchronize().context("checked message")?;
    } else {
        recv.copy_from_bytes(&vec![POISON; len]).context("poison")?;
        comm.recv(&mut recv, peer, stream)
            .context("recv the checked message")?;
        stream.synchronize().context("checked message")?;
        wrong = recv
            .to_bytes()
            .iter()
            .zip(&bytes)
            .filter(|(a, b)| a != b)
            .count() as u64;
        if wrong > 0 {
            eprintln!("streamcomm-bench: rank 1: sendrecv of {size} bytes: {wrong} wrong bytes");
        }
    }
    // Rank 0 learns the count from rank 1.
    let mut wrong_buf = UntypedBuffer::zeroed(DataType::U64, 1);
    if rank == 1 {
        let w = UntypedBuffer::zeroed(DataType::U64, 1);
        w.copy_from_bytes(&wrong.to_le_bytes())
            .context("wrong count")?;
        comm.send(&w, 0, stream).context("send the wrong count")?;
    } else {
        comm.recv(&mut wrong_buf, 1, stream)
            .context("recv the wrong count")?;
    }
    stream.synchronize().context("wrong count")?;
    let after = comm.p2p_stats();
    comm.barrier_host().context("barrier after the size")?;
    if rank != 0 {
        return Ok(None);
    }
    let wrong = u64::from_le_bytes(wrong_buf.to_bytes().try_into().unwrap_or([0; 8]));
    let rendezvous = after.sent_rendezvous_messages > before.sent_rendezvous_messages;
    let tcp = comm.transport_to(peer) == Some(streamcomm::Transport::Tcp);
    let nchannels = comm.config().nchannels;
    let bandwidth_gbps = (window * size) as f64 / median / 1e9;
    Ok(Some(P2pRow {
        bytes: size,
        protocol: if rendezvous { "rendezvous" } else { "eager" },
        latency_iters: lat_iters,
        latency: Percentiles::of(&mut samples),
        window,
        windows,
        bandwidth_gbps,
        per_channel_gbps: (tcp && nchannels > 1).then(|| bandwidth_gbps / nchannels as f64),
        wrong,
    }))
}
