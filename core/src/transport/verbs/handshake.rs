//! Making a verbs pair's queue pairs when the pair is first used.
//!
//! Creation makes no QP: each rank with verbs peers listens on a tcp port
//! of its own (published in its endpoint) and keeps it for the
//! communicator's life. The first time a pair is needed (a slot staged for
//! the peer, a grant to forward, a barrier flag to write), the engine
//! starts a dial on a thread of its own: it makes this side's QP (CQ, QP
//! in INIT, the control block registered), connects to the peer's port
//! and sends a [`Shake`] (the communicator's secret, both ranks, this
//! side's [`VerbsAddr`]). The peer's engine accepts it (on a thread of its
//! own too), makes its own QP if it has none yet, moves it to RTS towards
//! the dialer's and answers with its address; the dialer moves its QP to
//! RTS, may write at once (the peer's QP is ready to receive), and says
//! so with one byte, after which the peer may write too (before it, the
//! dialer's QP might not be ready to receive). The rings are then
//! registered at the pair's first slot, as before (`progress::rings`).
//!
//! Both ranks of a pair may dial each other at once: each side makes one
//! QP for the pair whoever asks, and tells the same address on its own
//! dial and in its answers, so the two handshakes connect the same two
//! QPs and the second changes nothing ([`super::qp::Qp::connect`]). No
//! rule of rank order is needed.
//!
//! Failures name the peer: a refused dial (nobody listens: it exited or
//! failed), a handshake closed before the answer, no answer within the
//! communicator's timeout (alive but not answering: stopped?). A failure
//! is left on the peer for the engine to report (as a failed post is).
//! Strangers, wrong secrets and silent connections at the listener are
//! dropped (a silent one after [`HELLO_TIMEOUT`]).

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::progress::SharedPeer;
use super::qp::VerbsAddr;
use crate::engine::Kick;
use crate::framed::{FrameReader, FrameWriter, HEAD_BYTES, Protocol};
use crate::{Error, Result};

/// The handshake's head.
const SHAKE: Protocol = Protocol {
    name: "verbs handshake",
    magic: *b"SCVH",
    version: 1,
};

/// Bytes of an encoded [`VerbsAddr`].
const ADDR_BYTES: usize = 4 + 4 + 2 + 1 + 16 + 8 + 4 + 8 + 4;
/// Bytes of a [`Shake`].
pub(crate) const SHAKE_BYTES: usize = HEAD_BYTES + 4 + 4 + ADDR_BYTES;
/// The dialer's last word: its QP is ready to receive.
const READY: u8 = 0x52;
/// How long an accepted connection may take to say who it is.
pub(crate) const HELLO_TIMEOUT: Duration = Duration::from_secs(2);
/// Most handshakes answered at once: beyond them, connections wait in the
/// listener's backlog until one is done (a flood of strangers costs no
/// more threads, and each of those is dropped within [`HELLO_TIMEOUT`]).
const MAX_ANSWERING: usize = 64;

/// One side's message: who it is, whom it means, where its QP is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shake {
    /// Rank of the side that sends it.
    pub from: u32,
    /// Rank it is for.
    pub to: u32,
    /// The sender's end of the pair.
    pub addr: VerbsAddr,
}

impl Shake {
    /// Fixed-size encoding, carrying `secret`.
    pub(crate) fn encode(&self, secret: &[u8; 16]) -> [u8; SHAKE_BYTES] {
        let a = &self.addr;
        let body = SHAKE
            .writer(secret)
            .u32(self.from)
            .u32(self.to)
            .u32(a.qpn)
            .u32(a.psn)
            .bytes(&a.lid.to_le_bytes())
            .u8(a.mtu)
            .bytes(&a.gid);
        let body = u64_field(body, a.ctrl_addr).u32(a.ctrl_rkey);
        let body = u64_field(body, a.barrier_addr).u32(a.barrier_rkey).finish();
        let mut b = [0u8; SHAKE_BYTES];
        b.copy_from_slice(&body);
        b
    }

    /// Decodes and checks a message against the communicator's secret.
    ///
    /// # Errors
    /// [`Error::Bootstrap`] for a wrong magic, version or secret.
    pub(crate) fn decode(b: &[u8; SHAKE_BYTES], secret: &[u8; 16]) -> Result<Shake> {
        let mut r = SHAKE
            .reader(b, secret)
            .map_err(|e| Error::Bootstrap(SHAKE.describe(&e)))?;
        Self::fields(&mut r).map_err(|e| Error::Bootstrap(format!("verbs handshake: {e}")))
    }

