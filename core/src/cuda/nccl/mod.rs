//! The API of `cudarc::nccl::safe`, on streamcomm: a program written for
//! `cudarc::nccl` compiles and runs after its `use` line changes from
//! `cudarc::nccl::safe::{...}` to `streamcomm::cuda::nccl::{...}`.
//!
//! ```no_run
//! use streamcomm::cuda::cudarc::driver::CudaContext;
//! use streamcomm::cuda::nccl::{Comm, Id, ReduceOp}; // was: cudarc::nccl::safe
//!
//! # fn id_from_rank_0() -> Id { Id::new().unwrap() }
//! # let (rank, world_size) = (0, 2);
//! let id = id_from_rank_0(); // Id::new() on rank 0, its internal() sent to the others
//! let stream = CudaContext::new(rank)?.default_stream();
//! let comm = Comm::from_rank(stream.clone(), rank, world_size, id)?;
//! let send = stream.clone_htod(&[1.0f32; 1024])?;
//! let mut recv = stream.alloc_zeros::<f32>(1024)?;
//! comm.all_reduce(&send, &mut recv, &ReduceOp::Sum)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Where it differs from `cudarc::nccl` (the guide `docs/guide/cuda.md`
//! has a section on moving over):
//! - No libnccl: the operations are [`CudaComm`]'s. [`Id`]'s 128 bytes
//!   carry a [`UniqueId`] (the address of a bootstrap root that `Id::new`
//!   starts in this process, and a secret).
//! - The error is [`crate::Error`] ([`NcclError`] names it): it implements
//!   [`std::error::Error`], says what was wrong, and a peer that fails or
//!   hangs becomes an error instead of a hang ([`Comm::async_error`]).
//! - Dropping a [`Comm`] or a [`Group`] never panics; [`Comm`] is `Send`
//!   and `Sync`; [`Comm::abort`] and [`Comm::async_error`] are there.
//! - A [`Group`] (or [`group_start`] … [`group_end`]) fuses its sends and
//!   receives into one group of streamcomm's, issued when the group ends,
//!   so pairs that would wait for each other do not; its collectives are
//!   enqueued at once (they never wait on the host). Inside
//!   `group_start`/`group_end` the buffers' cudarc events are recorded when
//!   each call returns, before the group is enqueued: order other streams
//!   that use those buffers yourself (a [`Group`] keeps the order right).
//! - [`Comm::from_devices`] makes one rank per stream as threads of this
//!   process; the streams must be on different devices (as NCCL requires).

mod error;
mod group;
pub mod sys;

use std::ffi::c_char;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaStream, DevicePtr, DevicePtrMut, SyncOnDrop};

use super::CudaComm;
use super::raw::raw_call;
use crate::bootstrap::UniqueId;
use crate::{Collective, Communicator, DataType, Error};
use crate::{RawBuffers, RawSpan};

pub use crate::group;
pub use error::{NcclError, last_error};
pub use group::{Group, group_end, group_start};
use sys::ncclDataType_t;

/// An element type NCCL can move: `cudarc::nccl`'s open trait. Implemented
/// for `f32`, `f64`, `i8`, `i32`, `i64`, `u8`, `u32`, `u64`, `char`,
/// `half::f16` and `half::bf16`; a type of your own names the NCCL type of
/// the same size and layout.
///
/// An operation checks that `T`'s size is the named type's and refuses it
/// otherwise, naming both: `char` (4 bytes) is `ncclUint8` in cudarc's
/// list, as here, so it is refused where cudarc would move a quarter of
/// the bytes.
///
/// # Examples
/// ```
/// use streamcomm::cuda::nccl::{NcclType, sys::ncclDataType_t};
///
/// #[derive(Clone, Copy)]
/// #[repr(transparent)]
/// struct Meters(f32);
/// impl NcclType for Meters {
///     fn as_nccl_type() -> ncclDataType_t {
///         ncclDataType_t::ncclFloat32
///     }
/// }
/// assert_eq!(f32::as_nccl_type(), ncclDataType_t::ncclFloat32);
/// ```
pub trait NcclType {
    /// The NCCL type of `Self`'s elements.
    fn as_nccl_type() -> ncclDataType_t;
}

