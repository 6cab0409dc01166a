//! The communicator: ranks, connections, and the operations users enqueue.
//!
//! A [`Communicator`] is created collectively by `size` ranks from a
//! [`UniqueId`] (like `ncclCommInitRank`), from a launcher's environment
//! ([`Communicator::from_env`]), or for threads of one process. Creation runs
//! the bootstrap all-gather of endpoints, maps every local peer's shared-memory
//! segment, and unlinks this rank's segment once all peers hold it.
//!
//! # Thread safety
//! `Communicator` is `Send + Sync`; operations may be enqueued from any thread
//! and on any stream. Whatever their stream, a communicator's operations
//! execute in the order they were issued (each takes a ticket), which every
//! rank must make the same order, as with NCCL.

mod affinity;
mod barrier;
mod blocking;
mod buffer;
mod builder;
mod child;
mod collectives;
pub(crate) mod core;
mod create;
mod departure;
mod endpoint;
pub(crate) mod exec;
pub(crate) mod failure;
mod host_collectives;
pub(crate) mod inner;
mod mismatch;
pub(crate) mod p2p;
pub(crate) mod peer_watch;
mod plan_cache;
mod raw;
pub(crate) mod recovery;
mod recovery_point;
mod selection;
mod split;
pub(crate) mod submit;
pub(crate) mod table;
pub(crate) mod task;
mod turns;

use std::sync::Arc;

pub(crate) use buffer::Binding;
pub use buffer::{AsBufView, BufView, UntypedBuffer};
pub use builder::CommunicatorBuilder;
pub use endpoint::Endpoint;
pub(crate) use endpoint::local_host_id;
pub use p2p::{Group, P2pStats};
pub use raw::{RawBuffers, RawSpan};

use crate::bootstrap::UniqueId;
use crate::config::Config;
use crate::{Error, Result};
use failure::Learned;
use inner::CommInner;

/// A group of ranks that run collectives together.
///
/// # Stream semantics
/// An operation given a stream is enqueued on it, not complete, on return:
/// its buffers must stay untouched until the stream has run it (after
/// [`HostStream::synchronize`](crate::host::HostStream::synchronize), or
/// for work enqueued after it on the same stream). Execution errors surface
/// from the stream and the communicator. Whatever their stream, a
/// communicator's operations run in the order they were issued.
///
/// # Graph capture
/// Every stream operation is capturable: each replay of the graph is a new
/// operation on the buffers' contents at that time (fresh tickets, same
/// plan and buffers).
///
/// # Examples
/// ```
/// use streamcomm::{bootstrap::UniqueId, Communicator};
/// use streamcomm::host::{HostBuffer, HostStream};
/// use streamcomm::ReduceOp;
///
/// let id = UniqueId::new().unwrap();
/// let ranks: Vec<_> = (0..2)
///     .map(|rank| {
///         let id = id.clone();
///         std::thread::spawn(move || {
///             let comm = Communicator::init(&id, rank, 2).unwrap();
///             let stream = HostStream::new().unwrap();
///             let send = HostBuffer::from_slice(&[rank as f32 + 1.0; 4]);
///             let mut recv = HostBuffer::<f32>::zeroed(4);
///             comm.all_reduce(&send, &mut recv, ReduceOp::Sum, &stream).unwrap();
///             comm.barrier(&stream).unwrap();
///             stream.synchronize().unwrap();
///             recv.to_vec()
///         })
///     })
///     .collect();
/// for r in ranks {
///     assert_eq!(r.join().unwrap(), vec![3.0; 4]);
/// }
/// ```
#[derive(Clone)]
pub struct Communicator {
    pub(crate) inner: Arc<CommInner>,
    /// Shared by this handle's clones only (not by the engine's sources or
    /// stream tasks): dropped with the last of them, on the thread that
    /// drops it.
    _departure: Arc<departure::Departure>,
}

impl std::fmt::Debug for Communicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Communicator")
            .field("rank", &self.inner.core.rank())
            .field("size", &self.inner.core.size())
            .finish()
    }
}

