//! The connector's handshake, driven by hand: two ranks in one thread,
//! each a connector and its one peer's state, stepped in a chosen order.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::*;
use crate::engine::{AbortWord, FailureSink};
use crate::transport::placement::Placement;
use crate::transport::ring::RingShape;
use crate::transport::tcp::TcpRings;

const SECRET: [u8; 16] = [7; 16];

/// Errors reported, in order.
#[derive(Default)]
struct Errors(Mutex<Vec<Error>>);

impl FailureSink for Errors {
    fn fail(&self, error: Error) {
        self.0.lock().unwrap().push(error);
    }
}

/// One rank: its connector and its one tcp peer.
struct Side {
    rank: usize,
    conn: Connector,
    peer: Arc<Mutex<PeerIo>>,
    errors: Errors,
    _rings: Arc<TcpRings>,
}

fn listener() -> (TcpListener, SocketAddr) {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let a = l.local_addr().unwrap();
    (l, a)
}

impl Side {
    /// Rank `rank` with listener `l`, whose one peer is `peer` at `addr`.
    fn new(rank: usize, l: TcpListener, peer: usize, addr: SocketAddr, timeout: Duration) -> Side {
        let rings = Arc::new(
            TcpRings::new(RingShape {
                nsteps: 4,
                slot_bytes: 64,
            })
            .unwrap(),
        );
        let io = PeerIo::new(
            peer,
            rings.staging.end(),
            rings.inbound.end(),
            Placement {
                grant_key: |_| None,
                placed: |sig| sig,
            },
        );
        Side {
            rank,
            conn: Connector::new(ConnectorSetup {
                rank,
                secret: SECRET,
                nsockets: 2,
                timeout,
                listener: l,
                peers: vec![(peer, addr)],
            })
            .unwrap(),
            peer: Arc::new(Mutex::new(io)),
            errors: Errors::default(),
            _rings: rings,
        }
    }

    /// A stream uses the link (it waits for a slot), and the engine
    /// starts the dial it asks for, as the tcp source does.
    fn want(&mut self) {
        let mut p = self.peer.lock().unwrap();
        p.pump().unwrap();
        assert!(p.wants_link() && p.needs_net(), "first use asks the engine");
        self.conn.dial(0, &mut p);
    }

    fn step(&mut self) -> bool {
        let abort = AbortWord::default();
        let ctx = Ctx {
            stopping: false,
            abort: &abort,
            sink: &self.errors,
        };
        self.conn.step(std::slice::from_ref(&self.peer), &ctx)
    }

    fn up(&self) -> bool {
        self.peer.lock().unwrap().link == LinkState::Up
    }

    /// Local and remote address of each attached socket.
    fn sockets(&self) -> Vec<(SocketAddr, SocketAddr)> {
        let p = self.peer.lock().unwrap();
        p.socks
            .iter()
            .map(|s| {
                (
                    s.stream.local_addr().unwrap(),
                    s.stream.peer_addr().unwrap(),
                )
            })
            .collect()
    }

    fn errors(&self) -> Vec<String> {
        self.errors
            .0
            .lock()
            .unwrap()
            .iter()
            .map(|e| e.to_string())
            .collect()
    }
}

/// Ranks 0 and 1, connected to each other's listeners.
fn pair() -> (Side, Side) {
    let (l0, a0) = listener();
    let (l1, a1) = listener();
    let t = Duration::from_secs(10);
    (Side::new(0, l0, 1, a1, t), Side::new(1, l1, 0, a0, t))
}

/// Steps both sides, `first` first, until both links are up.
fn until_up(sides: &mut [&mut Side; 2], first: usize) {
    let t0 = Instant::now();
    while !(sides[0].up() && sides[1].up()) {
        assert!(t0.elapsed() < Duration::from_secs(10), "no link in 10 s");
        sides[first].step();
        sides[1 - first].step();
        for s in sides.iter() {
            assert!(s.errors().is_empty(), "rank {}: {:?}", s.rank, s.errors());
        }
    }
}

