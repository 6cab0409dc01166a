//! The bootstrap's all-gather among the ranks themselves.
//!
//! The root relaying every round would write every rank's record to every
//! rank: `n²` records from one process (256 MB a round at 1,000 ranks of
//! 256-byte records). Instead the ranks run Bruck's all-gather over
//! connections of their own, as NCCL's bootstrap runs its ring: in step
//! `k` (of `ceil(log2 n)`), rank `r` sends the records it holds (its own
//! and the `2^k - 1` after it, at most the `n - 2^k` the receiver lacks)
//! to rank `r - 2^k` and receives as many from rank `r + 2^k`, so it holds
//! `2^(k+1)` after the step. Every rank sends and receives `n - 1`
//! records in `ceil(log2 n)` frames and holds `2 ceil(log2 n)` sockets;
//! the root sends each rank the `ceil(log2 n)` addresses it sends to, once
//! ([`super::wire::Reply::Welcome`]), and relays nothing.
//!
//! Each connection carries one direction of one step: the sender
//! connects to the receiver's listener and opens with a
//! [`PeerHello`] (the secret, its rank, the step), which the receiver
//! checks against the rank it expects for that step (strangers are
//! dropped). A step's frame is a `u64` length, then each record as a
//! `u32` length and its bytes. Sockets are non-blocking and one `poll(2)`
//! loop moves a step's send and receive together (so no rank waits on a
//! send while its receiver waits on it) and also watches the root's
//! connection, over which the root tells every rank which peer failed.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use super::root::{poll, pollfd};
use super::wire::{MAX_BLOB, PEER_HELLO_LEN, PeerHello};
use crate::{Error, Result};

/// Steps of an all-gather of `n` ranks: `ceil(log2 n)`.
pub(super) fn steps(n: usize) -> usize {
    n.next_power_of_two().trailing_zeros() as usize
}

/// The rank `rank` sends step `k` to: `rank - 2^k`, modulo `n`.
pub(super) fn target(rank: usize, n: usize, k: usize) -> usize {
    (rank + n - (1 << k) % n) % n
}

/// The rank `rank` receives step `k` from: `rank + 2^k`, modulo `n`.
pub(super) fn source(rank: usize, n: usize, k: usize) -> usize {
    (rank + (1 << k)) % n
}

/// Records sent in step `k` of `n` ranks: `2^k`, or the `n - 2^k` the
/// receiver still lacks in the last step.
fn records_in_step(n: usize, k: usize) -> usize {
    (1 << k).min(n - (1 << k))
}

/// Why an exchange stopped.
#[derive(Debug)]
pub(super) enum Stop {
    /// The connection to `peer` broke: closed, reset, or it broke the
    /// protocol (`what` says how).
    Peer { peer: usize, what: String },
    /// The deadline passed waiting for `what`.
    TimedOut { what: String },
    /// The root's verdict, or a local failure (`poll`).
    Failed(Error),
}

/// The root's connection as an exchange watches it: `fd` while open, and
/// what to do when it is readable (`hear`: the error the root announced,
/// or `None` when it closed, after which it is watched no more; a root
/// whose process exited once every rank had joined is no failure).
pub(super) struct RootWatch<'a> {
    pub(super) fd: Option<RawFd>,
    pub(super) hear: &'a mut dyn FnMut() -> Option<Error>,
}

/// A rank's connections for the all-gather: one to send and one to
/// receive each step on.
#[derive(Debug)]
pub(super) struct Links {
    rank: usize,
    size: usize,
    /// `out[k]`: to [`target`]`(rank, size, k)`.
    out: Vec<TcpStream>,
    /// `inc[k]`: from [`source`]`(rank, size, k)`.
    inc: Vec<TcpStream>,
}

impl Links {
    /// No links: a communicator of one rank.
    pub(super) fn none(rank: usize, size: usize) -> Links {
        Links {
            rank,
            size,
            out: Vec::new(),
            inc: Vec::new(),
        }
    }

