//! Host memory that streams operate on, the host backend's "device memory".
//!
//! A [`HostBuffer`] owns its memory, as a `Vec` does (or a cudarc
//! `CudaSlice`): it is not `Clone`, and writing to it takes `&mut self`.
//! Operations enqueued on a stream keep their own handle to the memory
//! until they have run (see the buffer's `# Stream semantics`). Stream tasks
//! and the host read and write it through short-lived locks, so a program
//! that forgets to synchronize sees stale values, never undefined behaviour.
//! Collectives take the locks one chunk at a time, and always in address
//! order, so two streams touching the same pair of buffers cannot deadlock
//! on them.

use std::fmt;
use std::marker::PhantomData;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use half::{bf16, f16};

use super::{HostStream, SharedHostBuffer};

use crate::{DataType, Error, Result};

/// An element type a buffer may hold: one of the ten types the reduction
/// kernels know (`f32`, `f64`, `f16`, `bf16`, `i8`, `u8`, `i32`, `u32`,
/// `i64`, `u64`), each with its [`DataType`].
///
/// The trait is sealed: it cannot be implemented outside this crate, since
/// a reduction interprets the bytes as its [`DataType`] says (and each
/// type's size is checked against its `DataType` at compile time):
///
/// ```compile_fail
/// # use streamcomm::{host::Element, DataType};
/// #[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
/// #[repr(transparent)]
/// struct Meters(f32);
/// impl Element for Meters { // error: the trait `Sealed` is not implemented
///     const DTYPE: DataType = DataType::F32;
/// }
/// ```
///
/// # Sending plain-old-data structs
/// A `#[repr(C)]` struct without padding that derives
/// [`bytemuck::Pod`] travels as its bytes, through `u8` slices
/// ([`bytemuck::cast_slice`] / [`bytemuck::cast_slice_mut`], no copy) or a
/// `HostBuffer<u8>` (point-to-point, broadcast, gathers; a reduction of
/// such bytes would add them as `u8`s, which is rarely what is meant):
///
/// ```
/// # use streamcomm::{bootstrap::UniqueId, Communicator};
/// #[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
/// #[repr(C)]
/// struct Particle {
///     position: [f32; 3],
///     id: u32,
/// }
/// # streamcomm::testing::on_two_ranks(|comm, _stream| {
/// // On each of two ranks (`comm.rank()` is 0 or 1):
/// let sent: Vec<Particle> = (0..4)
///     .map(|i| Particle { position: [i as f32, 0.5, -1.0], id: i })
///     .collect();
/// if comm.rank() == 0 {
///     comm.send_host(bytemuck::cast_slice::<Particle, u8>(&sent), 1)?;
/// } else {
///     let mut got = vec![Particle { position: [0.0; 3], id: u32::MAX }; 4];
///     comm.recv_host(bytemuck::cast_slice_mut::<Particle, u8>(&mut got), 0)?;
///     assert_eq!(got, sent);
/// }
/// # Ok(())
/// # })?;
/// # Ok::<(), streamcomm::Error>(())
/// ```
pub trait Element: sealed::Sealed + bytemuck::Pod + Send + Sync + fmt::Debug + 'static {
    /// The matching [`DataType`].
    const DTYPE: DataType;
}

/// Keeps [`Element`] to the types the kernels know.
mod sealed {
    /// Implemented for the [`super::Element`] types only.
    pub trait Sealed {}
}

macro_rules! element {
    ($($t:ty => $d:ident),* $(,)?) => {
        $(
            impl sealed::Sealed for $t {}
            impl Element for $t { const DTYPE: DataType = DataType::$d; }
            // The element's size is its DataType's, checked at compile time.
            const _: () = assert!(std::mem::size_of::<$t>() == DataType::$d.size());
        )*
    };
}
element!(f32 => F32, f64 => F64, f16 => F16, bf16 => Bf16, i8 => I8, u8 => U8,
         i32 => I32, u32 => U32, i64 => I64, u64 => U64);

