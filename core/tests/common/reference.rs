//! The reference: what each rank must hold after a collective, in `f64`.
//!
//! Written from the definitions (NCCL's semantics of each collective), not
//! from the plans, so an algorithm bug cannot be copied into its own check.

use streamcomm::Collective;
use streamcomm::{DataType, ReduceOp};
use streamcomm_kernels::{element_as_f64, write_element_from_f64};

/// True for the collectives that combine values with the operator.
pub(super) fn reduces(collective: Collective) -> bool {
    matches!(
        collective,
        Collective::AllReduce | Collective::ReduceScatter | Collective::Reduce { .. }
    )
}

/// Elements rank `rank` sends and receives, in that order (NCCL's
/// conventions for `count`).
pub(crate) fn counts(
    collective: Collective,
    rank: usize,
    nranks: usize,
    count: usize,
) -> (usize, usize) {
    let (whole, root_only) = (nranks * count, |root| if rank == root { count } else { 0 });
    match collective {
        Collective::ReduceScatter => (whole, count),
        Collective::AllGather => (count, whole),
        Collective::AllToAll => (whole, whole),
        Collective::Broadcast { root } => (root_only(root), count),
        Collective::Reduce { root } => (count, root_only(root)),
        Collective::Barrier => (0, 0),
        _ => (count, count),
    }
}

/// Every element of `bytes` as `f64`.
pub(crate) fn decode(dtype: DataType, bytes: &[u8]) -> Vec<f64> {
    (0..bytes.len() / dtype.size())
        .map(|i| element_as_f64(dtype, bytes, i))
        .collect()
}

/// `values` converted to `dtype`, as bytes.
pub(crate) fn encode(dtype: DataType, values: &[f64]) -> Vec<u8> {
    let mut bytes = vec![0u8; values.len() * dtype.size()];
    for (i, &v) in values.iter().enumerate() {
        write_element_from_f64(dtype, &mut bytes, i, v);
    }
    bytes
}

/// `op` over `values` (one per rank), with `Avg`'s division by `nranks`
/// (truncating for integers, as the kernels do).
fn combine(dtype: DataType, op: ReduceOp, nranks: usize, values: impl Iterator<Item = f64>) -> f64 {
    let mut values = values;
    let first = values.next().unwrap_or(0.0);
    let folded = values.fold(first, |acc, v| match op {
        ReduceOp::Sum | ReduceOp::Avg => acc + v,
        ReduceOp::Prod => acc * v,
        ReduceOp::Min => acc.min(v),
        ReduceOp::Max => acc.max(v),
    });
    if op != ReduceOp::Avg {
        return folded;
    }
    let avg = folded / nranks as f64;
    if dtype.is_float() { avg } else { avg.trunc() }
}

/// What every rank must hold after `collective` on `inputs` (each rank's send
/// buffer as bytes); `None` for a rank that receives nothing.
///
/// Point-to-point is a pairing, not one collective: for `Send{..}` every
/// entry is `None`; for `Recv{peer}` every entry is `peer`'s input, i.e.
/// what any rank that receives from `peer` must hold (pick the receiver's).
pub(crate) fn expected(
    collective: Collective,
    dtype: DataType,
    op: ReduceOp,
    nranks: usize,
    count: usize,
    inputs: &[Vec<u8>],
) -> Vec<Option<Vec<f64>>> {
    let ins: Vec<Vec<f64>> = inputs.iter().map(|b| decode(dtype, b)).collect();
    // Element `i` reduced over all ranks, reading each rank's input at `at + i`.
    let reduced = |at: usize, len: usize| -> Vec<f64> {
        (0..len)
            .map(|i| combine(dtype, op, nranks, ins.iter().map(|v| v[at + i])))
            .collect()
    };
    (0..nranks)
        .map(|rank| match collective {
            Collective::AllReduce => Some(reduced(0, count)),
            Collective::AllGather => Some(ins.concat()),
            Collective::ReduceScatter => Some(reduced(rank * count, count)),
            Collective::Broadcast { root } => Some(ins[root].clone()),
            Collective::Reduce { root } => (rank == root).then(|| reduced(0, count)),
            Collective::AllToAll => Some(
                (0..nranks)
                    .flat_map(|src| ins[src][rank * count..(rank + 1) * count].to_vec())
                    .collect(),
            ),
            Collective::Barrier => None,
        })
        .collect()
}

/// Compares every element of `got` (bytes of `dtype`) with `want`.
///
/// Exact, except float `Avg`, whose final division rounds in the element's
/// precision: there the tolerance is a few units in the last place of the
/// dtype (bf16 and f16 included).
///
/// # Errors
///
/// A message with the number of mismatches and the first few, by index.
pub(crate) fn check(dtype: DataType, op: ReduceOp, got: &[u8], want: &[f64]) -> Result<(), String> {
    if got.len() != want.len() * dtype.size() {
        return Err(format!(
            "got {} bytes, want {} {dtype} elements ({} bytes)",
            got.len(),
            want.len(),
            want.len() * dtype.size()
        ));
    }
    let rel = match (dtype, op) {
        (DataType::F32, ReduceOp::Avg) => 2.0 * f64::from(f32::EPSILON),
        (DataType::F64, ReduceOp::Avg) => 2.0 * f64::EPSILON,
        (DataType::F16, ReduceOp::Avg) => 2.0_f64.powi(-10),
        (DataType::Bf16, ReduceOp::Avg) => 2.0_f64.powi(-7),
        _ => 0.0,
    };
    let bad: Vec<String> = decode(dtype, got)
        .iter()
        .zip(want)
        .enumerate()
        .filter(|(_, (g, w))| {
            let diff = (*g - *w).abs();
            diff.is_nan() || diff > rel * w.abs()
        })
        .map(|(i, (g, w))| format!("[{i}] got {g}, want {w}"))
        .collect();
    if bad.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{} of {} {dtype} elements differ ({op}): {}",
        bad.len(),
        want.len(),
        bad.iter().take(8).cloned().collect::<Vec<_>>().join(", ")
    ))
}
