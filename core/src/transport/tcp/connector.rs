//! Making a tcp peer's connection when it is first used.
//!
//! Creation connects no tcp peer: each rank keeps its listener, and a
//! peer's sockets are made the first time a stream stages a slot for it
//! or waits for one from it ([`PeerIo`] marks the link wanted; the engine
//! starts the dial). So a ring algorithm connects its two neighbours, a
//! tree its parent and children, a send its peer, and a thousand-rank job
//! does not hold two thousand sockets per rank.
//!
//! The handshake, on each of the pair's `nsockets` sockets: the dialer
//! connects and says hello (the communicator's secret, both ranks, the
//! socket's index); the other side checks it and answers with the same
//! hello, ranks swapped (so the dialer knows it reached the rank it meant,
//! one that knows the secret). Nothing else travels before the answer, so
//! a connection refused costs no data. When both ranks dial each other at
//! once, the lower rank's dial wins: a rank that is dialing refuses a
//! higher rank's hello (it closes it), and a rank that is dialing accepts a
//! lower rank's hello and drops its own dial; a dialer that is refused by
//! a lower rank waits for that rank's dial, which is on its way. The link
//! is up once every socket of the winning dial is answered (dialer) or
//! greeted (the other side).
//!
//! Failures name the peer: a refused dial (nobody listens: it left or
//! failed), a lower-ranked peer's close before it answered, no connection
//! within the communicator's timeout (alive but not answering: stopped?).
//! Strangers, wrong secrets, duplicates and silent connections at the
//! listener are dropped (a silent one after [`HELLO_TIMEOUT`]).

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::frame::{HELLO_BYTES, Hello};
use super::progress::{LinkState, PeerIo};
use crate::Error;
use crate::engine::{Ctx, PollSet};

/// How long an accepted connection may take to say hello.
pub(crate) const HELLO_TIMEOUT: Duration = Duration::from_secs(2);

/// Socket send and receive buffer size asked of the kernel (it may cap it).
const SOCKET_BUFFER: libc::c_int = 4 << 20;

/// What a rank needs to make its tcp peers' connections.
pub(crate) struct ConnectorSetup {
    /// This rank.
    pub rank: usize,
    /// The communicator's secret.
    pub secret: [u8; 16],
    /// Sockets per peer (`STREAMCOMM_NCHANNELS`).
    pub nsockets: usize,
    /// How long a connection may take to form.
    pub timeout: Duration,
    /// This rank's listener.
    pub listener: TcpListener,
    /// Each tcp peer (in the source's order): its rank and listener.
    pub peers: Vec<(usize, SocketAddr)>,
}

/// The connections being made, for the engine (part of the tcp source).
pub(crate) struct Connector {
    rank: usize,
    secret: [u8; 16],
    nsockets: usize,
    timeout: Duration,
    listener: TcpListener,
    /// Rank and listener of each tcp peer, by index.
    peers: Vec<(usize, SocketAddr)>,
    /// Index of each tcp peer, by rank.
    index: HashMap<usize, usize>,
    /// Accepted connections that have not said hello yet.
    greeting: Vec<Greeting>,
    /// Connections in the making, by peer index.
    opening: HashMap<usize, Opening>,
    /// Dials that could not start, by peer index, to report.
    unstarted: Vec<(usize, Error)>,
}

/// An accepted connection, reading its hello.
struct Greeting {
    stream: TcpStream,
    hello: [u8; HELLO_BYTES],
    got: usize,
    since: Instant,
}

/// One peer's connection in the making.
enum Opening {
    /// This rank dials: one socket each.
    Dialing { socks: Vec<Dial>, deadline: Instant },
    /// The peer dials: the sockets greeted and answered so far.
    Accepting {
        got: Vec<Option<TcpStream>>,
        deadline: Instant,
    },
}

/// One socket of a dial.
struct Dial {
    stream: TcpStream,
    stage: Stage,
    /// The hello out, then the answer in.
    buf: [u8; HELLO_BYTES],
    done: usize,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// The non-blocking connect is under way.
    Connecting,
    /// Writing the hello.
    Hello,
    /// Reading the answer.
    Answer,
    /// Answered.
    Ready,
}

/// What became of a dial this step.
enum DialEnd {
    Going,
    /// Every socket answered.
    Up,
    /// The peer closed it before answering.
    Refused,
    Failed(String),
}