/// Untyped shared storage behind a [`HostBuffer`]: 64-byte aligned bytes
/// owned by the buffer, or memory owned by the caller
/// ([`RawBuffer::from_raw_parts`], what the C API wraps).
///
/// Cloning a `RawBuffer` gives another handle to the same storage (what a
/// stream operation keeps until it has run); a `RawBuffer` gives no access
/// to the bytes themselves.
#[derive(Clone)]
pub(crate) struct RawBuffer {
    inner: Arc<RwLock<Storage>>,
    bytes: usize,
}

/// Where a [`RawBuffer`]'s bytes live.
pub(crate) enum Storage {
    /// An allocation the buffer owns.
    Owned(Box<[Block]>),
    /// `bytes` bytes at `ptr` (the second field), owned by the caller of
    /// [`RawBuffer::from_raw_parts`], who keeps them valid while any handle
    /// to the buffer may still touch them.
    External(std::ptr::NonNull<u8>, usize),
    /// A caller's `Vec` moved in by [`HostBuffer::from_vec`]: its bytes at
    /// `ptr`, owned by `vec` (taken back by [`HostBuffer::into_vec`]).
    Vec {
        ptr: std::ptr::NonNull<u8>,
        bytes: usize,
        vec: Option<Box<dyn std::any::Any + Send + Sync>>,
    },
}

impl Drop for Storage {
    fn drop(&mut self) {
        // The memory goes away (or back to its owner): whoever keeps state
        // keyed by its addresses (a cache of RDMA registrations) drops it.
        let (addr, len) = match self {
            Storage::Owned(blocks) => (blocks.as_ptr() as usize, blocks.len() * 64),
            Storage::External(ptr, bytes) | Storage::Vec { ptr, bytes, .. } => {
                (ptr.as_ptr() as usize, *bytes)
            }
        };
        super::release_hooks::released(addr, len);
    }
}

// SAFETY: `Storage::External` is a plain pointer to memory that the caller of
// `RawBuffer::from_raw_parts` promised stays valid and is not otherwise
// accessed while stream work uses it (its `# Safety` contract);
// `Storage::Vec`'s pointer is into the `Vec` the storage itself owns (a
// `Send + Sync` box). Every access goes through the buffer's `RwLock`,
// exactly as for owned storage, so moving or sharing the pointer between
// threads adds no data race of its own.
unsafe impl Send for Storage {}
// SAFETY: as for `Send` above: shared access only reads through the lock.
unsafe impl Sync for Storage {}

#[derive(Clone, Copy, bytemuck::Zeroable, bytemuck::Pod)]
#[repr(C, align(64))]
pub(crate) struct Block([u8; 64]);

impl fmt::Debug for RawBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RawBuffer({} bytes at {:#x})", self.bytes, self.addr())
    }
}

impl RawBuffer {
    /// A zeroed allocation of `bytes` bytes.
    pub(crate) fn zeroed(bytes: usize) -> RawBuffer {
        let blocks = bytes.div_ceil(64);
        RawBuffer {
            inner: Arc::new(RwLock::new(Storage::Owned(
                vec![Block([0; 64]); blocks].into_boxed_slice(),
            ))),
            bytes,
        }
    }

    /// Wraps `bytes` bytes of caller-owned memory at `ptr`, without copying
    /// (what a C caller passes as `void*` + count, as with NCCL). Streams and
    /// the host access them through the buffer's lock like owned storage.
    ///
    /// # Safety
    /// Until the last handle to the returned buffer (and to every
    /// [`UntypedBuffer`](crate::comm::UntypedBuffer) or view made from it) is
    /// dropped, which for stream work is when the operation that uses it has
    /// *completed* (stream synchronized, or an event recorded after it has
    /// completed), the memory must:
    /// - be valid for reads of `bytes` bytes, and for writes too unless the
    ///   buffer is only ever read (a send buffer), and not be freed;
    /// - not be read or written by anything else (other threads, other
    ///   buffers wrapping overlapping memory) while stream work may use it.
    ///
    /// A null `ptr` is allowed only with `bytes == 0`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a null `ptr` with `bytes > 0`.
    pub(crate) unsafe fn from_raw_parts(ptr: *mut u8, bytes: usize) -> Result<RawBuffer> {
        let ptr = match std::ptr::NonNull::new(ptr) {
            Some(p) => p,
            None if bytes == 0 => std::ptr::NonNull::dangling(),
            None => {
                return Err(Error::invalid(format!(
                    "from_raw_parts: null pointer for {bytes} bytes"
                )));
            }
        };
        Ok(RawBuffer {
            inner: Arc::new(RwLock::new(Storage::External(ptr, bytes))),
            bytes,
        })
    }

