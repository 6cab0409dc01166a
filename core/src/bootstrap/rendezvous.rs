//! The first phase of the bootstrap root: admitting the ranks.
//!
//! A single `poll(2)` loop over the listener, the connections still in their
//! handshake and the ranks already admitted. A hello is read without blocking,
//! so a silent or slow stranger costs the others nothing; it is dropped when
//! its handshake timeout passes. Only a hello with the right magic, version and
//! secret is considered; then its rank and size are checked against the ranks
//! already admitted, and a refusal is sent back with its reason.

use std::io::{self, Read};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use super::gather;
use super::root::{
    FRAME_TIMEOUT, Joined, RootOptions, fail_all, millis, missing_ranks, poll, pollfd,
    remote_failed,
};
use super::wire::{HELLO, HELLO_FRAME_LEN, HELLO_LEN, Hello, MAX_RANKS, Reply};
use crate::{Error, Result};

/// Connections that may be in their handshake at once; more wait in the
/// listener's backlog (4,096: [`crate::os_limits`]) until one finishes.
const MAX_PENDING: usize = 256;

/// A connection that has not finished its hello yet.
struct Pending {
    stream: TcpStream,
    peer: SocketAddr,
    buf: [u8; HELLO_FRAME_LEN],
    filled: usize,
    deadline: Instant,
}

/// Progress of a pending handshake.
enum Handshake {
    Wait,
    Drop(String),
    /// Told why (a failure frame), then dropped.
    Refuse(String),
    Hello(Hello),
}

impl Pending {
    /// Reads what has arrived without blocking and says what to do next.
    fn advance(&mut self, secret: &[u8; 16]) -> Handshake {
        loop {
            if self.filled >= 4 {
                let len = u32::from_le_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]);
                if len as usize != HELLO_LEN {
                    // A hello of another version of this protocol is told
                    // why (its own version, nothing else of what it sent):
                    // a launcher and a program of different streamcomm
                    // versions say so instead of timing out.
                    if self.filled < 12 && len >= 8 {
                        match self.read_more() {
                            Some(stop) => return stop,
                            None => continue,
                        }
                    }
                    let version =
                        u32::from_le_bytes([self.buf[8], self.buf[9], self.buf[10], self.buf[11]]);
                    if len >= 8 && self.buf[4..8] == HELLO.magic && version != HELLO.version {
                        return Handshake::Refuse(format!(
                            "a bootstrap hello of version {version}, and this root speaks version \
                             {}: the launcher (or the process that created the id) and the \
                             program are of different streamcomm versions",
                            HELLO.version
                        ));
                    }
                    return Handshake::Drop(format!(
                        "announced a {len}-byte first frame (a hello is {HELLO_LEN} bytes)"
                    ));
                }
            }
            if self.filled == HELLO_FRAME_LEN {
                let mut body = [0u8; HELLO_LEN];
                body.copy_from_slice(&self.buf[4..]);
                return match Hello::decode(&body, secret) {
                    Ok(hello) => Handshake::Hello(hello),
                    Err(e) => Handshake::Drop(HELLO.describe(&e)),
                };
            }
            if let Some(stop) = self.read_more() {
                return stop;
            }
        }
    }

    /// Reads what has arrived into the hello's buffer: `None` when bytes
    /// came (or a signal interrupted), else what to do.
    fn read_more(&mut self) -> Option<Handshake> {
        match self.stream.read(&mut self.buf[self.filled..]) {
            Ok(0) => Some(Handshake::Drop(format!(
                "closed after {} of {HELLO_FRAME_LEN} hello bytes",
                self.filled
            ))),
            Ok(n) => {
                self.filled += n;
                None
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Some(Handshake::Wait),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => None,
            Err(e) => Some(Handshake::Drop(format!("read failed: {e}"))),
        }
    }
}