/// Locks a peer's state (a poisoned lock is still usable: the state is
/// only ever changed by complete non-blocking steps).
fn lock(p: &Mutex<PeerIo>) -> MutexGuard<'_, PeerIo> {
    p.lock().unwrap_or_else(|e| e.into_inner())
}

impl Connector {
    /// A connector over `setup`'s listener (made non-blocking).
    ///
    /// # Errors
    /// [`Error::Os`] when the listener cannot be made non-blocking.
    pub(crate) fn new(setup: ConnectorSetup) -> crate::Result<Connector> {
        setup
            .listener
            .set_nonblocking(true)
            .map_err(|e| Error::os("set_nonblocking(tcp listener)", e))?;
        Ok(Connector {
            rank: setup.rank,
            secret: setup.secret,
            nsockets: setup.nsockets.max(1),
            timeout: setup.timeout,
            listener: setup.listener,
            index: setup
                .peers
                .iter()
                .enumerate()
                .map(|(i, &(r, _))| (r, i))
                .collect(),
            peers: setup.peers,
            greeting: Vec::new(),
            opening: HashMap::new(),
            unstarted: Vec::new(),
        })
    }

    /// True while a connection is being made or greeted: each engine
    /// round [`Connector::step`]s it.
    pub(crate) fn busy(&self) -> bool {
        !self.greeting.is_empty() || !self.opening.is_empty() || !self.unstarted.is_empty()
    }

    /// Starts dialing peer `i`, wanted by a stream (`p` is its state).
    /// A failure to start is reported by the next [`Connector::step`].
    pub(crate) fn dial(&mut self, i: usize, p: &mut PeerIo) {
        p.link = LinkState::Opening;
        let (rank, addr) = self.peers[i];
        let mut socks = Vec::with_capacity(self.nsockets);
        for socket in 0..self.nsockets {
            match connect_nonblocking(addr) {
                Ok(stream) => {
                    let hello = Hello {
                        secret: self.secret,
                        from: self.rank as u32,
                        to: rank as u32,
                        socket: socket as u32,
                    };
                    socks.push(Dial {
                        stream,
                        stage: Stage::Connecting,
                        buf: hello.encode(),
                        done: 0,
                    });
                }
                Err(cause) => {
                    self.unstarted.push((i, refused(rank, addr, &cause)));
                    return;
                }
            }
        }
        let deadline = Instant::now() + self.timeout;
        self.opening.insert(i, Opening::Dialing { socks, deadline });
    }

    /// Adds the listener and the connections in the making to `fds`;
    /// returns the time to the nearest deadline.
    pub(crate) fn arm(&self, fds: &mut PollSet) -> Option<Duration> {
        fds.add(self.listener.as_raw_fd(), libc::POLLIN);
        let mut next: Option<Instant> = None;
        let mut soonest = |t: Instant| next = Some(next.map_or(t, |n| n.min(t)));
        for g in &self.greeting {
            fds.add(g.stream.as_raw_fd(), libc::POLLIN);
            soonest(g.since + HELLO_TIMEOUT);
        }
        for o in self.opening.values() {
            match o {
                Opening::Dialing { socks, deadline } => {
                    for d in socks {
                        let ev = match d.stage {
                            Stage::Connecting | Stage::Hello => libc::POLLOUT,
                            Stage::Answer => libc::POLLIN,
                            Stage::Ready => 0,
                        };
                        fds.add(d.stream.as_raw_fd(), ev);
                    }
                    soonest(*deadline);
                }
                Opening::Accepting { deadline, .. } => soonest(*deadline),
            }
        }
        if !self.unstarted.is_empty() {
            return Some(Duration::ZERO);
        }
        next.map(|t| t.saturating_duration_since(Instant::now()))
    }

