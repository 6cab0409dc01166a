//! NCCL's C types, with the values of NCCL 2.30's `nccl.h` (the ABI), as
//! `cudarc::nccl::sys` names them: what programs written against cudarc's
//! `nccl` module match on and pass around.

#![allow(non_camel_case_types)]

use std::ffi::c_char;

/// `ncclResult_t`: what every NCCL call returns.
///
/// # Examples
/// ```
/// use streamcomm::cuda::nccl::sys::ncclResult_t;
/// assert_eq!(ncclResult_t::ncclInvalidArgument as u32, 4);
/// ```
#[repr(u32)]
#[derive(Debug, Copy, Clone, Hash, PartialOrd, Ord, PartialEq, Eq)]
pub enum ncclResult_t {
    /// No error.
    ncclSuccess = 0,
    /// A CUDA call failed.
    ncclUnhandledCudaError = 1,
    /// A system call, the network or a resource failed.
    ncclSystemError = 2,
    /// An internal error.
    ncclInternalError = 3,
    /// A bad argument (null pointer, unknown type, out-of-range rank).
    ncclInvalidArgument = 4,
    /// A call the library does not allow now (a failed communicator, a
    /// collective mismatch, an unsupported use).
    ncclInvalidUsage = 5,
    /// A remote rank failed or went away.
    ncclRemoteError = 6,
    /// A non-blocking operation is still in progress.
    ncclInProgress = 7,
    /// An operation ran out of time.
    ncclTimeout = 8,
    /// The number of results.
    ncclNumResults = 9,
}

/// `ncclDataType_t`: the element types.
///
/// # Examples
/// ```
/// use streamcomm::cuda::nccl::sys::ncclDataType_t;
/// assert_eq!(ncclDataType_t::ncclBfloat16 as u32, 9);
/// ```
#[repr(u32)]
#[derive(Debug, Copy, Clone, Hash, PartialOrd, Ord, PartialEq, Eq)]
pub enum ncclDataType_t {
    /// `int8_t` (`ncclChar`).
    ncclInt8 = 0,
    /// `uint8_t`.
    ncclUint8 = 1,
    /// `int32_t` (`ncclInt`).
    ncclInt32 = 2,
    /// `uint32_t`.
    ncclUint32 = 3,
    /// `int64_t`.
    ncclInt64 = 4,
    /// `uint64_t`.
    ncclUint64 = 5,
    /// IEEE half (`ncclHalf`).
    ncclFloat16 = 6,
    /// `float` (`ncclFloat`).
    ncclFloat32 = 7,
    /// `double` (`ncclDouble`).
    ncclFloat64 = 8,
    /// bfloat16.
    ncclBfloat16 = 9,
    /// 8-bit float, e4m3 (not supported by streamcomm: refused).
    ncclFloat8e4m3 = 10,
    /// 8-bit float, e5m2 (not supported by streamcomm: refused).
    ncclFloat8e5m2 = 11,
    /// The number of types.
    ncclNumTypes = 12,
}

/// `ncclRedOp_t`: the reduction operators.
///
/// # Examples
/// ```
/// use streamcomm::cuda::nccl::sys::ncclRedOp_t;
/// assert_eq!(ncclRedOp_t::ncclAvg as u32, 4);
/// ```
#[repr(u32)]
#[derive(Debug, Copy, Clone, Hash, PartialOrd, Ord, PartialEq, Eq)]
pub enum ncclRedOp_t {
    /// Sum.
    ncclSum = 0,
    /// Product.
    ncclProd = 1,
    /// Maximum.
    ncclMax = 2,
    /// Minimum.
    ncclMin = 3,
    /// Sum divided by the rank count.
    ncclAvg = 4,
    /// The number of built-in operators.
    ncclNumOps = 5,
    /// The largest operator value (user operators lie between).
    ncclMaxRedOp = 0x7fff_ffff,
}

/// The NCCL version whose API this covers: 2.30.0.
pub const NCCL_MAJOR: i32 = 2;
/// See [`NCCL_MAJOR`].
pub const NCCL_MINOR: i32 = 30;
/// See [`NCCL_MAJOR`].
pub const NCCL_PATCH: i32 = 0;
/// `NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH)`, as `ncclGetVersion`
/// reports it.
pub const NCCL_VERSION_CODE: i32 = NCCL_MAJOR * 10000 + NCCL_MINOR * 100 + NCCL_PATCH;

/// Bytes of an `ncclUniqueId`.
pub const NCCL_UNIQUE_ID_BYTES: usize = 128;

/// `ncclUniqueId`: a communicator's id, 128 opaque bytes.
///
/// # Examples
/// ```
/// use streamcomm::cuda::nccl::sys::{ncclUniqueId, NCCL_UNIQUE_ID_BYTES};
/// let id = ncclUniqueId { internal: [0; NCCL_UNIQUE_ID_BYTES] };
/// assert_eq!(std::mem::size_of_val(&id), 128);
/// ```
#[repr(C)]
#[derive(Debug, Copy, Clone, Hash, PartialOrd, Ord, PartialEq, Eq)]
pub struct ncclUniqueId {
    /// The id's bytes.
    pub internal: [c_char; NCCL_UNIQUE_ID_BYTES],
}

