//! The element types both libraries know, and dispatch from candle's
//! [`DType`] to a function generic over the element.

use candle_core::{DType, Result, WithDType};
use streamcomm::host::Element;

/// An element type of candle's that streamcomm also reduces.
pub(crate) trait Elem: WithDType + Element {}

impl<T: WithDType + Element> Elem for T {}

/// Something to do with the elements of one tensor, whatever their type.
pub(crate) trait PerType {
    /// What it returns.
    type Out;
    /// Does it with elements of type `T`.
    fn run<T: Elem>(self) -> Result<Self::Out>;
}

/// Runs `task` with the element type of `dtype`, or refuses a type
/// streamcomm does not carry, naming it.
pub(crate) fn with_dtype<P: PerType>(dtype: DType, what: &str, task: P) -> Result<P::Out> {
    use half::{bf16, f16};
    match dtype {
        DType::F32 => task.run::<f32>(),
        DType::F64 => task.run::<f64>(),
        DType::F16 => task.run::<f16>(),
        DType::BF16 => task.run::<bf16>(),
        DType::U8 => task.run::<u8>(),
        DType::U32 => task.run::<u32>(),
        DType::I64 => task.run::<i64>(),
        other => Err(unsupported(what, other)),
    }
}

/// The error for tensors of `dtype`, which streamcomm does not carry.
pub(crate) fn unsupported(what: &str, dtype: DType) -> candle_core::Error {
    candle_core::Error::Msg(format!(
        "{what}: tensors of {dtype:?} are not carried by streamcomm (f32, f64, f16, bf16, u8, \
         u32 and i64 are)"
    ))
}

/// The error for a strided tensor given to a call that works in place.
pub(crate) fn not_contiguous(what: &str, dims: &[usize], stride: &[usize]) -> candle_core::Error {
    candle_core::Error::Msg(format!(
        "{what}: the tensor is not contiguous (shape {dims:?}, stride {stride:?}): call \
         .contiguous() first, or use the call that returns a new tensor"
    ))
}
