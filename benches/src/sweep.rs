//! The size sweep: nccl-tests' out-of-place timing, one row per size.
//!
//! Per size: allocate, fill the inputs, run the warm-up iterations, line the
//! ranks up with `barrier_host`, then enqueue the timed iterations back to
//! back and synchronize once, so the figure includes the stream's own
//! overheads but no per-iteration host round trip (as nccl-tests times
//! `-n` launches followed by one `cudaStreamSynchronize`). The row reports
//! the slowest rank's time and, with `-c 1`, the wrong elements of the last
//! iteration summed over ranks.

use std::time::Instant;

use streamcomm::UntypedBuffer;
use streamcomm::host::HostStream;
use streamcomm::{Communicator, ReduceOp};

use crate::check::{Pattern, count_wrong};
use crate::cli::Cli;
use crate::coll::Call;
use crate::error::{Context, Fallible};
use crate::stats::across_ranks;

/// One size's result, as printed and written to JSON.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub(crate) struct Row {
    /// Bytes of the larger buffer (nccl-tests' size column).
    pub bytes: u64,
    /// The call's `count` argument.
    pub count: usize,
    /// Slowest rank's time per iteration, in microseconds.
    pub time_us: f64,
    /// Algorithm bandwidth, GB/s (`bytes / time`).
    pub algbw: f64,
    /// Bus bandwidth, GB/s (`algbw` times the collective's factor).
    pub busbw: f64,
    /// Wrong output elements over all ranks; `None` without `-c 1`.
    pub wrong: Option<u64>,
    /// The algorithm the communicator ran (`None`: a single schedule).
    pub algo: Option<&'static str>,
    /// The cost model's prediction for that algorithm, in microseconds
    /// (only with `--model`).
    pub predicted_us: Option<f64>,
}

/// Runs the sweep, calling `on_row` as each row completes (every rank gets
/// every row).
///
/// # Errors
/// The first library error, with the size it happened at.
pub(crate) fn run(
    comm: &Communicator,
    stream: &HostStream,
    cli: &Cli,
    on_row: impl FnMut(&Row),
) -> Fallible<Vec<Row>> {
    let pattern = Pattern::new(cli.dtype, cli.op, comm.size());
    rows_by_size(cli, on_row, |size| {
        one_size(comm, stream, cli, &pattern, size)
            .map(Some)
            .with_context(|| format!("{} of {size} bytes", cli.collective.name()))
    })
}

/// The rows `one` makes for each of `cli`'s sizes in turn (`None`: no row
/// on this rank), calling `on_row` as each completes.
///
/// # Errors
/// The first error of `one`.
pub(crate) fn rows_by_size<R>(
    cli: &Cli,
    mut on_row: impl FnMut(&R),
    mut one: impl FnMut(u64) -> Fallible<Option<R>>,
) -> Fallible<Vec<R>> {
    let mut rows = Vec::new();
    for size in cli.sizes() {
        if let Some(row) = one(size)? {
            on_row(&row);
            rows.push(row);
        }
    }
    Ok(rows)
}

fn one_size(
    comm: &Communicator,
    stream: &HostStream,
    cli: &Cli,
    pattern: &Pattern,
    size: u64,
) -> Fallible<Row> {
    let (rank, n) = (comm.rank(), comm.size());
    let call = Call {
        collective: cli.collective,
        op: cli.op,
        root: cli.root,
    };
    let geometry = cli.collective.geometry(size, cli.dtype, n);
    let send = UntypedBuffer::zeroed(cli.dtype, geometry.send_len);
    let mut recv = UntypedBuffer::zeroed(cli.dtype, geometry.recv_len);
    send.copy_from_bytes(&pattern.send_bytes(rank, &geometry))
        .context("fill the send buffer")?;

    for _ in 0..cli.warmup {
        call.enqueue(comm, &send, &mut recv, stream)
            .context("enqueue a warm-up iteration")?;
    }
    stream.synchronize().context("warm-up")?;
    comm.barrier_host().context("barrier_host before timing")?;

    let start = Instant::now();
    for _ in 0..cli.iters {
        call.enqueue(comm, &send, &mut recv, stream)
            .context("enqueue a timed iteration")?;
    }
    stream.synchronize().context("timed iterations")?;
    let seconds = start.elapsed().as_secs_f64() / cli.iters as f64;

    let wrong = if cli.check() {
        let local = match pattern.expected_bytes(cli.collective, rank, cli.root, &geometry) {
            Some(expected) => {
                let context = format!("rank {rank}: {} of {size} bytes", cli.collective.name());
                count_wrong(cli.dtype, &recv.to_bytes(), &expected, &context)
            }
            None => 0,
        };
        let total = across_ranks(comm, stream, &[local as f64], ReduceOp::Sum)
            .context("sum the wrong counts")?;
        Some(total[0] as u64)
    } else {
        None
    };
    let slowest =
        across_ranks(comm, stream, &[seconds], ReduceOp::Max).context("combine the times")?[0];

    let algbw = if slowest > 0.0 {
        geometry.bytes as f64 / slowest / 1e9
    } else {
        0.0
    };
    let (algo, predicted_us) = match cli.collective.library() {
        Some(c) => {
            let algo = comm.algorithm(c, cli.dtype, geometry.count);
            let predicted = algo
                .filter(|_| cli.model)
                .and_then(|a| comm.predict(c, a, cli.dtype, geometry.count));
            (algo.map(|a| a.name()), predicted.map(|t| t * 1e6))
        }
        None => (None, None),
    };
    Ok(Row {
        algo,
        predicted_us,
        bytes: geometry.bytes,
        count: geometry.count,
        time_us: slowest * 1e6,
        algbw,
        busbw: algbw * cli.collective.bus_factor(n),
        wrong,
    })
}