    fn fields(r: &mut FrameReader<'_>) -> std::result::Result<Shake, String> {
        let (from, to) = (r.u32()?, r.u32()?);
        let (qpn, psn) = (r.u32()?, r.u32()?);
        let lid = r.bytes(2)?;
        let mtu = r.u8()?;
        let mut gid = [0u8; 16];
        gid.copy_from_slice(r.bytes(16)?);
        Ok(Shake {
            from,
            to,
            addr: VerbsAddr {
                qpn,
                psn,
                lid: u16::from_le_bytes([lid[0], lid[1]]),
                mtu,
                gid,
                ctrl_addr: r.u64()?,
                ctrl_rkey: r.u32()?,
                barrier_addr: r.u64()?,
                barrier_rkey: r.u32()?,
            },
        })
    }
}

fn u64_field(w: FrameWriter, v: u64) -> FrameWriter {
    w.bytes(&v.to_le_bytes())
}

/// What every handshake of a communicator needs.
pub(crate) struct Shaker {
    /// This rank.
    pub rank: usize,
    /// The communicator's secret.
    pub secret: [u8; 16],
    /// How long a pair may take to connect.
    pub timeout: Duration,
    /// Wakes the engine once a pair is connected or failed.
    pub kick: Arc<Kick>,
    /// Handshakes being answered now (at most [`MAX_ANSWERING`]).
    pub answering: AtomicUsize,
}

impl std::fmt::Debug for Shaker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the secret.
        write!(f, "Shaker(rank {})", self.rank)
    }
}

impl Shaker {
    /// Starts connecting to `peer` (rank `to`, listening at `addr`) on a
    /// thread of its own; the outcome is left on the peer.
    pub(crate) fn dial(self: &Arc<Self>, peer: Arc<SharedPeer>, to: usize, addr: SocketAddr) {
        let failed = move |peer: &SharedPeer, cause: String| {
            peer.defer(Error::Transport {
                transport: "verbs",
                peer: to,
                cause,
            });
        };
        let (me, target) = (self.clone(), peer.clone());
        let run = move || {
            if let Err(cause) = me.dial_now(&target, to, addr) {
                failed(&target, cause);
            }
            me.kick.kick();
        };
        if let Err(e) = std::thread::Builder::new()
            .name(format!("streamcomm-verbs-dial-{to}"))
            .spawn(run)
        {
            // Reported, not left waiting for a dial that never started.
            failed(&peer, format!("no thread for the handshake: {e}"));
            self.kick.kick();
        }
    }

    fn dial_now(
        &self,
        peer: &SharedPeer,
        to: usize,
        addr: SocketAddr,
    ) -> std::result::Result<(), String> {
        let deadline = Instant::now() + self.timeout;
        let local = peer.make_qp().map_err(|e| e.to_string())?;
        let mut s =
            TcpStream::connect_timeout(&addr, self.timeout).map_err(|e| match e.kind() {
                ErrorKind::ConnectionRefused => {
                    format!("nobody listens at {addr} (it exited or failed)")
                }
                ErrorKind::TimedOut | ErrorKind::WouldBlock => format!(
                    "no connection to {addr} within {} s (alive but not answering: stopped?)",
                    self.timeout.as_secs()
                ),
                _ => format!("connecting to {addr}: {e}"),
            })?;
        let _ = s.set_nodelay(true);
        let hello = Shake {
            from: self.rank as u32,
            to: to as u32,
            addr: local,
        };
        let mut answer = [0u8; SHAKE_BYTES];
        bounded(&s, deadline)?;
        s.write_all(&hello.encode(&self.secret))
            .and_then(|()| s.read_exact(&mut answer))
            .map_err(|e| self.io_cause(e, "its answer"))?;
        let answer = Shake::decode(&answer, &self.secret).map_err(|e| e.to_string())?;
        if answer.from as usize != to || answer.to as usize != self.rank {
            return Err(format!(
                "answered as rank {} to rank {}",
                answer.from, answer.to
            ));
        }
        peer.connect_qp(&answer.addr, true)
            .map_err(|e| e.to_string())?;
        // The peer may write once it knows our QP is ready (it is now).
        s.write_all(&[READY])
            .map_err(|e| self.io_cause(e, "saying ready"))
    }

