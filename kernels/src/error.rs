//! The one error a kernel call can return.
//!
//! Kernels work on raw bytes handed over by transports and user buffers, so the
//! only things that can go wrong are the shapes of those byte slices (a partial
//! element, slices of different lengths) and a zero divisor when `Avg` is
//! finalised. Each case is reported as data — the call, the dtype, the op and
//! the offending lengths — so the communicator can wrap it into its own
//! invalid-argument error without parsing strings.

use std::error::Error;
use std::fmt;

use crate::types::{DataType, ReduceOp};

/// Error from a kernel call: a byte length that is not a multiple of the element
/// size, slices of different lengths, or a zero divisor.
///
/// The [`Display`](fmt::Display) message names the call, the dtype and the
/// lengths involved, e.g.
/// `reduce(f32, sum): slice `b` is 12 bytes but `dst` is 8 bytes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelError {
    call: &'static str,
    dtype: DataType,
    op: Option<ReduceOp>,
    kind: KernelErrorKind,
}

/// What was wrong with the arguments of a kernel call.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KernelErrorKind {
    /// The byte length of `slice` is not a multiple of the element size.
    PartialElement {
        /// Name of the argument (`a`, `b`, `dst`, `src`, `buf`).
        slice: &'static str,
        /// Its length in bytes.
        len: usize,
        /// Size of one element of the dtype, in bytes.
        elem_size: usize,
    },
    /// A source slice does not have the same byte length as the destination.
    LengthMismatch {
        /// Name of the source argument that differs (`a`, `b`, `src`).
        slice: &'static str,
        /// Its length in bytes.
        len: usize,
        /// Length of the destination in bytes.
        dst_len: usize,
    },
    /// [`divide`](crate::divide) was called with a divisor of 0.
    ZeroDivisor,
}

impl KernelError {
    pub(crate) fn new(
        call: &'static str,
        dtype: DataType,
        op: Option<ReduceOp>,
        kind: KernelErrorKind,
    ) -> KernelError {
        KernelError {
            call,
            dtype,
            op,
            kind,
        }
    }

    /// What was wrong with the arguments.
    pub fn kind(&self) -> &KernelErrorKind {
        &self.kind
    }

    /// The element type the call was made with.
    pub fn dtype(&self) -> DataType {
        self.dtype
    }

    /// The reduction operator, for `reduce` / `reduce_in_place` (`None` for `divide`).
    pub fn op(&self) -> Option<ReduceOp> {
        self.op
    }

    /// Name of the failing function (`reduce`, `reduce_in_place`, `divide`).
    pub fn call(&self) -> &'static str {
        self.call
    }
}

impl fmt::Display for KernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.op {
            Some(op) => write!(f, "{}({}, {}): ", self.call, self.dtype, op)?,
            None => write!(f, "{}({}): ", self.call, self.dtype)?,
        }
        match &self.kind {
            KernelErrorKind::PartialElement {
                slice,
                len,
                elem_size,
            } => write!(
                f,
                "slice `{slice}` is {len} bytes, not a multiple of the {elem_size}-byte element size"
            ),
            KernelErrorKind::LengthMismatch {
                slice,
                len,
                dst_len,
            } => write!(
                f,
                "slice `{slice}` is {len} bytes but `dst` is {dst_len} bytes"
            ),
            KernelErrorKind::ZeroDivisor => f.write_str("divisor is 0"),
        }
    }
}

impl Error for KernelError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_dtype_and_lengths() {
        let e = KernelError::new(
            "reduce",
            DataType::F32,
            Some(ReduceOp::Sum),
            KernelErrorKind::LengthMismatch {
                slice: "b",
                len: 12,
                dst_len: 8,
            },
        );
        assert_eq!(
            e.to_string(),
            "reduce(f32, sum): slice `b` is 12 bytes but `dst` is 8 bytes"
        );
        let e = KernelError::new(
            "divide",
            DataType::Bf16,
            None,
            KernelErrorKind::PartialElement {
                slice: "buf",
                len: 7,
                elem_size: 2,
            },
        );
        assert_eq!(
            e.to_string(),
            "divide(bf16): slice `buf` is 7 bytes, not a multiple of the 2-byte element size"
        );
        assert_eq!(e.dtype(), DataType::Bf16);
        assert_eq!(e.op(), None);
        assert_eq!(e.call(), "divide");
    }
}