/// Accepts connections until `size` ranks have said a valid hello.
pub(super) fn rendezvous(
    listener: &TcpListener,
    addr: SocketAddr,
    secret: &[u8; 16],
    opts: &RootOptions,
) -> Result<Vec<Joined>> {
    let start = Instant::now();
    let deadline = start + opts.timeout;
    let mut pending: Vec<Pending> = Vec::new();
    let mut slots: Vec<Option<Joined>> = Vec::new();
    let mut joined = 0usize;
    while slots.is_empty() || joined < slots.len() {
        let now = Instant::now();
        if now >= deadline {
            let missing = missing_ranks(slots.iter().map(Option::is_some));
            let what = format!("ranks {missing} to join the bootstrap root at {addr}");
            tracing::warn!("bootstrap rendezvous timed out waiting for {missing}");
            let reason = format!("bootstrap rendezvous timed out waiting for {missing}");
            fail_all(
                slots.iter_mut().flatten().map(|j| &mut j.stream),
                None,
                &reason,
            );
            return Err(Error::Timeout {
                op: "bootstrap rendezvous".into(),
                what,
                waited_ms: millis(now - start),
            });
        }
        let wake = pending
            .iter()
            .map(|p| p.deadline)
            .fold(deadline, Instant::min);
        let waiting: Vec<usize> = (0..slots.len()).filter(|&r| slots[r].is_some()).collect();
        let mut fds = vec![pollfd(listener.as_raw_fd())];
        if pending.len() >= MAX_PENDING {
            // No room for another handshake: the backlog keeps them.
            fds[0].events = 0;
        }
        fds.extend(pending.iter().map(|p| pollfd(p.stream.as_raw_fd())));
        fds.extend(
            waiting
                .iter()
                .filter_map(|&r| slots[r].as_ref())
                .map(|j| pollfd(j.stream.as_raw_fd())),
        );
        poll(&mut fds, Some(wake.saturating_duration_since(now)))?;

        // A joined rank never speaks before the welcome: any event means it
        // closed (or misbehaves), and its slot is free again.
        for (k, &rank) in waiting.iter().enumerate() {
            if fds[1 + pending.len() + k].revents != 0
                && let Some(j) = slots[rank].take()
            {
                tracing::warn!(rank, peer = %j.peer, "rank left before all ranks joined");
                joined -= 1;
            }
        }
        if joined == 0 {
            slots.clear();
        }

        let now = Instant::now();
        let mut still = Vec::with_capacity(pending.len());
        for (k, mut p) in pending.drain(..).enumerate() {
            let step = if fds[1 + k].revents != 0 {
                p.advance(secret)
            } else {
                Handshake::Wait
            };
            match step {
                Handshake::Wait if now >= p.deadline => {
                    let ms = millis(opts.handshake_timeout);
                    tracing::warn!(peer = %p.peer, "dropped a connection: no hello within {ms} ms");
                }
                Handshake::Wait => still.push(p),
                Handshake::Drop(reason) => {
                    tracing::warn!(peer = %p.peer, "dropped a connection: {reason}");
                }
                Handshake::Refuse(reason) => {
                    tracing::warn!(peer = %p.peer, "refused a connection: {reason}");
                    let mut stream = p.stream;
                    let _ = stream.set_nonblocking(false);
                    fail_all(std::iter::once(&mut stream), None, &reason);
                }
                Handshake::Hello(hello) => {
                    if admit(&mut slots, p, &hello) {
                        joined += 1;
                    }
                }
            }
        }
        pending = still;

        if fds[0].revents != 0
            && let Err(reason) = accept_all(listener, &mut pending, now + opts.handshake_timeout)
        {
            tracing::warn!("bootstrap root gives up: {reason}");
            // The size, where a hello has told it (else a refused hello will).
            let mut size = (!slots.is_empty()).then_some(slots.len());
            let held = slots.iter_mut().flatten().map(|j| &mut j.stream);
            let mut told = fail_all(held, None, &reason);
            drop(slots);
            for p in pending {
                let (sent, announced) = tell_and_close(p.stream, &reason, secret, p.buf, p.filled);
                told += sent;
                size = size.or(announced);
            }
            refuse_latecomers(listener, &reason, secret, (size, told), deadline);
            return Err(Error::Bootstrap(reason));
        }
    }
    let mut ranks: Vec<Joined> = slots.into_iter().flatten().collect();
    let n = ranks.len();
    for rank in 0..n {
        // The all-gather's peers this rank sends to (see `super::gather`):
        // `ceil(log2 n)` addresses a rank, O(n log n) bytes in all.
        let targets = (0..gather::steps(n))
            .map(|k| ranks[gather::target(rank, n, k)].gather)
            .collect();
        if let Err(e) = (Reply::Welcome { targets }).write_to(&mut ranks[rank].stream) {
            let reason = format!("rank {rank} disconnected during the bootstrap rendezvous ({e})");
            tracing::warn!("{reason}");
            let others = ranks.iter_mut().enumerate().filter(|(r, _)| *r != rank);
            fail_all(others.map(|(_, j)| &mut j.stream), Some(rank), &reason);
            return Err(remote_failed(rank, reason));
        }
    }
    Ok(ranks)
}

