//! A read-only, shareable handle to a [`HostBuffer`]'s memory.

use std::fmt;

#[cfg(doc)]
use super::HostBuffer;
use super::buffer::{Element, HostBufferRead, RawBuffer, typed_storage_accessors};
use crate::DataType;

/// A read-only handle to a [`HostBuffer`]'s memory, made by
/// [`HostBuffer::share`]. Cloning it gives another handle to the same
/// memory; it reads the buffer (`with`, `read`, `to_vec`) and is accepted by
/// collectives and `send` as a send buffer, never as a receive buffer.
///
/// # Examples
/// ```
/// # use streamcomm::host::HostBuffer;
/// let mut buf = HostBuffer::from_slice(&[1u32, 2]);
/// let shared = buf.share();
/// let copy = shared.clone();
/// buf.with_mut(|s| s[0] = 10); // the owner still writes
/// assert_eq!(copy.to_vec(), vec![10, 2]);
/// assert_eq!(shared.len(), 2);
/// ```
pub struct SharedHostBuffer<T: Element> {
    raw: RawBuffer,
    len: usize,
    _elem: std::marker::PhantomData<T>,
}

impl<T: Element> Clone for SharedHostBuffer<T> {
    fn clone(&self) -> Self {
        SharedHostBuffer::new(self.raw.clone(), self.len)
    }
}

impl<T: Element> fmt::Debug for SharedHostBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SharedHostBuffer<{}>[{}]", T::DTYPE, self.len)
    }
}

impl<T: Element> SharedHostBuffer<T> {
    /// `len` elements of `T` in `raw`.
    pub(crate) fn new(raw: RawBuffer, len: usize) -> SharedHostBuffer<T> {
        SharedHostBuffer {
            raw,
            len,
            _elem: std::marker::PhantomData,
        }
    }

    typed_storage_accessors!(".share()");

    /// Runs `f` with shared access to the elements (not ordered with stream
    /// work, as [`HostBuffer::with`]).
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::HostBuffer;
    /// let shared = HostBuffer::from_slice(&[2i32, 3]).share();
    /// assert_eq!(shared.with(|s| s.iter().product::<i32>()), 6);
    /// ```
    pub fn with<R>(&self, f: impl FnOnce(&[T]) -> R) -> R {
        f(&self.read())
    }

    /// The elements as a slice while the guard lives, as [`HostBuffer::read`].
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::HostBuffer;
    /// let shared = HostBuffer::from_slice(&[2i32, 3]).share();
    /// assert_eq!(shared.read()[1], 3);
    /// ```
    pub fn read(&self) -> HostBufferRead<'_, T> {
        HostBufferRead::new(&self.raw)
    }

    /// A copy of the elements.
    ///
    /// # Examples
    /// ```
    /// # use streamcomm::host::HostBuffer;
    /// let shared = HostBuffer::from_vec(vec![1u64, 2]).share();
    /// assert_eq!(shared.to_vec(), vec![1, 2]);
    /// ```
    pub fn to_vec(&self) -> Vec<T> {
        self.read().to_vec()
    }
}
