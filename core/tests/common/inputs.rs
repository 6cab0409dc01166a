//! Random inputs whose reductions are exact.
//!
//! A reference computed in `f64` only proves something if the library's
//! result can be compared exactly. The values here are small integers chosen
//! per dtype and operator so that, for up to 64 ranks, every partial result
//! of every reduction order is representable: sums never leave the range
//! where the type holds integers exactly (bf16 has 8 significant bits, f16
//! 11) and never overflow an integer type; products only use magnitudes 1
//! and 2 on the few ranks whose factors still fit, and ±1 elsewhere.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use streamcomm::Collective;
use streamcomm::{DataType, ReduceOp};

use super::reference::{counts, encode, reduces};

/// Inclusive range of integers whose sum over 64 ranks is exact.
fn sum_range(dtype: DataType) -> (i64, i64) {
    match dtype {
        DataType::F32 => (-1000, 1000),
        DataType::F64 => (-1_000_000, 1_000_000),
        DataType::F16 => (-16, 16),
        DataType::Bf16 => (-2, 2),
        DataType::I8 => (-1, 1),
        DataType::U8 => (0, 3),
        DataType::I32 => (-1_000_000, 1_000_000),
        DataType::U32 => (0, 1_000_000),
        DataType::I64 => (-1_000_000_000, 1_000_000_000),
        DataType::U64 => (0, 1_000_000_000),
    }
}

/// Inclusive range of integers the type holds exactly (for min, max and
/// the collectives that only move data).
fn exact_range(dtype: DataType) -> (i64, i64) {
    match dtype {
        DataType::F32 => (-1 << 24, 1 << 24),
        DataType::F64 | DataType::I64 => (-1 << 53, 1 << 53),
        DataType::F16 => (-2048, 2048),
        DataType::Bf16 => (-256, 256),
        DataType::I8 => (i8::MIN.into(), i8::MAX.into()),
        DataType::U8 => (0, u8::MAX.into()),
        DataType::I32 => (i32::MIN.into(), i32::MAX.into()),
        DataType::U32 => (0, u32::MAX.into()),
        DataType::U64 => (0, 1 << 53),
    }
}

/// How many ranks may contribute a factor of magnitude 2 to a product
/// without overflowing the type (every other rank contributes ±1).
fn prod_twos(dtype: DataType) -> usize {
    match dtype {
        DataType::F32 | DataType::F64 | DataType::Bf16 => 64,
        DataType::F16 => 15,
        DataType::I8 => 6,
        DataType::U8 => 7,
        DataType::I32 => 30,
        DataType::U32 => 31,
        DataType::I64 => 62,
        DataType::U64 => 63,
    }
}

/// `len` random values for `rank`, exact under `op` (or under plain copies
/// when `op` is `None`).
pub(crate) fn gen_values(
    dtype: DataType,
    op: Option<ReduceOp>,
    rank: usize,
    len: usize,
    rng: &mut impl Rng,
) -> Vec<f64> {
    let signed = !matches!(dtype, DataType::U8 | DataType::U32 | DataType::U64);
    (0..len)
        .map(|_| match op {
            Some(ReduceOp::Sum | ReduceOp::Avg) => {
                let (lo, hi) = sum_range(dtype);
                rng.gen_range(lo..=hi) as f64
            }
            Some(ReduceOp::Prod) => {
                let magnitude = if rank < prod_twos(dtype) {
                    rng.gen_range(1..=2)
                } else {
                    1
                };
                let negative = signed && rng.gen_bool(0.5);
                if negative {
                    -f64::from(magnitude)
                } else {
                    f64::from(magnitude)
                }
            }
            Some(ReduceOp::Min | ReduceOp::Max) | None => {
                let (lo, hi) = exact_range(dtype);
                rng.gen_range(lo..=hi) as f64
            }
        })
        .collect()
}

/// Every rank's send buffer for one call, as bytes: the elements it sends
/// (see [`counts`]), reproducible from `seed`.
pub(crate) fn gen_inputs(
    collective: Collective,
    dtype: DataType,
    op: ReduceOp,
    nranks: usize,
    count: usize,
    seed: u64,
) -> Vec<Vec<u8>> {
    let mut rng = StdRng::seed_from_u64(seed);
    let op = reduces(collective).then_some(op);
    (0..nranks)
        .map(|rank| {
            let len = counts(collective, rank, nranks, count).0;
            encode(dtype, &gen_values(dtype, op, rank, len, &mut rng))
        })
        .collect()
}
