//! The bootstrap root server: one thread that serves one communicator's rendezvous.
//!
//! NCCL's bootstrap root is a thread in the process that created the unique id;
//! ranks connect to it, it learns who is who, and then it relays the small
//! all-gathers that set up the transports. Here the root is the same kind of
//! thread, with two duties that decide its shape:
//!
//! * Its port is open to anything on the network. Strangers (port scanners,
//!   a stale job, a rank of another communicator) must never disturb the real
//!   ranks. So the thread is a single `poll(2)` loop: a connection's hello is
//!   read without blocking, a silent connection is dropped after a short
//!   handshake timeout while others keep being served, and every frame's
//!   length is checked before allocation (see [`super::wire`]).
//! * It must not live forever. The rendezvous has an overall deadline
//!   ([`RootOptions::timeout`], 10 minutes by default), so a root nobody uses
//!   goes away; once all ranks have joined it lives as long as they keep their
//!   connections, and ends when they all close them.
//!
//! This file holds the public face (options, handle, the `UniqueId`
//! constructors that start a root) and the helpers both phases share; the
//! phases themselves are [`super::rendezvous`] (joining, then telling each
//! rank its all-gather peers) and [`super::watch`] (releasing each round
//! once every rank has it, and relaying the first failure a rank reports).

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::thread::JoinHandle;
use std::time::Duration;

use super::id::UniqueId;
use super::rendezvous::rendezvous;
use super::watch::watch_ranks;
use super::wire::Reply;
use crate::{Error, Result};

/// Longest a joined rank may take to deliver one whole frame, or to take one.
pub(super) const FRAME_TIMEOUT: Duration = Duration::from_secs(30);

/// Settings of a bootstrap root server.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use streamcomm::testing::bootstrap::RootOptions;
///
/// let options = RootOptions::default().with_timeout(Duration::from_secs(60));
/// assert_eq!(options.handshake_timeout, Duration::from_secs(2));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RootOptions {
    /// Deadline for all ranks to join, counted from the start of the server.
    /// A root that reaches it tells the connected ranks and exits (the
    /// all-gathers after it are bounded by each rank's own timeout).
    /// Default 10 minutes.
    pub timeout: Duration,
    /// How long a new connection may take to send its hello before it is
    /// dropped. Default 2 seconds.
    pub handshake_timeout: Duration,
}

impl Default for RootOptions {
    fn default() -> Self {
        RootOptions {
            timeout: Duration::from_secs(600),
            handshake_timeout: Duration::from_secs(2),
        }
    }
}

impl RootOptions {
    /// Sets [`timeout`](RootOptions::timeout).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets [`handshake_timeout`](RootOptions::handshake_timeout).
    pub fn with_handshake_timeout(mut self, timeout: Duration) -> Self {
        self.handshake_timeout = timeout;
        self
    }
}

/// A running bootstrap root: its id and its thread.
///
/// Most programs never hold one: [`UniqueId::new`] starts a root and detaches
/// it. Keep the handle to learn how the root ended ([`RootServer::join`]).
#[derive(Debug)]
pub struct RootServer {
    id: UniqueId,
    thread: JoinHandle<Result<()>>,
}

impl RootServer {
    /// Binds `addr` (port 0 picks a free port) and starts serving one
    /// communicator's rendezvous for ranks that present `secret`.
    ///
    /// The id of the returned server carries the bound address; if `addr`'s
    /// IP is unspecified (`0.0.0.0`), so is the id's, and remote ranks must be
    /// told a reachable address some other way.
    ///
    /// # Errors
    ///
    /// [`Error::Os`] if the address cannot be bound or the thread not started.
    pub fn start(addr: SocketAddr, secret: [u8; 16], options: RootOptions) -> Result<RootServer> {
        let listener = TcpListener::bind(addr)
            .map_err(|e| Error::os(format!("bind bootstrap root on {addr}"), e))?;
        crate::os_limits::widen_backlog(&listener);
        let local = listener
            .local_addr()
            .map_err(|e| Error::os("getsockname of bootstrap root", e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| Error::os("set bootstrap root listener non-blocking", e))?;
        let thread = std::thread::Builder::new()
            .name("streamcomm-bootstrap-root".into())
            .spawn(move || serve(listener, local, secret, options))
            .map_err(|e| Error::os("spawn bootstrap root thread", e))?;
        Ok(RootServer {
            id: UniqueId::from_parts(local, secret),
            thread,
        })
    }

    /// The id ranks use to join this root.
    pub fn id(&self) -> UniqueId {
        self.id
    }

    /// True once the server thread has ended.
    pub fn is_finished(&self) -> bool {
        self.thread.is_finished()
    }

    /// Waits for the server to end and returns how it ended: `Ok` when all
    /// ranks joined and later disconnected without a round in flight.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] if the rendezvous or a round missed the deadline,
    /// [`Error::RemoteFailed`] if a rank vanished or misbehaved mid-round,
    /// [`Error::Os`] if `poll` failed.
    pub fn join(self) -> Result<()> {
        self.thread
            .join()
            .unwrap_or_else(|_| Err(Error::Bootstrap("bootstrap root thread panicked".into())))
    }

    /// Lets the server run on its own and returns its id.
    pub fn detach(self) -> UniqueId {
        self.id
    }
}

impl UniqueId {
    /// Creates an id with a fresh random secret and starts its root server on
    /// `127.0.0.1` (a free port), for ranks on this host.
    ///
    /// The root serves one communicator and exits when its ranks disconnect,
    /// or after [`RootOptions::timeout`] (10 minutes) if they never all join.
    ///
    /// # Errors
    ///
    /// [`Error::Os`] if no port can be bound, [`Error::Unavailable`] if the OS
    /// random source fails.
    ///
    /// # Examples
    /// ```
    /// let id = streamcomm::bootstrap::UniqueId::new()?;
    /// let text = id.to_string(); // hand it to the other ranks, e.g. in an environment variable
    /// assert_eq!(text.parse::<streamcomm::bootstrap::UniqueId>()?, id);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn new() -> Result<UniqueId> {
        UniqueId::new_on(IpAddr::V4(Ipv4Addr::LOCALHOST))
    }