    /// Opens the links of `rank` of `size`: connects to `targets` (one a
    /// step) and says who it is, then accepts one connection a step on
    /// `listener`, each from the rank that step expects (any other
    /// connection is dropped), all by `deadline`.
    ///
    /// # Errors
    /// [`Error::Timeout`] past the deadline (naming what was missing);
    /// [`Error::Bootstrap`] when a target refuses the connection.
    pub(super) fn open(
        listener: TcpListener,
        targets: &[SocketAddr],
        (rank, size): (usize, usize),
        secret: &[u8; 16],
        deadline: Instant,
    ) -> Result<Links> {
        let start = Instant::now();
        let mut out = Vec::with_capacity(targets.len());
        for (k, &addr) in targets.iter().enumerate() {
            let peer = target(rank, size, k);
            let stream = loop {
                match TcpStream::connect_timeout(&addr, left(deadline)) {
                    Ok(stream) => break stream,
                    Err(e) if crate::os_limits::exhausted(&e) => {
                        if crate::os_limits::raise().is_none() {
                            return Err(Error::Unavailable(crate::os_limits::advice(
                                "this process",
                                "connecting to its bootstrap all-gather peers",
                            )));
                        }
                    }
                    Err(e) => {
                        return Err(Error::Bootstrap(format!(
                            "bootstrap: connecting to rank {peer} at {addr} (all-gather step \
                             {k}) failed: {e}"
                        )));
                    }
                }
            };
            let _ = stream.set_nodelay(true);
            let hello = PeerHello {
                rank: rank as u32,
                step: k as u32,
            };
            stream
                .set_write_timeout(Some(left(deadline)))
                .and_then(|()| (&stream).write_all(&hello.encode(secret)))
                .map_err(|e| {
                    Error::Bootstrap(format!(
                        "bootstrap: greeting rank {peer} at {addr} (all-gather step {k}) \
                         failed: {e}"
                    ))
                })?;
            out.push(stream);
        }
        listener
            .set_nonblocking(true)
            .map_err(|e| Error::os("set_nonblocking(bootstrap all-gather listener)", e))?;
        let mut inc: Vec<Option<TcpStream>> = (0..targets.len()).map(|_| None).collect();
        while inc.iter().any(Option::is_none) {
            if Instant::now() >= deadline {
                let missing: Vec<usize> = (0..inc.len())
                    .filter(|&k| inc[k].is_none())
                    .map(|k| source(rank, size, k))
                    .collect();
                return Err(Error::Timeout {
                    op: "bootstrap connect".into(),
                    what: format!("ranks {missing:?} to connect for the all-gather"),
                    waited_ms: u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX),
                });
            }
            let mut fds = [pollfd(listener.as_raw_fd())];
            poll(&mut fds, Some(left(deadline)))?;
            if fds[0].revents == 0 {
                continue;
            }
            // Non-blocking: a connection reset between the wake-up and the
            // accept must not block this loop past its deadline.
            let (stream, from) = match listener.accept() {
                Ok(accepted) => accepted,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) if crate::os_limits::exhausted(&e) => {
                    if crate::os_limits::raise().is_none() {
                        return Err(Error::Unavailable(crate::os_limits::advice(
                            "this process",
                            "accepting its bootstrap all-gather peers",
                        )));
                    }
                    continue;
                }
                Err(e) => {
                    tracing::warn!("bootstrap: accepting an all-gather peer failed: {e}");
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
            };
            // Accepted sockets do not inherit the listener's non-blocking
            // mode; the hello is read with a timeout.
            let _ = stream.set_nonblocking(false);
            match greeting(&stream, secret, deadline) {
                Ok(h)
                    if (h.step as usize) < inc.len()
                        && h.rank as usize == source(rank, size, h.step as usize)
                        && inc[h.step as usize].is_none() =>
                {
                    let _ = stream.set_nodelay(true);
                    inc[h.step as usize] = Some(stream);
                }
                Ok(h) => tracing::warn!(
                    %from,
                    "bootstrap: dropped a connection claiming rank {} for step {}, \
                     which this rank does not expect",
                    h.rank,
                    h.step
                ),
                Err(why) => tracing::warn!(%from, "bootstrap: dropped a connection: {why}"),
            }
        }
        let links = Links {
            rank,
            size,
            out,
            inc: inc.into_iter().flatten().collect(),
        };
        for s in links.out.iter().chain(&links.inc) {
            s.set_nonblocking(true)
                .map_err(|e| Error::os("set_nonblocking(bootstrap link)", e))?;
        }
        Ok(links)
    }

    /// Every rank's blob in rank order, `blob` being this rank's, while
    /// watching the root.
    pub(super) fn all_gather(
        &mut self,
        blob: &[u8],
        root: &mut RootWatch<'_>,
        deadline: Instant,
    ) -> std::result::Result<Vec<Vec<u8>>, Stop> {
        let (rank, n) = (self.rank, self.size);
        // held[i] is the record of rank (rank + i) mod n.
        let mut held: Vec<Vec<u8>> = Vec::with_capacity(n);
        held.push(blob.to_vec());
        for k in 0..self.out.len() {
            let count = records_in_step(n, k);
            let frame = encode_records(&held[..count]);
            let got = self.step(k, &frame, count, root, deadline)?;
            held.extend(got);
        }
        held.rotate_right(rank);
        Ok(held)
    }

    /// Sends `frame` on step `k`'s outgoing link while receiving `count`
    /// records on its incoming one.
    fn step(
        &mut self,
        k: usize,
        frame: &[u8],
        count: usize,
        root: &mut RootWatch<'_>,
        deadline: Instant,
    ) -> std::result::Result<Vec<Vec<u8>>, Stop> {
        let (to, from) = (
            target(self.rank, self.size, k),
            source(self.rank, self.size, k),
        );
        let max = count as u64 * (4 + MAX_BLOB as u64);
        let mut sent = 0;
        let mut incoming = Incoming::default();
        loop {
            let sending = sent < frame.len();
            let receiving = incoming.records.is_none();
            if !sending && !receiving {
                break;
            }
            if Instant::now() >= deadline {
                let what = if receiving {
                    format!("rank {from}'s records (all-gather step {k})")
                } else {
                    format!("rank {to} to take this rank's records (all-gather step {k})")
                };
                return Err(Stop::TimedOut { what });
            }
            // A link this step is done with is left out (a negative fd):
            // its peer may close it, which must not wake this loop.
            let mut fds = [
                pollfd(if sending { self.out[k].as_raw_fd() } else { -1 }),
                pollfd(if receiving {
                    self.inc[k].as_raw_fd()
                } else {
                    -1
                }),
                pollfd(root.fd.unwrap_or(-1)),
            ];
            fds[0].events = libc::POLLOUT;
            poll(&mut fds, Some(left(deadline))).map_err(Stop::Failed)?;
            if fds[2].revents != 0 {
                match (root.hear)() {
                    Some(e) => return Err(Stop::Failed(e)),
                    None => root.fd = None,
                }
            }
            if fds[0].revents != 0 {
                sent += write_some(&mut self.out[k], &frame[sent..]).map_err(|e| Stop::Peer {
                    peer: to,
                    what: format!("sending to it failed ({e})"),
                })?;
            }
            if fds[1].revents != 0 {
                incoming
                    .read(&mut self.inc[k], count, max)
                    .map_err(|what| Stop::Peer { peer: from, what })?;
            }
        }
        Ok(incoming.records.unwrap_or_default())
    }
}