    /// Length in bytes.
    pub(crate) fn len_bytes(&self) -> usize {
        self.bytes
    }

    /// True when both handles name the same allocation.
    pub(crate) fn same_as(&self, other: &RawBuffer) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// How many handles share this storage (1: this one only).
    pub(crate) fn handles(&self) -> usize {
        Arc::strong_count(&self.inner)
    }

    /// Address used to order lock acquisition.
    pub(crate) fn addr(&self) -> usize {
        Arc::as_ptr(&self.inner) as usize
    }

    /// Shared access to the bytes.
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, Storage> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Exclusive access to the bytes.
    pub(crate) fn write(&self) -> RwLockWriteGuard<'_, Storage> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on `src`'s bytes read-locked and `dst`'s write-locked,
    /// taking the two locks in address order ([`RawBuffer::addr`]), as
    /// every lock of two buffers in this crate, so that two threads doing
    /// the same in opposite roles can never deadlock. `src` and `dst` must
    /// be two buffers (one buffer would wait for itself).
    pub(crate) fn read_write<R>(
        src: &RawBuffer,
        dst: &RawBuffer,
        f: impl FnOnce(&[u8], &mut [u8]) -> R,
    ) -> R {
        let (sg, mut dg);
        if src.addr() < dst.addr() {
            sg = src.read();
            dg = dst.write();
        } else {
            dg = dst.write();
            sg = src.read();
        }
        f(src.bytes_of(&sg), dst.bytes_of_mut(&mut dg))
    }

    /// Views locked storage as exactly `bytes` bytes.
    pub(crate) fn bytes_of<'a>(&self, storage: &'a Storage) -> &'a [u8] {
        match storage {
            Storage::Owned(blocks) => {
                let all: &[u8] = bytemuck::cast_slice(blocks);
                &all[..self.bytes]
            }
            // SAFETY: `from_raw_parts`' contract: `ptr` is valid for `bytes`
            // bytes while this handle exists, and nothing else writes them;
            // the read lock held by the caller (`storage` borrows its guard)
            // keeps writers of this buffer out for the slice's lifetime.
            Storage::External(ptr, _) => unsafe {
                std::slice::from_raw_parts(ptr.as_ptr(), self.bytes)
            },
            // SAFETY: `ptr` is the data of the `Vec` this storage owns, which
            // holds `bytes` initialised bytes and is never touched while the
            // storage lives; the read lock keeps writers out, as above.
            Storage::Vec { ptr, .. } => unsafe {
                std::slice::from_raw_parts(ptr.as_ptr(), self.bytes)
            },
        }
    }

    /// Views locked storage as exactly `bytes` mutable bytes.
    pub(crate) fn bytes_of_mut<'a>(&self, storage: &'a mut Storage) -> &'a mut [u8] {
        match storage {
            Storage::Owned(blocks) => {
                let all: &mut [u8] = bytemuck::cast_slice_mut(blocks);
                &mut all[..self.bytes]
            }
            // SAFETY: as in `bytes_of`; the caller holds the write lock
            // (`storage` borrows its guard mutably), so this is the only
            // access to the bytes for the slice's lifetime.
            Storage::External(ptr, _) => unsafe {
                std::slice::from_raw_parts_mut(ptr.as_ptr(), self.bytes)
            },
            // SAFETY: as in `bytes_of`, under the write lock.
            Storage::Vec { ptr, .. } => unsafe {
                std::slice::from_raw_parts_mut(ptr.as_ptr(), self.bytes)
            },
        }
    }
}