macro_rules! nccl_type {
    ($($t:ty => $v:ident),* $(,)?) => {
        $(impl NcclType for $t {
            fn as_nccl_type() -> ncclDataType_t {
                ncclDataType_t::$v
            }
        })*
    };
}

nccl_type!(
    f32 => ncclFloat32, f64 => ncclFloat64, i8 => ncclInt8, i32 => ncclInt32,
    i64 => ncclInt64, u8 => ncclUint8, u32 => ncclUint32, u64 => ncclUint64,
    char => ncclUint8, half::f16 => ncclFloat16, half::bf16 => ncclBfloat16,
);

/// `T`'s element type, checked against `T`'s size.
fn dtype_of<T: NcclType>() -> Result<DataType, Error> {
    let nccl = T::as_nccl_type();
    let dtype = nccl.data_type()?;
    let size = std::mem::size_of::<T>();
    if size != dtype.size() {
        return Err(Error::invalid(format!(
            "{} is {size} bytes but its NcclType says {nccl:?}, {} bytes a element",
            std::any::type_name::<T>(),
            dtype.size()
        )));
    }
    Ok(dtype)
}

/// `cudarc::nccl::result`'s names: the status and error of every call,
/// groups, the version.
pub mod result {
    pub use super::NcclError;
    pub use super::group::{group_end, group_start};

    /// The NCCL version whose API this covers, as `ncclGetVersion` codes it
    /// (`major * 10000 + minor * 100 + patch`: 23000 for 2.30.0).
    ///
    /// # Examples
    /// ```
    /// let v = streamcomm::cuda::nccl::result::get_nccl_version()?;
    /// assert_eq!(v / 10000, 2);
    /// # Ok::<(), streamcomm::cuda::nccl::NcclError>(())
    /// ```
    ///
    /// # Errors
    /// None; a `Result` for cudarc's shape.
    pub fn get_nccl_version() -> Result<std::ffi::c_int, NcclError> {
        Ok(super::sys::NCCL_VERSION_CODE)
    }

    /// What an operation that was enqueued returns, as NCCL's `ncclResult_t`
    /// does (streamcomm always returns [`NcclStatus::Success`]).
    ///
    /// # Examples
    /// ```
    /// use streamcomm::cuda::nccl::result::NcclStatus;
    /// assert_eq!(NcclStatus::Success, NcclStatus::Success);
    /// ```
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum NcclStatus {
        /// Enqueued.
        Success,
        /// Enqueued, still in progress (never returned: kept for NCCL's shape).
        InProgress,
        /// NCCL's result count (never returned).
        NumResults,
    }
}

use result::NcclStatus;

/// NCCL's reduction operators.
///
/// # Examples
/// ```
/// use streamcomm::cuda::nccl::ReduceOp;
/// let op = ReduceOp::Avg;
/// assert!(matches!(op, ReduceOp::Avg));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    /// Sum.
    Sum,
    /// Product.
    Prod,
    /// Maximum.
    Max,
    /// Minimum.
    Min,
    /// Sum divided by the rank count.
    Avg,
}

impl From<&ReduceOp> for crate::ReduceOp {
    fn from(op: &ReduceOp) -> crate::ReduceOp {
        match op {
            ReduceOp::Sum => crate::ReduceOp::Sum,
            ReduceOp::Prod => crate::ReduceOp::Prod,
            ReduceOp::Max => crate::ReduceOp::Max,
            ReduceOp::Min => crate::ReduceOp::Min,
            ReduceOp::Avg => crate::ReduceOp::Avg,
        }
    }
}

/// Bytes of [`Id::internal`], as `ncclUniqueId`'s.
const ID_BYTES: usize = 128;

/// A communicator's id, `ncclUniqueId`'s shape: 128 bytes to send from the
/// rank that made it to every other rank.
///
/// # Examples
/// ```
/// use streamcomm::cuda::nccl::Id;
/// let id = Id::new()?;                  // rank 0: starts the bootstrap root here
/// let bytes = *id.internal();           // send these to the other ranks
/// let theirs = Id::uninit(bytes);       // on every other rank
/// assert_eq!(theirs.internal(), id.internal());
/// # Ok::<(), streamcomm::Error>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Id {
    internal: [c_char; ID_BYTES],
}

