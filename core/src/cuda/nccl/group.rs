//! NCCL's groups on streamcomm: sends and receives issued inside a group
//! are held and enqueued together, as one group of [`CudaComm`]'s, when the
//! group ends, so that pairs which would wait for each other in stream
//! order (every rank sending before receiving, around a ring) do not.
//! Collectives are enqueued at once (after the sends and receives held
//! before them): they never wait on the host.
//!
//! Two forms, as in `cudarc::nccl`: [`Comm::group`], a [`Group`] of one
//! communicator that ends when dropped, and [`group_start`] …
//! [`group_end`] around calls on any communicators of this thread.

use std::cell::RefCell;
use std::sync::Arc;

use cudarc::driver::{CudaStream, CudaView, CudaViewMut, SyncOnDrop};

use super::result::NcclStatus;
use super::{Comm, NcclError, NcclType, ReduceOp};
use crate::RawSpan;
use crate::cuda::{CudaComm, RawP2p};

/// `cudarc::nccl`'s `group!`: runs the block between [`group_start`] and
/// [`group_end`], here `streamcomm::cuda::nccl::group!` (or
/// `streamcomm::group!`).
///
/// Where cudarc's expands to statements that unwrap the group's end, this
/// one is an expression: the block's value, or the group's end's error,
/// as `Result<_, NcclError>`. A program written for cudarc
/// (`group!({ ... });`) compiles unchanged and is warned that the result
/// is unused; `group!({ ... })?` takes the error.
///
/// # Examples
/// ```no_run
/// use streamcomm::cuda::nccl::{group, Comm};
/// # fn ring(comm: &Comm, buf: &streamcomm::cuda::cudarc::driver::CudaSlice<f32>,
/// #         inb: &mut streamcomm::cuda::cudarc::driver::CudaSlice<f32>)
/// #         -> Result<(), streamcomm::cuda::nccl::NcclError> {
/// let (r, n) = (comm.rank() as i32, comm.world_size() as i32);
/// group!({
///     comm.send(buf, (r + 1) % n)?;
///     comm.recv(inb, (r + n - 1) % n)?;
/// })?;
/// # Ok(())
/// # }
/// ```
#[macro_export]
macro_rules! group {
    ($x:block) => {{
        let _ = $crate::cuda::nccl::group_start();
        let value = (|| -> ::std::result::Result<_, $crate::cuda::nccl::NcclError> {
            ::std::result::Result::Ok($x)
        })();
        let ended = $crate::cuda::nccl::group_end();
        match (value, ended) {
            (::std::result::Result::Ok(v), ::std::result::Result::Ok(_)) => {
                ::std::result::Result::Ok(v)
            }
            (::std::result::Result::Err(e), _) | (_, ::std::result::Result::Err(e)) => {
                ::std::result::Result::Err(e)
            }
        }
    }};
}

/// Sends and receives of one communicator, held until their group ends.
struct Held {
    cuda: Arc<CudaComm>,
    stream: Arc<CudaStream>,
    ops: Vec<RawP2p>,
}

thread_local! {
    /// This thread's open groups (`group_start` nests), and what they hold.
    static OPEN: RefCell<(usize, Vec<Held>)> = const { RefCell::new((0, Vec::new())) };
}

/// Opens a group on this thread (`ncclGroupStart`): sends and receives on
/// any communicator wait for the matching [`group_end`]. Groups nest.
///
/// # Examples
/// ```no_run
/// use streamcomm::cuda::nccl::{group_end, group_start, Comm};
/// # let comms: Vec<Comm> = Vec::new();
/// # let bufs: Vec<_> = comms.iter().map(|c| c.stream().alloc_zeros::<f32>(8).unwrap()).collect();
/// group_start()?;
/// for (c, b) in comms.iter().zip(&bufs) {
///     c.send(b, ((c.rank() + 1) % c.world_size()) as i32)?;
/// }
/// group_end()?; // the sends are enqueued now
/// # Ok::<(), streamcomm::Error>(())
/// ```
///
/// # Errors
/// None; a `Result` for NCCL's shape.
pub fn group_start() -> Result<NcclStatus, NcclError> {
    OPEN.with(|o| o.borrow_mut().0 += 1);
    Ok(NcclStatus::Success)
}

/// Closes this thread's innermost group (`ncclGroupEnd`); the outermost
/// enqueues what the group holds, one group per communicator.
///
/// # Examples
/// ```
/// use streamcomm::cuda::nccl::{group_end, group_start};
/// group_start()?;
/// group_end()?; // an empty group
/// assert!(group_end().is_err(), "no group is open");
/// # Ok::<(), streamcomm::Error>(())
/// ```
///
/// # Errors
/// No group open; the first error of enqueueing what it held (every
/// communicator's held operations are enqueued regardless).
pub fn group_end() -> Result<NcclStatus, NcclError> {
    let held = OPEN.with(|o| {
        let mut o = o.borrow_mut();
        match o.0 {
            0 => Err(crate::Error::invalid("group_end: no group is open")),
            1 => {
                o.0 = 0;
                Ok(std::mem::take(&mut o.1))
            }
            _ => {
                o.0 -= 1;
                Ok(Vec::new())
            }
        }
    })?;
    let mut first = Ok(NcclStatus::Success);
    for h in held {
        if let Err(e) = issue(&h)
            && first.is_ok()
        {
            first = Err(e);
        }
    }
    first
}