/// Socket `j` of one side is socket `j` of the other, and the lower
/// rank dialed them (their far end is the higher rank's listener).
fn check_one_link(r0: &Side, r1: &Side, a1: SocketAddr) {
    let (s0, s1) = (r0.sockets(), r1.sockets());
    assert_eq!(s0.len(), 2);
    assert_eq!(s1.len(), 2);
    for j in 0..2 {
        assert_eq!(s0[j].0, s1[j].1, "socket {j}: the two ends differ");
        assert_eq!(s0[j].1, a1, "socket {j} was not rank 0's dial");
    }
}

#[test]
fn both_ranks_dialing_at_once_keep_the_lower_ranks_dial_whoever_moves_first() {
    for first in [0, 1] {
        let (mut r0, mut r1) = pair();
        let a1 = r1.conn.listener.local_addr().unwrap();
        r0.want();
        r1.want();
        until_up(&mut [&mut r0, &mut r1], first);
        check_one_link(&r0, &r1, a1);
        assert!(!r0.conn.busy() && !r1.conn.busy());
    }
}

#[test]
fn one_rank_dialing_is_accepted_whichever_rank_it_is() {
    for dialer in [0, 1] {
        let (mut r0, mut r1) = pair();
        let (a0, a1) = (
            r0.conn.listener.local_addr().unwrap(),
            r1.conn.listener.local_addr().unwrap(),
        );
        if dialer == 0 {
            r0.want();
        } else {
            r1.want();
        }
        until_up(&mut [&mut r0, &mut r1], dialer);
        assert!(!r0.conn.busy() && !r1.conn.busy());
        let far = if dialer == 0 { a1 } else { a0 };
        let s = if dialer == 0 { &r0 } else { &r1 };
        assert!(s.sockets().iter().all(|(_, to)| *to == far));
        // Data flows socket to socket.
        let mut p0 = r0.peer.lock().unwrap();
        let mut p1 = r1.peer.lock().unwrap();
        for j in 0..2 {
            (&p0.socks[j].stream).write_all(&[j as u8; 3]).unwrap();
            let mut b = [0u8; 3];
            p1.socks[j].stream.set_nonblocking(false).unwrap();
            p1.socks[j].stream.read_exact(&mut b).unwrap();
            assert_eq!(b, [j as u8; 3]);
        }
        drop((&mut p0, &mut p1));
    }
}

#[test]
fn strangers_wrong_secrets_and_silent_connections_are_dropped() {
    let (mut r0, mut r1) = pair();
    let a1 = r1.conn.listener.local_addr().unwrap();
    let mut forged = TcpStream::connect(a1).unwrap();
    let lie = Hello {
        secret: [8; 16],
        from: 0,
        to: 1,
        socket: 0,
    };
    forged.write_all(&lie.encode()).unwrap();
    let mut misdirected = TcpStream::connect(a1).unwrap();
    let elsewhere = Hello {
        secret: SECRET,
        from: 0,
        to: 5,
        socket: 0,
    };
    misdirected.write_all(&elsewhere.encode()).unwrap();
    let silent = TcpStream::connect(a1).unwrap();
    r1.step();
    r0.want();
    until_up(&mut [&mut r0, &mut r1], 1);
    check_one_link(&r0, &r1, a1);
    for (what, mut s) in [("a wrong secret", forged), ("another rank's", misdirected)] {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut b = [0u8; 1];
        assert_eq!(s.read(&mut b).unwrap(), 0, "{what} hello was answered");
    }
    // The silent one is dropped after the hello's time.
    let t0 = Instant::now();
    while r1.conn.busy() {
        assert!(
            t0.elapsed() < HELLO_TIMEOUT * 3,
            "the silent connection stayed"
        );
        r1.step();
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(silent);
    assert!(r1.errors().is_empty());
}

#[test]
fn a_peer_nobody_listens_for_fails_naming_it() {
    let (l0, _) = listener();
    let (gone, addr) = listener();
    drop(gone);
    let mut r0 = Side::new(0, l0, 3, addr, Duration::from_secs(10));
    r0.want();
    let t0 = Instant::now();
    while r0.errors().is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(5), "no error");
        r0.step();
    }
    let e = &r0.errors.0.lock().unwrap()[0];
    assert_eq!(e.culprit(), Some(3), "{e}");
    assert!(e.to_string().contains("cannot connect"), "{e}");
    assert!(r0.peer.lock().unwrap().dead);
    assert!(!r0.conn.busy());
}

