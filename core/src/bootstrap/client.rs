//! [`Bootstrap`]: a rank's connection to the bootstrap root, and to the
//! peers it all-gathers with.
//!
//! Before a communicator has any transport, its ranks need a slow but sure way
//! to swap small records (endpoints, host names, shared-memory names): NCCL's
//! `bootstrapAllGather`. Each rank keeps one TCP connection to the root,
//! which tells it where its all-gather peers listen and, later, which rank
//! failed; an all-gather is "send my blob, receive everyone's in rank
//! order", over the ranks' own connections ([`super::gather`]). Every wait
//! is bounded by the timeout given at connect time, and every way the root
//! or a peer can fail (refusal, death, a rank gone, a deadline) becomes an
//! error that says what happened, after which the connection stays failed.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use super::gather::{self, Links, RootWatch, Stop};
use super::id::UniqueId;
use super::wire::{self, FrameRead, Hello, MAX_BLOB, MAX_RANKS, MAX_REPLY, Reply};
use crate::{Error, Result};

/// Longest a rank that found a peer gone waits for the root's verdict
/// (which names the rank every rank blames: the first one reported).
const VERDICT_WAIT: Duration = Duration::from_secs(2);

/// A rank's connection to the bootstrap root of its communicator.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use streamcomm::testing::bootstrap::Bootstrap;
/// use streamcomm::bootstrap::UniqueId;
///
/// let id = UniqueId::new()?;
/// let timeout = Duration::from_secs(10);
/// let peer = std::thread::spawn(move || -> streamcomm::Result<Vec<Vec<u8>>> {
///     Bootstrap::connect(&id, 1, 2, timeout)?.all_gather(b"one")
/// });
/// let mut boot = Bootstrap::connect(&id, 0, 2, timeout)?;
/// let all = boot.all_gather(b"zero")?;
/// assert_eq!(all, vec![b"zero".to_vec(), b"one".to_vec()]);
/// assert_eq!(peer.join().unwrap()?, all);
/// # Ok::<(), streamcomm::Error>(())
/// ```
#[derive(Debug)]
pub struct Bootstrap {
    stream: TcpStream,
    /// This end's address, recorded in [`super::local`] while connected.
    local: Option<SocketAddr>,
    root: SocketAddr,
    rank: usize,
    size: usize,
    timeout: Duration,
    round: u64,
    failed: Option<Error>,
    /// The connections to the peers of the all-gather.
    links: Links,
    /// The root closed its connection (its process exited): failures are
    /// then learnt from the peers alone.
    root_closed: bool,
}