    /// Moves every connection in the making as far as it goes without
    /// blocking: accepts, greets, dials, answers; attaches the links that
    /// are up to their peers and reports the ones that failed. True if
    /// anything moved.
    pub(crate) fn step(&mut self, peers: &[Arc<Mutex<PeerIo>>], ctx: &Ctx<'_>) -> bool {
        let mut moved = !self.unstarted.is_empty();
        for (i, e) in std::mem::take(&mut self.unstarted) {
            self.opening.remove(&i);
            report(&peers[i], ctx, e);
        }
        moved |= self.accept_all();
        moved |= self.greet(peers, ctx);
        let now = Instant::now();
        let keys: Vec<usize> = self.opening.keys().copied().collect();
        for i in keys {
            let (rank, addr) = self.peers[i];
            let end = match self.opening.get_mut(&i) {
                Some(Opening::Dialing { socks, deadline }) => {
                    match advance_dial(socks, rank, self.rank, &self.secret) {
                        DialEnd::Going if now >= *deadline => DialEnd::Failed(format!(
                            "no connection to {addr} within {:?}: the rank is alive but \
                             does not answer (stopped?)",
                            self.timeout
                        )),
                        end => end,
                    }
                }
                Some(Opening::Accepting { deadline, .. }) if now >= *deadline => {
                    DialEnd::Failed(format!(
                        "its connection did not complete within {:?} (it left, failed or \
                         stopped?)",
                        self.timeout
                    ))
                }
                _ => continue,
            };
            moved |= !matches!(end, DialEnd::Going);
            match end {
                DialEnd::Going => {}
                DialEnd::Up => {
                    if let Some(Opening::Dialing { socks, .. }) = self.opening.remove(&i) {
                        attach(&peers[i], socks.into_iter().map(|d| d.stream).collect());
                    }
                }
                DialEnd::Refused if self.rank > rank => {
                    // The lower rank dials us: wait for its hello.
                    self.opening.insert(
                        i,
                        Opening::Accepting {
                            got: (0..self.nsockets).map(|_| None).collect(),
                            deadline: now + self.timeout,
                        },
                    );
                }
                DialEnd::Refused => self.fail(
                    i,
                    peers,
                    ctx,
                    format!(
                        "rank {rank} closed this rank's connection before answering it \
                         (it left or failed)"
                    ),
                ),
                DialEnd::Failed(cause) => self.fail(i, peers, ctx, cause),
            }
        }
        moved
    }

    /// Gives up on peer `i`: its waits fail naming it.
    fn fail(&mut self, i: usize, peers: &[Arc<Mutex<PeerIo>>], ctx: &Ctx<'_>, cause: String) {
        self.opening.remove(&i);
        let peer = self.peers[i].0;
        let e = Error::Transport {
            transport: "tcp",
            peer,
            cause,
        };
        report(&peers[i], ctx, e);
    }

    /// Takes every connection waiting at the listener; true if any.
    fn accept_all(&mut self) -> bool {
        let mut moved = false;
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    moved = true;
                    if stream.set_nonblocking(true).is_ok() {
                        self.greeting.push(Greeting {
                            stream,
                            hello: [0; HELLO_BYTES],
                            got: 0,
                            since: Instant::now(),
                        });
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if crate::os_limits::exhausted(&e) => {
                    // Left in the backlog: the dialer's deadline names us
                    // if the limit cannot be raised.
                    if crate::os_limits::raise().is_none() {
                        tracing::warn!(
                            "{}",
                            crate::os_limits::advice("this rank", "accepting a tcp peer")
                        );
                        return moved;
                    }
                }
                Err(_) => return moved,
            }
        }
    }

    /// Reads the hellos of accepted connections; answers and keeps the
    /// ones this rank takes. True if anything moved.
    fn greet(&mut self, peers: &[Arc<Mutex<PeerIo>>], ctx: &Ctx<'_>) -> bool {
        let mut moved = false;
        let mut k = 0;
        while k < self.greeting.len() {
            let g = &mut self.greeting[k];
            let r = read_some(&mut g.stream, &mut g.hello[g.got..]);
            let whole = match r {
                Ok(n) => {
                    g.got += n;
                    moved |= n > 0;
                    g.got == HELLO_BYTES
                }
                Err(()) => {
                    self.greeting.swap_remove(k);
                    moved = true;
                    continue;
                }
            };
            if !whole {
                if g.since.elapsed() >= HELLO_TIMEOUT {
                    tracing::warn!("tcp: a connection that said no hello in time was dropped");
                    self.greeting.swap_remove(k);
                    moved = true;
                } else {
                    k += 1;
                }
                continue;
            }
            let g = self.greeting.swap_remove(k);
            moved = true;
            match Hello::decode(&g.hello, &self.secret) {
                Ok(h) => self.offered(h, g.stream, peers, ctx),
                Err(e) => {
                    tracing::warn!(error = %e, "tcp: a connection without a valid hello was dropped")
                }
            }
        }
        moved
    }

    /// A peer's hello `h` arrived on `stream`: takes it (and answers) or
    /// drops it, by the rule in the module's docs.
    fn offered(
        &mut self,
        h: Hello,
        stream: TcpStream,
        peers: &[Arc<Mutex<PeerIo>>],
        ctx: &Ctx<'_>,
    ) {
        let (from, socket) = (h.from as usize, h.socket as usize);
        let i = match self.index.get(&from) {
            Some(&i) if h.to as usize == self.rank && socket < self.nsockets => i,
            _ => {
                tracing::warn!(
                    from,
                    to = h.to,
                    socket,
                    "tcp: a hello for another link was dropped"
                );
                return;
            }
        };
        {
            let mut p = lock(&peers[i]);
            if p.dead || p.link == LinkState::Up {
                return; // a duplicate, or too late
            }
            match self.opening.get(&i) {
                // Our dial wins: closing theirs tells them.
                Some(Opening::Dialing { .. }) if self.rank < from => return,
                Some(Opening::Accepting { .. }) => {}
                // Theirs wins (or we were not dialing).
                _ => {
                    p.link = LinkState::Opening;
                    self.opening.insert(
                        i,
                        Opening::Accepting {
                            got: (0..self.nsockets).map(|_| None).collect(),
                            deadline: Instant::now() + self.timeout,
                        },
                    );
                }
            }
        }
        let answer = Hello {
            secret: self.secret,
            from: self.rank as u32,
            to: h.from,
            socket: h.socket,
        };
        // A fresh socket's send buffer takes the whole answer at once.
        if !matches!((&stream).write(&answer.encode()), Ok(HELLO_BYTES)) {
            self.fail(
                i,
                peers,
                ctx,
                "could not answer the peer's hello (it left?)".into(),
            );
            return;
        }
        let Some(Opening::Accepting { got, .. }) = self.opening.get_mut(&i) else {
            return;
        };
        if got[socket].is_none() {
            got[socket] = Some(stream);
        }
        if got.iter().all(Option::is_some) {
            let socks = got.iter_mut().filter_map(Option::take).collect();
            self.opening.remove(&i);
            attach(&peers[i], socks);
        }
    }
}