    /// Like [`UniqueId::new`], serving on the interface address `ip` (use an
    /// address other hosts can reach for multi-host communicators).
    ///
    /// # Errors
    ///
    /// As for [`UniqueId::new`].
    ///
    /// # Examples
    /// ```
    /// use std::net::{IpAddr, Ipv4Addr};
    /// // Here loopback; on a cluster, this host's address on the network the ranks share.
    /// let id = streamcomm::bootstrap::UniqueId::new_on(IpAddr::V4(Ipv4Addr::LOCALHOST))?;
    /// assert!(id.ip().is_loopback());
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn new_on(ip: IpAddr) -> Result<UniqueId> {
        let secret = UniqueId::random_secret()?;
        Ok(RootServer::start(SocketAddr::new(ip, 0), secret, RootOptions::default())?.detach())
    }

    /// Starts a root server on exactly `addr` with the given secret (what
    /// rank 0 does under torchrun-style launchers, where every rank already
    /// knows the address) and returns its id.
    ///
    /// # Errors
    ///
    /// [`Error::Os`] if `addr` cannot be bound (e.g. the port is taken).
    ///
    /// # Examples
    /// ```
    /// use streamcomm::bootstrap::UniqueId;
    /// let secret = UniqueId::random_secret()?;
    /// let id = UniqueId::serve_at("127.0.0.1:0".parse().unwrap(), secret)?; // port 0: any free port
    /// assert_eq!(id.secret(), &secret);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn serve_at(addr: SocketAddr, secret: [u8; 16]) -> Result<UniqueId> {
        Ok(RootServer::start(addr, secret, RootOptions::default())?.detach())
    }
}

fn serve(
    listener: TcpListener,
    addr: SocketAddr,
    secret: [u8; 16],
    opts: RootOptions,
) -> Result<()> {
    let span = tracing::info_span!("bootstrap_root", %addr);
    let _enter = span.enter();
    let ranks = rendezvous(&listener, addr, &secret, &opts)?;
    drop(listener);
    tracing::debug!(size = ranks.len(), "all ranks joined");
    watch_ranks(ranks)
}

/// A rank that has joined.
pub(super) struct Joined {
    pub(super) stream: TcpStream,
    pub(super) peer: SocketAddr,
    /// Where it accepts its all-gather peers.
    pub(super) gather: SocketAddr,
}

/// Best-effort failure notice to each stream; returns how many took it.
pub(super) fn fail_all<'a>(
    streams: impl Iterator<Item = &'a mut TcpStream>,
    peer: Option<usize>,
    reason: &str,
) -> usize {
    let reply = Reply::Failure {
        peer,
        reason: reason.to_string(),
    };
    let mut told = 0;
    for stream in streams {
        let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
        told += usize::from(reply.write_to(stream).is_ok());
    }
    told
}

pub(super) fn remote_failed(peer: usize, cause: String) -> Error {
    Error::RemoteFailed {
        peer,
        op: "bootstrap".into(),
        cause,
    }
}

/// Lists the ranks not yet present, at most 16 of them.
pub(super) fn missing_ranks(present: impl Iterator<Item = bool>) -> String {
    let missing: Vec<usize> = present
        .enumerate()
        .filter(|(_, p)| !p)
        .map(|(r, _)| r)
        .collect();
    match missing.len() {
        0 => "all ranks (none joined yet)".to_string(),
        n if n <= 16 => format!("{missing:?}"),
        n => format!("{:?} and {} more", &missing[..16], n - 16),
    }
}

pub(super) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

pub(super) fn pollfd(fd: std::os::fd::RawFd) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

/// `poll(2)` over `fds`; `None` waits without limit. EINTR counts as a wake-up.
pub(super) fn poll(fds: &mut [libc::pollfd], timeout: Option<Duration>) -> Result<()> {
    let ms = match timeout {
        None => -1,
        // Round up so a sub-millisecond wait does not spin.
        Some(d) => i32::try_from(d.as_micros().div_ceil(1000)).unwrap_or(i32::MAX),
    };
    // SAFETY: `fds` is a valid, exclusively borrowed slice of initialised
    // `pollfd`s, and its length is passed with it.
    let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(Error::os("poll in bootstrap root", e));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_ranks_are_listed_briefly() {
        assert_eq!(
            missing_ranks([true, false, true, false].into_iter()),
            "[1, 3]"
        );
        assert_eq!(
            missing_ranks(std::iter::empty()),
            "all ranks (none joined yet)"
        );
        let many = missing_ranks(std::iter::repeat_n(false, 20));
        assert!(many.ends_with("and 4 more"), "{many}");
    }

    #[test]
    fn unused_root_exits_after_its_timeout() {
        let opts = RootOptions::default().with_timeout(Duration::from_millis(100));
        let root = RootServer::start("127.0.0.1:0".parse().expect("addr"), [0; 16], opts)
            .expect("start root");
        assert!(matches!(root.join(), Err(Error::Timeout { .. })));
    }
}
