//! The tcp connections as a source of the progress engine.
//!
//! Poll-driven: the engine sleeps in `poll(2)` on the sockets that can make
//! progress (readable with room in the inbound ring, writable with staged
//! slots), and this source does I/O only on sockets that were reported
//! ready, so an idle or waiting communicator costs no syscalls. Streams may
//! move a peer's bytes themselves meanwhile ([`super::inline`]); each peer's
//! state is behind its own lock, held only for non-blocking I/O.
//!
//! While streams read a peer's sockets themselves (they did since the last
//! sleep), the engine does not poll them for input: a waiting stream takes
//! each frame as it lands, and an engine woken by the same frame only cost a
//! context switch on the rank's cores (`docs/measurements/tcp.md`). It looks
//! at those sockets every [`STREAMS_READ_RECHECK`] instead, and polls them
//! again once a whole sleep passed without a stream reading, or as soon as
//! a stream goes to sleep on one of the peer's rings (the waiter wakes the
//! engine before it sleeps, as for verbs). A peer
//! whose socket fails is reported once and then left alone; the other peers
//! keep being served, so they hear about the failure from the dead peer's
//! own sockets rather than from ours closing.

use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::TcpRings;
use super::connector::Connector;
use super::progress::{LinkState, PeerIo};
use crate::engine::{Ctx, PollSet, Source};
use streamcomm_types::MismatchNote;

/// Every tcp peer of a communicator.
pub(crate) struct TcpSource {
    peers: Vec<Arc<Mutex<PeerIo>>>,
    /// Keeps the rings' memory, which the peers' state points into, alive
    /// as long as this source runs.
    _rings: Vec<Arc<TcpRings>>,
    /// (peer index, socket index) of each descriptor armed, in order.
    owners: Vec<(usize, usize)>,
    /// The last arming found work no descriptor will announce (a frame
    /// that waited for a slot, an error a stream met).
    recheck: bool,
    /// By peer: the last arming left reading its sockets to the streams,
    /// so the engine reads them itself after each sleep.
    streams_read: Vec<bool>,
    /// Makes the peers' connections on first use; its descriptors follow
    /// the peers' in each arming.
    connector: Connector,
    /// Descriptors the connector armed last.
    connector_fds: usize,
    /// The abort notice, once the communicator failed: a peer connected
    /// after it (it dialed to wait on us) is told too.
    aborted: Option<(usize, Option<MismatchNote>)>,
    /// By peer: told of the abort.
    told: Vec<bool>,
}

/// The longest a frame waits for the engine while the peer's sockets are
/// left to the streams and none is waiting after all.
pub(crate) const STREAMS_READ_RECHECK: Duration = Duration::from_millis(1);

/// Locks a peer's state (a poisoned lock is still usable: the state is
/// only ever changed by complete non-blocking steps).
fn lock(p: &Mutex<PeerIo>) -> MutexGuard<'_, PeerIo> {
    p.lock().unwrap_or_else(|e| e.into_inner())
}

impl TcpSource {
    /// A source for `peers`, whose state points into `rings`, connected
    /// on first use by `connector`.
    pub(crate) fn new(
        peers: Vec<Arc<Mutex<PeerIo>>>,
        rings: Vec<Arc<TcpRings>>,
        connector: Connector,
    ) -> TcpSource {
        let n = peers.len();
        TcpSource {
            streams_read: vec![false; peers.len()],
            peers,
            _rings: rings,
            owners: Vec::new(),
            recheck: false,
            connector,
            connector_fds: 0,
            aborted: None,
            told: vec![false; n],
        }
    }

    /// After the communicator failed, tells the peers connected since.
    fn tell_new_links(&mut self) {
        let Some((failed, note)) = self.aborted else {
            return;
        };
        for (p, told) in self.peers.iter().zip(&mut self.told) {
            let mut p = lock(p);
            if !*told && p.link == LinkState::Up && !p.dead {
                p.abort_notice(failed as u64, note);
                *told = true;
            }
        }
    }

