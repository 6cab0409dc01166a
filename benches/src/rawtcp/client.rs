//! Rank 0's side of the raw TCP measurement: it times everything.
//!
//! Round trips: one 8-byte write and one 8-byte read on the control socket,
//! each timed on its own, after untimed warm-up ones; first on blocking
//! sockets, then with both sides busy-polling non-blocking ones. Bandwidth: fresh
//! connections per run (opened before the clock starts), one thread per
//! socket writing its share in `write_bytes` writes and then reading rank
//! 1's one-byte acknowledgement, so the time covers every byte's arrival.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Instant;

use super::RawTcp;
use super::settings::Settings;
use super::spin;
use super::wire::{self, Command};
use crate::error::{Context, Fallible};
use crate::latency::MESSAGE_BYTES;
use crate::stats::Percentiles;

/// Runs the whole measurement against rank 1's listener at `addr`.
///
/// # Errors
/// The first socket error, naming the step.
pub(super) fn run(addr: SocketAddr, settings: &Settings) -> Fallible<RawTcp> {
    let mut control = wire::connect(addr, settings.timeout)
        .with_context(|| format!("connect to rank 1's raw tcp listener at {addr}"))?;
    let round_trip = ping_pong(&mut control, settings).context("raw tcp round trips")?;
    let busy =
        busy_ping_pong(&mut control, settings).context("raw tcp busy-polling round trips")?;
    let single = bandwidth(&mut control, addr, 1, settings).context("raw tcp on 1 socket")?;
    let multi = if settings.sockets == 1 {
        single
    } else {
        bandwidth(&mut control, addr, settings.sockets, settings)
            .with_context(|| format!("raw tcp on {} sockets", settings.sockets))?
    };
    let exchange = exchange(&mut control, addr, settings.sockets, settings)
        .with_context(|| format!("raw tcp exchange on {} sockets", settings.sockets))?;
    wire::send(&mut control, Command::Done).context("end the raw tcp measurement")?;
    Ok(RawTcp {
        addr: addr.to_string(),
        message_bytes: MESSAGE_BYTES,
        round_trips: settings.round_trips,
        round_trip_us: round_trip.p50,
        round_trip_p99_us: round_trip.p99,
        busy_round_trip_us: busy.p50,
        busy_round_trip_p99_us: busy.p99,
        bytes: settings.bytes,
        write_bytes: settings.write_bytes,
        runs: settings.runs,
        single_socket_gbps: single,
        sockets: settings.sockets,
        multi_socket_gbps: multi,
        best_gbps: single.max(multi),
        exchange_gbps: exchange,
    })
}

/// Percentiles of the 8-byte round trip, µs.
fn ping_pong(control: &mut TcpStream, settings: &Settings) -> Fallible<Percentiles> {
    let count = settings.warmup + settings.round_trips;
    wire::send(control, Command::PingPong { count }).context("send the command")?;
    let mut samples = Vec::with_capacity(settings.round_trips as usize);
    let mut pong = [0u8; MESSAGE_BYTES];
    for i in 0..count {
        let ping = i.to_le_bytes();
        let start = Instant::now();
        control.write_all(&ping).context("write")?;
        control.read_exact(&mut pong).context("read")?;
        if i >= settings.warmup {
            samples.push(start.elapsed().as_secs_f64() * 1e6);
        }
        if pong != ping {
            return Err(format!(
                "round trip {i}: rank 1 echoed {pong:?}, not {ping:?}"
            ));
        }
    }
    Ok(Percentiles::of(&mut samples))
}

/// Percentiles of the 8-byte round trip with both sides busy-polling
/// non-blocking sockets, µs.
fn busy_ping_pong(control: &mut TcpStream, settings: &Settings) -> Fallible<Percentiles> {
    let count = settings.warmup + settings.round_trips;
    wire::send(control, Command::BusyPingPong { count }).context("send the command")?;
    control
        .set_nonblocking(true)
        .context("make the socket non-blocking")?;
    let mut samples = Vec::with_capacity(settings.round_trips as usize);
    let mut pong = [0u8; MESSAGE_BYTES];
    let timed = (0..count).try_for_each(|i| {
        let ping = i.to_le_bytes();
        let start = Instant::now();
        spin::write_all(control, &ping, settings.timeout).context("write")?;
        spin::read_exact(control, &mut pong, settings.timeout).context("read")?;
        if i >= settings.warmup {
            samples.push(start.elapsed().as_secs_f64() * 1e6);
        }
        if pong != ping {
            return Err(format!(
                "round trip {i}: rank 1 echoed {pong:?}, not {ping:?}"
            ));
        }
        Ok(())
    });
    control
        .set_nonblocking(false)
        .context("make the socket blocking again")?;
    timed?;
    Ok(Percentiles::of(&mut samples))
}

