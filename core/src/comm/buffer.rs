//! Buffers as the communicator sees them: storage, element type, length.
//!
//! Typed [`HostBuffer`]s are what Rust programs use; [`UntypedBuffer`] carries
//! its element type at run time (what a C caller or a generic framework has).
//! Both reach the communicator as a [`BufView`], which is checked against the
//! call (type, length) before anything is enqueued.

use crate::host::{Element, HostBuffer, RawBuffer, SharedHostBuffer};
use crate::plan::Plan;
use crate::plan::apply::Buffers;
use crate::{DataType, Error, Result};

/// A buffer as passed to a collective: storage plus its element type and length.
#[derive(Clone, Debug)]
pub struct BufView {
    raw: RawBuffer,
    dtype: DataType,
    len: usize,
    /// Refused as a receive (or in-place) buffer: a [`SharedHostBuffer`].
    read_only: bool,
}

/// Anything a collective accepts as a buffer: a [`HostBuffer`], an
/// [`UntypedBuffer`], or (as a send buffer only) a [`SharedHostBuffer`].
///
/// # Examples
/// ```
/// # use streamcomm::{host::HostBuffer, AsBufView, DataType};
/// let buf = HostBuffer::<f64>::zeroed(3);
/// let view = buf.buf_view();
/// assert_eq!((view.dtype(), view.len()), (DataType::F64, 3));
/// ```
pub trait AsBufView {
    /// The storage, element type and length.
    fn buf_view(&self) -> BufView;
}

impl<T: Element> AsBufView for HostBuffer<T> {
    fn buf_view(&self) -> BufView {
        BufView {
            raw: self.raw().clone(),
            dtype: T::DTYPE,
            len: self.len(),
            read_only: false,
        }
    }
}

/// A send buffer only: given as a receive or in-place buffer, the call
/// fails with [`Error::InvalidArgument`].
impl<T: Element> AsBufView for SharedHostBuffer<T> {
    fn buf_view(&self) -> BufView {
        BufView {
            raw: self.raw().clone(),
            dtype: T::DTYPE,
            len: self.len(),
            read_only: true,
        }
    }
}

/// A host buffer whose element type is known only at run time.
#[derive(Clone, Debug)]
pub struct UntypedBuffer {
    view: BufView,
}

impl UntypedBuffer {
    /// A zeroed buffer of `len` elements of `dtype`.
    ///
    /// Cloning an `UntypedBuffer` gives another handle to the same memory
    /// (what a C caller's pointer is); two handles to one buffer given as
    /// send and recv of one call are refused.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{DataType, UntypedBuffer};
    /// let buf = UntypedBuffer::zeroed(DataType::F16, 3);
    /// assert_eq!(buf.to_bytes(), vec![0; 6]);
    /// ```
    pub fn zeroed(dtype: DataType, len: usize) -> UntypedBuffer {
        let raw = RawBuffer::zeroed(len * dtype.size());
        UntypedBuffer {
            view: BufView::new(raw, dtype, len),
        }
    }

    /// Wraps `len` elements of `dtype` at `ptr`, memory the caller owns,
    /// without copying (what the C API does with a `void*` + count + dtype).
    /// Any alignment is accepted.
    ///
    /// # Safety
    /// As with NCCL, the `len * dtype.size()` bytes at `ptr` must stay
    /// valid (for reads, and for writes unless the buffer is only ever
    /// read, as a send buffer), not be freed, and be untouched by anything
    /// else (other threads, other buffers wrapping overlapping memory)
    /// until every stream operation given this buffer has completed
    /// (synchronize the stream before freeing, reading or reusing it) and
    /// the buffer's handles are dropped. Two buffers wrapping overlapping
    /// memory must never be given to one operation (pass one buffer to the
    /// `*_in_place` call instead). A null `ptr` is allowed only with
    /// `len == 0`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a null `ptr` with `len > 0`, or a byte
    /// length that overflows `usize`.
    ///
    /// # Examples
    /// ```
    /// use streamcomm::UntypedBuffer;
    /// use streamcomm::DataType;
    /// let mut data = vec![1.0f32, 2.0, 3.0];
    /// // SAFETY: `data` outlives `buf` and is not used while `buf` exists.
    /// let buf = unsafe { UntypedBuffer::from_raw_parts(data.as_mut_ptr().cast(), DataType::F32, 3)? };
    /// assert_eq!(buf.to_bytes(), 1.0f32.to_ne_bytes().iter().chain(&2.0f32.to_ne_bytes())
    ///     .chain(&3.0f32.to_ne_bytes()).copied().collect::<Vec<u8>>());
    /// buf.copy_from_bytes(&[0; 12])?; // writes the caller's memory, no copy kept
    /// drop(buf);
    /// assert_eq!(data, [0.0; 3]);
    /// // SAFETY: a null pointer is refused unless the length is 0.
    /// assert!(unsafe { UntypedBuffer::from_raw_parts(std::ptr::null_mut(), DataType::F32, 1) }.is_err());
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub unsafe fn from_raw_parts(ptr: *mut u8, dtype: DataType, len: usize) -> Result<Self> {
        let bytes = len.checked_mul(dtype.size()).ok_or_else(|| {
            Error::invalid(format!(
                "from_raw_parts: {len} elements of {dtype} overflow the address space"
            ))
        })?;
        // SAFETY: forwarded: this function's contract is RawBuffer's.
        let raw = unsafe { RawBuffer::from_raw_parts(ptr, bytes)? };
        Ok(UntypedBuffer {
            view: BufView::new(raw, dtype, len),
        })
    }