impl ncclDataType_t {
    /// The type whose value is `raw` (what C passes), if there is one.
    ///
    /// # Examples
    /// ```
    /// use streamcomm::cuda::nccl::sys::ncclDataType_t;
    /// assert_eq!(ncclDataType_t::from_raw(7), Some(ncclDataType_t::ncclFloat32));
    /// assert_eq!(ncclDataType_t::from_raw(99), None);
    /// ```
    pub fn from_raw(raw: i32) -> Option<ncclDataType_t> {
        use ncclDataType_t::*;
        [
            ncclInt8,
            ncclUint8,
            ncclInt32,
            ncclUint32,
            ncclInt64,
            ncclUint64,
            ncclFloat16,
            ncclFloat32,
            ncclFloat64,
            ncclBfloat16,
            ncclFloat8e4m3,
            ncclFloat8e5m2,
        ]
        .into_iter()
        .find(|t| *t as i32 == raw)
    }

    /// streamcomm's element type for this one.
    ///
    /// # Examples
    /// ```
    /// use streamcomm::cuda::nccl::sys::ncclDataType_t;
    /// assert_eq!(ncclDataType_t::ncclBfloat16.data_type()?, streamcomm::DataType::Bf16);
    /// assert!(ncclDataType_t::ncclFloat8e4m3.data_type().is_err());
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for the
    /// 8-bit floats and `ncclNumTypes`, which streamcomm does not move.
    pub fn data_type(self) -> crate::Result<crate::DataType> {
        use crate::DataType;
        use ncclDataType_t::*;
        Ok(match self {
            ncclInt8 => DataType::I8,
            ncclUint8 => DataType::U8,
            ncclInt32 => DataType::I32,
            ncclUint32 => DataType::U32,
            ncclInt64 => DataType::I64,
            ncclUint64 => DataType::U64,
            ncclFloat16 => DataType::F16,
            ncclFloat32 => DataType::F32,
            ncclFloat64 => DataType::F64,
            ncclBfloat16 => DataType::Bf16,
            ncclFloat8e4m3 | ncclFloat8e5m2 | ncclNumTypes => {
                return Err(crate::Error::invalid(format!(
                    "{self:?} is not an element type streamcomm reduces or moves"
                )));
            }
        })
    }
}

impl ncclRedOp_t {
    /// The built-in operator whose value is `raw`, if there is one (user
    /// operators, such as `ncclRedOpCreatePreMulSum`'s, are not).
    ///
    /// # Examples
    /// ```
    /// use streamcomm::cuda::nccl::sys::ncclRedOp_t;
    /// assert_eq!(ncclRedOp_t::from_raw(4), Some(ncclRedOp_t::ncclAvg));
    /// assert_eq!(ncclRedOp_t::from_raw(5), None);
    /// ```
    pub fn from_raw(raw: i32) -> Option<ncclRedOp_t> {
        use ncclRedOp_t::*;
        [ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg]
            .into_iter()
            .find(|o| *o as i32 == raw)
    }

    /// streamcomm's operator for this one.
    ///
    /// # Examples
    /// ```
    /// use streamcomm::cuda::nccl::sys::ncclRedOp_t;
    /// assert_eq!(ncclRedOp_t::ncclMin.reduce_op()?, streamcomm::ReduceOp::Min);
    /// # Ok::<(), streamcomm::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for
    /// `ncclNumOps` and `ncclMaxRedOp`, which are no operators.
    pub fn reduce_op(self) -> crate::Result<crate::ReduceOp> {
        use crate::ReduceOp;
        use ncclRedOp_t::*;
        Ok(match self {
            ncclSum => ReduceOp::Sum,
            ncclProd => ReduceOp::Prod,
            ncclMax => ReduceOp::Max,
            ncclMin => ReduceOp::Min,
            ncclAvg => ReduceOp::Avg,
            ncclNumOps | ncclMaxRedOp => {
                return Err(crate::Error::invalid(format!("{self:?} is no operator")));
            }
        })
    }
}

impl ncclResult_t {
    /// [`ncclSuccess`](ncclResult_t::ncclSuccess) and the two statuses
    /// as `Ok`, every other code as [`NcclError`](super::NcclError) (as
    /// cudarc's `result()`).
    ///
    /// # Examples
    /// ```
    /// use streamcomm::cuda::nccl::{NcclError, sys::ncclResult_t};
    /// assert!(ncclResult_t::ncclSuccess.result().is_ok());
    /// assert_eq!(
    ///     ncclResult_t::ncclTimeout.result(),
    ///     Err(NcclError(ncclResult_t::ncclTimeout))
    /// );
    /// ```
    ///
    /// # Errors
    /// Every code but the three above.
    pub fn result(self) -> Result<super::result::NcclStatus, super::NcclError> {
        use super::result::NcclStatus;
        match self {
            ncclResult_t::ncclSuccess => Ok(NcclStatus::Success),
            ncclResult_t::ncclInProgress => Ok(NcclStatus::InProgress),
            ncclResult_t::ncclNumResults => Ok(NcclStatus::NumResults),
            code => Err(super::NcclError(code)),
        }
    }
}
