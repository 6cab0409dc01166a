//! Point-to-point: send, recv, groups, and the collectives built on them
//! (all-to-all-v, gather, scatter). `docs/design/p2p.md`.
//!
//! # Semantics
//! - `send(buf, peer)` / `recv(buf, peer)` are enqueued on a stream like a
//!   collective and run in the communicator's issue order. Messages between
//!   a pair of ranks arrive in the order they were posted.
//! - A receive buffer may be larger than the message (the front of it is
//!   filled, the rest left untouched); a smaller one, another element type,
//!   or a collective where a message was expected fails with
//!   [`crate::Error::Mismatch`] naming both sides.
//! - Outside a group, a send waits for its receiver like NCCL's (for large
//!   messages it cannot complete before the receiver posts), so two ranks
//!   that both send first must use a group. [`Communicator::group`] posts
//!   several operations as one unit that progresses all of them together:
//!   any order of the calls inside works. A rank may send to itself only
//!   inside a group, paired with a receive from itself.
//!
//! # Protocols
//! - **Eager** (messages up to `STREAMCOMM_P2P_EAGER_LIMIT`, default 256 KiB):
//!   the bytes go through the peer's slot ring under credit flow control; a
//!   sender with no credit waits, it never overwrites a slot its receiver
//!   has not consumed.
//! - **Rendezvous** (larger messages): the sender posts a ready-to-send
//!   slot; the receiver grants its buffer (address, length) in its ring
//!   header's mailbox, outside the data ring so a grant never waits behind
//!   data.
//!   - Shared memory: the request carries the sender's buffer address; the
//!     receiver pulls the whole message straight into its buffer with one
//!     cross-memory copy (`process_vm_readv`, on two threads from 4 MiB on)
//!     and tells the sender, which sends a done slot. The sending process never writes into the
//!     receiver's memory: a sender stopped after the grant and woken after
//!     the receive failed (a rank shrunk away, then resumed) finds nothing
//!     to write. Where the kernel refuses the copy (ptrace restrictions) or
//!     `STREAMCOMM_P2P_DIRECT=0`, the bytes follow through the ring instead.
//!   - tcp: the data follows the request through the ring at once; the
//!     receiver's progress engine reads each data frame from its socket
//!     straight into the granted buffer (only frames that arrived before the
//!     grant, at most a ring's worth, are copied out of slots). A grant is
//!     withdrawn, waiting for any write in progress, before a receive ends
//!     in any way, so no write outlives the buffer's lock.
//!
//!   - verbs: the receiver registers its buffer (a cached registration)
//!     and grants its remote key; the grant is copied by RDMA into the
//!     sender's staging ring header, the sender's NIC writes the message
//!     straight into the buffer, then the done slot follows (see `rdma`).
//!
//!   [`P2pStats`] shows which path ran.
//!
//! Verified here: both protocols over shared memory and tcp (loopback and
//! across network namespaces), ranks as threads and as processes.

mod cma;
mod collectives;
pub(crate) mod exchange;
pub(crate) mod exchange_table;
mod group;
mod immediate;
pub(crate) use immediate::Now;
mod payload;
mod placement;
mod receiver;
mod sender;
mod spec;
mod stats;
mod wire;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

pub use stats::P2pStats;

use crate::comm::Communicator;
use crate::comm::buffer::{AsBufView, BufView};
use crate::comm::core::Core;
use crate::host::HostStream;
use crate::host::{Job, JobMode, Task};
use crate::{DataType, Result};
pub(crate) use placement::PLACEMENT;
pub(crate) use spec::Dir;
use spec::GroupSpec;
use stats::StatCounters;

/// Point-to-point's part of a communicator: the core it runs on and its
/// own state ([`P2pState`]). The executor and the immediate path are its
/// methods.
pub(crate) struct P2p {
    pub(crate) core: Arc<Core>,
    pub(crate) state: P2pState,
}

impl P2p {
    pub(crate) fn new(state: P2pState, core: Arc<Core>) -> P2p {
        P2p { core, state }
    }
}

/// Per-communicator point-to-point state: rendezvous sequence numbers per
/// peer and the byte counters.
#[derive(Debug)]
pub(crate) struct P2pState {
    /// Rendezvous requests sent to each peer.
    requests: Vec<AtomicU64>,
    /// Rendezvous grants given to each peer.
    grants: Vec<AtomicU64>,
    pub stats: StatCounters,
    refused_logged: AtomicBool,
    /// Rendezvous grants that asked the sender to write nothing (receives
    /// into lent slices over shared memory, which pull the message).
    pub pull_only_grants: AtomicU64,
    /// Host-blocking sends and receives that took the immediate path
    /// (`comm::p2p::immediate`).
    pub immediate_calls: AtomicU64,
}