/// One step's frame of `records`.
fn encode_records(records: &[Vec<u8>]) -> Vec<u8> {
    let len: usize = records.iter().map(|r| 4 + r.len()).sum();
    let mut frame = Vec::with_capacity(8 + len);
    frame.extend_from_slice(&(len as u64).to_le_bytes());
    for r in records {
        frame.extend_from_slice(&(r.len() as u32).to_le_bytes());
        frame.extend_from_slice(r);
    }
    frame
}

/// The records of one frame in `body`, exactly `count` of them, each at
/// most [`MAX_BLOB`] bytes.
fn decode_records(body: &[u8], count: usize) -> std::result::Result<Vec<Vec<u8>>, String> {
    let mut records = Vec::with_capacity(count);
    let mut at = 0;
    while at < body.len() {
        let Some(head) = body.get(at..at + 4) else {
            return Err(format!("a record's length cut short at byte {at}"));
        };
        let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
        if len > MAX_BLOB {
            return Err(format!("a {len}-byte record (limit {MAX_BLOB})"));
        }
        let Some(bytes) = body.get(at + 4..at + 4 + len) else {
            return Err(format!("a {len}-byte record cut short"));
        };
        records.push(bytes.to_vec());
        at += 4 + len;
    }
    if records.len() != count {
        return Err(format!("{} records where {count} were due", records.len()));
    }
    Ok(records)
}