/// The accessors every typed handle of a [`RawBuffer`] has (a
/// [`HostBuffer`] and a [`SharedHostBuffer`]: fields `raw` and `len`);
/// `$share` is how the doc examples turn a new `HostBuffer` into the
/// handle (`""`, or `".share()"`).
macro_rules! typed_storage_accessors {
    ($share:literal) => {
        /// Number of elements.
        ///
        /// # Examples
        /// ```
        /// # use streamcomm::host::HostBuffer;
        #[doc = concat!("assert_eq!(HostBuffer::<u64>::zeroed(5)", $share, ".len(), 5);")]
        /// ```
        pub fn len(&self) -> usize {
            self.len
        }

        /// True when the buffer holds no elements.
        ///
        /// # Examples
        /// ```
        /// # use streamcomm::host::HostBuffer;
        #[doc = concat!("assert!(HostBuffer::<u64>::zeroed(0)", $share, ".is_empty());")]
        /// ```
        pub fn is_empty(&self) -> bool {
            self.len == 0
        }

        /// The element type.
        ///
        /// # Examples
        /// ```
        /// # use streamcomm::host::HostBuffer;
        /// use streamcomm::DataType;
        #[doc = concat!("assert_eq!(HostBuffer::<half::bf16>::zeroed(1)", $share, ".dtype(), DataType::Bf16);")]
        #[doc = concat!("assert_eq!(HostBuffer::<i32>::zeroed(1)", $share, ".dtype(), DataType::I32);")]
        /// ```
        pub fn dtype(&self) -> DataType {
            T::DTYPE
        }

        /// The untyped storage (its size, and whether two buffers share it).
        pub(crate) fn raw(&self) -> &RawBuffer {
            &self.raw
        }
    };
}
pub(super) use typed_storage_accessors;

/// A typed buffer in host memory, usable by streams and collectives.
///
/// A `HostBuffer` owns its elements, like a `Vec<T>` (or a cudarc
/// `CudaSlice`): it is not `Clone`, reading takes `&self` and writing takes
/// `&mut self`. [`HostBuffer::from_vec`] and [`HostBuffer::into_vec`] move a
/// `Vec`'s allocation in and out without a copy. A read-only handle that
/// may be shared (with a closure on a stream, or several streams sending
/// the same data) is made explicitly with [`HostBuffer::share`]; host work
/// that reads or writes the buffer in stream order is enqueued with
/// [`HostBuffer::with_on_stream`] / [`HostBuffer::with_mut_on_stream`].
///
/// # Stream semantics
/// A stream runs its work later than the call that enqueues it, so every
/// stream-ordered call (a collective, `send`, `recv`, a captured graph)
/// keeps its own handle to the buffer's memory, from the call until the
/// stream has run it (for a graph, until the graph is dropped). Meanwhile:
/// - the caller still owns the `HostBuffer`, but its contents are the
///   stream's: reads see old or new values, writes race with the
///   operation (both memory-safe: every access takes the buffer's lock,
///   but neither is ordered with the stream), so synchronize the stream
///   (or wait on an event recorded after the operation) first;
/// - [`HostBuffer::into_vec`] fails with [`Error::InvalidUsage`] (the
///   allocation cannot leave while the stream may still use it);
/// - dropping the `HostBuffer` is fine: the memory lives until the last
///   handle, the operation's, is gone.
///
/// The host-blocking calls (`all_reduce_host`, `send_host`, ...) take plain
/// slices instead (see [`HostBuffer::read`] / [`HostBuffer::write`]) and
/// keep nothing after they return.
///
/// # Examples
/// ```
/// use streamcomm::host::HostBuffer;
/// let mut buf = HostBuffer::from_slice(&[1.0f32, 2.0, 3.0]);
/// buf.with_mut(|s| s[0] = 5.0);
/// assert_eq!(buf.to_vec(), vec![5.0, 2.0, 3.0]);
/// ```
pub struct HostBuffer<T: Element> {
    raw: RawBuffer,
    len: usize,
    _elem: PhantomData<T>,
}

