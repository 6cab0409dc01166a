//! Element types and reduction operators shared by every layer.
//!
//! These two enums are the vocabulary of the whole library: plans, the wire
//! format, the CPU loops here and (later) the CUDA kernels all speak them.

use std::fmt;

/// Element type of a communication buffer (NCCL's `ncclDataType_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DataType {
    /// IEEE 754 binary32.
    F32 = 0,
    /// IEEE 754 binary64.
    F64 = 1,
    /// IEEE 754 binary16 ([`half::f16`]).
    F16 = 2,
    /// bfloat16 ([`half::bf16`]).
    Bf16 = 3,
    /// Signed 8-bit integer.
    I8 = 4,
    /// Unsigned 8-bit integer.
    U8 = 5,
    /// Signed 32-bit integer.
    I32 = 6,
    /// Unsigned 32-bit integer.
    U32 = 7,
    /// Signed 64-bit integer.
    I64 = 8,
    /// Unsigned 64-bit integer.
    U64 = 9,
}

impl DataType {
    /// Every data type, in declaration order.
    pub const ALL: [DataType; 10] = [
        DataType::F32,
        DataType::F64,
        DataType::F16,
        DataType::Bf16,
        DataType::I8,
        DataType::U8,
        DataType::I32,
        DataType::U32,
        DataType::I64,
        DataType::U64,
    ];

    /// Size of one element in bytes.
    pub const fn size(self) -> usize {
        match self {
            DataType::I8 | DataType::U8 => 1,
            DataType::F16 | DataType::Bf16 => 2,
            DataType::F32 | DataType::I32 | DataType::U32 => 4,
            DataType::F64 | DataType::I64 | DataType::U64 => 8,
        }
    }

    /// True for the floating-point types.
    pub const fn is_float(self) -> bool {
        matches!(
            self,
            DataType::F32 | DataType::F64 | DataType::F16 | DataType::Bf16
        )
    }

    /// Short lowercase name, as used on the command line (`f32`, `bf16`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            DataType::F32 => "f32",
            DataType::F64 => "f64",
            DataType::F16 => "f16",
            DataType::Bf16 => "bf16",
            DataType::I8 => "i8",
            DataType::U8 => "u8",
            DataType::I32 => "i32",
            DataType::U32 => "u32",
            DataType::I64 => "i64",
            DataType::U64 => "u64",
        }
    }

    /// Parses a name produced by [`DataType::name`] (also accepts `float`, `half`,
    /// `double`, `int`, as nccl-tests does).
    pub fn parse(s: &str) -> Option<DataType> {
        let lower = s.to_ascii_lowercase();
        let dtype = match lower.as_str() {
            "f32" | "float" | "float32" => DataType::F32,
            "f64" | "double" | "float64" => DataType::F64,
            "f16" | "half" | "float16" => DataType::F16,
            "bf16" | "bfloat16" => DataType::Bf16,
            "i8" | "int8" => DataType::I8,
            "u8" | "uint8" => DataType::U8,
            "i32" | "int" | "int32" => DataType::I32,
            "u32" | "uint32" => DataType::U32,
            "i64" | "int64" => DataType::I64,
            "u64" | "uint64" => DataType::U64,
            _ => return None,
        };
        Some(dtype)
    }

    /// Decodes the `repr(u8)` discriminant (wire format).
    pub fn from_u8(v: u8) -> Option<DataType> {
        DataType::ALL.get(v as usize).copied()
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Reduction operator (NCCL's `ncclRedOp_t`).
///
/// `Avg` reduces with a sum and divides by the number of ranks once, at the end
/// (integer types use truncating division, like NCCL).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ReduceOp {
    /// Element-wise sum (wrapping for integers).
    Sum = 0,
    /// Element-wise product (wrapping for integers).
    Prod = 1,
    /// Element-wise minimum.
    Min = 2,
    /// Element-wise maximum.
    Max = 3,
    /// Sum divided by the number of ranks.
    Avg = 4,
}

impl ReduceOp {
    /// Every operator, in declaration order.
    pub const ALL: [ReduceOp; 5] = [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::Avg,
    ];

    /// Short lowercase name (`sum`, `prod`, `min`, `max`, `avg`).
    pub const fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
            ReduceOp::Avg => "avg",
        }
    }

    /// Parses a name produced by [`ReduceOp::name`].
    pub fn parse(s: &str) -> Option<ReduceOp> {
        ReduceOp::ALL
            .iter()
            .copied()
            .find(|op| op.name().eq_ignore_ascii_case(s))
    }

    /// Decodes the `repr(u8)` discriminant (wire format).
    pub fn from_u8(v: u8) -> Option<ReduceOp> {
        ReduceOp::ALL.get(v as usize).copied()
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
