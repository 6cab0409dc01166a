//! [`Bootstrap`]: a rank's connection to the bootstrap root.
//!
//! Before a communicator has any transport, its ranks need a slow but sure way
//! to swap small records (endpoints, host names, shared-memory names): NCCL's
//! `bootstrapAllGather`. Each rank keeps one TCP connection to the root; an
//! all-gather is "send my blob, receive everyone's in rank order". Every read
//! is bounded by the timeout given at connect time, and every way the root can
//! fail (refusal, death, a rank gone, a deadline) becomes an error that says
//! what happened, after which the connection stays failed.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use super::id::UniqueId;
use super::wire::{self, FrameRead, Hello, MAX_BLOB, MAX_RANKS, MAX_REPLY, Reply};
use crate::{Error, Result};

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
        let mut boot = Bootstrap {
            stream,
            local,
            root,
            rank,
            size,
            timeout,
            round: 0,
            failed: None,
        };
        let hello = Hello {
            secret: *id.secret(),
            rank: rank as u32,
            size: size as u32,
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
        match boot.read_reply(deadline, "bootstrap connect") {
            Ok(Reply::Welcome) => Ok(boot),
            Ok(other) => Err(boot.unexpected(&other)),
            Err(ReadFail::Closed) => Err(Error::Bootstrap(format!(
                "the bootstrap root at {root} closed the connection during the handshake \
                 (wrong secret, or not a streamcomm bootstrap root)"
            ))),
            Err(ReadFail::TimedOut) => Err(Error::Timeout {
                op: "bootstrap connect".into(),
                what: format!("all {size} ranks to join the bootstrap root at {root}"),
                waited_ms: millis(start.elapsed()),
            }),
            Err(ReadFail::Other(e)) => Err(e),
        }
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
        let sent = self
            .stream
            .set_write_timeout(Some(socket_timeout(deadline)))
            .and_then(|()| wire::write_frame(&mut self.stream, &[blob]));
        if let Err(e) = sent {
            if wire::is_timeout(&e) {
                return Err(self.timeout_error(&op, "sending this rank's blob to the root", start));
            }
            // The root may have given up and closed first: its failure notice
            // (which names the culprit) is then already here to be read.
            let peek = Instant::now() + Duration::from_millis(100);
            if let Err(ReadFail::Other(notice)) = self.read_reply(peek.min(deadline), &op) {
                return Err(notice);
            }
            return Err(Error::Bootstrap(format!(
                "{op}: sending to the root at {} failed: {e}",
                self.root
            )));
        }
        let mut all = Vec::with_capacity(self.size);
        while all.len() < self.size {
            match self.read_reply(deadline, &op) {
                Ok(Reply::Data(bytes)) => all.push(bytes),
                Ok(other) => return Err(self.unexpected(&other)),
                Err(ReadFail::Closed) => {
                    return Err(Error::Bootstrap(format!(
                        "{op}: the bootstrap root at {} closed the connection after {} of {} \
                         blobs (the root process exited, or it gave up on this communicator)",
                        self.root,
                        all.len(),
                        self.size
                    )));
                }
                Err(ReadFail::TimedOut) => {
                    return Err(Error::Timeout {
                        op,
                        what: format!(
                            "blobs from the bootstrap root at {} (got {} of {})",
                            self.root,
                            all.len(),
                            self.size
                        ),
                        waited_ms: millis(start.elapsed()),
                    });
                }
                Err(ReadFail::Other(e)) => return Err(e),
            }
        }
        self.round += 1;
        Ok(all)
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
            Reply::Welcome => "a second welcome",
            Reply::Data(_) => "data before the welcome",
            Reply::Failure { .. } => "a failure notice",
        };
        Error::Bootstrap(format!("the bootstrap root at {} sent {kind}", self.root))
    }

    fn timeout_error(&self, op: &str, what: &str, start: Instant) -> Error {
        Error::Timeout {
            op: op.to_string(),
            what: what.to_string(),
            waited_ms: millis(start.elapsed()),
        }
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