/// Takes every connection waiting in the backlog into the handshake; fails
/// with the reason to give every rank when this process is out of file
/// descriptors even after raising its limit ([`crate::os_limits`]).
fn accept_all(
    listener: &TcpListener,
    pending: &mut Vec<Pending>,
    deadline: Instant,
) -> std::result::Result<(), String> {
    while pending.len() < MAX_PENDING {
        match listener.accept() {
            Ok((stream, peer)) => {
                if let Err(e) = stream.set_nonblocking(true) {
                    tracing::warn!(%peer, "dropped a connection: {e}");
                    continue;
                }
                let _ = stream.set_nodelay(true);
                pending.push(Pending {
                    stream,
                    peer,
                    buf: [0; HELLO_FRAME_LEN],
                    filled: 0,
                    deadline,
                });
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if crate::os_limits::exhausted(&e) => {
                if crate::os_limits::raise().is_none() {
                    return Err(crate::os_limits::advice(
                        "the bootstrap root's process",
                        "accepting ranks (it holds one socket per rank)",
                    ));
                }
            }
            Err(e) => {
                // E.g. the system's table is full: back off instead of spinning.
                tracing::warn!("bootstrap root accept failed: {e}");
                std::thread::sleep(Duration::from_millis(10));
                return Ok(());
            }
        }
    }
    Ok(())
}

/// After the root gave up for want of descriptors (its ranks' connections
/// now closed, which frees them), answers every later connection with
/// `reason` until every rank has been told (`told` of `size`, the size
/// learnt from a hello if not yet known) or the rendezvous `deadline`, so
/// that the ranks still starting learn it instead of waiting for their
/// timeout.
fn refuse_latecomers(
    listener: &TcpListener,
    reason: &str,
    secret: &[u8; 16],
    (mut size, mut told): (Option<usize>, usize),
    deadline: Instant,
) {
    while size.is_none_or(|n| told < n) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        let mut fds = [pollfd(listener.as_raw_fd())];
        if poll(&mut fds, Some(left)).is_err() {
            return;
        }
        loop {
            match listener.accept() {
                Ok((stream, _)) => {
                    let (sent, announced) =
                        tell_and_close(stream, reason, secret, [0; HELLO_FRAME_LEN], 0);
                    told += sent;
                    size = size.or(announced);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    // Still out of descriptors, say: back off, do not spin.
                    std::thread::sleep(Duration::from_millis(10));
                    break;
                }
            }
        }
    }
}

/// Tells a connection still in its handshake why the root gives up, and
/// closes it without resetting it (its hello, unread, would make the close
/// a reset that can reach the rank before the reason does). `buf` holds
/// the `filled` bytes of its hello read so far. Returns 1 if the reason
/// was sent, and the size its hello announced, if it was a rank's.
fn tell_and_close(
    mut stream: TcpStream,
    reason: &str,
    secret: &[u8; 16],
    mut buf: [u8; HELLO_FRAME_LEN],
    mut filled: usize,
) -> (usize, Option<usize>) {
    let _ = stream.set_nonblocking(false);
    let told = fail_all(std::iter::once(&mut stream), None, reason);
    let _ = stream.shutdown(std::net::Shutdown::Write);
    // Read what the rank sent until it closes (it does once it has read
    // the reason), for at most a moment whatever a stranger sends.
    let until = Instant::now() + Duration::from_millis(200);
    let more = |stream: &TcpStream| {
        let left = until.saturating_duration_since(Instant::now());
        !left.is_zero() && stream.set_read_timeout(Some(left)).is_ok()
    };
    while filled < HELLO_FRAME_LEN && more(&stream) {
        match stream.read(&mut buf[filled..]) {
            Ok(n) if n > 0 => filled += n,
            _ => break,
        }
    }
    let size = (filled == HELLO_FRAME_LEN)
        .then(|| {
            let mut body = [0u8; HELLO_LEN];
            body.copy_from_slice(&buf[4..]);
            Hello::decode(&body, secret).ok()
        })
        .flatten()
        .map(|h| h.size as usize);
    let mut sink = [0u8; 256];
    while more(&stream) && matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
    (told, size)
}

/// Checks an authenticated hello against the ranks already joined; takes the
/// connection into its slot, or refuses it with a reason the rank will see.
fn admit(slots: &mut Vec<Option<Joined>>, p: Pending, hello: &Hello) -> bool {
    let (rank, size) = (hello.rank as usize, hello.size as usize);
    let refusal = if size == 0 || size > MAX_RANKS {
        Some(format!("size {size} is out of range (1..={MAX_RANKS})"))
    } else if rank >= size {
        Some(format!("rank {rank} is out of range for size {size}"))
    } else if !slots.is_empty() && slots.len() != size {
        Some(format!(
            "size {size} disagrees with size {} announced by the ranks already joined",
            slots.len()
        ))
    } else if let Some(Some(other)) = slots.get(rank) {
        Some(format!("rank {rank} is already taken (by {})", other.peer))
    } else {
        None
    };
    let mut stream = p.stream;
    let ready = stream
        .set_nonblocking(false)
        .and_then(|()| stream.set_write_timeout(Some(FRAME_TIMEOUT)));
    if let Some(reason) = refusal {
        tracing::warn!(peer = %p.peer, "refused a rank: {reason}");
        if ready.is_ok() {
            let _ = Reply::Failure { peer: None, reason }.write_to(&mut stream);
        }
        return false;
    }
    if let Err(e) = ready {
        tracing::warn!(peer = %p.peer, rank, "dropped a rank: {e}");
        return false;
    }
    if slots.is_empty() {
        slots.resize_with(size, || None);
    }
    tracing::debug!(peer = %p.peer, rank, size, "rank joined");
    slots[rank] = Some(Joined {
        stream,
        peer: p.peer,
        gather: hello.gather,
    });
    true
}