impl Communicator {
    /// The first user handle of a communicator just created.
    pub(crate) fn from_inner(inner: Arc<CommInner>) -> Communicator {
        let departure = Arc::new(departure::Departure::new(inner.core.clone()));
        Communicator {
            inner,
            _departure: departure,
        }
    }

    /// Joins the communicator named by `id` as `rank` of `size`, with the
    /// configuration from the environment ([`Config::from_env`]): the short
    /// form of [`Communicator::builder`], as `ncclCommInitRank`.
    ///
    /// Collective: every rank must call it; it returns when all have joined.
    ///
    /// # Examples
    /// ```
    /// use streamcomm::{bootstrap::UniqueId, Communicator};
    ///
    /// // One rank creates the id and hands it to the others (its text form,
    /// // `id.to_string()`, travels through any channel); here, threads.
    /// let id = UniqueId::new()?;
    /// let threads: Vec<_> = (0..2)
    ///     .map(|rank| std::thread::spawn(move || Communicator::init(&id, rank, 2)))
    ///     .collect();
    /// let comms = threads
    ///     .into_iter()
    ///     .map(|t| t.join().unwrap())
    ///     .collect::<streamcomm::Result<Vec<_>>>()?;
    /// assert_eq!((comms[1].rank(), comms[1].size()), (1, 2));
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`CommunicatorBuilder::build`].
    pub fn init(id: &UniqueId, rank: usize, size: usize) -> Result<Communicator> {
        Communicator::builder()
            .unique_id(id)
            .rank(rank)
            .size(size)
            .build()
    }

    /// Joins a communicator described by a launcher's environment: our own
    /// `streamcomm-run`, torchrun, Slurm, Open MPI or PMI (see
    /// [`launch`](crate::launch) for the variables read), with the
    /// configuration from the environment: the short form of
    /// `Communicator::builder().build()`.
    ///
    /// Under torchrun-style variables (`MASTER_ADDR`/`MASTER_PORT` without
    /// `STREAMCOMM_UNIQUE_ID`), rank 0 hosts the bootstrap root on that address.
    ///
    /// # Examples
    /// ```no_run
    /// // Started as `streamcomm-run -n 4 -- prog` (or by torchrun, Slurm, Open MPI, PMI):
    /// let comm = streamcomm::Communicator::from_env()?;
    /// println!("rank {} of {} on {} host(s)", comm.rank(), comm.size(), comm.num_hosts());
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming a missing or malformed variable, then
    /// as [`CommunicatorBuilder::build`].
    pub fn from_env() -> Result<Communicator> {
        Communicator::builder().build()
    }

    /// A builder for a communicator with settings of the program's own
    /// (timeout, barrier algorithm, a whole [`Config`]); see
    /// [`CommunicatorBuilder`].
    ///
    /// # Examples
    /// ```no_run
    /// use std::time::Duration;
    /// // Under a launcher: who the ranks are comes from its environment.
    /// let comm = streamcomm::Communicator::builder()
    ///     .timeout(Duration::from_secs(60))
    ///     .build()?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn builder() -> CommunicatorBuilder {
        CommunicatorBuilder::default()
    }

    /// This process's rank.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// # let comm = Communicator::init(&UniqueId::new()?, 0, 1)?;
    /// # let stream = HostStream::new()?;
    /// assert_eq!(comm.rank(), 0);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn rank(&self) -> usize {
        self.inner.core.rank()
    }

    /// Number of ranks.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// # let comm = Communicator::init(&UniqueId::new()?, 0, 1)?;
    /// # let stream = HostStream::new()?;
    /// assert_eq!(comm.size(), 1);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn size(&self) -> usize {
        self.inner.core.size()
    }

    /// Ranks that share this rank's host (itself included).
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// # streamcomm::testing::on_two_ranks(|comm, stream| {
    /// // On each of two ranks (`comm.rank()` is 0 or 1):
    /// assert_eq!(comm.local_size(), 2); // both ranks on this host
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn local_size(&self) -> usize {
        self.inner.core.topology().local_ranks
    }

    /// Number of distinct hosts the ranks are on (after `STREAMCOMM_HOSTS_OVERRIDE`).
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// # streamcomm::testing::on_two_ranks(|comm, stream| {
    /// // On each of two ranks (`comm.rank()` is 0 or 1):
    /// assert_eq!(comm.num_hosts(), 1);
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn num_hosts(&self) -> usize {
        self.inner.core.topology().nhosts
    }

    /// Where `rank` accepts tcp connections (its tcp listener), if it has one;
    /// an address of that rank's host that the other ranks can reach.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// # streamcomm::testing::on_two_ranks(|comm, stream| {
    /// // On each of two ranks (`comm.rank()` is 0 or 1):
    /// if let Some(addr) = comm.tcp_addr(1 - comm.rank()) {
    ///     println!("the peer's tcp listener: {addr}");
    /// }
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn tcp_addr(&self, rank: usize) -> Option<std::net::SocketAddr> {
        self.inner
            .core
            .topology()
            .tcp_addrs
            .get(rank)
            .copied()
            .flatten()
    }

    /// The transport that reaches `peer` (`None` for this rank itself or a
    /// rank out of range). [`Transport::as_str`](crate::Transport::as_str)
    /// gives its name (`"shm"`, `"tcp"`, `"verbs"`).
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// # streamcomm::testing::on_two_ranks(|comm, stream| {
    /// // On each of two ranks (`comm.rank()` is 0 or 1):
    /// use streamcomm::Transport;
    /// assert_eq!(comm.transport_to(1 - comm.rank()), Some(Transport::Shm)); // same host
    /// assert_eq!(comm.transport_to(comm.rank()), None);
    /// assert_eq!(comm.transport_to(7), None);
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn transport_to(&self, peer: usize) -> Option<crate::config::Transport> {
        self.inner
            .core
            .peers()
            .get(peer)?
            .as_ref()
            .map(|c| c.kind())
    }

    /// Host identity of `rank`, as exchanged at bootstrap.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// # streamcomm::testing::on_two_ranks(|comm, stream| {
    /// // On each of two ranks (`comm.rank()` is 0 or 1):
    /// assert_eq!(comm.host_of(0), comm.host_of(1));
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn host_of(&self, rank: usize) -> Option<&str> {
        self.inner
            .core
            .topology()
            .hosts
            .get(rank)
            .map(|s| s.as_str())
    }

    /// The configuration in use.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// # let comm = Communicator::init(&UniqueId::new()?, 0, 1)?;
    /// # let stream = HostStream::new()?;
    /// assert!(comm.config().slot_bytes() > 0);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn config(&self) -> &Config {
        self.inner.core.config()
    }

    /// The error that put the communicator in its failed state, if any
    /// (never blocks; like `ncclCommGetAsyncError`). A peer's failure shows
    /// here even while this rank is idle: a failing peer raises the failure
    /// word in this rank's segment, which is read here.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// # let comm = Communicator::init(&UniqueId::new()?, 0, 1)?;
    /// # let stream = HostStream::new()?;
    /// assert!(comm.async_error().is_none());
    /// comm.abort();
    /// assert!(matches!(comm.async_error(), Some(streamcomm::Error::Aborted(_))));
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn async_error(&self) -> Option<Error> {
        self.inner.core.async_error()
    }

    /// Fails the communicator from any thread: pending and later operations
    /// end with [`Error::Aborted`] on this rank, and peers' waits end with
    /// [`Error::RemoteFailed`] naming this rank, instead of waiting for
    /// their timeout.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// # let comm = Communicator::init(&UniqueId::new()?, 0, 1)?;
    /// # let stream = HostStream::new()?;
    /// let comm2 = comm.clone();
    /// std::thread::spawn(move || comm2.abort()).join().unwrap(); // from any thread
    /// let buf = HostBuffer::from_slice(&[1.0f32; 4]);
    /// let mut out = HostBuffer::<f32>::zeroed(4);
    /// assert!(comm.all_reduce(&buf, &mut out, ReduceOp::Sum, &stream).is_err());
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn abort(&self) {
        self.inner
            .core
            .failure()
            .fail(&Error::Aborted("abort() was called".into()), Learned::Abort);
    }
}
