//! Host memory that streams operate on, the host backend's "device memory".
//!
//! A [`HostBuffer`] is a cheap, cloneable handle (like a device pointer) to an
//! aligned allocation. Stream tasks and the host read and write it through
//! short-lived locks, so a program that forgets to synchronize sees stale
//! values, never undefined behaviour. Collectives take the locks one chunk at a
//! time, and always in address order, so two streams touching the same pair of
//! buffers cannot deadlock on them.

use std::fmt;
use std::marker::PhantomData;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use half::{bf16, f16};

use crate::{DataType, Error, Result};

/// An element type a buffer may hold.
pub trait Element: bytemuck::Pod + Send + Sync + fmt::Debug + 'static {
    /// The matching [`DataType`].
    const DTYPE: DataType;
}

macro_rules! element {
    ($($t:ty => $d:ident),* $(,)?) => {
        $(impl Element for $t { const DTYPE: DataType = DataType::$d; })*
    };
}
element!(f32 => F32, f64 => F64, f16 => F16, bf16 => Bf16, i8 => I8, u8 => U8,
         i32 => I32, u32 => U32, i64 => I64, u64 => U64);

/// Untyped shared storage behind a [`HostBuffer`]: 64-byte aligned bytes
/// owned by the buffer, or memory owned by the caller
/// ([`RawBuffer::from_raw_parts`], what the C API wraps).
#[derive(Clone)]
pub struct RawBuffer {
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
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::RawBuffer;
    /// assert_eq!(RawBuffer::zeroed(64).len_bytes(), 64);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn zeroed(bytes: usize) -> RawBuffer {
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
    pub unsafe fn from_raw_parts(ptr: *mut u8, bytes: usize) -> Result<RawBuffer> {
        let ptr = match std::ptr::NonNull::new(ptr) {
            Some(p) => p,
            None if bytes == 0 => std::ptr::NonNull::dangling(),
            None => {
                return Err(Error::invalid(format!(
                    "from_raw_parts: null pointer for {bytes} bytes"
                )))
            }
        };
        Ok(RawBuffer {
            inner: Arc::new(RwLock::new(Storage::External(ptr, bytes))),
            bytes,
        })
    }

    /// Length in bytes.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::RawBuffer;
    /// assert_eq!(RawBuffer::zeroed(8).len_bytes(), 8);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn len_bytes(&self) -> usize {
        self.bytes
    }

    /// True when both handles name the same allocation.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::RawBuffer;
    /// let a = RawBuffer::zeroed(8);
    /// assert!(a.same_as(&a.clone()));
    /// assert!(!a.same_as(&RawBuffer::zeroed(8)));
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn same_as(&self, other: &RawBuffer) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
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

/// A typed buffer in host memory, usable by streams and collectives.
///
/// Cloning gives another handle to the same memory.
///
/// # Examples
/// ```
/// use streamcomm::host::HostBuffer;
/// let buf = HostBuffer::from_slice(&[1.0f32, 2.0, 3.0]);
/// buf.with_mut(|s| s[0] = 5.0);
/// assert_eq!(buf.to_vec(), vec![5.0, 2.0, 3.0]);
/// ```
pub struct HostBuffer<T: Element> {
    raw: RawBuffer,
    len: usize,
    _elem: PhantomData<T>,
}