impl Id {
    /// A new id, serving its bootstrap root from this process (as
    /// `ncclGetUniqueId` does).
    ///
    /// # Errors
    /// As [`UniqueId::new`].
    pub fn new() -> Result<Id, NcclError> {
        Ok(Id::from_unique(&UniqueId::new()?))
    }

    /// The id whose bytes are `internal` (received from the rank that made
    /// it); checked when a communicator is made from it.
    pub fn uninit(internal: [c_char; ID_BYTES]) -> Id {
        Id { internal }
    }

    /// The id's bytes, to send to the other ranks.
    pub fn internal(&self) -> &[c_char; ID_BYTES] {
        &self.internal
    }

    fn from_unique(id: &UniqueId) -> Id {
        let mut internal = [0 as c_char; ID_BYTES];
        for (d, s) in internal.iter_mut().zip(id.to_bytes()) {
            *d = s as c_char;
        }
        Id { internal }
    }

    fn unique(&self) -> Result<UniqueId, NcclError> {
        let bytes: Vec<u8> = self.internal[..UniqueId::BYTES]
            .iter()
            .map(|&c| c as u8)
            .collect();
        Ok(UniqueId::from_bytes(&bytes)?)
    }
}

/// One rank of a communicator on one cudarc stream, `cudarc::nccl`'s
/// `Comm`: every operation is enqueued on that stream.
pub struct Comm {
    cuda: Arc<CudaComm>,
    stream: Arc<CudaStream>,
    rank: usize,
    world_size: usize,
}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Comm")
            .field("rank", &self.rank)
            .field("world_size", &self.world_size)
            .field("ordinal", &self.ordinal())
            .finish()
    }
}

