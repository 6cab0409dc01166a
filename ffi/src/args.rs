//! Checking what C passes: enums, integers, pointers and buffers.
//!
//! C gives plain integers where Rust has enums and `void*` + count where Rust
//! has buffers. Everything is checked here before it reaches the library:
//! enum values are decoded (never transmuted), ranks must be non-negative,
//! buffers non-null when non-empty and aligned to their element size, and
//! send/recv buffers either the same (in place) or disjoint.

use std::ffi::{c_int, c_void};

use streamcomm::UntypedBuffer;
use streamcomm::{DataType, ReduceOp};

use crate::result::{Failure, FfiResult};

/// Decodes a C enum whose values are the indices of `all` (`what` names
/// the enum in the error).
fn decode_enum<T: Copy>(value: c_int, all: &[T], what: &str) -> FfiResult<T> {
    usize::try_from(value)
        .ok()
        .and_then(|i| all.get(i).copied())
        .ok_or_else(|| {
            Failure::invalid(format!(
                "unknown {what} {value} (valid: 0..={})",
                all.len() - 1
            ))
        })
}

/// Decodes a `streamcomm_data_type_t`.
pub(crate) fn dtype(value: c_int) -> FfiResult<DataType> {
    decode_enum(value, &DataType::ALL, "data type")
}

/// Decodes a `streamcomm_reduce_op_t`.
pub(crate) fn reduce_op(value: c_int) -> FfiResult<ReduceOp> {
    decode_enum(value, &ReduceOp::ALL, "reduce op")
}

/// A rank-like integer (`what` names it) that must be non-negative.
pub(crate) fn index(value: c_int, what: &str) -> FfiResult<usize> {
    usize::try_from(value).map_err(|_| Failure::invalid(format!("{what} {value} is negative")))
}

/// `STREAMCOMM_SPLIT_NOCOLOR` in the header: the colour of a rank that joins
/// no group in `streamcomm_comm_split`.
pub const SPLIT_NOCOLOR: c_int = -1;

/// Decodes a split colour: `None` for [`SPLIT_NOCOLOR`], an error for any
/// other negative value.
pub(crate) fn split_color(value: c_int) -> FfiResult<Option<u32>> {
    if value == SPLIT_NOCOLOR {
        return Ok(None);
    }
    u32::try_from(value).map(Some).map_err(|_| {
        Failure::invalid(format!(
            "color {value} is negative (only STREAMCOMM_SPLIT_NOCOLOR, -1, is allowed: it joins no group)"
        ))
    })
}

/// Reads `n` ranks (C `int`s, each non-negative) from `ptr`; `what` names
/// the array. `ptr` may be NULL when `n` is 0.
///
/// # Safety
/// `ptr` is NULL or points to `n` readable `int`s.
pub(crate) unsafe fn read_ranks(ptr: *const c_int, n: usize, what: &str) -> FfiResult<Vec<usize>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    non_null(ptr, what)?;
    if !ptr.is_aligned() {
        return Err(Failure::invalid(format!(
            "{what} {ptr:p} is not aligned for int"
        )));
    }
    if n > isize::MAX as usize / std::mem::size_of::<c_int>() {
        return Err(Failure::invalid(format!(
            "{what}: {n} entries overflow the address space"
        )));
    }
    // SAFETY: non-null, aligned, `n` entries long per the contract, and
    // their size fits in an `isize` (checked above).
    let raw = unsafe { std::slice::from_raw_parts(ptr, n) };
    raw.iter()
        .enumerate()
        .map(|(i, &r)| index(r, &format!("{what}[{i}]")))
        .collect()
}

/// Fails naming `what` when `ptr` is null.
pub(crate) fn non_null<T>(ptr: *const T, what: &str) -> FfiResult {
    if ptr.is_null() {
        return Err(Failure::invalid(format!("{what} is NULL")));
    }
    Ok(())
}

