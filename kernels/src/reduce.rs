//! The public entry points: check the byte slices, dispatch once, run the loop.
//!
//! A call checks its arguments, then chooses the monomorphic loop for its
//! (dtype, op) pair exactly once; nothing is decided per element. `Avg` runs
//! the `Sum` loop: the division by the number of ranks happens once, at the
//! end of a collective, through [`divide`].

use half::{bf16, f16};

use crate::element::{MaxOp, MinOp, ProdOp, SumOp};
use crate::error::{KernelError, KernelErrorKind};
use crate::loops::Lane;
use crate::stage;
use crate::types::{DataType, ReduceOp};

/// Runs `$f::<T>($args)` with `T` the Rust type of `$dtype`.
macro_rules! with_type {
    ($dtype:expr, $f:ident($($arg:expr),* $(,)?)) => {
        match $dtype {
            DataType::F32 => $f::<f32>($($arg),*),
            DataType::F64 => $f::<f64>($($arg),*),
            DataType::F16 => $f::<f16>($($arg),*),
            DataType::Bf16 => $f::<bf16>($($arg),*),
            DataType::I8 => $f::<i8>($($arg),*),
            DataType::U8 => $f::<u8>($($arg),*),
            DataType::I32 => $f::<i32>($($arg),*),
            DataType::U32 => $f::<u32>($($arg),*),
            DataType::I64 => $f::<i64>($($arg),*),
            DataType::U64 => $f::<u64>($($arg),*),
        }
    };
}

/// Element-wise `dst[i] = a[i] op b[i]`.
///
/// `a`, `b` and `dst` are raw bytes holding elements of `dtype` in native byte
/// order, at any alignment (aligned slices take the fast path; others are
/// staged through aligned stack blocks). [`ReduceOp::Avg`] reduces like
/// [`ReduceOp::Sum`]; finish with [`divide`].
///
/// Arithmetic: integer `Sum`/`Prod` wrap. Float `Min`/`Max` follow IEEE 754
/// minNum/maxNum (`f32::min`/`f32::max`): a NaN operand is ignored unless both
/// are NaN. `f16`/`bf16` are computed in `f32` and rounded back (to nearest,
/// ties to even) once per operation.
///
/// # Errors
///
/// [`KernelErrorKind::PartialElement`] if a slice's length is not a multiple of
/// `dtype.size()`, [`KernelErrorKind::LengthMismatch`] if `a` or `b` differs in
/// length from `dst`. Nothing is written on error.
///
/// # Examples
///
/// ```
/// use streamcomm_kernels::{reduce, DataType, ReduceOp};
///
/// let a: Vec<u8> = [1.0f32, 2.0].iter().flat_map(|x| x.to_ne_bytes()).collect();
/// let b: Vec<u8> = [10.0f32, 20.0].iter().flat_map(|x| x.to_ne_bytes()).collect();
/// let mut dst = vec![0u8; 8];
/// reduce(DataType::F32, ReduceOp::Sum, &a, &b, &mut dst)?;
/// assert_eq!(dst[..4], 11.0f32.to_ne_bytes());
/// assert_eq!(dst[4..], 22.0f32.to_ne_bytes());
/// # Ok::<(), streamcomm_kernels::KernelError>(())
/// ```
pub fn reduce(
    dtype: DataType,
    op: ReduceOp,
    a: &[u8],
    b: &[u8],
    dst: &mut [u8],
) -> Result<(), KernelError> {
    let err = |kind| KernelError::new("reduce", dtype, Some(op), kind);
    check_whole(dtype, &[("a", a.len()), ("b", b.len()), ("dst", dst.len())]).map_err(err)?;
    check_same(dst.len(), &[("a", a.len()), ("b", b.len())]).map_err(err)?;
    with_type!(dtype, reduce_as(op, a, b, dst));
    Ok(())
}

/// Element-wise `dst[i] = dst[i] op src[i]`.
///
/// Same arithmetic, alignment rules and `Avg` handling as [`reduce`].
///
/// # Errors
///
/// [`KernelErrorKind::PartialElement`] if a slice's length is not a multiple of
/// `dtype.size()`, [`KernelErrorKind::LengthMismatch`] if `src` differs in
/// length from `dst`. Nothing is written on error.
///
/// # Examples
///
/// ```
/// use streamcomm_kernels::{reduce_in_place, DataType, ReduceOp};
///
/// let mut dst = vec![200u8, 3];
/// reduce_in_place(DataType::U8, ReduceOp::Sum, &mut dst, &[100, 4])?;
/// assert_eq!(dst, [44, 7]); // u8 sums wrap
/// # Ok::<(), streamcomm_kernels::KernelError>(())
/// ```
pub fn reduce_in_place(
    dtype: DataType,
    op: ReduceOp,
    dst: &mut [u8],
    src: &[u8],
) -> Result<(), KernelError> {
    let err = |kind| KernelError::new("reduce_in_place", dtype, Some(op), kind);
    check_whole(dtype, &[("dst", dst.len()), ("src", src.len())]).map_err(err)?;
    check_same(dst.len(), &[("src", src.len())]).map_err(err)?;
    with_type!(dtype, reduce_in_place_as(op, dst, src));
    Ok(())
}