/// A step's frame as it arrives: its length, then its body.
#[derive(Default)]
struct Incoming {
    head: [u8; 8],
    got_head: usize,
    body: Vec<u8>,
    got: usize,
    records: Option<Vec<Vec<u8>>>,
}

impl Incoming {
    /// Reads what has arrived (never past this frame's end); decodes the
    /// frame once whole.
    ///
    /// # Errors
    /// How the sender broke the connection or the protocol.
    fn read(
        &mut self,
        s: &mut TcpStream,
        count: usize,
        max: u64,
    ) -> std::result::Result<(), String> {
        while self.got_head < 8 {
            match read_some(s, &mut self.head[self.got_head..])? {
                0 => return Ok(()),
                got => self.got_head += got,
            }
            if self.got_head == 8 {
                let len = u64::from_le_bytes(self.head);
                if len > max {
                    return Err(format!(
                        "it announced a {len}-byte step for {count} records (limit {max})"
                    ));
                }
                self.body = vec![0; len as usize];
            }
        }
        while self.got < self.body.len() {
            match read_some(s, &mut self.body[self.got..])? {
                0 => return Ok(()),
                got => self.got += got,
            }
        }
        self.records = Some(decode_records(&self.body, count)?);
        Ok(())
    }
}

/// Reads into `buf` without blocking: the bytes read, 0 when none are
/// there yet.
///
/// # Errors
/// The connection closed, reset or failed.
fn read_some(s: &mut TcpStream, buf: &mut [u8]) -> std::result::Result<usize, String> {
    loop {
        match s.read(buf) {
            Ok(0) => return Err("its connection closed (the process exited?)".into()),
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(0),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("reading from it failed ({e})")),
        }
    }
}