impl<T: Element> Clone for HostBuffer<T> {
    fn clone(&self) -> Self {
        HostBuffer {
            raw: self.raw.clone(),
            len: self.len,
            _elem: PhantomData,
        }
    }
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
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// let buf = HostBuffer::<f32>::zeroed(3);
    /// assert_eq!(buf.to_vec(), vec![0.0; 3]);
    /// # Ok::<(), streamcomm::Error>(())
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
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// let buf = HostBuffer::from_slice(&[1u8, 2, 3]);
    /// assert_eq!(buf.len(), 3);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn from_slice(data: &[T]) -> HostBuffer<T> {
        let buf = HostBuffer::zeroed(data.len());
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
    /// let buf = HostBuffer::from_vec(data);
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
    /// until it has run.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::HostBuffer;
    /// let buf = HostBuffer::from_vec(vec![7u32; 4]);
    /// let other = buf.clone();
    /// let buf = match buf.into_vec() {
    ///     Err(_) => other, // a second handle still holds it
    ///     Ok(_) => unreachable!(),
    /// };
    /// assert_eq!(buf.into_vec()?, vec![7; 4]);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidUsage`] while another handle holds the buffer (a clone,
    /// a view, or an operation on a stream that has not run yet); the buffer
    /// is dropped with the error.
    pub fn into_vec(self) -> Result<Vec<T>> {
        let inner = Arc::try_unwrap(self.raw.inner).map_err(|_| {
            Error::InvalidUsage(format!(
                "into_vec: another handle still holds this HostBuffer<{}> (a clone, a view, or an operation on a stream that has not run: synchronize the stream first)",
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

    /// Number of elements.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// assert_eq!(HostBuffer::<u64>::zeroed(5).len(), 5);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the buffer holds no elements.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// assert!(HostBuffer::<u64>::zeroed(0).is_empty());
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The element type.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// use streamcomm::DataType;
    /// assert_eq!(HostBuffer::<half::bf16>::zeroed(1).dtype(), DataType::Bf16);
    /// assert_eq!(HostBuffer::<i32>::zeroed(1).dtype(), DataType::I32);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn dtype(&self) -> DataType {
        T::DTYPE
    }

    /// The untyped storage.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// assert_eq!(HostBuffer::<f64>::zeroed(4).raw().len_bytes(), 32);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn raw(&self) -> &RawBuffer {
        &self.raw
    }

    /// Runs `f` with shared access to the elements.
    ///
    /// # Stream semantics
    /// Not ordered with stream work: synchronize the stream first to see the
    /// results of enqueued work.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// let buf = HostBuffer::from_slice(&[1.0f32, 2.0, 3.0]);
    /// let sum: f32 = buf.with(|s| s.iter().sum());
    /// assert_eq!(sum, 6.0);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn with<R>(&self, f: impl FnOnce(&[T]) -> R) -> R {
        let guard = self.raw.read();
        let bytes = self.raw.bytes_of(&guard);
        f(bytemuck::cast_slice(bytes))
    }

    /// Runs `f` with exclusive access to the elements.
    ///
    /// # Stream semantics
    /// As [`HostBuffer::with`].
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// let buf = HostBuffer::<u32>::zeroed(4);
    /// buf.with_mut(|s| s.iter_mut().enumerate().for_each(|(i, x)| *x = i as u32));
    /// assert_eq!(buf.to_vec(), vec![0, 1, 2, 3]);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn with_mut<R>(&self, f: impl FnOnce(&mut [T]) -> R) -> R {
        let mut guard = self.raw.write();
        let bytes = self.raw.bytes_of_mut(&mut guard);
        f(bytemuck::cast_slice_mut(bytes))
    }

    /// A copy of the elements.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// let stream = HostStream::new()?;
    /// let buf = HostBuffer::<i64>::zeroed(2);
    /// let b = buf.clone(); // another handle to the same memory
    /// stream.host_fn(move || b.with_mut(|s| s.fill(-1)))?;
    /// stream.synchronize()?; // then read: to_vec is not ordered with stream work
    /// assert_eq!(buf.to_vec(), vec![-1, -1]);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn to_vec(&self) -> Vec<T> {
        self.with(|s| s.to_vec())
    }

    /// Overwrites the elements with `data`.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// let buf = HostBuffer::<f32>::zeroed(2);
    /// buf.copy_from(&[4.0, 5.0])?;
    /// assert_eq!(buf.to_vec(), vec![4.0, 5.0]);
    /// assert!(buf.copy_from(&[1.0]).is_err()); // lengths must match
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `data.len()` differs from the buffer's length.
    pub fn copy_from(&self, data: &[T]) -> Result<()> {
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
    /// # use streamcomm::host::{HostBuffer, HostStream};
    /// let buf = HostBuffer::<u32>::zeroed(2);
    /// buf.fill_bytes(0xff);
    /// assert_eq!(buf.to_vec(), vec![u32::MAX; 2]);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn fill_bytes(&self, byte: u8) {
        let mut guard = self.raw.write();
        self.raw.bytes_of_mut(&mut guard).fill(byte);
    }
}

#[cfg(test)]
#[path = "buffer_vec_tests.rs"]
mod vec_tests;
