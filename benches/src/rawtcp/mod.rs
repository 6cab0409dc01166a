//! Raw TCP between ranks 0 and 1, measured in the same run as the benchmark.
//!
//! When rank 0 reaches rank 1 over tcp, the figures that matter are the
//! network's, not the memory's: so right after the communicator is created,
//! and before anything is timed, ranks 0 and 1 measure plain sockets
//! between them — the 8-byte round trip (p50, p99) on blocking sockets and
//! busy-polling non-blocking ones, and the bandwidth of one
//! socket and of as many parallel sockets as the communicator stripes a
//! peer over (`nchannels`). Rank 1 listens on its tcp address and shares
//! the port through the communicator (an all_gather that also carries rank
//! 0's view of the transport, so every rank takes the same decision); the
//! other ranks wait at `barrier_host` meanwhile.

mod client;
mod server;
mod settings;
mod spin;
mod wire;

use std::net::SocketAddr;

use streamcomm::host::{HostBuffer, HostStream};
use streamcomm::{Communicator, Transport};

use crate::error::{Context, Fallible};

pub(crate) use settings::Settings;

/// The raw TCP figures between ranks 0 and 1.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub(crate) struct RawTcp {
    /// Rank 1's raw listener (its tcp address, another port).
    pub addr: String,
    /// Bytes per round-trip message.
    pub message_bytes: usize,
    /// Timed round trips (after as many warm-up ones as the sendrecv test).
    pub round_trips: u64,
    /// Median round trip, µs.
    pub round_trip_us: f64,
    /// 99th percentile round trip, µs.
    pub round_trip_p99_us: f64,
    /// Median round trip with both sides busy-polling non-blocking
    /// sockets, µs: the limit of a library whose waits spin.
    pub busy_round_trip_us: f64,
    /// 99th percentile busy-polling round trip, µs.
    pub busy_round_trip_p99_us: f64,
    /// Bytes of each bandwidth run (split over the sockets).
    pub bytes: u64,
    /// Bytes per write.
    pub write_bytes: usize,
    /// Runs per socket count (the best is reported).
    pub runs: u32,
    /// Bandwidth on one socket, GB/s.
    pub single_socket_gbps: f64,
    /// Parallel sockets of the other bandwidth figure (`nchannels`).
    pub sockets: usize,
    /// Bandwidth on `sockets` sockets, GB/s.
    pub multi_socket_gbps: f64,
    /// The better of the two, GB/s: what busbw is compared with.
    pub best_gbps: f64,
    /// Both ranks writing and reading at once on `sockets` sockets: GB/s
    /// in each direction. A 2-rank all-reduce moves its data this way, so
    /// this is its like-for-like ceiling on a CPU-bound host.
    pub exchange_gbps: f64,
}

/// Measures raw TCP between ranks 0 and 1 if rank 0 reaches rank 1 over
/// tcp; collective (every rank calls it). Returns the figures on rank 0
/// when measured, `None` elsewhere.
///
/// # Errors
/// A library error in the port exchange or the barrier, or a socket error.
pub(crate) fn measure(
    comm: &Communicator,
    stream: &HostStream,
    settings: &Settings,
) -> Fallible<Option<RawTcp>> {
    if comm.size() < 2 {
        return Ok(None);
    }
    let rank = comm.rank();
    let listener =
        (rank == 1 && comm.transport_to(0) == Some(Transport::Tcp)).then(|| server::listen(comm));
    let mine = match (rank, &listener) {
        (0, _) => u64::from(comm.transport_to(1) == Some(Transport::Tcp)),
        (1, Some(Ok(l))) => u64::from(l.local_addr().map_or(0, |a| a.port())),
        _ => 0,
    };
    let shared = gather(comm, stream, mine).context("share the raw tcp port")?;
    let (tcp, port) = (shared[0] == 1, shared[1]);
    if !tcp {
        return Ok(None);
    }
    if port == 0 {
        return Err(match listener {
            Some(Err(e)) => e,
            _ => "rank 0 reaches rank 1 over tcp, but rank 1 has no raw tcp listener \
                  (it does not reach rank 0 over tcp, or could not listen)"
                .to_string(),
        });
    }
    let figures = match (rank, listener) {
        (0, _) => {
            let ip = comm
                .tcp_addr(1)
                .ok_or("rank 0 reaches rank 1 over tcp but knows no tcp address of rank 1")?
                .ip();
            let port = u16::try_from(port).map_err(|_| format!("rank 1 sent port {port}"))?;
            Some(client::run(SocketAddr::new(ip, port), settings)?)
        }
        (1, Some(Ok(listener))) => {
            server::serve(&listener, settings)?;
            None
        }
        _ => None,
    };
    comm.barrier_host()
        .context("barrier after the raw tcp measurement")?;
    Ok(figures)
}

/// Every rank's `value`, in rank order.
fn gather(comm: &Communicator, stream: &HostStream, value: u64) -> Fallible<Vec<u64>> {
    let send = HostBuffer::from_slice(&[value]);
    let mut recv = HostBuffer::<u64>::zeroed(comm.size());
    comm.all_gather(&send, &mut recv, stream)
        .context("all_gather")?;
    stream.synchronize().context("all_gather")?;
    Ok(recv.to_vec())
}