/// Enqueues `held`'s operations as one group.
fn issue(held: &Held) -> Result<(), NcclError> {
    // SAFETY: every buffer is a cudarc allocation of the stream's context
    // holding `len` elements of its dtype (lengths from cudarc), kept alive
    // by cudarc until the stream has used it; the stream is the Comm's.
    Ok(unsafe { held.cuda.group_raw(&held.ops, held.stream.cu_stream()) }?)
}

/// A send (`send`) or receive of `comm`: held if a group is open on this
/// thread, else enqueued now as a group of one.
pub(super) fn p2p<T: NcclType>(
    comm: &Comm,
    send: bool,
    peer: usize,
    buf: RawSpan,
) -> Result<(), NcclError> {
    let op = RawP2p {
        send,
        peer,
        dtype: super::dtype_of::<T>()?,
        buf,
    };
    let held = OPEN.with(|o| {
        let mut o = o.borrow_mut();
        if o.0 == 0 {
            return false;
        }
        match o.1.iter_mut().find(|h| Arc::ptr_eq(&h.cuda, &comm.cuda)) {
            Some(h) => h.ops.push(op),
            None => o.1.push(Held {
                cuda: comm.cuda.clone(),
                stream: comm.stream.clone(),
                ops: vec![op],
            }),
        }
        true
    });
    if held {
        return Ok(());
    }
    issue(&Held {
        cuda: comm.cuda.clone(),
        stream: comm.stream.clone(),
        ops: vec![op],
    })
}

/// Enqueues now what this thread's open group holds for `comm`, so that a
/// collective issued next comes after it, as in NCCL's order.
pub(super) fn flush(comm: &Comm) -> Result<(), NcclError> {
    let held = OPEN.with(|o| {
        let mut o = o.borrow_mut();
        let i = o.1.iter().position(|h| Arc::ptr_eq(&h.cuda, &comm.cuda))?;
        Some(o.1.remove(i))
    });
    held.map_or(Ok(()), |h| issue(&h))
}

/// A group of one communicator's operations (`cudarc::nccl`'s `Group`),
/// ended when dropped: its sends and receives are enqueued then, as one
/// group. [`Group::end`] ends it with the error, where dropping only keeps
/// it ([`Comm::async_error`]).
pub struct Group<'a> {
    comm: &'a Comm,
    /// cudarc's records of the buffers' use, made once the group is enqueued.
    syncs: Vec<SyncOnDrop<'a>>,
    ended: bool,
}

impl Comm {
    /// Opens a group on this communicator (`ncclGroupStart`); it ends when
    /// dropped (`ncclGroupEnd`).
    ///
    /// # Examples
    /// ```no_run
    /// # use streamcomm::cuda::nccl::Comm;
    /// # let stream = streamcomm::cuda::cudarc::driver::CudaContext::new(0).expect("GPU").default_stream();
    /// # let comm = Comm::from_env(stream)?;
    /// let (r, n) = (comm.rank(), comm.world_size());
    /// let out = comm.stream().clone_htod(&[r as f32; 64]).expect("copy");
    /// let mut inb = comm.stream().alloc_zeros::<f32>(64).expect("alloc");
    /// let mut group = comm.group();
    /// group.send(out.as_view(), ((r + 1) % n) as i32)?;
    /// group.recv(inb.as_view_mut(), ((r + n - 1) % n) as i32)?;
    /// group.end()?; // or drop(group)
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn group(&self) -> Group<'_> {
        // Cannot fail: a counter.
        let _ = group_start();
        Group {
            comm: self,
            syncs: Vec::new(),
            ended: false,
        }
    }
}