impl Bootstrap {
    /// Joins the communicator served by `id`'s root as `rank` of `size`, and
    /// returns once all `size` ranks have joined.
    ///
    /// Connecting is retried until `timeout` (the root may not be up yet);
    /// the same `timeout` then bounds every later operation.
    ///
    /// # Errors
    ///
    /// * [`Error::InvalidArgument`] if `size` is 0 or too large, or `rank >= size`.
    /// * [`Error::Timeout`] if the root cannot be reached, or not all ranks
    ///   join, within `timeout`.
    /// * [`Error::Bootstrap`] if the root refuses this rank (rank taken, sizes
    ///   disagree), drops the connection (wrong secret, not a streamcomm root)
    ///   or gives up.
    pub fn connect(
        id: &UniqueId,
        rank: usize,
        size: usize,
        timeout: Duration,
    ) -> Result<Bootstrap> {
        if size == 0 || size > MAX_RANKS {
            return Err(Error::invalid(format!(
                "bootstrap size {size} is out of range (1..={MAX_RANKS})"
            )));
        }
        if rank >= size {
            return Err(Error::invalid(format!(
                "bootstrap rank {rank} >= size {size}"
            )));
        }
        let start = Instant::now();
        let deadline = start + timeout;
        let root = id.addr();
        let _span = tracing::debug_span!("bootstrap_connect", %root, rank, size).entered();
        let stream = connect_retrying(root, start, deadline)?;
        let _ = stream.set_nodelay(true);
        // Recorded before the hello, so the root knows this process's ranks
        // by the time they have all joined (see `super::local`); dropping
        // `boot` forgets it, whatever happens below.
        let local = stream.local_addr().ok();
        if let Some(addr) = local {
            super::local::add(addr);
        }
        // Where this rank's all-gather peers connect: on the interface
        // that reaches the root, which theirs reach too.
        let listener = match (size > 1, local) {
            (false, _) => None,
            (true, Some(addr)) => Some(
                TcpListener::bind(SocketAddr::new(addr.ip(), 0))
                    .map_err(|e| Error::os("bind(bootstrap all-gather listener)", e))?,
            ),
            (true, None) => {
                return Err(Error::Bootstrap(format!(
                    "the connection to the bootstrap root at {root} has no local address"
                )));
            }
        };
        let gather = match &listener {
            Some(l) => l
                .local_addr()
                .map_err(|e| Error::os("getsockname(bootstrap all-gather listener)", e))?,
            None => SocketAddr::from(([0, 0, 0, 0], 0)),
        };
        let mut boot = Bootstrap {
            stream,
            local,
            root,
            rank,
            size,
            timeout,
            round: 0,
            failed: None,
            links: Links::none(rank, size),
            root_closed: false,
        };
        let hello = Hello {
            secret: *id.secret(),
            rank: rank as u32,
            size: size as u32,
            gather,
        };
        let sent = boot
            .stream
            .set_write_timeout(Some(socket_timeout(deadline)))
            .and_then(|()| io::Write::write_all(&mut boot.stream, &hello.encode()));
        if let Err(e) = sent {
            return Err(Error::Bootstrap(format!(
                "sending the hello to the bootstrap root at {root} failed: {e}"
            )));
        }
        let targets = match boot.read_reply(deadline, "bootstrap connect") {
            Ok(Reply::Welcome { targets }) => targets,
            Ok(other) => return Err(boot.unexpected(&other)),
            Err(ReadFail::Closed) => {
                return Err(Error::Bootstrap(format!(
                    "the bootstrap root at {root} closed the connection during the handshake \
                     (wrong secret, not a streamcomm bootstrap root, or one of another streamcomm \
                     version: the launcher and the program must be of the same version)"
                )));
            }
            Err(ReadFail::TimedOut) => {
                return Err(Error::Timeout {
                    op: "bootstrap connect".into(),
                    what: format!("all {size} ranks to join the bootstrap root at {root}"),
                    waited_ms: millis(start.elapsed()),
                });
            }
            Err(ReadFail::Other(e)) => return Err(e),
        };
        if targets.len() != gather::steps(size) {
            return Err(Error::Bootstrap(format!(
                "the bootstrap root at {root} named {} all-gather peers for {size} ranks \
                 (expected {})",
                targets.len(),
                gather::steps(size)
            )));
        }
        if let Some(listener) = listener {
            boot.links = Links::open(listener, &targets, (rank, size), id.secret(), deadline)?;
        }
        Ok(boot)
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The timeout that bounds each operation.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Changes the timeout of later operations.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// This rank's address on the connection to the root: the interface that
    /// reaches the root, a good default for other sockets of this rank.
    ///
    /// # Errors
    /// [`Error::Os`] if the socket has no local address.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.stream
            .local_addr()
            .map_err(|e| Error::os("getsockname(bootstrap)", e))
    }

    /// The root's address.
    pub fn root_addr(&self) -> SocketAddr {
        self.root
    }

    /// Sends `blob` to every rank and returns every rank's blob, in rank order
    /// (this rank's included). All ranks must call it the same number of times.
    ///
    /// # Errors
    ///
    /// * [`Error::InvalidArgument`] if `blob` is larger than 16 MiB.
    /// * [`Error::Timeout`] if the blobs do not all arrive within the timeout.
    /// * [`Error::RemoteFailed`] if the root reports that a rank vanished.
    /// * [`Error::Bootstrap`] if the root dies or breaks the protocol.
    ///
    /// After an error other than `InvalidArgument`, every later call returns
    /// the same error.
    pub fn all_gather(&mut self, blob: &[u8]) -> Result<Vec<Vec<u8>>> {
        if blob.len() > MAX_BLOB {
            return Err(Error::invalid(format!(
                "bootstrap all_gather blob of {} bytes exceeds the {MAX_BLOB}-byte limit",
                blob.len()
            )));
        }
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let result = self.all_gather_inner(blob);
        if let Err(e) = &result {
            self.failed = Some(e.clone());
        }
        result
    }

    /// Returns once every rank has entered the barrier.
    ///
    /// # Errors
    ///
    /// As for [`all_gather`](Bootstrap::all_gather).
    pub fn barrier(&mut self) -> Result<()> {
        self.all_gather(&[]).map(drop)
    }