impl<T: Element> fmt::Debug for HostBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostBuffer<{}>[{}]", T::DTYPE, self.len)
    }
}

impl<T: Element> HostBuffer<T> {
    /// A buffer of `len` zeroed elements.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::HostBuffer;
    /// let buf = HostBuffer::<f32>::zeroed(3);
    /// assert_eq!(buf.to_vec(), vec![0.0; 3]);
    /// ```
    pub fn zeroed(len: usize) -> HostBuffer<T> {
        HostBuffer {
            raw: RawBuffer::zeroed(len * std::mem::size_of::<T>()),
            len,
            _elem: PhantomData,
        }
    }

    /// A buffer holding a copy of `data`.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::HostBuffer;
    /// let buf = HostBuffer::from_slice(&[1u8, 2, 3]);
    /// assert_eq!(buf.to_vec(), vec![1, 2, 3]);
    /// ```
    pub fn from_slice(data: &[T]) -> HostBuffer<T> {
        let mut buf = HostBuffer::zeroed(data.len());
        buf.with_mut(|s| s.copy_from_slice(data));
        buf
    }

    /// A buffer that takes `data`'s allocation over, without copying it:
    /// streams and collectives work on the very memory of the `Vec`, and
    /// [`HostBuffer::into_vec`] gives it back.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::HostBuffer;
    /// let data = vec![1.0f32; 1024];
    /// let at = data.as_ptr();
    /// let mut buf = HostBuffer::from_vec(data);
    /// buf.with_mut(|s| s[0] = 2.0);
    /// let data = buf.into_vec()?;
    /// assert_eq!((data.as_ptr(), data[0]), (at, 2.0)); // the same allocation
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn from_vec(mut data: Vec<T>) -> HostBuffer<T> {
        let len = data.len();
        let bytes = std::mem::size_of_val(data.as_slice());
        let ptr = std::ptr::NonNull::new(data.as_mut_ptr().cast::<u8>())
            .unwrap_or(std::ptr::NonNull::dangling());
        HostBuffer {
            raw: RawBuffer {
                inner: Arc::new(RwLock::new(Storage::Vec {
                    ptr,
                    bytes,
                    vec: Some(Box::new(data)),
                })),
                bytes,
            },
            len,
            _elem: PhantomData,
        }
    }