/// Writes what the socket takes of `buf` without blocking.
fn write_some(s: &mut TcpStream, buf: &[u8]) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match s.write(&buf[done..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Reads a peer's hello from a fresh connection, by `deadline` (and 2
/// seconds at most: a silent stranger must not hold up the ranks).
fn greeting(
    stream: &TcpStream,
    secret: &[u8; 16],
    deadline: Instant,
) -> std::result::Result<PeerHello, String> {
    let mut frame = [0u8; 4 + PEER_HELLO_LEN];
    let until = deadline.min(Instant::now() + Duration::from_secs(2));
    let mut got = 0;
    while got < frame.len() {
        let wait = left(until);
        if wait <= Duration::from_millis(1) {
            return Err("no hello in time".into());
        }
        stream
            .set_read_timeout(Some(wait))
            .map_err(|e| e.to_string())?;
        match (&*stream).read(&mut frame[got..]) {
            Ok(0) => return Err(format!("closed after {got} hello bytes")),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("reading its hello failed ({e})")),
        }
    }
    let len = u32::from_le_bytes([frame[0], frame[1], frame[2], frame[3]]) as usize;
    if len != PEER_HELLO_LEN {
        return Err(format!(
            "a {len}-byte first frame (a peer hello is {PEER_HELLO_LEN})"
        ));
    }
    PeerHello::decode(&frame[4..], secret).map_err(|e| super::wire::PEER_HELLO.describe(&e))
}

/// Time left until `deadline` (at least a millisecond: sockets refuse 0).
fn left(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rank_receives_each_record_once_and_ends_in_rank_order() {
        // Bruck's schedule on paper, for every size to 70: each step's
        // receiver gets from its source exactly the records it lacks.
        for n in 1..=70usize {
            let mut held: Vec<Vec<usize>> = (0..n).map(|r| vec![r]).collect();
            for k in 0..steps(n) {
                let count = records_in_step(n, k);
                let sent: Vec<Vec<usize>> = (0..n).map(|r| held[r][..count].to_vec()).collect();
                for r in 0..n {
                    assert_eq!(target(source(r, n, k), n, k), r, "n {n} step {k}");
                    held[r].extend(&sent[source(r, n, k)]);
                }
            }
            for (r, h) in held.iter_mut().enumerate() {
                h.rotate_right(r);
                assert_eq!(*h, (0..n).collect::<Vec<_>>(), "n {n} rank {r}");
            }
        }
        assert_eq!((steps(1), steps(2), steps(3), steps(1000)), (0, 1, 2, 10));
    }

    /// Opens the links of `rank` of `size` on a fresh listener, after
    /// `before` has had the listener's address (to connect as it likes).
    fn open_with(
        rank: usize,
        size: usize,
        targets: Vec<SocketAddr>,
        listener: TcpListener,
    ) -> std::thread::JoinHandle<Result<Links>> {
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(10);
            Links::open(listener, &targets, (rank, size), &[7; 16], deadline)
        })
    }

    #[test]
    fn strangers_and_impostors_at_a_ranks_listener_are_dropped() {
        // Two ranks: each sends step 0 to the other. Before rank 1's real
        // connection reaches rank 0's listener, it gets garbage, a hello
        // with a wrong secret, one naming a rank it does not expect, and a
        // silent connection; rank 0 still opens its links, with rank 1's.
        let l0 = TcpListener::bind("127.0.0.1:0").expect("bind");
        let l1 = TcpListener::bind("127.0.0.1:0").expect("bind");
        let (a0, a1) = (l0.local_addr().expect("a0"), l1.local_addr().expect("a1"));
        let mut garbage = TcpStream::connect(a0).expect("garbage");
        garbage.write_all(&[0xff; 40]).expect("write");
        let mut wrong = TcpStream::connect(a0).expect("wrong secret");
        wrong
            .write_all(&PeerHello { rank: 1, step: 0 }.encode(&[8; 16]))
            .expect("write");
        let mut impostor = TcpStream::connect(a0).expect("impostor");
        impostor
            .write_all(&PeerHello { rank: 0, step: 0 }.encode(&[7; 16]))
            .expect("write");
        let _silent = TcpStream::connect(a0).expect("silent");
        let rank0 = open_with(0, 2, vec![a1], l0);
        let rank1 = open_with(1, 2, vec![a0], l1);
        let (mut links0, mut links1) = (
            rank0.join().expect("rank 0").expect("rank 0's links"),
            rank1.join().expect("rank 1").expect("rank 1's links"),
        );
        // The links carry an all-gather (no root to watch).
        let g1 = std::thread::spawn(move || {
            let mut quiet = || None;
            let mut root = RootWatch {
                fd: None,
                hear: &mut quiet,
            };
            links1.all_gather(b"one", &mut root, Instant::now() + Duration::from_secs(10))
        });
        let mut quiet = || None;
        let mut root = RootWatch {
            fd: None,
            hear: &mut quiet,
        };
        let all = links0
            .all_gather(b"zero", &mut root, Instant::now() + Duration::from_secs(10))
            .expect("rank 0 gathers");
        assert_eq!(all, vec![b"zero".to_vec(), b"one".to_vec()]);
        assert_eq!(g1.join().expect("rank 1").expect("rank 1 gathers"), all);
    }

    #[test]
    fn records_round_trip_and_bad_frames_are_named() {
        let records = vec![vec![], vec![1, 2, 3], vec![9; 300]];
        let frame = encode_records(&records);
        assert_eq!(
            u64::from_le_bytes(frame[..8].try_into().expect("8")),
            frame.len() as u64 - 8
        );
        assert_eq!(decode_records(&frame[8..], 3), Ok(records));
        let err = decode_records(&frame[8..], 2).expect_err("one too many");
        assert!(err.contains("3 records where 2"), "{err}");
        let err = decode_records(&frame[8..frame.len() - 1], 3).expect_err("cut");
        assert!(err.contains("cut short"), "{err}");
        let mut huge = (MAX_BLOB as u32 + 1).to_le_bytes().to_vec();
        huge.push(0);
        let err = decode_records(&huge, 1).expect_err("too large");
        assert!(err.contains("limit"), "{err}");
    }
}