#[test]
fn a_peer_that_never_answers_fails_naming_it_at_the_deadline() {
    let (l0, _) = listener();
    // Listening (the kernel completes the handshake) but never accepting.
    let (_mute, addr) = listener();
    let timeout = Duration::from_millis(300);
    let mut r0 = Side::new(0, l0, 2, addr, timeout);
    r0.want();
    let t0 = Instant::now();
    while r0.errors().is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(5), "no error");
        r0.step();
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(t0.elapsed() >= timeout);
    let e = &r0.errors.0.lock().unwrap()[0];
    assert_eq!(e.culprit(), Some(2), "{e}");
    assert!(e.to_string().contains("does not answer"), "{e}");
}

/// Rank `me` dials a raw listener playing rank `peer`, which takes both
/// sockets and closes them unanswered (as a rank that exits does); the
/// errors rank `me` reported by the time it reported one, or gave up.
fn closed_unanswered(me: usize, peer: usize, timeout: Duration) -> (Vec<Error>, Duration) {
    let (l, addr) = listener();
    let (own, _) = listener();
    let mut r = Side::new(me, own, peer, addr, timeout);
    r.want();
    l.set_nonblocking(true).unwrap();
    let t0 = Instant::now();
    let mut taken = 0;
    while r.errors().is_empty() && t0.elapsed() < Duration::from_secs(5) {
        r.step();
        if taken < 2
            && let Ok((s, _)) = l.accept()
        {
            taken += 1;
            drop(s);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let errors = std::mem::take(&mut *r.errors.0.lock().unwrap());
    (errors, t0.elapsed())
}

#[test]
fn a_higher_rank_that_closes_before_answering_is_named_at_once() {
    let (errors, took) = closed_unanswered(0, 5, Duration::from_secs(30));
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].culprit(), Some(5), "{}", errors[0]);
    assert!(
        errors[0].to_string().contains("before answering"),
        "{}",
        errors[0]
    );
    assert!(took < Duration::from_secs(5));
}

#[test]
fn a_rank_refused_by_a_lower_one_waits_for_its_dial_until_the_deadline() {
    // Refused by rank 0: its own dial is to come (rank 0 won the race),
    // so rank 1 waits for it, and names rank 0 only at the deadline.
    let timeout = Duration::from_millis(400);
    let (errors, took) = closed_unanswered(1, 0, timeout);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].culprit(), Some(0), "{}", errors[0]);
    assert!(
        errors[0].to_string().contains("did not complete"),
        "{}",
        errors[0]
    );
    assert!(took >= timeout, "named after {took:?}, before the deadline");
}

#[test]
fn an_answer_from_another_rank_is_an_error_naming_the_peer_meant() {
    // Something at rank 4's address answers as rank 9 (a stale address
    // reused by another communicator's rank, say): not rank 4's link.
    let (l, addr) = listener();
    let (own, _) = listener();
    let mut r = Side::new(0, own, 4, addr, Duration::from_secs(10));
    r.want();
    l.set_nonblocking(true).unwrap();
    let t0 = Instant::now();
    let mut held = Vec::new();
    while r.errors().is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(5), "no error");
        r.step();
        if let Ok((mut s, _)) = l.accept() {
            s.set_nonblocking(false).unwrap();
            let mut hello = [0u8; HELLO_BYTES];
            s.read_exact(&mut hello).unwrap();
            let h = Hello::decode(&hello, &SECRET).unwrap();
            let wrong = Hello {
                from: 9,
                to: h.from,
                ..h
            };
            s.write_all(&wrong.encode()).unwrap();
            held.push(s);
        }
    }
    let e = &r.errors.0.lock().unwrap()[0];
    assert_eq!(e.culprit(), Some(4), "{e}");
    assert!(e.to_string().contains("another rank"), "{e}");
    assert!(!r.up());
}