    /// The elements as a `Vec`: the very allocation [`HostBuffer::from_vec`]
    /// took, without a copy; for a buffer made otherwise (`zeroed`,
    /// `from_slice`), a copy.
    ///
    /// # Stream semantics
    /// Call it once the streams that use the buffer are done with it
    /// (synchronized): every operation enqueued on a stream holds a handle
    /// until it has run, and so does every [`HostBuffer::share`] handle.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::HostBuffer;
    /// let buf = HostBuffer::from_vec(vec![7u32; 4]);
    /// let shared = buf.share();
    /// let e = buf.into_vec().unwrap_err(); // the shared handle still holds it
    /// assert!(e.to_string().contains("another handle"));
    /// assert_eq!(shared.to_vec(), vec![7; 4]); // the memory lives on in `shared`
    ///
    /// let buf = HostBuffer::from_vec(vec![1u8, 2]);
    /// assert_eq!(buf.into_vec()?, vec![1, 2]); // the only handle: the Vec comes back
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidUsage`] while another handle holds the buffer (a
    /// [`HostBuffer::share`] handle, or an operation on a stream that has
    /// not run yet); the buffer is dropped with the error (its memory lives
    /// on in the other handles).
    pub fn into_vec(self) -> Result<Vec<T>> {
        let inner = Arc::try_unwrap(self.raw.inner).map_err(|_| {
            Error::InvalidUsage(format!(
                "into_vec: another handle still holds this HostBuffer<{}> (a shared handle, or an operation on a stream that has not run: synchronize the stream first)",
                T::DTYPE
            ))
        })?;
        let mut storage = inner.into_inner().unwrap_or_else(|p| p.into_inner());
        if let Storage::Vec { vec, .. } = &mut storage {
            // Taken only when it is a `Vec<T>` (a buffer viewed as another
            // element type gives a copy): the storage must keep its bytes
            // otherwise.
            if vec.as_ref().is_some_and(|b| b.is::<Vec<T>>()) {
                let v = vec.take().and_then(|b| b.downcast::<Vec<T>>().ok());
                // The storage's drop tells the release hooks that the bytes
                // left the buffer (an RDMA registration of them is dropped).
                drop(storage);
                return v.map(|v| *v).ok_or_else(|| {
                    Error::InvalidUsage("into_vec: the buffer's Vec is gone".into())
                });
            }
        }
        let raw = RawBuffer {
            inner: Arc::new(RwLock::new(storage)),
            bytes: self.raw.bytes,
        };
        let copy = HostBuffer::<T> {
            raw,
            len: self.len,
            _elem: PhantomData,
        };
        Ok(copy.to_vec())
    }

    typed_storage_accessors!("");

    /// A read-only handle to the same memory, which may be cloned and
    /// moved (into a closure on a stream, to another thread) and passed to
    /// collectives as a *send* buffer; given as a receive buffer it is
    /// refused with [`Error::InvalidArgument`].
    ///
    /// The owner may still write the buffer (`with_mut`, or as a receive
    /// buffer): shared handles see those writes, ordered as any host access
    /// is with stream work (see `# Stream semantics`). While a shared handle
    /// exists, [`HostBuffer::into_vec`] fails.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use std::sync::Arc;
    /// let stream = HostStream::new()?;
    /// let buf = HostBuffer::from_slice(&[1u32, 2, 3]);
    /// let (shared, sum) = (buf.share(), Arc::new(AtomicU32::new(0)));
    /// let s = sum.clone();
    /// stream.host_fn(move || s.store(shared.with(|v| v.iter().sum()), Ordering::Relaxed))?;
    /// stream.synchronize()?;
    /// assert_eq!(sum.load(Ordering::Relaxed), 6);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn share(&self) -> SharedHostBuffer<T> {
        SharedHostBuffer::new(self.raw.clone(), self.len)
    }

    /// Runs `f` with shared access to the elements.
    ///
    /// # Stream semantics
    /// Not ordered with stream work: synchronize the stream first to see the
    /// results of enqueued work.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::HostBuffer;
    /// let buf = HostBuffer::from_slice(&[1.0f32, 2.0, 3.0]);
    /// let sum: f32 = buf.with(|s| s.iter().sum());
    /// assert_eq!(sum, 6.0);
    /// ```
    pub fn with<R>(&self, f: impl FnOnce(&[T]) -> R) -> R {
        f(&self.read())
    }

    /// Runs `f` with exclusive access to the elements.
    ///
    /// # Stream semantics
    /// As [`HostBuffer::with`].
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::HostBuffer;
    /// let mut buf = HostBuffer::<u32>::zeroed(4);
    /// buf.with_mut(|s| s.iter_mut().enumerate().for_each(|(i, x)| *x = i as u32));
    /// assert_eq!(buf.to_vec(), vec![0, 1, 2, 3]);
    /// ```
    pub fn with_mut<R>(&mut self, f: impl FnOnce(&mut [T]) -> R) -> R {
        f(&mut self.write())
    }

    /// Enqueues `f` on `stream` with shared access to the elements: the
    /// stream-ordered counterpart of [`HostBuffer::with`] (a host task that
    /// reads what earlier work on the stream wrote).
    ///
    /// # Stream semantics
    /// The stream keeps a handle to the memory until the task has run (for
    /// a captured graph, until the graph is dropped), as collectives do; `f`
    /// runs on each replay.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use std::sync::Arc;
    /// let stream = HostStream::new()?;
    /// let mut buf = HostBuffer::<u64>::zeroed(4);
    /// buf.with_mut_on_stream(&stream, |s| s.fill(5))?;
    /// let total = Arc::new(AtomicU64::new(0));
    /// let t = total.clone();
    /// buf.with_on_stream(&stream, move |s| t.store(s.iter().sum(), Ordering::Relaxed))?;
    /// stream.synchronize()?;
    /// assert_eq!(total.load(Ordering::Relaxed), 20);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`HostStream::host_fn`].
    pub fn with_on_stream(
        &self,
        stream: &HostStream,
        f: impl Fn(&[T]) + Send + Sync + 'static,
    ) -> Result<()> {
        let shared = self.share();
        stream.host_fn(move || shared.with(&f))
    }

    /// Enqueues `f` on `stream` with exclusive access to the elements: the
    /// stream-ordered counterpart of [`HostBuffer::with_mut`] (a host task
    /// that prepares input for the collectives enqueued after it, as a
    /// kernel would on a GPU stream).
    ///
    /// # Stream semantics
    /// As [`HostBuffer::with_on_stream`].
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{bootstrap::UniqueId, Communicator, ReduceOp};
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// # let comm = Communicator::init(&UniqueId::new()?, 0, 1)?;
    /// let stream = HostStream::new()?;
    /// let mut buf = HostBuffer::<f32>::zeroed(3);
    /// // Runs on the stream, before the all-reduce enqueued after it.
    /// buf.with_mut_on_stream(&stream, |s| s.copy_from_slice(&[1.0, 2.0, 3.0]))?;
    /// comm.all_reduce_in_place(&mut buf, ReduceOp::Sum, &stream)?;
    /// stream.synchronize()?;
    /// assert_eq!(buf.to_vec(), vec![1.0, 2.0, 3.0]); // one rank: the sum is the input
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`HostStream::host_fn`].
    pub fn with_mut_on_stream(
        &mut self,
        stream: &HostStream,
        f: impl Fn(&mut [T]) + Send + Sync + 'static,
    ) -> Result<()> {
        // The stream's own handle, written under the buffer's lock.
        let raw = self.raw.clone();
        stream.host_fn(move || {
            let mut guard = raw.write();
            f(bytemuck::cast_slice_mut(raw.bytes_of_mut(&mut guard)));
        })
    }

    /// The elements as a slice, for as long as the returned guard lives
    /// (what the host-blocking calls such as
    /// [`Communicator::send_host`](crate::Communicator::send_host) take).
    ///
    /// # Stream semantics
    /// As [`HostBuffer::with`]; the guard holds the buffer's read lock, so a
    /// stream operation that writes the buffer waits until it is dropped.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::HostBuffer;
    /// let buf = HostBuffer::from_slice(&[1i64, 2, 3]);
    /// let s = buf.read();
    /// assert_eq!(&s[1..], &[2, 3]);
    /// assert_eq!(s.iter().sum::<i64>(), 6);
    /// ```
    pub fn read(&self) -> HostBufferRead<'_, T> {
        HostBufferRead::new(&self.raw)
    }

    /// The elements as a mutable slice, for as long as the returned guard
    /// lives (what the host-blocking calls such as
    /// [`Communicator::all_reduce_in_place_host`](crate::Communicator::all_reduce_in_place_host)
    /// take).
    ///
    /// # Stream semantics
    /// As [`HostBuffer::with`]; the guard holds the buffer's write lock, so a
    /// stream operation on the buffer waits until it is dropped.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::HostBuffer;
    /// let mut buf = HostBuffer::<f32>::zeroed(3);
    /// buf.write()[2] = 4.5;
    /// assert_eq!(buf.to_vec(), vec![0.0, 0.0, 4.5]);
    /// ```
    pub fn write(&mut self) -> HostBufferWrite<'_, T> {
        HostBufferWrite {
            guard: self.raw.write(),
            raw: &self.raw,
            _elem: PhantomData,
        }
    }

    /// A copy of the elements.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// let stream = HostStream::new()?;
    /// let mut buf = HostBuffer::<i64>::zeroed(2);
    /// buf.fill_bytes(0xff);
    /// stream.synchronize()?; // (stream work on `buf` would be done here)
    /// assert_eq!(buf.to_vec(), vec![-1, -1]);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn to_vec(&self) -> Vec<T> {
        self.read().to_vec()
    }

    /// Overwrites the elements with `data`.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::HostBuffer;
    /// let mut buf = HostBuffer::<f32>::zeroed(2);
    /// buf.copy_from(&[4.0, 5.0])?;
    /// assert_eq!(buf.to_vec(), vec![4.0, 5.0]);
    /// assert!(buf.copy_from(&[1.0]).is_err()); // lengths must match
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `data.len()` differs from the buffer's length.
    pub fn copy_from(&mut self, data: &[T]) -> Result<()> {
        if data.len() != self.len {
            return Err(Error::invalid(format!(
                "copy_from: {} elements into a buffer of {}",
                data.len(),
                self.len
            )));
        }
        self.with_mut(|s| s.copy_from_slice(data));
        Ok(())
    }

    /// Sets every byte of the buffer to `byte` (for poisoning outputs in tests).
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::HostBuffer;
    /// let mut buf = HostBuffer::<u32>::zeroed(2);
    /// buf.fill_bytes(0xff);
    /// assert_eq!(buf.to_vec(), vec![u32::MAX; 2]);
    /// ```
    pub fn fill_bytes(&mut self, byte: u8) {
        let mut guard = self.raw.write();
        self.raw.bytes_of_mut(&mut guard).fill(byte);
    }
}