    /// Starts the dials streams asked for since the last look (peers whose
    /// locks a stream holds now are looked at next time).
    fn start_wanted(&mut self) {
        for (i, p) in self.peers.iter().enumerate() {
            let Ok(mut p) = p.try_lock() else { continue };
            if !p.dead && p.wants_link() {
                self.connector.dial(i, &mut p);
            }
        }
    }
}

impl Source for TcpSource {
    fn progress(&mut self, ctx: &Ctx<'_>, fds: &PollSet) -> bool {
        // Without a ready socket or work found by the arming there is
        // nothing to do: the peers' locks are left to the streams, which
        // move their own bytes meanwhile.
        let ready = (0..self.owners.len()).any(|k| fds.revents(k) != 0);
        let connecting = self.connector.busy()
            || (0..self.connector_fds).any(|c| fds.revents(self.owners.len() + c) != 0);
        let timed = self.streams_read.contains(&true);
        if !ready && !connecting && !std::mem::take(&mut self.recheck) && !timed {
            return false;
        }
        let mut moved = false;
        if connecting && self.connector.step(&self.peers, ctx) {
            moved = true;
            self.tell_new_links();
        }
        for (k, &(i, j)) in self.owners.iter().enumerate() {
            let mut p = lock(&self.peers[i]);
            if p.dead {
                continue;
            }
            let r = match p.inline_error.take() {
                Some(e) => Err(e),
                None => {
                    let complete = p.completable(j) || self.streams_read[i];
                    let revents = fds.revents(k);
                    if revents == 0 && !complete {
                        continue;
                    }
                    let mut r = Ok(false);
                    if revents & (libc::POLLOUT | libc::POLLERR | libc::POLLHUP) != 0 {
                        r = p.send_on(j);
                    }
                    if let Ok(sent) = r
                        && (complete
                            || revents & (libc::POLLIN | libc::POLLERR | libc::POLLHUP) != 0)
                    {
                        r = p.recv_on(j).map(|got| got || sent);
                    }
                    r.inspect(|_| p.advance())
                }
            };
            match r {
                Ok(m) => moved |= m,
                Err(e) => {
                    p.dead = true;
                    let peer = p.peer;
                    drop(p);
                    ctx.fail(e, peer);
                    moved = true;
                }
            }
        }
        moved
    }

    /// A job on the engine waits: move every peer's bytes that can move,
    /// since the engine cannot poll for them meanwhile (a half-written slot
    /// left for the engine would otherwise wait for the job, and the peer
    /// for it).
    fn tick(&mut self, ctx: &Ctx<'_>) {
        self.start_wanted();
        if self.connector.step(&self.peers, ctx) {
            self.tell_new_links();
        }
        for p in &self.peers {
            let Ok(mut p) = p.try_lock() else { continue };
            if p.dead {
                continue;
            }
            if let Err(e) = p.pump() {
                p.dead = true;
                let peer = p.peer;
                drop(p);
                ctx.fail(e, peer);
            }
        }
    }

    fn arm(&mut self, fds: &mut PollSet) -> Option<Duration> {
        self.owners.clear();
        self.streams_read.fill(false);
        let mut now = false;
        for (i, p) in self.peers.iter().enumerate() {
            let mut p = lock(p);
            if p.dead {
                continue;
            }
            now |= p.inline_error.is_some();
            let interest = p.interest();
            // A stream that sleeps reads nothing: it woke us before it
            // slept (its policy's sleep hook), so that we poll for it.
            let streams_read = p.streams_reading() && !p.has_sleepers();
            self.streams_read[i] = streams_read;
            for (j, (sock, &ev)) in p.socks.iter().zip(&interest).enumerate() {
                let ev = if streams_read { ev & !libc::POLLIN } else { ev };
                fds.add(sock.stream.as_raw_fd(), ev);
                self.owners.push((i, j));
            }
            now |= (0..p.socks.len()).any(|j| p.completable(j));
            p.polled = interest;
            if p.wants_link() {
                self.connector.dial(i, &mut p);
            }
        }
        let before = fds.len();
        let connecting = self.connector.arm(fds);
        self.connector_fds = fds.len() - before;
        // A frame waiting for a slot that is free now, or an error a stream
        // met: no descriptor will announce either.
        self.recheck = now;
        if now {
            Some(Duration::ZERO)
        } else {
            let reads = self
                .streams_read
                .contains(&true)
                .then_some(STREAMS_READ_RECHECK);
            reads.into_iter().chain(connecting).min()
        }
    }