/// Best of `settings.runs` runs of `settings.bytes` over `sockets` parallel
/// sockets, GB/s.
fn bandwidth(
    control: &mut TcpStream,
    addr: SocketAddr,
    sockets: usize,
    settings: &Settings,
) -> Fallible<f64> {
    let chunk = vec![0xa5u8; settings.write_bytes.max(1)];
    let stream = |sockets, bytes| Command::Stream { sockets, bytes };
    best_of_runs(
        control,
        addr,
        sockets,
        settings,
        stream,
        |streams, bytes| {
            in_parallel(streams, "a sender thread", |stream| {
                send_and_wait(stream, bytes, &chunk)
            })
        },
    )
}

/// Best of `settings.runs` exchanges of `settings.bytes` each way over
/// `sockets` sockets (both sides write and read at once), GB/s per direction.
fn exchange(
    control: &mut TcpStream,
    addr: SocketAddr,
    sockets: usize,
    settings: &Settings,
) -> Fallible<f64> {
    let exchange = |sockets, bytes| Command::Exchange { sockets, bytes };
    best_of_runs(
        control,
        addr,
        sockets,
        settings,
        exchange,
        |streams, bytes| both_ways(streams, bytes, settings.write_bytes.max(1)),
    )
}

/// Best of `settings.runs` runs of `transfer`, GB/s: each run sends rank 1
/// `command` (built from the socket count and the bytes per socket), opens
/// `sockets` fresh connections to `addr`, then times `transfer` of the
/// bytes per socket (`settings.bytes` split over them) on them.
fn best_of_runs(
    control: &mut TcpStream,
    addr: SocketAddr,
    sockets: usize,
    settings: &Settings,
    command: impl Fn(u64, u64) -> Command,
    transfer: impl Fn(Vec<TcpStream>, u64) -> Fallible<()>,
) -> Fallible<f64> {
    let per_socket = settings.bytes_per_socket(sockets);
    let mut best = 0.0f64;
    for run in 0..settings.runs {
        wire::send(control, command(sockets as u64, per_socket)).context("send the command")?;
        let streams = (0..sockets)
            .map(|_| wire::connect(addr, settings.timeout))
            .collect::<std::io::Result<Vec<_>>>()
            .context("connect")?;
        let start = Instant::now();
        transfer(streams, per_socket).with_context(|| format!("run {}", run + 1))?;
        let seconds = start.elapsed().as_secs_f64();
        if seconds > 0.0 {
            best = best.max((per_socket * sockets as u64) as f64 / seconds / 1e9);
        }
    }
    Ok(best)
}

/// `work` on each of `items` at once, a thread each (`thread` names one in
/// the message when it panics).
///
/// # Errors
/// The first error, in the order of `items`.
pub(super) fn in_parallel<T: Send>(
    items: Vec<T>,
    thread: &str,
    work: impl Fn(T) -> std::io::Result<()> + Sync,
) -> Fallible<()> {
    let work = &work;
    std::thread::scope(|scope| {
        let threads: Vec<_> = items
            .into_iter()
            .map(|item| scope.spawn(move || work(item)))
            .collect();
        threads.into_iter().try_for_each(|t| {
            t.join()
                .map_err(|_| format!("{thread} panicked"))?
                .map_err(|e| e.to_string())
        })
    })
}

/// On every stream at once, writes `bytes` bytes while reading as many.
///
/// # Errors
/// The first socket error.
pub(super) fn both_ways(streams: Vec<TcpStream>, bytes: u64, write_bytes: usize) -> Fallible<()> {
    let mut ends = Vec::with_capacity(2 * streams.len());
    for stream in streams {
        let reader = stream.try_clone().context("clone a socket")?;
        ends.push((stream, true));
        ends.push((reader, false));
    }
    let chunk = vec![0x5au8; write_bytes];
    in_parallel(ends, "an exchange thread", |(mut stream, writes)| {
        if writes {
            write_in(&mut stream, bytes, &chunk)
        } else {
            read_n(&mut stream, bytes, write_bytes)
        }
    })
    .context("exchange")
}

/// Writes `bytes` bytes in `chunk`-sized writes.
fn write_in(stream: &mut TcpStream, bytes: u64, chunk: &[u8]) -> std::io::Result<()> {
    let mut left = bytes;
    while left > 0 {
        let n = chunk.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        stream.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    Ok(())
}

/// Reads exactly `bytes` bytes from `stream` (in reads of `buffer_bytes`).
///
/// # Errors
/// The read's error, or `UnexpectedEof` when the peer closes early.
pub(super) fn read_n(
    stream: &mut TcpStream,
    bytes: u64,
    buffer_bytes: usize,
) -> std::io::Result<()> {
    let mut buffer = vec![0u8; buffer_bytes];
    let mut left = bytes;
    while left > 0 {
        let want = buffer
            .len()
            .min(usize::try_from(left).unwrap_or(usize::MAX));
        match stream.read(&mut buffer[..want]) {
            Ok(0) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("the peer closed the socket with {left} bytes to go"),
                ));
            }
            Ok(n) => left -= n as u64,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes `bytes` bytes in `chunk`-sized writes, then waits for the
/// one-byte acknowledgement.
fn send_and_wait(mut stream: TcpStream, bytes: u64, chunk: &[u8]) -> std::io::Result<()> {
    write_in(&mut stream, bytes, chunk)?;
    let mut ack = [0u8; 1];
    stream.read_exact(&mut ack)
}