/// A [`HostBuffer`]'s elements as a slice, while this guard holds the
/// buffer's read lock ([`HostBuffer::read`]).
///
/// # Examples
/// ```
/// # use streamcomm::host::HostBuffer;
/// let buf = HostBuffer::from_slice(&[3u8, 4]);
/// let s: &[u8] = &buf.read();
/// assert_eq!(s, &[3, 4]);
/// ```
pub struct HostBufferRead<'a, T: Element> {
    guard: RwLockReadGuard<'a, Storage>,
    raw: &'a RawBuffer,
    _elem: PhantomData<T>,
}

impl<'a, T: Element> HostBufferRead<'a, T> {
    /// The elements of `raw` (which holds `T`s) under its read lock.
    pub(crate) fn new(raw: &'a RawBuffer) -> HostBufferRead<'a, T> {
        HostBufferRead {
            guard: raw.read(),
            raw,
            _elem: PhantomData,
        }
    }
}

impl<T: Element> std::ops::Deref for HostBufferRead<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        bytemuck::cast_slice(self.raw.bytes_of(&self.guard))
    }
}

impl<T: Element> fmt::Debug for HostBufferRead<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// A [`HostBuffer`]'s elements as a mutable slice, while this guard holds
/// the buffer's write lock ([`HostBuffer::write`]).
///
/// # Examples
/// ```
/// # use streamcomm::host::HostBuffer;
/// let mut buf = HostBuffer::<u8>::zeroed(2);
/// buf.write().copy_from_slice(&[5, 6]);
/// assert_eq!(buf.to_vec(), vec![5, 6]);
/// ```
pub struct HostBufferWrite<'a, T: Element> {
    guard: RwLockWriteGuard<'a, Storage>,
    raw: &'a RawBuffer,
    _elem: PhantomData<T>,
}

impl<T: Element> std::ops::Deref for HostBufferWrite<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        bytemuck::cast_slice(self.raw.bytes_of(&self.guard))
    }
}

impl<T: Element> std::ops::DerefMut for HostBufferWrite<'_, T> {
    fn deref_mut(&mut self) -> &mut [T] {
        bytemuck::cast_slice_mut(self.raw.bytes_of_mut(&mut self.guard))
    }
}

impl<T: Element> fmt::Debug for HostBufferWrite<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
#[path = "buffer_vec_tests.rs"]
mod vec_tests;