/// Checks an output pointer (`what` names it): non-null and aligned for `T`.
pub(crate) fn out_ptr<T>(ptr: *mut T, what: &str) -> FfiResult<*mut T> {
    non_null(ptr, what)?;
    if !ptr.is_aligned() {
        return Err(Failure::invalid(format!(
            "{what} {ptr:p} is not aligned to {} bytes",
            std::mem::align_of::<T>()
        )));
    }
    Ok(ptr)
}

/// Stores `value` through an out-parameter (`what` names it), checked by
/// [`out_ptr`].
///
/// # Safety
/// `ptr` is NULL or writable.
pub(crate) unsafe fn write_out<T>(ptr: *mut T, what: &str, value: T) -> FfiResult {
    let ptr = out_ptr(ptr, what)?;
    // SAFETY: checked non-null and aligned; writable per the contract.
    unsafe { ptr.write(value) };
    Ok(())
}

/// Checks a handle out-parameter (`what` names it) and stores NULL there:
/// what the caller reads should the call then fail.
///
/// # Safety
/// `ptr` is NULL or writable.
pub(crate) unsafe fn cleared_out(ptr: *mut *mut c_void, what: &str) -> FfiResult<*mut *mut c_void> {
    let ptr = out_ptr(ptr, what)?;
    // SAFETY: checked non-null and aligned; writable per the contract.
    unsafe { ptr.write(std::ptr::null_mut()) };
    Ok(ptr)
}

/// A C buffer: `count` elements of `dtype` at `ptr`, checked but not wrapped.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CBuf {
    pub ptr: *mut u8,
    pub dtype: DataType,
    pub count: usize,
}

impl CBuf {
    /// Checks `ptr` (named `what` in errors): non-null unless `count == 0`,
    /// aligned to the element size, and its byte range inside the address
    /// space.
    pub(crate) fn new(
        ptr: *const c_void,
        dtype: DataType,
        count: usize,
        what: &str,
    ) -> FfiResult<CBuf> {
        let bytes = count.checked_mul(dtype.size()).ok_or_else(|| {
            Failure::invalid(format!(
                "{what}: {count} elements of {dtype} overflow the address space"
            ))
        })?;
        if count > 0 {
            non_null(ptr, what)?;
        }
        let addr = ptr as usize;
        if !addr.is_multiple_of(dtype.size()) {
            return Err(Failure::invalid(format!(
                "{what} {addr:#x} is not aligned to its element size ({} bytes for {dtype})",
                dtype.size()
            )));
        }
        if addr.checked_add(bytes).is_none() {
            return Err(Failure::invalid(format!(
                "{what}: {bytes} bytes at {addr:#x} run past the end of the address space"
            )));
        }
        Ok(CBuf {
            ptr: ptr as *mut u8,
            dtype,
            count,
        })
    }

    /// The byte range `[start, end)`.
    pub(crate) fn range(&self) -> (usize, usize) {
        let start = self.ptr as usize;
        (start, start + self.count * self.dtype.size())
    }

    /// True when both are non-empty and their bytes overlap.
    pub(crate) fn overlaps(&self, other: &CBuf) -> bool {
        let (a0, a1) = self.range();
        let (b0, b1) = other.range();
        a0 < a1 && b0 < b1 && a0 < b1 && b0 < a1
    }

    /// Wraps the memory for the library without copying.
    ///
    /// # Safety
    /// The C API's buffer contract (documented in `streamcomm.h`): the memory
    /// holds `count` elements and stays valid, and untouched by the caller,
    /// until the stream operation it is given to has completed.
    pub(crate) unsafe fn wrap(&self) -> FfiResult<UntypedBuffer> {
        // SAFETY: forwarded from this function's contract; `new` checked the
        // pointer is non-null when `count > 0` and the length fits.
        unsafe { UntypedBuffer::from_raw_parts(self.ptr, self.dtype, self.count) }
            .map_err(Failure::from)
    }
}