    fn abort(&mut self, failed: usize, note: Option<MismatchNote>) -> bool {
        self.aborted = Some((failed, note));
        for (p, told) in self.peers.iter().zip(&mut self.told) {
            let mut p = lock(p);
            if p.link == LinkState::Up && (!p.dead || p.bad_frame || p.peer_aborted) {
                p.abort_notice(failed as u64, note);
                *told = true;
            }
        }
        true
    }

    fn flushed(&mut self) -> bool {
        self.peers.iter().all(|p| {
            let p = lock(p);
            p.dead || p.flushed()
        })
    }

    fn close(&mut self) {
        for p in &self.peers {
            let mut p = lock(p);
            if !p.dead {
                p.goodbye();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::{TcpListener, TcpStream};

    use super::*;
    use crate::transport::placement::Placement;
    use crate::transport::ring::RingShape;
    use crate::transport::tcp::connector::ConnectorSetup;

    /// A source over one peer whose single socket is connected to the
    /// returned one.
    fn one_peer() -> (TcpSource, Arc<Mutex<PeerIo>>, Arc<TcpRings>, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let far = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (near, _) = listener.accept().unwrap();
        near.set_nonblocking(true).unwrap();
        let rings = Arc::new(
            TcpRings::new(RingShape {
                nsteps: 4,
                slot_bytes: 64,
            })
            .unwrap(),
        );
        let mut peer = PeerIo::new(
            1,
            rings.staging.end(),
            rings.inbound.end(),
            Placement {
                grant_key: |_| None,
                placed: |sig| sig,
            },
        );
        peer.attach(vec![near]);
        let io = Arc::new(Mutex::new(peer));
        let connector = Connector::new(ConnectorSetup {
            rank: 0,
            secret: [0; 16],
            nsockets: 1,
            timeout: Duration::from_secs(1),
            listener,
            peers: vec![(1, far.local_addr().unwrap())],
        })
        .unwrap();
        (
            TcpSource::new(vec![io.clone()], vec![rings.clone()], connector),
            io,
            rings,
            far,
        )
    }

    /// What the source armed for its one socket, and the sleep it allows.
    fn arm(source: &mut TcpSource) -> (libc::c_short, Option<Duration>) {
        let mut fds = PollSet::default();
        let sleep = source.arm(&mut fds);
        (fds.events(0), sleep)
    }

    #[test]
    fn reads_are_left_to_streams_only_while_they_read() {
        let (mut source, io, rings, _far) = one_peer();
        // Idle: woken by input, sleeping as long as it likes.
        assert_eq!(arm(&mut source), (libc::POLLIN, None));
        // A stream read the socket since: the engine does not poll it for
        // input, and looks again after a short sleep.
        io.lock().unwrap().stream_read();
        assert_eq!(arm(&mut source), (0, Some(STREAMS_READ_RECHECK)));
        // A whole sleep without a stream reading: polled for input again.
        assert_eq!(arm(&mut source), (libc::POLLIN, None));
        // What the engine armed counts as polled: a stream moving bytes
        // meanwhile does not wake it for input it will read on its timer.
        io.lock().unwrap().stream_read();
        arm(&mut source);
        assert!(!io.lock().unwrap().needs_net());
        // A stream that read and then went to sleep waiting for a slot:
        // polled for input again at once.
        io.lock().unwrap().stream_read();
        let waiter = std::thread::spawn(move || {
            let policy = crate::wait::WaitPolicy::new(0, Duration::from_millis(500));
            rings.inbound.end().acquire_recv(&policy).is_err()
        });
        let t0 = std::time::Instant::now();
        while !io.lock().unwrap().has_sleepers() {
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "the waiter never slept"
            );
            std::thread::yield_now();
        }
        assert_eq!(arm(&mut source), (libc::POLLIN, None));
        assert!(
            waiter.join().unwrap(),
            "nothing was sent: the wait times out"
        );
    }
}