    fn all_gather_inner(&mut self, blob: &[u8]) -> Result<Vec<Vec<u8>>> {
        let start = Instant::now();
        let deadline = start + self.timeout;
        let op = format!("bootstrap all_gather #{}", self.round);
        let mut links = std::mem::replace(&mut self.links, Links::none(self.rank, self.size));
        let root_fd = (!self.root_closed).then(|| self.stream.as_raw_fd());
        let mut root_closed = false;
        let gathered = {
            let mut hear = || self.root_notice(deadline, &op, &mut root_closed);
            let mut root = RootWatch {
                fd: root_fd,
                hear: &mut hear,
            };
            links.all_gather(blob, &mut root, deadline)
        };
        self.links = links;
        self.root_closed |= root_closed;
        let all = match gathered {
            Ok(all) => all,
            Err(Stop::Peer { peer, what }) => return Err(self.peer_gone(peer, &what, &op)),
            Err(Stop::TimedOut { what }) => {
                return Err(Error::Timeout {
                    op,
                    what,
                    waited_ms: millis(start.elapsed()),
                });
            }
            Err(Stop::Failed(e)) => return Err(e),
        };
        // A lone rank's round is all or nothing already.
        if self.size > 1 {
            self.confirm(deadline, &op, start)?;
        }
        self.round += 1;
        Ok(all)
    }

    /// Tells the root this rank has the round's records and waits for its
    /// release: a round ends for every rank or for none (a rank that fails
    /// or leaves before every rank has arrived fails it for all), which a
    /// shrink relies on to have its survivors start over together.
    fn confirm(&mut self, deadline: Instant, op: &str, start: Instant) -> Result<()> {
        let root = self.root;
        let closed = || {
            Error::Bootstrap(format!(
                "{op}: the bootstrap root at {root} closed the connection before every rank \
                 had the round (the process that created the id exited, or it gave up)"
            ))
        };
        if self.root_closed {
            return Err(closed());
        }
        let told = self
            .stream
            .set_write_timeout(Some(socket_timeout(deadline)))
            .and_then(|()| Reply::Arrived.write_to(&mut self.stream));
        if told.is_err() {
            let peek = (Instant::now() + Duration::from_millis(100)).min(deadline);
            if let Err(ReadFail::Other(notice)) = self.read_reply(peek, op) {
                return Err(notice);
            }
            return Err(closed());
        }
        match self.read_reply(deadline, op) {
            Ok(Reply::Release) => Ok(()),
            Ok(other) => Err(self.unexpected(&other)),
            Err(ReadFail::Closed) => Err(closed()),
            Err(ReadFail::TimedOut) => Err(Error::Timeout {
                op: op.to_string(),
                what: format!(
                    "every rank to have the round (the bootstrap root at {} releases them)",
                    self.root
                ),
                waited_ms: millis(start.elapsed()),
            }),
            Err(ReadFail::Other(e)) => Err(e),
        }
    }

    /// What the root says in the middle of a round: a failure notice (the
    /// error: the rank to blame), or `None` when its connection closed
    /// (`closed` is then set: the root's process may exit once every rank
    /// has joined, and the ranks need it only to learn of failures).
    fn root_notice(&mut self, deadline: Instant, op: &str, closed: &mut bool) -> Option<Error> {
        match self.read_reply(deadline, op) {
            Err(ReadFail::Other(e)) => Some(e),
            Ok(other) => Some(self.unexpected(&other)),
            Err(ReadFail::Closed) => {
                tracing::debug!("{op}: the bootstrap root closed its connection");
                *closed = true;
                None
            }
            Err(ReadFail::TimedOut) => Some(Error::Bootstrap(format!(
                "{op}: the bootstrap root at {} began a frame and did not finish it",
                self.root
            ))),
        }
    }

    /// The error when the connection to `peer` broke (`what`): the root is
    /// told, and its verdict (the first rank any rank reported: a rank
    /// whose own peer failed may look gone to the next when it stops) is
    /// the error; without one in time, `peer` is blamed.
    fn peer_gone(&mut self, peer: usize, what: &str, op: &str) -> Error {
        let reason = format!("rank {} lost rank {peer} during {op}: {what}", self.rank);
        let report = Reply::Failure {
            peer: Some(peer),
            reason: reason.clone(),
        };
        let wait = Instant::now() + VERDICT_WAIT;
        let told = !self.root_closed
            && self
                .stream
                .set_write_timeout(Some(VERDICT_WAIT))
                .and_then(|()| report.write_to(&mut self.stream))
                .is_ok();
        if told && let Err(ReadFail::Other(verdict)) = self.read_reply(wait, op) {
            return verdict;
        }
        Error::RemoteFailed {
            peer,
            op: op.to_string(),
            cause: format!("{what} (the bootstrap root gave no verdict)"),
        }
    }