/// Fails unless `send` and `recv` are disjoint (`call` names the operation).
pub(crate) fn disjoint(call: &str, send: &CBuf, recv: &CBuf) -> FfiResult {
    if send.overlaps(recv) {
        return Err(Failure::invalid(format!(
            "{call}: sendbuff and recvbuff overlap without being NCCL's in-place layout"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::INVALID_ARGUMENT;

    #[test]
    fn enums_decode_without_transmute() {
        assert_eq!(dtype(0).unwrap(), DataType::F32);
        assert_eq!(dtype(9).unwrap(), DataType::U64);
        for bad in [-1, 10, 256, c_int::MAX] {
            assert_eq!(dtype(bad).unwrap_err().code, INVALID_ARGUMENT);
        }
        assert_eq!(reduce_op(4).unwrap(), ReduceOp::Avg);
        for bad in [-1, 5, 260] {
            assert_eq!(reduce_op(bad).unwrap_err().code, INVALID_ARGUMENT);
        }
    }

    #[test]
    fn split_colors_decode() {
        assert_eq!(split_color(SPLIT_NOCOLOR).unwrap(), None);
        assert_eq!(split_color(0).unwrap(), Some(0));
        assert_eq!(split_color(c_int::MAX).unwrap(), Some(c_int::MAX as u32));
        for bad in [-2, c_int::MIN] {
            let e = split_color(bad).unwrap_err();
            assert_eq!(e.code, INVALID_ARGUMENT);
            assert!(e.message.contains(&format!("color {bad}")), "{}", e.message);
        }
    }

    #[test]
    fn rank_lists_are_checked() {
        let read = |p: *const c_int, n: usize| {
            // SAFETY: each call below passes NULL, a pointer to at least `n`
            // ints, or arguments refused before anything is read.
            unsafe { read_ranks(p, n, "exclude") }
        };
        assert_eq!(read(std::ptr::null(), 0).unwrap(), Vec::<usize>::new());
        let ranks: [c_int; 3] = [3, 0, 3];
        assert_eq!(read(ranks.as_ptr(), 3).unwrap(), [3, 0, 3]);
        let null = read(std::ptr::null(), 1).unwrap_err();
        assert!(null.message.contains("exclude is NULL"), "{}", null.message);
        let negative: [c_int; 2] = [1, -1];
        let e = read(negative.as_ptr(), 2).unwrap_err();
        assert_eq!(e.code, INVALID_ARGUMENT);
        assert!(
            e.message.contains("exclude[1] -1 is negative"),
            "{}",
            e.message
        );
        let odd = (ranks.as_ptr() as usize + 1) as *const c_int;
        assert!(read(odd, 1).unwrap_err().message.contains("aligned"));
        let huge = read(ranks.as_ptr(), usize::MAX).unwrap_err();
        assert!(huge.message.contains("overflow"), "{}", huge.message);
    }

    #[test]
    fn buffers_are_checked() {
        let data = [0u64; 4];
        let p = data.as_ptr() as *const c_void;
        assert!(CBuf::new(p, DataType::U64, 4, "b").is_ok());
        assert!(CBuf::new(std::ptr::null(), DataType::U64, 0, "b").is_ok());
        let null = CBuf::new(std::ptr::null(), DataType::U64, 1, "b").unwrap_err();
        assert!(null.message.contains("NULL"));
        let odd = (p as usize + 4) as *const c_void;
        let mis = CBuf::new(odd, DataType::U64, 1, "b").unwrap_err();
        assert!(mis.message.contains("aligned"), "{}", mis.message);
        assert!(CBuf::new(odd, DataType::U32, 1, "b").is_ok());
        let huge = CBuf::new(p, DataType::U64, usize::MAX / 4, "b").unwrap_err();
        assert!(huge.message.contains("overflow"), "{}", huge.message);
        let a = CBuf::new(p, DataType::U64, 2, "a").unwrap();
        let b = CBuf::new((p as usize + 8) as *const c_void, DataType::U64, 2, "b").unwrap();
        let c = CBuf::new((p as usize + 16) as *const c_void, DataType::U64, 2, "c").unwrap();
        assert!(a.overlaps(&b) && !a.overlaps(&c));
        assert!(disjoint("x", &a, &b).is_err() && disjoint("x", &a, &c).is_ok());
    }
}