    /// The element type.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{DataType, UntypedBuffer};
    /// assert_eq!(UntypedBuffer::zeroed(DataType::I64, 1).dtype(), DataType::I64);
    /// ```
    pub fn dtype(&self) -> DataType {
        self.view.dtype
    }

    /// Number of elements.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{DataType, UntypedBuffer};
    /// assert_eq!(UntypedBuffer::zeroed(DataType::I64, 5).len(), 5);
    /// ```
    pub fn len(&self) -> usize {
        self.view.len
    }

    /// True when empty.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{DataType, UntypedBuffer};
    /// assert!(UntypedBuffer::zeroed(DataType::U8, 0).is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.view.len == 0
    }

    /// A copy of the bytes.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{DataType, UntypedBuffer};
    /// let buf = UntypedBuffer::zeroed(DataType::U32, 1);
    /// buf.copy_from_bytes(&7u32.to_ne_bytes())?;
    /// assert_eq!(buf.to_bytes(), 7u32.to_ne_bytes());
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    pub fn to_bytes(&self) -> Vec<u8> {
        let g = self.view.raw.read();
        self.view.raw.bytes_of(&g).to_vec()
    }

    /// Overwrites the bytes (through any handle: see
    /// [`UntypedBuffer::zeroed`]).
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{DataType, UntypedBuffer};
    /// let buf = UntypedBuffer::zeroed(DataType::U8, 2);
    /// buf.copy_from_bytes(&[1, 2])?;
    /// assert!(buf.copy_from_bytes(&[1]).is_err()); // lengths must match
    /// assert_eq!(buf.to_bytes(), vec![1, 2]);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the length differs.
    pub fn copy_from_bytes(&self, bytes: &[u8]) -> Result<()> {
        let mut g = self.view.raw.write();
        let dst = self.view.raw.bytes_of_mut(&mut g);
        if dst.len() != bytes.len() {
            return Err(Error::invalid(format!(
                "copy_from_bytes: {} bytes into a buffer of {}",
                bytes.len(),
                dst.len()
            )));
        }
        dst.copy_from_slice(bytes);
        Ok(())
    }
}

impl AsBufView for UntypedBuffer {
    fn buf_view(&self) -> BufView {
        self.view.clone()
    }
}

impl BufView {
    /// `len` elements of `dtype` in `raw` (which must hold them).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn new(raw: RawBuffer, dtype: DataType, len: usize) -> BufView {
        debug_assert!(raw.len_bytes() >= len * dtype.size());
        BufView {
            raw,
            dtype,
            len,
            read_only: false,
        }
    }

    /// `len` elements of `dtype` in `raw`, refused as a receive buffer.
    pub(crate) fn read_only(raw: RawBuffer, dtype: DataType, len: usize) -> BufView {
        BufView {
            read_only: true,
            ..BufView::new(raw, dtype, len)
        }
    }

    /// Fails when this view may not be written (a shared, read-only
    /// handle) but `call` would write it as its `what` buffer.
    pub(crate) fn check_writable(&self, call: impl std::fmt::Display, what: &str) -> Result<()> {
        if self.read_only {
            return Err(Error::invalid(format!(
                "{call}: the {what} buffer is a read-only shared handle (HostBuffer::share); pass the HostBuffer itself"
            )));
        }
        Ok(())
    }

    /// The storage.
    pub(crate) fn raw(&self) -> &RawBuffer {
        &self.raw
    }

    /// The element type.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{host::HostBuffer, AsBufView, DataType};
    /// assert_eq!(HostBuffer::<u32>::zeroed(2).buf_view().dtype(), DataType::U32);
    /// ```
    pub fn dtype(&self) -> DataType {
        self.dtype
    }

    /// Number of elements.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{host::HostBuffer, AsBufView};
    /// assert_eq!(HostBuffer::<u32>::zeroed(2).buf_view().len(), 2);
    /// ```
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when empty.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::{host::HostBuffer, AsBufView};
    /// assert!(HostBuffer::<u32>::zeroed(0).buf_view().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The buffers bound to one enqueued operation.