    fn io_cause(&self, e: std::io::Error, what: &str) -> String {
        match e.kind() {
            ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset | ErrorKind::BrokenPipe => {
                format!("it closed the handshake before {what} (it failed or is leaving)")
            }
            ErrorKind::TimedOut | ErrorKind::WouldBlock => format!(
                "no {what} within {} s (alive but not answering: stopped?)",
                self.timeout.as_secs()
            ),
            _ => format!("the handshake failed before {what}: {e}"),
        }
    }

    /// True while fewer than [`MAX_ANSWERING`] handshakes are being
    /// answered: the listener may accept another.
    pub(crate) fn has_room(&self) -> bool {
        self.answering.load(Ordering::Acquire) < MAX_ANSWERING
    }

    /// Answers one connection the listener accepted, on a thread of its
    /// own; `peer_of` finds the pair of a rank (`None`: not a verbs peer).
    pub(crate) fn answer(
        self: &Arc<Self>,
        stream: TcpStream,
        peer_of: impl Fn(usize) -> Option<Arc<SharedPeer>> + Send + 'static,
    ) {
        self.answering.fetch_add(1, Ordering::AcqRel);
        let me = self.clone();
        let run = move || {
            me.answer_now(stream, peer_of);
            me.answering.fetch_sub(1, Ordering::AcqRel);
        };
        if let Err(e) = std::thread::Builder::new()
            .name("streamcomm-verbs-answer".into())
            .spawn(run)
        {
            self.answering.fetch_sub(1, Ordering::AcqRel);
            tracing::warn!(error = %e, "verbs: no thread for a handshake");
        }
    }

    fn answer_now(&self, mut s: TcpStream, peer_of: impl Fn(usize) -> Option<Arc<SharedPeer>>) {
        let _ = s.set_nodelay(true);
        let mut hello = [0u8; SHAKE_BYTES];
        // A stranger, a wrong secret or a silent connection is dropped.
        if bounded(&s, Instant::now() + HELLO_TIMEOUT).is_err() || s.read_exact(&mut hello).is_err()
        {
            return;
        }
        let Ok(hello) = Shake::decode(&hello, &self.secret) else {
            return;
        };
        let from = hello.from as usize;
        let (true, Some(peer)) = (hello.to as usize == self.rank, peer_of(from)) else {
            return;
        };
        let made = peer
            .make_qp()
            .and_then(|local| peer.connect_qp(&hello.addr, false).map(|()| local));
        let local = match made {
            Ok(local) => local,
            Err(e) => {
                peer.defer(Error::Transport {
                    transport: "verbs",
                    peer: from,
                    cause: format!("answering its handshake: {e}"),
                });
                self.kick.kick();
                return;
            }
        };
        let answer = Shake {
            from: self.rank as u32,
            to: hello.from,
            addr: local,
        };
        let mut ready = [0u8; 1];
        let told = bounded(&s, Instant::now() + self.timeout).is_ok()
            && s.write_all(&answer.encode(&self.secret)).is_ok()
            && s.read_exact(&mut ready).is_ok()
            && ready[0] == READY;
        // Without the dialer's word its QP may not receive yet: the pair
        // stays down here (the dialer reports its own failure; a later
        // dial of ours finds both QPs connected already).
        if told {
            peer.mark_up();
            self.kick.kick();
        }
    }
}

/// Gives the socket's reads and writes what is left until `deadline`.
fn bounded(s: &TcpStream, deadline: Instant) -> std::result::Result<(), String> {
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1));
    s.set_read_timeout(Some(left))
        .and_then(|()| s.set_write_timeout(Some(left)))
        .map_err(|e| format!("setting the handshake's timeouts: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shakes_round_trip_and_strangers_are_refused() {
        let s = Shake {
            from: 3,
            to: 7,
            addr: VerbsAddr {
                qpn: 0x12_3456,
                psn: 0xab_cdef,
                lid: 7,
                mtu: 3,
                gid: std::array::from_fn(|i| i as u8 * 11),
                ctrl_addr: 0x7f00_beef_0040,
                ctrl_rkey: 0x3333_4444,
                barrier_addr: 0x7f00_f00d_0080,
                barrier_rkey: 0x7777_8888,
            },
        };
        let secret = [9u8; 16];
        let b = s.encode(&secret);
        assert_eq!(Shake::decode(&b, &secret).unwrap(), s);
        assert!(Shake::decode(&b, &[8u8; 16]).is_err(), "another secret");
        let mut bad = b;
        bad[0] ^= 1;
        assert!(Shake::decode(&bad, &secret).is_err(), "another magic");
    }
}