/// Finalises [`ReduceOp::Avg`]: `buf[i] = buf[i] / divisor`.
///
/// Floats divide in the element's precision (`f16`/`bf16` through `f32`,
/// rounded back once; the divisor is converted to the float type first, which
/// is exact up to 2^24 for `f32`). Integers use truncating division (towards
/// zero), also for divisors too large for the type.
///
/// # Errors
///
/// [`KernelErrorKind::ZeroDivisor`] if `divisor` is 0,
/// [`KernelErrorKind::PartialElement`] if `buf.len()` is not a multiple of
/// `dtype.size()`. Nothing is written on error.
///
/// # Examples
///
/// ```
/// use streamcomm_kernels::{divide, DataType};
///
/// let mut buf: Vec<u8> = [7i32, -7].iter().flat_map(|x| x.to_ne_bytes()).collect();
/// divide(DataType::I32, &mut buf, 2)?;
/// assert_eq!(buf[..4], 3i32.to_ne_bytes());
/// assert_eq!(buf[4..], (-3i32).to_ne_bytes());
/// # Ok::<(), streamcomm_kernels::KernelError>(())
/// ```
pub fn divide(dtype: DataType, buf: &mut [u8], divisor: usize) -> Result<(), KernelError> {
    let err = |kind| KernelError::new("divide", dtype, None, kind);
    check_whole(dtype, &[("buf", buf.len())]).map_err(err)?;
    if divisor == 0 {
        return Err(err(KernelErrorKind::ZeroDivisor));
    }
    with_type!(dtype, divide_as(buf, divisor));
    Ok(())
}

/// Dispatches on `op` once, then runs the loop for `(T, op)`.
fn reduce_as<T: Lane>(op: ReduceOp, a: &[u8], b: &[u8], dst: &mut [u8]) {
    match op {
        ReduceOp::Sum | ReduceOp::Avg => stage::binary::<T, SumOp>(a, b, dst),
        ReduceOp::Prod => stage::binary::<T, ProdOp>(a, b, dst),
        ReduceOp::Min => stage::binary::<T, MinOp>(a, b, dst),
        ReduceOp::Max => stage::binary::<T, MaxOp>(a, b, dst),
    }
}

/// Dispatches on `op` once, then runs the in-place loop for `(T, op)`.
fn reduce_in_place_as<T: Lane>(op: ReduceOp, dst: &mut [u8], src: &[u8]) {
    match op {
        ReduceOp::Sum | ReduceOp::Avg => stage::in_place::<T, SumOp>(dst, src),
        ReduceOp::Prod => stage::in_place::<T, ProdOp>(dst, src),
        ReduceOp::Min => stage::in_place::<T, MinOp>(dst, src),
        ReduceOp::Max => stage::in_place::<T, MaxOp>(dst, src),
    }
}

/// Runs the divide loop for `T`.
fn divide_as<T: Lane>(buf: &mut [u8], divisor: usize) {
    stage::divide::<T>(buf, divisor);
}

/// Checks that every named length is a whole number of `dtype` elements.
fn check_whole(dtype: DataType, slices: &[(&'static str, usize)]) -> Result<(), KernelErrorKind> {
    let elem_size = dtype.size();
    match slices.iter().find(|(_, len)| len % elem_size != 0) {
        Some(&(slice, len)) => Err(KernelErrorKind::PartialElement {
            slice,
            len,
            elem_size,
        }),
        None => Ok(()),
    }
}

/// Checks that every named source length equals `dst_len`.
fn check_same(dst_len: usize, sources: &[(&'static str, usize)]) -> Result<(), KernelErrorKind> {
    match sources.iter().find(|(_, len)| *len != dst_len) {
        Some(&(slice, len)) => Err(KernelErrorKind::LengthMismatch {
            slice,
            len,
            dst_len,
        }),
        None => Ok(()),
    }
}
