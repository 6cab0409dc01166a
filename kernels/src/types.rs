//! Element types and reduction operators shared by every layer.
//!
//! These two enums are the vocabulary of the whole library: plans, the wire
//! format, the CPU loops here and (later) the CUDA kernels all speak them.

use std::fmt;

/// Defines a `repr(u8)` vocabulary enum from its variants, each with its
/// discriminant and short name, and what every such enum has: `ALL` (the
/// variants in declaration order), `name`, `from_u8` (the wire format's
/// decoding) and `Display` (the name).
macro_rules! vocabulary {
    (
        $(#[$meta:meta])*
        pub enum $ty:ident {
            $($(#[doc = $doc:literal])* $v:ident = $n:literal => $name:literal,)*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum $ty {
            $($(#[doc = $doc])* $v = $n,)*
        }

        impl $ty {
            /// Every variant, in declaration order (which is discriminant
            /// order).
            pub const ALL: [$ty; [$($name),*].len()] = [$($ty::$v),*];

            /// Short lowercase name, as used on the command line.
            pub const fn name(self) -> &'static str {
                match self {
                    $($ty::$v => $name,)*
                }
            }

            /// Decodes the `repr(u8)` discriminant (wire format).
            pub fn from_u8(v: u8) -> Option<$ty> {
                $ty::ALL.get(v as usize).copied()
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

vocabulary! {
    /// Element type of a communication buffer (NCCL's `ncclDataType_t`):
    /// `f32`, `f64`, `f16`, `bf16`, `i8`, `u8`, `i32`, `u32`, `i64`, `u64`.
    pub enum DataType {
        /// IEEE 754 binary32.
        F32 = 0 => "f32",
        /// IEEE 754 binary64.
        F64 = 1 => "f64",
        /// IEEE 754 binary16 ([`half::f16`]).
        F16 = 2 => "f16",
        /// bfloat16 ([`half::bf16`]).
        Bf16 = 3 => "bf16",
        /// Signed 8-bit integer.
        I8 = 4 => "i8",
        /// Unsigned 8-bit integer.
        U8 = 5 => "u8",
        /// Signed 32-bit integer.
        I32 = 6 => "i32",
        /// Unsigned 32-bit integer.
        U32 = 7 => "u32",
        /// Signed 64-bit integer.
        I64 = 8 => "i64",
        /// Unsigned 64-bit integer.
        U64 = 9 => "u64",
    }
}

impl DataType {
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
}

vocabulary! {
    /// Reduction operator (NCCL's `ncclRedOp_t`): `sum`, `prod`, `min`,
    /// `max`, `avg`.
    ///
    /// `Avg` reduces with a sum and divides by the number of ranks once, at the end
    /// (integer types use truncating division, like NCCL).
    pub enum ReduceOp {
        /// Element-wise sum (wrapping for integers).
        Sum = 0 => "sum",
        /// Element-wise product (wrapping for integers).
        Prod = 1 => "prod",
        /// Element-wise minimum.
        Min = 2 => "min",
        /// Element-wise maximum.
        Max = 3 => "max",
        /// Sum divided by the number of ranks.
        Avg = 4 => "avg",
    }
}

impl ReduceOp {
    /// Parses a name produced by [`ReduceOp::name`].
    pub fn parse(s: &str) -> Option<ReduceOp> {
        ReduceOp::ALL
            .iter()
            .copied()
            .find(|op| op.name().eq_ignore_ascii_case(s))
    }
}