impl<'g> Group<'g> {
    /// The communicator.
    pub fn comm(&self) -> &'g Comm {
        self.comm
    }

    /// Ends the group: its sends and receives are enqueued now.
    ///
    /// # Errors
    /// As [`group_end`].
    pub fn end(mut self) -> Result<NcclStatus, NcclError> {
        self.ended = true;
        let r = group_end();
        self.syncs.clear();
        r
    }

    /// Sends `data` to `peer` when the group ends.
    ///
    /// # Errors
    /// As [`Comm::send`].
    pub fn send<'s: 'g, T: NcclType>(
        &mut self,
        data: CudaView<'s, T>,
        peer: i32,
    ) -> Result<(), NcclError> {
        let peer = self.comm.peer(peer)?;
        let len = data.len();
        let (ptr, sync) = data.view_ptr(&self.comm.stream);
        self.syncs.push(sync);
        p2p::<T>(self.comm, true, peer, RawSpan { ptr, len })
    }

    /// Receives from `peer` into `buff` when the group ends.
    ///
    /// # Errors
    /// As [`Comm::recv`].
    pub fn recv<'r: 'g, T: NcclType>(
        &mut self,
        buff: CudaViewMut<'r, T>,
        peer: i32,
    ) -> Result<NcclStatus, NcclError> {
        let peer = self.comm.peer(peer)?;
        let len = buff.len();
        let (ptr, sync) = buff.view_ptr_mut(&self.comm.stream);
        self.syncs.push(sync);
        p2p::<T>(self.comm, false, peer, RawSpan { ptr, len })?;
        Ok(NcclStatus::Success)
    }

    /// As [`Comm::broadcast`], now.
    ///
    /// # Errors
    /// As [`Comm::broadcast`].
    pub fn broadcast<'s: 'g, 'r: 'g, T: NcclType>(
        &mut self,
        sendbuff: Option<CudaView<'s, T>>,
        mut recvbuff: CudaViewMut<'r, T>,
        root: i32,
    ) -> Result<NcclStatus, NcclError> {
        self.comm.broadcast(sendbuff.as_ref(), &mut recvbuff, root)
    }

    /// As [`Comm::broadcast_in_place`], now.
    ///
    /// # Errors
    /// As [`Comm::broadcast`].
    pub fn broadcast_in_place<'r: 'g, T: NcclType>(
        &mut self,
        mut recvbuff: CudaViewMut<'r, T>,
        root: i32,
    ) -> Result<NcclStatus, NcclError> {
        self.comm.broadcast_in_place(&mut recvbuff, root)
    }

    /// As [`Comm::all_gather`], now.
    ///
    /// # Errors
    /// As [`Comm::all_gather`].
    pub fn all_gather<'s: 'g, 'r: 'g, T: NcclType>(
        &mut self,
        sendbuff: CudaView<'s, T>,
        mut recvbuff: CudaViewMut<'r, T>,
    ) -> Result<NcclStatus, NcclError> {
        self.comm.all_gather(&sendbuff, &mut recvbuff)
    }

    /// As [`Comm::all_reduce`], now.
    ///
    /// # Errors
    /// As [`Comm::all_reduce`].
    pub fn all_reduce<'s: 'g, 'r: 'g, T: NcclType>(
        &mut self,
        sendbuff: CudaView<'s, T>,
        mut recvbuff: CudaViewMut<'r, T>,
        reduce_op: &ReduceOp,
    ) -> Result<NcclStatus, NcclError> {
        self.comm.all_reduce(&sendbuff, &mut recvbuff, reduce_op)
    }

    /// As [`Comm::all_reduce_in_place`], now.
    ///
    /// # Errors
    /// As [`Comm::all_reduce`].
    pub fn all_reduce_in_place<'r: 'g, T: NcclType>(
        &mut self,
        mut buff: CudaViewMut<'r, T>,
        reduce_op: &ReduceOp,
    ) -> Result<NcclStatus, NcclError> {
        self.comm.all_reduce_in_place(&mut buff, reduce_op)
    }

    /// As [`Comm::reduce`], now.
    ///
    /// # Errors
    /// As [`Comm::reduce`].
    pub fn reduce<'s: 'g, 'r: 'g, T: NcclType>(
        &mut self,
        sendbuff: CudaView<'s, T>,
        recvbuff: Option<CudaViewMut<'r, T>>,
        reduce_op: &ReduceOp,
        root: i32,
    ) -> Result<NcclStatus, NcclError> {
        let mut recvbuff = recvbuff;
        self.comm
            .reduce(&sendbuff, recvbuff.as_mut(), reduce_op, root)
    }

    /// As [`Comm::reduce_in_place`], now.
    ///
    /// # Errors
    /// As [`Comm::reduce`].
    pub fn reduce_in_place<'s: 'g, T: NcclType>(
        &mut self,
        mut recvbuff: CudaViewMut<'s, T>,
        reduce_op: &ReduceOp,
        root: i32,
    ) -> Result<NcclStatus, NcclError> {
        self.comm.reduce_in_place(&mut recvbuff, reduce_op, root)
    }

    /// As [`Comm::reduce_scatter`], now.
    ///
    /// # Errors
    /// As [`Comm::reduce_scatter`].
    pub fn reduce_scatter<'s: 'g, 'r: 'g, T: NcclType>(
        &mut self,
        sendbuff: CudaView<'s, T>,
        mut recvbuff: CudaViewMut<'r, T>,
        reduce_op: &ReduceOp,
    ) -> Result<NcclStatus, NcclError> {
        self.comm
            .reduce_scatter(&sendbuff, &mut recvbuff, reduce_op)
    }
}

impl Drop for Group<'_> {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        // Never panics: an error of the group's end is the communicator's
        // (Comm::async_error), as for any operation that failed in flight.
        if let Err(e) = group_end() {
            tracing::warn!(error = %e, "nccl::Group dropped: its end failed");
            // The full error, which the conversion to NCCL's code kept.
            let full =
                super::last_error().unwrap_or_else(|| crate::Error::InvalidUsage(e.to_string()));
            self.comm
                .cuda
                .communicator()
                .inner
                .core
                .failure()
                .fail(&full, crate::comm::failure::Learned::Call);
        }
    }
}
