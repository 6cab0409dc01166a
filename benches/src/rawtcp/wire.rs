//! The raw TCP measurement's control protocol, and socket set-up.
//!
//! Rank 0 drives: on one control socket it tells rank 1 what comes next (a
//! run of 8-byte round trips, blocking or busy-polling, a bandwidth run on fresh sockets, or the end),
//! as three little-endian `u64`s. Every socket has `TCP_NODELAY` set and
//! read/write timeouts, and accepting waits until a deadline at most, so a
//! rank that dies mid-measurement fails its peer instead of hanging it.

use std::io::{self, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// What rank 1 does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Command {
    /// Echo `count` 8-byte messages on the control socket.
    PingPong {
        /// Round trips, warm-up included.
        count: u64,
    },
    /// Echo `count` 8-byte messages on the control socket, busy-polling it
    /// (non-blocking) instead of sleeping in `read`.
    BusyPingPong {
        /// Round trips, warm-up included.
        count: u64,
    },
    /// Accept `sockets` connections, read `bytes` from each, then write a
    /// one-byte acknowledgement on each.
    Stream {
        /// Connections to accept.
        sockets: u64,
        /// Bytes to read from each.
        bytes: u64,
    },
    /// Accept `sockets` connections; on each, write `bytes` while reading
    /// `bytes` (both directions at once, as a 2-rank all-reduce moves data).
    Exchange {
        /// Connections to accept.
        sockets: u64,
        /// Bytes each side writes on each.
        bytes: u64,
    },
    /// The measurement is over.
    Done,
}

/// Bytes of an encoded command.
const COMMAND_BYTES: usize = 24;

impl Command {
    fn encode(self) -> [u8; COMMAND_BYTES] {
        let words = match self {
            Command::PingPong { count } => [1, count, 0],
            Command::Stream { sockets, bytes } => [2, sockets, bytes],
            Command::Done => [3, 0, 0],
            Command::Exchange { sockets, bytes } => [4, sockets, bytes],
            Command::BusyPingPong { count } => [5, count, 0],
        };
        let mut out = [0; COMMAND_BYTES];
        for (chunk, word) in out.chunks_exact_mut(8).zip(words) {
            chunk.copy_from_slice(&word.to_le_bytes());
        }
        out
    }

    fn decode(bytes: &[u8; COMMAND_BYTES]) -> io::Result<Command> {
        let mut words = [0u64; 3];
        for (word, chunk) in words.iter_mut().zip(bytes.chunks_exact(8)) {
            let mut b = [0; 8];
            b.copy_from_slice(chunk);
            *word = u64::from_le_bytes(b);
        }
        match words {
            [1, count, _] => Ok(Command::PingPong { count }),
            [2, sockets, bytes] => Ok(Command::Stream { sockets, bytes }),
            [3, _, _] => Ok(Command::Done),
            [4, sockets, bytes] => Ok(Command::Exchange { sockets, bytes }),
            [5, count, _] => Ok(Command::BusyPingPong { count }),
            [kind, ..] => Err(io::Error::new(
                ErrorKind::InvalidData,
                format!("unknown command {kind} on the control socket"),
            )),
        }
    }
}

/// Sends `command` on the control socket.
///
/// # Errors
/// As the write.
pub(super) fn send(control: &mut TcpStream, command: Command) -> io::Result<()> {
    control.write_all(&command.encode())
}

/// Reads the next command from the control socket.
///
/// # Errors
/// As the read; `InvalidData` for an unknown command.
pub(super) fn receive(control: &mut TcpStream) -> io::Result<Command> {
    let mut bytes = [0; COMMAND_BYTES];
    control.read_exact(&mut bytes)?;
    Command::decode(&bytes)
}

/// Connects to `addr` within `timeout`, ready for the measurement.
///
/// # Errors
/// As the connect and the socket options.
pub(super) fn connect(addr: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
    let stream = TcpStream::connect_timeout(&addr, timeout)?;
    prepare(&stream, timeout)?;
    Ok(stream)
}

/// Accepts one connection on `listener`, waiting until `timeout` has passed
/// at most, ready for the measurement.
///
/// # Errors
/// `TimedOut` when nobody connected in time; otherwise as the accept and the
/// socket options.
pub(super) fn accept(listener: &TcpListener, timeout: Duration) -> io::Result<TcpStream> {
    let deadline = Instant::now() + timeout;
    listener.set_nonblocking(true)?;
    let accepted = loop {
        match listener.accept() {
            Ok((stream, _)) => break stream,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if Instant::now() > deadline {
                    return Err(io::Error::new(
                        ErrorKind::TimedOut,
                        format!("nobody connected within {timeout:?}"),
                    ));
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    };
    accepted.set_nonblocking(false)?;
    prepare(&accepted, timeout)?;
    Ok(accepted)
}

/// `TCP_NODELAY` and read/write timeouts of `timeout`.
fn prepare(stream: &TcpStream, timeout: Duration) -> io::Result<()> {
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_round_trip() {
        for c in [
            Command::PingPong { count: 11_000 },
            Command::BusyPingPong { count: 7 },
            Command::Stream {
                sockets: 2,
                bytes: 128 << 20,
            },
            Command::Exchange {
                sockets: 2,
                bytes: 5,
            },
            Command::Done,
        ] {
            assert_eq!(Command::decode(&c.encode()).ok(), Some(c));
        }
        assert!(Command::decode(&[0; COMMAND_BYTES]).is_err());
    }
}