/// Reports `e`, met making `p`'s connection: the peer is given up on.
fn report(p: &Mutex<PeerIo>, ctx: &Ctx<'_>, e: Error) {
    let mut p = lock(p);
    if p.dead {
        return;
    }
    p.dead = true;
    let peer = p.peer;
    drop(p);
    ctx.fail(e, peer);
}

/// Connects `p` with `socks`, tuned for the slots.
fn attach(p: &Mutex<PeerIo>, socks: Vec<TcpStream>) {
    for s in &socks {
        let _ = s.set_nodelay(true);
        set_buffers(s, SOCKET_BUFFER);
    }
    lock(p).attach(socks);
}

/// Moves a dial's sockets on: connect, hello out, answer in.
fn advance_dial(socks: &mut [Dial], peer: usize, me: usize, secret: &[u8; 16]) -> DialEnd {
    let mut fds: Vec<libc::pollfd> = socks
        .iter()
        .map(|d| libc::pollfd {
            fd: d.stream.as_raw_fd(),
            events: if d.stage == Stage::Connecting {
                libc::POLLOUT
            } else {
                0
            },
            revents: 0,
        })
        .collect();
    // SAFETY: `fds` is a valid array of pollfd for the call; a zero
    // timeout returns at once, writing only their `revents`.
    unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 0) };
    for (d, f) in socks.iter_mut().zip(&fds) {
        if d.stage == Stage::Connecting {
            if f.revents == 0 {
                continue;
            }
            match d.stream.take_error() {
                Ok(None) => d.stage = Stage::Hello,
                Ok(Some(e)) | Err(e) => return connect_failed(&e),
            }
        }
        if d.stage == Stage::Hello {
            match (&d.stream).write(&d.buf[d.done..]) {
                Ok(n) => d.done += n,
                Err(e) if would_block(&e) => continue,
                Err(e) => return connect_failed(&e),
            }
            if d.done < HELLO_BYTES {
                continue;
            }
            d.stage = Stage::Answer;
            d.done = 0;
        }
        if d.stage == Stage::Answer {
            match read_some(&mut d.stream, &mut d.buf[d.done..]) {
                Ok(n) => d.done += n,
                Err(()) => return DialEnd::Refused,
            }
            if d.done < HELLO_BYTES {
                continue;
            }
            match Hello::decode(&d.buf, secret) {
                Ok(h) if h.from as usize == peer && h.to as usize == me => d.stage = Stage::Ready,
                Ok(_) => return DialEnd::Failed("answered by another rank".into()),
                Err(e) => return DialEnd::Failed(format!("its answer: {e}")),
            }
        }
    }
    if socks.iter().all(|d| d.stage == Stage::Ready) {
        return DialEnd::Up;
    }
    DialEnd::Going
}