    /// Reads one reply; a failure notice from the root becomes its error.
    fn read_reply(&mut self, deadline: Instant, op: &str) -> std::result::Result<Reply, ReadFail> {
        let root = self.root;
        let bad = |what: String| ReadFail::Other(Error::Bootstrap(format!("{op}: {what}")));
        match wire::read_frame(&mut self.stream, MAX_REPLY, Some(deadline)) {
            Ok(FrameRead::Frame(body)) => match Reply::decode(body) {
                Ok(Reply::Failure {
                    peer: Some(peer),
                    reason,
                }) => Err(ReadFail::Other(Error::RemoteFailed {
                    peer,
                    op: op.to_string(),
                    cause: format!("the bootstrap root reports: {reason}"),
                })),
                Ok(Reply::Failure { peer: None, reason }) => Err(bad(format!(
                    "the bootstrap root at {root} reports: {reason}"
                ))),
                Ok(reply) => Ok(reply),
                Err(what) => Err(bad(format!(
                    "the bootstrap root at {root} sent a bad frame: {what}"
                ))),
            },
            Ok(FrameRead::Eof) => Err(ReadFail::Closed),
            Ok(FrameRead::TooLarge(len)) => Err(bad(format!(
                "the bootstrap root at {root} announced a {len}-byte frame (limit {MAX_REPLY})"
            ))),
            Err(e) if wire::is_timeout(&e) => Err(ReadFail::TimedOut),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Err(bad(format!(
                "the bootstrap root at {root} closed the connection in the middle of a frame"
            ))),
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => Err(ReadFail::Closed),
            Err(e) => Err(bad(format!(
                "reading from the bootstrap root at {root} failed: {e}"
            ))),
        }
    }

    fn unexpected(&self, reply: &Reply) -> Error {
        let kind = match reply {
            Reply::Welcome { .. } => "a second welcome",
            Reply::Failure { .. } => "a failure notice",
            Reply::Arrived => "an arrival",
            Reply::Release => "a release outside a round",
        };
        Error::Bootstrap(format!("the bootstrap root at {} sent {kind}", self.root))
    }
}

impl Drop for Bootstrap {
    fn drop(&mut self) {
        if let Some(addr) = self.local {
            super::local::remove(addr);
        }
    }
}

/// Why reading a reply did not produce one.
enum ReadFail {
    /// The root closed the connection between frames.
    Closed,
    /// The deadline passed.
    TimedOut,
    /// Anything else, already an error.
    Other(Error),
}

/// Connects to `root`, retrying with a growing pause until `deadline`.
fn connect_retrying(root: SocketAddr, start: Instant, deadline: Instant) -> Result<TcpStream> {
    let mut pause = Duration::from_millis(5);
    let mut attempts = 0u32;
    loop {
        let left = remaining(deadline);
        let last = if left.is_zero() {
            None
        } else {
            attempts += 1;
            match TcpStream::connect_timeout(&root, left) {
                Ok(stream) => return Ok(stream),
                Err(e) if crate::os_limits::exhausted(&e) => {
                    if crate::os_limits::raise().is_some() {
                        continue;
                    }
                    return Err(Error::Unavailable(crate::os_limits::advice(
                        "this process",
                        &format!("connecting to the bootstrap root at {root}"),
                    )));
                }
                Err(e) => Some(e),
            }
        };
        let left = remaining(deadline);
        if left.is_zero() {
            let last = last.map_or_else(|| "no attempt made".to_string(), |e| e.to_string());
            return Err(Error::Timeout {
                op: "bootstrap connect".into(),
                what: format!(
                    "the bootstrap root at {root} to accept a connection \
                     ({attempts} attempts, last error: {last})"
                ),
                waited_ms: millis(start.elapsed()),
            });
        }
        std::thread::sleep(pause.min(left));
        pause = (pause * 2).min(Duration::from_millis(200));
    }
}

fn remaining(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

/// A socket timeout for the time left until `deadline` (never zero, which
/// sockets refuse).
fn socket_timeout(deadline: Instant) -> Duration {
    remaining(deadline).max(Duration::from_millis(1))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
