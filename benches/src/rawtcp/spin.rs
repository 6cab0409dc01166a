//! Busy-polling socket I/O: the fastest a spinning library can move a small
//! message over tcp.
//!
//! A blocking `read` sleeps in the kernel and pays a wake-up (tens of µs on
//! shared virtual cores) each time; a non-blocking socket polled in a loop
//! pays none. The raw tcp yardstick measures both round trips, and small
//! tcp messages are judged against this one, the limit for a library whose
//! waits spin.

use std::io::{self, ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Polls between deadline checks.
const POLLS_PER_CHECK: u32 = 1024;

/// Reads exactly `buf.len()` bytes from a non-blocking `stream`, spinning
/// on `WouldBlock`, for at most `timeout`.
///
/// # Errors
/// `TimedOut` past the deadline, `UnexpectedEof` when the peer closes, or
/// the read's own error.
pub(super) fn read_exact(
    stream: &mut TcpStream,
    buf: &mut [u8],
    timeout: Duration,
) -> io::Result<()> {
    let len = buf.len();
    spin(len, timeout, "no message", |got| {
        match stream.read(&mut buf[got..]) {
            Ok(0) => Err(io::Error::new(
                ErrorKind::UnexpectedEof,
                "the peer closed the socket mid-message",
            )),
            moved => moved,
        }
    })
}

/// Writes all of `buf` to a non-blocking `stream`, spinning on
/// `WouldBlock`, for at most `timeout`.
///
/// # Errors
/// `TimedOut` past the deadline, or the write's own error.
pub(super) fn write_all(stream: &mut TcpStream, buf: &[u8], timeout: Duration) -> io::Result<()> {
    spin(buf.len(), timeout, "the socket took no bytes", |sent| {
        stream.write(&buf[sent..])
    })
}

/// Moves `len` bytes by calls of `step` (one non-blocking read or write
/// from the offset it is given, returning how many bytes it moved),
/// spinning on `WouldBlock`, for at most `timeout`.
///
/// # Errors
/// `TimedOut` past the deadline (`stalled` says what did not happen), or
/// `step`'s own error.
fn spin(
    len: usize,
    timeout: Duration,
    stalled: &str,
    mut step: impl FnMut(usize) -> io::Result<usize>,
) -> io::Result<()> {
    let deadline = Instant::now() + timeout;
    let (mut done, mut polls) = (0, 0u32);
    while done < len {
        match step(done) {
            Ok(n) => done += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                polls = polls.wrapping_add(1);
                if polls % POLLS_PER_CHECK == 0 && Instant::now() > deadline {
                    return Err(io::Error::new(
                        ErrorKind::TimedOut,
                        format!("{stalled} within {timeout:?} of busy-polling"),
                    ));
                }
                std::hint::spin_loop();
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn echoes_through_non_blocking_sockets_and_times_out_without_a_peer() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let echo = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            s.set_nonblocking(true).unwrap();
            let mut m = [0u8; 8];
            for _ in 0..100 {
                read_exact(&mut s, &mut m, Duration::from_secs(10)).unwrap();
                write_all(&mut s, &m, Duration::from_secs(10)).unwrap();
            }
            s
        });
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_nonblocking(true).unwrap();
        for i in 0..100u64 {
            let mut back = [0u8; 8];
            write_all(&mut c, &i.to_le_bytes(), Duration::from_secs(10)).unwrap();
            read_exact(&mut c, &mut back, Duration::from_secs(10)).unwrap();
            assert_eq!(u64::from_le_bytes(back), i);
        }
        let _server = echo.join().unwrap(); // kept open: the next read must time out, not end
        let mut m = [0u8; 8];
        let e = read_exact(&mut c, &mut m, Duration::from_millis(20)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::TimedOut);
    }
}