/// Writes the look-alike's reductions with separate buffers, as cudarc
/// declares them (`sendbuff`, `recvbuff`, `reduce_op`): one entry a
/// collective, each method one call into [`Comm::separate`].
macro_rules! reductions {
    ($($(#[$doc:meta])* $name:ident = $collective:expr;)*) => {
        $(
            $(#[$doc])*
            pub fn $name<S: DevicePtr<T>, R: DevicePtrMut<T>, T: NcclType>(
                &self,
                sendbuff: &S,
                recvbuff: &mut R,
                reduce_op: &ReduceOp,
            ) -> Result<NcclStatus, NcclError> {
                self.separate::<T>($collective, reduce_op, Some(sendbuff as _), Some(recvbuff))
            }
        )*
    };
}
impl Comm {
    /// Rank `rank` of `world_size` ranks of the communicator `id` names,
    /// on `stream`'s device (`ncclCommInitRank`; every rank calls it).
    ///
    /// # Examples
    /// ```no_run
    /// use streamcomm::cuda::cudarc::driver::CudaContext;
    /// use streamcomm::cuda::nccl::{Comm, Id};
    /// # let id = Id::new()?;
    /// let stream = CudaContext::new(0).expect("device 0").default_stream();
    /// let comm = Comm::from_rank(stream, 0, 1, id)?;
    /// assert_eq!((comm.rank(), comm.world_size()), (0, 1));
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// A malformed id; as [`Communicator::init`] and [`CudaComm::new`].
    pub fn from_rank(
        stream: Arc<CudaStream>,
        rank: usize,
        world_size: usize,
        id: Id,
    ) -> Result<Comm, NcclError> {
        Comm::bind(
            &Communicator::init(&id.unique()?, rank, world_size)?,
            stream,
        )
    }

    /// This rank of the job a launcher started (`streamcomm-run`, torchrun,
    /// Slurm, Open MPI: [`Communicator::from_env`]), on `stream`'s device:
    /// no id to ship by hand. Not in `cudarc::nccl`.
    ///
    /// # Examples
    /// ```no_run
    /// use streamcomm::cuda::cudarc::driver::CudaContext;
    /// use streamcomm::cuda::nccl::Comm;
    /// // streamcomm-run -n 2 -- ./train
    /// let stream = CudaContext::new(0).expect("device 0").default_stream();
    /// let comm = Comm::from_env(stream)?;
    /// println!("rank {} of {}", comm.rank(), comm.world_size());
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Communicator::from_env`] and [`CudaComm::new`].
    pub fn from_env(stream: Arc<CudaStream>) -> Result<Comm, NcclError> {
        Comm::bind(&Communicator::from_env()?, stream)
    }

    /// `comm` on `stream`'s device (a collective call: [`CudaComm::new`]).
    fn bind(comm: &Communicator, stream: Arc<CudaStream>) -> Result<Comm, NcclError> {
        let cuda = CudaComm::new(comm, stream.context().clone())?;
        Ok(Comm {
            cuda: Arc::new(cuda),
            stream,
            rank: comm.rank(),
            world_size: comm.size(),
        })
    }

    /// One communicator over `streams`, rank `i` on `streams[i]`, made
    /// from this process (`ncclCommInitAll`): the ranks are threads, so
    /// the streams must be on different devices.
    ///
    /// # Examples
    /// ```no_run
    /// use streamcomm::cuda::cudarc::driver::CudaContext;
    /// use streamcomm::cuda::nccl::Comm;
    /// let streams = (0..2)
    ///     .map(|d| CudaContext::new(d).map(|c| c.default_stream()))
    ///     .collect::<Result<Vec<_>, _>>()?;
    /// let comms = Comm::from_devices(streams)?;
    /// assert_eq!(comms.len(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// As [`Comm::from_rank`] on any rank; two streams on one device.
    pub fn from_devices(streams: Vec<Arc<CudaStream>>) -> Result<Vec<Comm>, NcclError> {
        let n = streams.len();
        let id = Id::new()?;
        let ranks: Vec<_> = streams
            .into_iter()
            .enumerate()
            .map(|(rank, stream)| std::thread::spawn(move || Comm::from_rank(stream, rank, n, id)))
            .collect();
        let mut comms = Vec::with_capacity(n);
        let mut first_error = None;
        for (rank, made) in ranks.into_iter().enumerate() {
            match made.join() {
                Ok(Ok(comm)) => comms.push(comm),
                Ok(Err(e)) => {
                    first_error.get_or_insert(e);
                }
                Err(_) => {
                    first_error.get_or_insert(NcclError::from(Error::Aborted(format!(
                        "Comm::from_devices: the thread making rank {rank} panicked"
                    ))));
                }
            }
        }
        match first_error {
            None => Ok(comms),
            Some(e) => Err(e),
        }
    }

    /// The stream every operation is enqueued on.
    pub fn stream(&self) -> Arc<CudaStream> {
        self.stream.clone()
    }

    /// The stream's context.
    pub fn context(&self) -> &Arc<CudaContext> {
        self.stream.context()
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.stream.context().ordinal()
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks.
    pub fn world_size(&self) -> usize {
        self.world_size
    }

    /// The [`CudaComm`] underneath, for what `cudarc::nccl` lacks
    /// (barriers, all-to-all, gather, scatter, split, shrink).
    pub fn cuda(&self) -> &CudaComm {
        &self.cuda
    }

    /// Fails the communicator on every rank: operations waiting in streams
    /// drain with the error, and every later call returns it
    /// (`ncclCommAbort`; [`Communicator::abort`]).
    pub fn abort(&self) {
        self.cuda.communicator().abort();
    }

    /// The first error of this communicator or one of its operations, if
    /// any (`ncclCommGetAsyncError`), in full: streamcomm's [`Error`].
    pub fn async_error(&self) -> Option<Error> {
        self.cuda.async_error()
    }

    /// Sends `data` to `peer` (`ncclSend`). Inside [`group_start`] …
    /// [`group_end`] it waits for the group's end to be enqueued.
    ///
    /// # Errors
    /// A peer out of range; a failed communicator.
    pub fn send<S: DevicePtr<T>, T: NcclType>(&self, data: &S, peer: i32) -> Result<(), NcclError> {
        let peer = self.peer(peer)?;
        self.cuda.check_capturable(&self.stream, "send")?;
        let (ptr, _read) = data.device_ptr(&self.stream);
        let buf = RawSpan {
            ptr,
            len: data.len(),
        };
        group::p2p::<T>(self, true, peer, buf)
    }

    /// Receives from `peer` into `buff` (`ncclRecv`).
    ///
    /// # Errors
    /// As [`Comm::send`].
    pub fn recv<R: DevicePtrMut<T>, T: NcclType>(
        &self,
        buff: &mut R,
        peer: i32,
    ) -> Result<NcclStatus, NcclError> {
        let peer = self.peer(peer)?;
        self.cuda.check_capturable(&self.stream, "recv")?;
        let len = buff.len();
        let (ptr, _write) = buff.device_ptr_mut(&self.stream);
        group::p2p::<T>(self, false, peer, RawSpan { ptr, len })?;
        Ok(NcclStatus::Success)
    }

    /// Broadcasts `root`'s `sendbuff` into every rank's `recvbuff`
    /// (`ncclBroadcast`); other ranks may pass `None`.
    ///
    /// # Errors
    /// The root without `sendbuff`; as [`CudaComm::broadcast`].
    pub fn broadcast<S: DevicePtr<T>, R: DevicePtrMut<T>, T: NcclType>(
        &self,
        sendbuff: Option<&S>,
        recvbuff: &mut R,
        root: i32,
    ) -> Result<NcclStatus, NcclError> {
        let root = self.peer(root)?;
        if root == self.rank && sendbuff.is_none() {
            return Err(Error::invalid("broadcast: the root must pass a sendbuff").into());
        }
        let coll = Collective::Broadcast { root };
        self.separate::<T>(
            coll,
            &ReduceOp::Sum,
            sendbuff.map(|s| s as _),
            Some(recvbuff),
        )
    }

    /// Broadcasts `root`'s `recvbuff` into every rank's, in place.
    ///
    /// # Errors
    /// As [`Comm::broadcast`].
    pub fn broadcast_in_place<R: DevicePtrMut<T>, T: NcclType>(
        &self,
        recvbuff: &mut R,
        root: i32,
    ) -> Result<NcclStatus, NcclError> {
        let root = self.peer(root)?;
        self.in_place::<T>(Collective::Broadcast { root }, &ReduceOp::Sum, recvbuff)
    }

    /// Every rank's `sendbuff`, in rank order, into every rank's `recvbuff`
    /// (`ncclAllGather`).
    ///
    /// # Errors
    /// As [`CudaComm::all_gather`].
    pub fn all_gather<S: DevicePtr<T>, R: DevicePtrMut<T>, T: NcclType>(
        &self,
        sendbuff: &S,
        recvbuff: &mut R,
    ) -> Result<NcclStatus, NcclError> {
        self.separate::<T>(
            Collective::AllGather,
            &ReduceOp::Sum,
            Some(sendbuff as _),
            Some(recvbuff),
        )
    }

    reductions! {
        /// Reduces every rank's `sendbuff` into every rank's `recvbuff`
        /// (`ncclAllReduce`).
        ///
        /// # Errors
        /// As [`CudaComm::all_reduce`].
        all_reduce = Collective::AllReduce;

        /// Reduces every rank's `sendbuff` and scatters the result: rank `r`'s
        /// `recvbuff` gets block `r` (`ncclReduceScatter`).
        ///
        /// # Errors
        /// As [`CudaComm::reduce_scatter`].
        reduce_scatter = Collective::ReduceScatter;
    }

    /// [`Comm::all_reduce`] in place.
    ///
    /// # Errors
    /// As [`Comm::all_reduce`].
    pub fn all_reduce_in_place<R: DevicePtrMut<T>, T: NcclType>(
        &self,
        buff: &mut R,
        reduce_op: &ReduceOp,
    ) -> Result<NcclStatus, NcclError> {
        self.in_place::<T>(Collective::AllReduce, reduce_op, buff)
    }

    /// Reduces every rank's `sendbuff` into `root`'s `recvbuff`
    /// (`ncclReduce`); other ranks may pass `None`.
    ///
    /// # Errors
    /// The root without `recvbuff`; as [`CudaComm::reduce`].
    pub fn reduce<S: DevicePtr<T>, R: DevicePtrMut<T>, T: NcclType>(
        &self,
        sendbuff: &S,
        recvbuff: Option<&mut R>,
        reduce_op: &ReduceOp,
        root: i32,
    ) -> Result<NcclStatus, NcclError> {
        let root = self.peer(root)?;
        if root == self.rank && recvbuff.is_none() {
            return Err(Error::invalid("reduce: the root must pass a recvbuff").into());
        }
        let coll = Collective::Reduce { root };
        let recv = recvbuff.map(|r| r as &mut dyn DevicePtrMut<T>);
        self.separate::<T>(coll, reduce_op, Some(sendbuff as _), recv)
    }

    /// [`Comm::reduce`] in place: `root`'s `recvbuff` gets the result.
    ///
    /// # Errors
    /// As [`Comm::reduce`].
    pub fn reduce_in_place<R: DevicePtrMut<T>, T: NcclType>(
        &self,
        recvbuff: &mut R,
        reduce_op: &ReduceOp,
        root: i32,
    ) -> Result<NcclStatus, NcclError> {
        let root = self.peer(root)?;
        self.in_place::<T>(Collective::Reduce { root }, reduce_op, recvbuff)
    }

    /// `peer` as a rank, or the error naming it.
    fn peer(&self, peer: i32) -> Result<usize, NcclError> {
        usize::try_from(peer)
            .ok()
            .filter(|&p| p < self.world_size)
            .ok_or_else(|| {
                NcclError::from(Error::invalid(format!(
                    "rank {peer} is not a rank of this communicator of {}",
                    self.world_size
                )))
            })
    }

    /// A collective with separate buffers (either may be absent where the
    /// collective does not use it on this rank).
    fn separate<T: NcclType>(
        &self,
        collective: Collective,
        op: &ReduceOp,
        send: Option<&dyn DevicePtr<T>>,
        recv: Option<&mut dyn DevicePtrMut<T>>,
    ) -> Result<NcclStatus, NcclError> {
        let name = collective.name();
        let capturing = self.cuda.check_capturable(&self.stream, name)?;
        // cudarc's tracking: waits now, records when the guards drop,
        // after the enqueue.
        let mut guards: Vec<SyncOnDrop<'_>> = Vec::with_capacity(2);
        let send = send.map_or(RawSpan { ptr: 0, len: 0 }, |s| {
            let len = s.len();
            let (ptr, g) = s.device_ptr(&self.stream);
            guards.push(g);
            RawSpan { ptr, len }
        });
        let recv = recv.map_or(RawSpan { ptr: 0, len: 0 }, |r| {
            let len = r.len();
            let (ptr, g) = r.device_ptr_mut(&self.stream);
            guards.push(g);
            RawSpan { ptr, len }
        });
        let buffers = RawBuffers::Separate { send, recv };
        self.collective::<T>(collective, op, buffers, capturing)
    }

    /// A collective in place.
    fn in_place<T: NcclType>(
        &self,
        collective: Collective,
        op: &ReduceOp,
        buff: &mut dyn DevicePtrMut<T>,
    ) -> Result<NcclStatus, NcclError> {
        let capturing = self
            .cuda
            .check_capturable(&self.stream, collective.name())?;
        let len = buff.len();
        let (ptr, _write) = buff.device_ptr_mut(&self.stream);
        let buffer = RawBuffers::InPlace(RawSpan { ptr, len });
        self.collective::<T>(collective, op, buffer, capturing)
    }

    /// Enqueues a collective (after the sends and receives this thread's
    /// open group holds for this communicator, which come first);
    /// `capturing` is what the capture check learned of the stream.
    fn collective<T: NcclType>(
        &self,
        collective: Collective,
        op: &ReduceOp,
        buffers: RawBuffers,
        capturing: Option<bool>,
    ) -> Result<NcclStatus, NcclError> {
        group::flush(self)?;
        let call = raw_call(collective, dtype_of::<T>()?, op.into(), buffers)?;
        // SAFETY: the buffers are cudarc allocations of this stream's
        // context holding `len` elements of `T` (their lengths come from
        // cudarc), which cudarc keeps alive until the stream has used them
        // (its own rule: a buffer is freed in stream order); the stream is
        // the one this Comm holds.
        unsafe {
            self.cuda
                .enqueue_raw(&call, self.stream.cu_stream(), capturing)
        }?;
        Ok(NcclStatus::Success)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_carries_its_unique_id_through_its_bytes() {
        let unique = UniqueId::from_parts("127.0.0.1:4242".parse().unwrap(), [7; 16]);
        let id = Id::from_unique(&unique);
        let back = Id::uninit(*id.internal()).unique().unwrap();
        assert_eq!(back, unique);
        assert!(
            Id::uninit([0; ID_BYTES]).unique().is_err(),
            "zeros are no id"
        );
    }

    #[test]
    fn comm_is_send_and_sync() {
        fn both<T: Send + Sync>() {}
        both::<Comm>();
        both::<Id>();
    }
}