impl P2pState {
    /// State for a communicator of `size` ranks.
    pub(crate) fn new(size: usize) -> P2pState {
        P2pState {
            requests: (0..size).map(|_| AtomicU64::new(0)).collect(),
            grants: (0..size).map(|_| AtomicU64::new(0)).collect(),
            stats: StatCounters::default(),
            refused_logged: AtomicBool::new(false),
            pull_only_grants: AtomicU64::new(0),
            immediate_calls: AtomicU64::new(0),
        }
    }

    /// Number of the next rendezvous request to `peer` (1-based).
    pub(crate) fn next_request(&self, peer: usize) -> u64 {
        self.requests[peer].fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Number of the next grant to `peer` (1-based).
    pub(crate) fn next_grant(&self, peer: usize) -> u64 {
        self.grants[peer].fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Notes (once) that the kernel refused a direct copy.
    pub(crate) fn direct_refused(&self, peer: usize, e: &std::io::Error) {
        if !self.refused_logged.swap(true, Ordering::Relaxed) {
            tracing::warn!(peer, error = %e, "rendezvous: direct copy refused; streaming through the ring");
        }
    }
}

/// The memory of one operation of a device group.
pub(crate) enum GroupMemory {
    /// A host (staging) buffer, all of it.
    Host(BufView),
    /// `count` elements of `dtype` in device memory that the NIC moves.
    Device {
        span: crate::transport::device_span::DeviceSpan,
        dtype: DataType,
        count: usize,
    },
}

/// Operations posted together with [`Communicator::group`], all on its
/// stream.
pub struct Group<'a> {
    comm: &'a Communicator,
    spec: GroupSpec,
}

impl Group<'_> {
    /// Adds a send of all of `buf` to `peer`.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// # streamcomm::testing::on_two_ranks(|comm, stream| {
    /// // On each of two ranks (`comm.rank()` is 0 or 1):
    /// // A ring exchange: send to the next rank, receive from the previous one.
    /// let n = comm.size();
    /// let (next, prev) = ((comm.rank() + 1) % n, (comm.rank() + n - 1) % n);
    /// let send = HostBuffer::from_slice(&[comm.rank() as f32; 4]);
    /// let mut recv = HostBuffer::<f32>::zeroed(4);
    /// comm.group(&stream, |g| {
    ///     g.send(&send, next)?;
    ///     g.recv(&mut recv, prev)
    /// })?;
    /// stream.synchronize()?;
    /// assert_eq!(recv.to_vec(), vec![prev as f32; 4]);
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a peer out of range.
    pub fn send(&mut self, buf: &impl AsBufView, peer: usize) -> Result<()> {
        let v = buf.buf_view();
        self.send_region(&v, 0, v.len(), peer)
    }