#[derive(Clone, Debug)]
pub(crate) enum Binding {
    /// Distinct buffers; either side may be absent (e.g. a non-root's send in broadcast).
    Separate {
        send: Option<BufView>,
        recv: Option<BufView>,
    },
    /// One buffer at NCCL's in-place offsets.
    InPlace(BufView),
}

impl Binding {
    /// Working memory `plan` needs on this rank: empty unless its call has
    /// no receive buffer but the plan uses one (`Plan::work_count`).
    pub(crate) fn work_buffer(plan: &Plan) -> Vec<u8> {
        if plan.recv_count == 0 && plan.work_count > 0 {
            vec![0u8; plan.work_count * plan.dtype.size()]
        } else {
            Vec::new()
        }
    }

    /// Runs `f` with the buffers locked (reads shared, writes exclusive, locks
    /// taken in address order so two streams can never deadlock on them).
    /// `work` is [`Binding::work_buffer`]`(plan)`, kept by the caller for the
    /// whole plan: it stands in for the receive buffer of a rank whose call
    /// has none but whose plan needs one (see `Plan::work_count`).
    pub(crate) fn with_buffers<R>(
        &self,
        plan: &Plan,
        work: &mut [u8],
        f: impl FnOnce(&mut Buffers<'_>) -> Result<R>,
    ) -> Result<R> {
        match self {
            // In place, such a rank only reads its buffer (the input).
            Binding::InPlace(v) if !work.is_empty() => {
                let g = v.raw.read();
                f(&mut Buffers::Separate {
                    send: v.raw.bytes_of(&g),
                    recv: work,
                })
            }
            Binding::InPlace(v) => {
                let mut g = v.raw.write();
                let mut bufs = Buffers::in_place(plan, v.raw.bytes_of_mut(&mut g))?;
                f(&mut bufs)
            }
            Binding::Separate { send, recv } => {
                let empty_send: &[u8] = &[];
                let mut empty_recv: [u8; 0] = [];
                match (send, recv) {
                    (Some(s), Some(r)) => RawBuffer::read_write(&s.raw, &r.raw, |send, recv| {
                        f(&mut Buffers::Separate { send, recv })
                    }),
                    (Some(s), None) => {
                        let sg = s.raw.read();
                        f(&mut Buffers::Separate {
                            send: s.raw.bytes_of(&sg),
                            recv: if work.is_empty() {
                                &mut empty_recv
                            } else {
                                work
                            },
                        })
                    }
                    (None, Some(r)) => {
                        let mut rg = r.raw.write();
                        f(&mut Buffers::Separate {
                            send: empty_send,
                            recv: r.raw.bytes_of_mut(&mut rg),
                        })
                    }
                    (None, None) => f(&mut Buffers::Separate {
                        send: empty_send,
                        recv: &mut empty_recv,
                    }),
                }
            }
        }
    }

    /// Checks the bound buffers against what `plan` needs (the call is
    /// named in an error only: nothing is formatted while all is well).
    pub(crate) fn check(&self, plan: &Plan) -> Result<()> {
        let name = plan.collective;
        let check_one = |v: &BufView, need: usize, what: &str| -> Result<()> {
            if v.dtype != plan.dtype {
                return Err(Error::invalid(format!(
                    "{name}: {what} buffer holds {}, the call is {}",
                    v.dtype, plan.dtype
                )));
            }
            if v.len < need {
                return Err(Error::invalid(format!(
                    "{name}: {what} buffer has {} elements, needs {need}",
                    v.len
                )));
            }
            Ok(())
        };
        match self {
            Binding::InPlace(v) => {
                v.check_writable(name, "in-place")?;
                let layout = crate::plan::InPlaceLayout::of(plan)?;
                check_one(v, layout.len, "in-place")
            }
            Binding::Separate { send, recv } => {
                if let Some(r) = recv {
                    r.check_writable(name, "recv")?;
                }
                if let (Some(s), Some(r)) = (send, recv) {
                    if s.raw.same_as(&r.raw) {
                        return Err(Error::invalid(format!(
                            "{name}: send and recv are the same buffer; use the *_in_place call"
                        )));
                    }
                    if s.dtype != r.dtype {
                        return Err(Error::invalid(format!(
                            "{name}: dtype mismatch: send buffer holds {}, recv buffer holds {}",
                            s.dtype, r.dtype
                        )));
                    }
                }
                match send {
                    Some(s) => check_one(s, plan.send_count, "send")?,
                    None if plan.send_count > 0 => {
                        return Err(Error::invalid(format!("{name}: a send buffer is required")));
                    }
                    None => {}
                }
                match recv {
                    Some(r) => check_one(r, plan.recv_count, "recv")?,
                    None if plan.recv_count > 0 => {
                        return Err(Error::invalid(format!("{name}: a recv buffer is required")));
                    }
                    None => {}
                }
                Ok(())
            }
        }
    }
}