/// A dial's socket failed: refused (nobody listens) or reset before the
/// answer both mean the peer closed it.
fn connect_failed(e: &std::io::Error) -> DialEnd {
    match e.kind() {
        ErrorKind::ConnectionReset | ErrorKind::BrokenPipe | ErrorKind::UnexpectedEof => {
            DialEnd::Refused
        }
        _ => DialEnd::Failed(format!("cannot connect: {e} (it left or failed?)")),
    }
}

fn would_block(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted)
}

/// Reads what is there without blocking: `Ok(0)` when nothing is;
/// `Err(())` at the end of the stream or on an error.
fn read_some(stream: &mut TcpStream, buf: &mut [u8]) -> Result<usize, ()> {
    if buf.is_empty() {
        return Ok(0);
    }
    match stream.read(buf) {
        Ok(0) => Err(()),
        Ok(n) => Ok(n),
        Err(e) if would_block(&e) => Ok(0),
        Err(_) => Err(()),
    }
}

/// The error of a dial that could not start.
fn refused(peer: usize, addr: SocketAddr, cause: &std::io::Error) -> Error {
    Error::Transport {
        transport: "tcp",
        peer,
        cause: format!("cannot connect to {addr}: {cause} (it left or failed?)"),
    }
}

/// Starts connecting to `addr` without waiting: the socket is writable
/// once connected.
fn connect_nonblocking(addr: SocketAddr) -> std::io::Result<TcpStream> {
    loop {
        match try_connect(addr) {
            Err(e) if crate::os_limits::exhausted(&e) => {
                if crate::os_limits::raise().is_none() {
                    return Err(std::io::Error::other(crate::os_limits::advice(
                        "this rank",
                        "connecting a tcp peer",
                    )));
                }
            }
            r => return r,
        }
    }
}

fn try_connect(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let family = match addr {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    };
    // SAFETY: socket(2) with constant arguments; the result is checked.
    let fd = unsafe {
        libc::socket(
            family,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a socket just created and owned by nobody else: the
    // stream closes it.
    let stream = unsafe { TcpStream::from_raw_fd(fd) };
    // Buffers are set before the handshake, where the window's scale is
    // agreed.
    set_buffers(&stream, SOCKET_BUFFER);
    // SAFETY: a zeroed sockaddr_storage is a valid (empty) address of the
    // largest kind; the fields set below are those of `family`'s sockaddr.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is large and aligned enough for a
            // sockaddr_in.
            let sin = unsafe { &mut *(&mut storage as *mut _ as *mut libc::sockaddr_in) };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr = libc::in_addr {
                s_addr: u32::from_ne_bytes(a.ip().octets()),
            };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            // SAFETY: sockaddr_storage is large and aligned enough for a
            // sockaddr_in6.
            let sin6 = unsafe { &mut *(&mut storage as *mut _ as *mut libc::sockaddr_in6) };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_flowinfo = a.flowinfo();
            sin6.sin6_addr = libc::in6_addr {
                s6_addr: a.ip().octets(),
            };
            sin6.sin6_scope_id = a.scope_id();
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    // SAFETY: `storage` holds a valid address of `len` bytes for `fd`'s family.
    let r = unsafe {
        libc::connect(
            fd,
            &storage as *const _ as *const libc::sockaddr,
            len as libc::socklen_t,
        )
    };
    if r == 0 {
        return Ok(stream);
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EINPROGRESS) {
        Ok(stream)
    } else {
        Err(e)
    }
}

/// Asks the kernel for `bytes` of send and receive buffer.
pub(super) fn set_buffers(s: &TcpStream, bytes: libc::c_int) {
    for opt in [libc::SO_SNDBUF, libc::SO_RCVBUF] {
        // SAFETY: setsockopt with a valid fd and a pointer to a c_int of the right size.
        unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                &bytes as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
}

#[cfg(test)]
#[path = "connector_tests.rs"]
mod tests;