    /// Adds a receive from `peer` into `buf` (a message up to its length).
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// # streamcomm::testing::on_two_ranks(|comm, stream| {
    /// // On each of two ranks (`comm.rank()` is 0 or 1):
    /// // A ring exchange: send to the next rank, receive from the previous one.
    /// let n = comm.size();
    /// let (next, prev) = ((comm.rank() + 1) % n, (comm.rank() + n - 1) % n);
    /// let send = HostBuffer::from_slice(&[comm.rank() as f32; 4]);
    /// let mut recv = HostBuffer::<f32>::zeroed(4);
    /// comm.group(&stream, |g| {
    ///     g.send(&send, next)?;
    ///     g.recv(&mut recv, prev)
    /// })?;
    /// stream.synchronize()?;
    /// assert_eq!(recv.to_vec(), vec![prev as f32; 4]);
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Group::send`].
    pub fn recv(&mut self, buf: &mut impl AsBufView, peer: usize) -> Result<()> {
        let v = buf.buf_view();
        self.recv_region(&v, 0, v.len(), peer)
    }

    fn send_region(&mut self, v: &BufView, offset: usize, count: usize, peer: usize) -> Result<()> {
        self.spec.push(Dir::Send, peer, v, offset, count)
    }

    fn recv_region(&mut self, v: &BufView, offset: usize, count: usize, peer: usize) -> Result<()> {
        self.spec.push(Dir::Recv, peer, v, offset, count)
    }
}

/// A group on a stream.
struct GroupTask {
    p2p: Arc<P2p>,
    spec: Arc<GroupSpec>,
}

impl Task for GroupTask {
    fn prepare(&self) -> Job {
        let ticket = self.p2p.core.turns().take();
        let (p2p, spec) = (self.p2p.clone(), self.spec.clone());
        Box::new(move |mode| {
            let name = format_args!("{} #{ticket}", spec.name);
            p2p.core
                .run_ticketed(ticket, mode, name, |_| p2p.run_group(&spec, ticket))
        })
    }

    fn name(&self) -> &str {
        &self.spec.name
    }
}

impl Communicator {
    /// Posts the operations `f` adds as one unit: they progress together, so
    /// patterns such as every rank sending right and receiving left (or
    /// all-to-all) never deadlock, whatever the order of the calls. Nothing
    /// is enqueued if `f` fails; an empty group enqueues nothing.
    ///
    /// ```no_run
    /// # use streamcomm::{Communicator, host::{HostBuffer, HostStream}};
    /// # fn f(comm: &Communicator, stream: &HostStream) -> streamcomm::Result<()> {
    /// let (n, r) = (comm.size(), comm.rank());
    /// let out = HostBuffer::from_slice(&[r as f32; 4]);
    /// let mut inb = HostBuffer::<f32>::zeroed(4);
    /// comm.group(stream, |g| {
    ///     g.send(&out, (r + 1) % n)?;
    ///     g.recv(&mut inb, (r + n - 1) % n)
    /// })?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// What `f` returns; [`Error::InvalidArgument`](crate::Error::InvalidArgument) when the group as a
    /// whole is invalid (a buffer both sent and received, overlapping
    /// receive regions, unpaired sends to this rank).
    pub fn group<R>(
        &self,
        stream: &HostStream,
        f: impl FnOnce(&mut Group<'_>) -> Result<R>,
    ) -> Result<R> {
        self.group_named("group", stream, f)
    }

    fn group_named<R>(
        &self,
        name: &str,
        stream: &HostStream,
        f: impl FnOnce(&mut Group<'_>) -> Result<R>,
    ) -> Result<R> {
        self.inner.core.failure().check()?;
        let mut g = Group {
            comm: self,
            spec: GroupSpec::new(
                name.to_string(),
                self.inner.core.rank(),
                self.inner.core.size(),
            ),
        };
        let r = f(&mut g)?;
        let Group { comm, mut spec, .. } = g;
        if spec.ops.is_empty() {
            return Ok(r);
        }
        if spec.name == "group" && spec.ops.len() == 1 {
            let o = &spec.ops[0];
            spec.name = match o.dir {
                Dir::Send => "send".into(),
                Dir::Recv => "recv".into(),
            };
        }
        spec.check()?;
        stream.enqueue(Arc::new(GroupTask {
            p2p: comm.inner.p2p.clone(),
            spec: Arc::new(spec),
        }))?;
        Ok(r)
    }

    /// The stream task of a group of whole-buffer sends and receives
    /// (`None` for an empty group), checked as [`Communicator::group`]
    /// checks: what device streams run, on staging buffers or (GPUDirect)
    /// on device memory. With `rdma_rendezvous`, every non-empty message
    /// over an RDMA connection goes by rendezvous (a device group's peer may
    /// receive into device memory).
    pub(crate) fn p2p_group_task(
        &self,
        ops: &[(Dir, usize, GroupMemory)],
        rdma_rendezvous: bool,
    ) -> Result<Option<Arc<dyn Task>>> {
        self.inner.core.failure().check()?;
        let name = match ops {
            [] => return Ok(None),
            [(Dir::Send, ..)] => "send",
            [(Dir::Recv, ..)] => "recv",
            _ => "group",
        };
        let mut spec = GroupSpec::new(name, self.inner.core.rank(), self.inner.core.size());
        spec.rdma_rendezvous = rdma_rendezvous;
        for (dir, peer, mem) in ops {
            match mem {
                GroupMemory::Host(v) => spec.push(*dir, *peer, v, 0, v.len())?,
                GroupMemory::Device { span, dtype, count } => {
                    spec.push_device(*dir, *peer, span.clone(), *dtype, *count)?
                }
            }
        }
        spec.check()?;
        Ok(Some(Arc::new(GroupTask {
            p2p: self.inner.p2p.clone(),
            spec: Arc::new(spec),
        })))
    }

    /// Sends `buf` to `peer`; messages to one peer arrive in posting order.
    /// Outside a [`Communicator::group`], a send to this rank itself is
    /// refused (nobody could receive it).
    ///
    /// # Stream semantics
    /// Enqueued on `stream`, not complete, on return; `buf` must stay untouched
    /// until the stream has run it. Sends and receives that depend on each other
    /// (a ring exchange) go in one [`Communicator::group`].
    ///
    /// # Graph capture
    /// Capturable: each replay sends (or receives) the buffer's contents at that
    /// time.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// # streamcomm::testing::on_two_ranks(|comm, stream| {
    /// // On each of two ranks (`comm.rank()` is 0 or 1):
    /// let mut buf = HostBuffer::from_slice(&[comm.rank() as f32; 3]);
    /// if comm.rank() == 0 {
    ///     comm.send(&buf, 1, &stream)?;
    /// } else {
    ///     comm.recv(&mut buf, 0, &stream)?;
    /// }
    /// stream.synchronize()?;
    /// assert_eq!(buf.to_vec(), vec![0.0; 3]);
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a peer out of range or equal to this
    /// rank; the stored error if the communicator has failed.
    pub fn send(&self, buf: &impl AsBufView, peer: usize, stream: &HostStream) -> Result<()> {
        self.group(stream, |g| g.send(buf, peer))
    }

    /// Receives a message from `peer` into the front of `buf`; one larger
    /// than `buf` fails with [`Error::Mismatch`](crate::Error::Mismatch) naming both sizes.
    ///
    /// # Stream semantics
    /// Enqueued on `stream`, not complete, on return; `buf` must stay untouched
    /// until the stream has run it. Sends and receives that depend on each other
    /// (a ring exchange) go in one [`Communicator::group`].
    ///
    /// # Graph capture
    /// Capturable: each replay sends (or receives) the buffer's contents at that
    /// time.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// # streamcomm::testing::on_two_ranks(|comm, stream| {
    /// // On each of two ranks (`comm.rank()` is 0 or 1):
    /// let mut inbox = HostBuffer::<u64>::zeroed(8); // may be larger than the message
    /// if comm.rank() == 1 {
    ///     comm.send(&HostBuffer::from_slice(&[42u64; 2]), 0, &stream)?;
    /// } else {
    ///     comm.recv(&mut inbox, 1, &stream)?;
    /// }
    /// stream.synchronize()?;
    /// if comm.rank() == 0 {
    ///     assert_eq!(&inbox.to_vec()[..2], &[42, 42]);
    /// }
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Communicator::send`].
    pub fn recv(&self, buf: &mut impl AsBufView, peer: usize, stream: &HostStream) -> Result<()> {
        self.group(stream, |g| g.recv(buf, peer))
    }

    /// One operation on all of `v`, run by the calling thread in its turn
    /// (`send_host`, `recv_host`: `comm::blocking`): under `ticket` when
    /// one was taken already (by an immediate path that could not finish,
    /// `comm::p2p::immediate`); an invalid call then still takes its turn,
    /// skipping it, so that later operations run.
    pub(crate) fn run_host_in_turn(
        &self,
        name: &'static str,
        dir: Dir,
        peer: usize,
        v: &BufView,
        ticket: Option<u64>,
    ) -> Result<()> {
        let spec = (|| {
            self.inner.core.failure().check()?;
            let mut spec = GroupSpec::new(name, self.inner.core.rank(), self.inner.core.size());
            spec.push(dir, peer, v, 0, v.len())?;
            spec.check()?;
            Ok(spec)
        })();
        let spec = match (spec, ticket) {
            (Ok(spec), _) => spec,
            (Err(e), None) => return Err(e),
            (Err(e), Some(ticket)) => {
                self.inner
                    .core
                    .run_ticketed(ticket, JobMode::Skip, name, |_| Ok(()))?;
                return Err(e);
            }
        };
        let ticket = ticket.unwrap_or_else(|| self.inner.core.turns().take());
        self.inner
            .core
            .run_ticketed(ticket, JobMode::Run, &spec.name, |_| {
                self.inner.p2p.run_group(&spec, ticket)
            })
    }

    /// How this rank's point-to-point bytes travelled so far (eager, direct
    /// rendezvous writes, streamed rendezvous).
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// # streamcomm::testing::on_two_ranks(|comm, stream| {
    /// // On each of two ranks (`comm.rank()` is 0 or 1):
    /// let mut buf = vec![0.0f32; 16];
    /// if comm.rank() == 0 {
    ///     comm.send_host(&buf, 1)?;
    ///     assert_eq!(comm.p2p_stats().sent_eager_messages, 1); // 64 bytes: eager
    /// } else {
    ///     comm.recv_host(&mut buf, 0)?;
    /// }
    /// # Ok(())
    /// # })?;
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn p2p_stats(&self) -> P2pStats {
        self.inner.p2p.state.stats.snapshot()
    }
}
