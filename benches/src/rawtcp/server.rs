//! Rank 1's side of the raw TCP measurement: it listens, echoes and drains.
//!
//! The listener is bound on the address rank 1's communicator listens on
//! for tcp (so the raw figures cross the same path as the library's
//! sockets), on a port of the system's choosing; rank 0 learns the port
//! through the communicator. Rank 1 then does what rank 0's commands say
//! until told the measurement is over.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};

use streamcomm::Communicator;

use super::settings::Settings;
use super::wire::{self, Command};
use crate::error::{Context, Fallible};
use crate::latency::MESSAGE_BYTES;

/// Binds a listener on the address of `comm`'s own tcp listener, port 0.
///
/// # Errors
/// When this rank has no tcp address or the bind fails.
pub(super) fn listen(comm: &Communicator) -> Fallible<TcpListener> {
    let own = comm
        .tcp_addr(comm.rank())
        .ok_or("this rank has no tcp address although it reaches rank 0 over tcp")?;
    let addr = SocketAddr::new(own.ip(), 0);
    TcpListener::bind(addr).with_context(|| format!("bind a raw tcp listener on {addr}"))
}

/// Serves rank 0's commands until [`Command::Done`].
///
/// # Errors
/// The first socket error, naming the step.
pub(super) fn serve(listener: &TcpListener, settings: &Settings) -> Fallible<()> {
    let mut control =
        wire::accept(listener, settings.timeout).context("accept rank 0's control connection")?;
    loop {
        match wire::receive(&mut control).context("read the next command")? {
            Command::PingPong { count } => {
                echo(&mut control, count).context("raw tcp round trips")?
            }
            Command::BusyPingPong { count } => busy_echo(&mut control, count, settings)
                .context("raw tcp busy-polling round trips")?,
            Command::Stream { sockets, bytes } => drain(listener, sockets, bytes, settings)
                .with_context(|| format!("raw tcp on {sockets} sockets"))?,
            Command::Exchange { sockets, bytes } => accept(listener, sockets, settings)
                .and_then(|streams| {
                    super::client::both_ways(streams, bytes, settings.write_bytes.max(1))
                })
                .with_context(|| format!("raw tcp exchange on {sockets} sockets"))?,
            Command::Done => return Ok(()),
        }
    }
}

/// Echoes `count` 8-byte messages.
fn echo(control: &mut TcpStream, count: u64) -> Fallible<()> {
    let mut message = [0u8; MESSAGE_BYTES];
    for _ in 0..count {
        control.read_exact(&mut message).context("read")?;
        control.write_all(&message).context("write")?;
    }
    Ok(())
}

/// Echoes `count` 8-byte messages, busy-polling the socket.
fn busy_echo(control: &mut TcpStream, count: u64, settings: &Settings) -> Fallible<()> {
    control
        .set_nonblocking(true)
        .context("make the socket non-blocking")?;
    let mut message = [0u8; MESSAGE_BYTES];
    let echoed = (0..count).try_for_each(|_| {
        super::spin::read_exact(control, &mut message, settings.timeout)?;
        super::spin::write_all(control, &message, settings.timeout)
    });
    control
        .set_nonblocking(false)
        .context("make the socket blocking again")?;
    echoed.context("echo")
}

/// Accepts `sockets` connections and reads `bytes` from each in parallel,
/// acknowledging each with one byte once all of its bytes arrived.
fn drain(listener: &TcpListener, sockets: u64, bytes: u64, settings: &Settings) -> Fallible<()> {
    let streams = accept(listener, sockets, settings)?;
    let buffer_bytes = settings.write_bytes.max(1);
    super::client::in_parallel(streams, "a reader thread", |stream| {
        read_and_ack(stream, bytes, buffer_bytes)
    })
    .context("read")
}

/// The next `sockets` connections to `listener`.
fn accept(listener: &TcpListener, sockets: u64, settings: &Settings) -> Fallible<Vec<TcpStream>> {
    (0..sockets)
        .map(|_| wire::accept(listener, settings.timeout))
        .collect::<std::io::Result<Vec<_>>>()
        .context("accept")
}

/// Reads exactly `bytes` bytes, then writes the acknowledgement.
fn read_and_ack(mut stream: TcpStream, bytes: u64, buffer_bytes: usize) -> std::io::Result<()> {
    super::client::read_n(&mut stream, bytes, buffer_bytes)?;
    stream.write_all(&[1])
}
