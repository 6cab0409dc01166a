//! Reading and writing single elements of a byte buffer as `f64`.
//!
//! Tests, references and the plan simulator fill buffers with known values and
//! check results element by element, for every dtype, without writing a match
//! on the dtype each time. These helpers are for that: they are per element
//! and not meant for hot loops.

use bytemuck::{Pod, bytes_of, pod_read_unaligned};
use half::{bf16, f16};

use crate::types::DataType;

/// Element `i` of `bytes` (native endian, any alignment) as `f64`.
///
/// Lossless for every type except `i64`/`u64` values beyond 2^53, which round
/// to the nearest `f64`.
///
/// # Panics
///
/// If element `i` does not lie entirely inside `bytes` (like slice indexing).
///
/// # Examples
///
/// ```
/// use streamcomm_kernels::{element_as_f64, DataType};
///
/// let bytes: Vec<u8> = [-3i8, 5].iter().map(|&x| x as u8).collect();
/// assert_eq!(element_as_f64(DataType::I8, &bytes, 0), -3.0);
/// assert_eq!(element_as_f64(DataType::I8, &bytes, 1), 5.0);
/// ```
pub fn element_as_f64(dtype: DataType, bytes: &[u8], i: usize) -> f64 {
    let b = element_bytes(dtype, bytes, i);
    match dtype {
        DataType::F32 => f64::from(read::<f32>(b)),
        DataType::F64 => read::<f64>(b),
        DataType::F16 => read::<f16>(b).to_f64(),
        DataType::Bf16 => read::<bf16>(b).to_f64(),
        DataType::I8 => f64::from(read::<i8>(b)),
        DataType::U8 => f64::from(read::<u8>(b)),
        DataType::I32 => f64::from(read::<i32>(b)),
        DataType::U32 => f64::from(read::<u32>(b)),
        DataType::I64 => read::<i64>(b) as f64,
        DataType::U64 => read::<u64>(b) as f64,
    }
}

/// Writes `v`, converted to `dtype`, into element `i` of `bytes` (native
/// endian, any alignment).
///
/// Integers use Rust's saturating `as` conversion (fraction truncated, out of
/// range values clamped, NaN becomes 0); `f32`, `f16` and `bf16` round to
/// nearest, ties to even, in a single rounding from `f64`.
///
/// # Panics
///
/// If element `i` does not lie entirely inside `bytes` (like slice indexing).
///
/// # Examples
///
/// ```
/// use streamcomm_kernels::{element_as_f64, write_element_from_f64, DataType};
///
/// let mut bytes = vec![0u8; 4];
/// write_element_from_f64(DataType::U8, &mut bytes, 2, 300.0);
/// assert_eq!(bytes, [0, 0, 255, 0]);
/// write_element_from_f64(DataType::F16, &mut bytes, 1, 0.1);
/// assert_eq!(element_as_f64(DataType::F16, &bytes, 1), 0.0999755859375);
/// ```
pub fn write_element_from_f64(dtype: DataType, bytes: &mut [u8], i: usize, v: f64) {
    let b = element_bytes_mut(dtype, bytes, i);
    match dtype {
        DataType::F32 => write(b, v as f32),
        DataType::F64 => write(b, v),
        DataType::F16 => write(b, f16::from_f64(v)),
        DataType::Bf16 => write(b, bf16::from_f64(v)),
        DataType::I8 => write(b, v as i8),
        DataType::U8 => write(b, v as u8),
        DataType::I32 => write(b, v as i32),
        DataType::U32 => write(b, v as u32),
        DataType::I64 => write(b, v as i64),
        DataType::U64 => write(b, v as u64),
    }
}

/// Byte range of element `i`, or `None` if it does not fit in `len` bytes.
fn element_range(dtype: DataType, len: usize, i: usize) -> Option<std::ops::Range<usize>> {
    let size = dtype.size();
    let start = i.checked_mul(size)?;
    let end = start.checked_add(size)?;
    (end <= len).then_some(start..end)
}

fn element_bytes(dtype: DataType, bytes: &[u8], i: usize) -> &[u8] {
    match element_range(dtype, bytes.len(), i) {
        Some(range) => &bytes[range],
        None => out_of_range(dtype, bytes.len(), i),
    }
}

fn element_bytes_mut(dtype: DataType, bytes: &mut [u8], i: usize) -> &mut [u8] {
    match element_range(dtype, bytes.len(), i) {
        Some(range) => &mut bytes[range],
        None => out_of_range(dtype, bytes.len(), i),
    }
}

#[cold]
#[track_caller]
fn out_of_range(dtype: DataType, len: usize, i: usize) -> ! {
    panic!(
        "element {i} is out of range for a {len}-byte buffer of {dtype} ({} elements)",
        len / dtype.size()
    )
}

fn read<T: Pod>(b: &[u8]) -> T {
    pod_read_unaligned(b)
}

fn write<T: Pod>(b: &mut [u8], v: T) {
    b.copy_from_slice(bytes_of(&v));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_dtype_at_odd_offsets() {
        for dtype in DataType::ALL {
            let mut buf = vec![0u8; 1 + 3 * dtype.size()];
            let bytes = &mut buf[1..];
            for (i, v) in [-2.0f64, 0.5, 100.0].into_iter().enumerate() {
                let v = if dtype.is_float() { v } else { v.abs().trunc() };
                write_element_from_f64(dtype, bytes, i, v);
                assert_eq!(element_as_f64(dtype, bytes, i), v, "{dtype}");
            }
        }
    }

    #[test]
    fn integer_writes_saturate() {
        let mut b = [0u8; 8];
        write_element_from_f64(DataType::I8, &mut b, 0, -1e9);
        write_element_from_f64(DataType::I8, &mut b, 1, f64::NAN);
        write_element_from_f64(DataType::U8, &mut b, 2, -5.0);
        write_element_from_f64(DataType::I8, &mut b, 3, 3.9);
        assert_eq!(b[..4], [0x80, 0, 0, 3]);
        write_element_from_f64(DataType::U32, &mut b, 1, 1e20);
        assert_eq!(element_as_f64(DataType::U32, &b, 1), f64::from(u32::MAX));
    }

    #[test]
    #[should_panic(expected = "element 2 is out of range")]
    fn out_of_range_index_panics() {
        element_as_f64(DataType::F32, &[0u8; 11], 2);
    }
}
