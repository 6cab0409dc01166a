//! Inputs with exactly known results, and the check of every output element.
//!
//! Every rank fills its input with small integers that depend on the rank and
//! the element index, chosen so that any order of reduction gives the same
//! exact result in every element type (sums stay within the range where
//! f16, bf16 and i8 represent every integer; products are 1 or 2; averages
//! divide evenly). The expected output is computed here, independently of the
//! library, in `f64`, then converted once to the element type; a correct
//! result matches it bit for bit, so checking is a byte comparison.
//!
//! Inputs and results are periodic in the element index, so a buffer is
//! filled by computing one period and doubling copies: checking 64 MiB costs
//! a few memcpys, not 16 million conversions.

use streamcomm::{DataType, ReduceOp};
use streamcomm_kernels::{element_as_f64, write_element_from_f64};

use crate::cli::Collective;
use crate::coll::Geometry;

/// Largest value any input takes, before the rank offset of `Avg`.
const MAX_SPREAD: usize = 16;
/// Mismatches printed per rank and size (all are counted).
const MISMATCHES_SHOWN: usize = 3;

/// The input pattern of one run: element type, operator and number of ranks.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pattern {
    dtype: DataType,
    op: ReduceOp,
    nranks: usize,
    /// Distinct values per rank (`1..=spread`).
    spread: usize,
}

impl Pattern {
    /// The pattern for a run (`op` is ignored by non-reductions).
    pub(crate) fn new(dtype: DataType, op: ReduceOp, nranks: usize) -> Pattern {
        let spread = (exact_limit(dtype) / nranks.max(1))
            .saturating_sub(1)
            .clamp(1, MAX_SPREAD);
        Pattern {
            dtype,
            op,
            nranks: nranks.max(1),
            spread,
        }
    }

    /// Elements after which inputs and results repeat.
    pub(crate) fn period(&self) -> usize {
        self.spread * (self.nranks + 1)
    }

    /// Rank `rank`'s input at element `i`.
    pub(crate) fn input(&self, rank: usize, i: usize) -> f64 {
        match self.op {
            // One rank contributes 2 to each element (none to every
            // (n+1)-th): products are 1 or 2 in every type.
            ReduceOp::Prod => {
                if i % (self.nranks + 1) == rank {
                    2.0
                } else {
                    1.0
                }
            }
            // Offsets that sum to zero over the ranks: the sum is n times
            // the base, so the average is exact.
            ReduceOp::Avg => {
                let base = 1 + i % self.spread;
                let offset = if self.nranks % 2 == 1 && rank == self.nranks - 1 {
                    0.0
                } else if rank.is_multiple_of(2) {
                    1.0
                } else {
                    -1.0
                };
                base as f64 + offset
            }
            ReduceOp::Sum | ReduceOp::Min | ReduceOp::Max => {
                (1 + (i + 5 * rank) % self.spread) as f64
            }
        }
    }

    /// The reduction over all ranks of element `i`, as the library must
    /// compute it (integer sums wrap, integer averages truncate).
    pub(crate) fn reduced(&self, i: usize) -> f64 {
        let inputs = (0..self.nranks).map(|r| self.input(r, i));
        match self.op {
            ReduceOp::Sum => wrap(self.dtype, inputs.sum()),
            ReduceOp::Prod => wrap(self.dtype, inputs.product()),
            ReduceOp::Min => inputs.fold(f64::INFINITY, f64::min),
            ReduceOp::Max => inputs.fold(f64::NEG_INFINITY, f64::max),
            ReduceOp::Avg => {
                let sum = wrap(self.dtype, inputs.sum());
                let avg = sum / self.nranks as f64;
                if self.dtype.is_float() {
                    avg
                } else {
                    avg.trunc()
                }
            }
        }
    }

    /// This rank's send buffer for a row, as bytes.
    pub(crate) fn send_bytes(&self, rank: usize, geometry: &Geometry) -> Vec<u8> {
        let mut out = vec![0u8; geometry.send_len * self.dtype.size()];
        self.fill(&mut out, |i| self.input(rank, i));
        out
    }

    /// What this rank's receive buffer must hold after the last iteration,
    /// or `None` when it receives nothing (reduce, except on the root).
    pub(crate) fn expected_bytes(
        &self,
        collective: Collective,
        rank: usize,
        root: usize,
        geometry: &Geometry,
    ) -> Option<Vec<u8>> {
        let (count, size) = (geometry.count, self.dtype.size());
        let n = self.nranks;
        let mut out = vec![0u8; geometry.recv_len * size];
        match collective {
            Collective::AllReduce => self.fill(&mut out, |i| self.reduced(i)),
            Collective::Reduce if rank == root => self.fill(&mut out, |i| self.reduced(i)),
            Collective::Reduce | Collective::Barrier => return None,
            Collective::ReduceScatter => self.fill(&mut out, |i| self.reduced(rank * count + i)),
            Collective::Broadcast => self.fill(&mut out, |i| self.input(root, i)),
            Collective::Sendrecv => self.fill(&mut out, |i| self.input((rank + n - 1) % n, i)),
            Collective::AllGather => {
                for (block, dst) in out.chunks_mut(count.max(1) * size).enumerate() {
                    self.fill(dst, |i| self.input(block, i));
                }
            }
            Collective::AllToAll => {
                for (block, dst) in out.chunks_mut(count.max(1) * size).enumerate() {
                    self.fill(dst, |i| self.input(block, rank * count + i));
                }
            }
        }
        Some(out)
    }

    /// Writes `value(i)` into every element `i` of `out`; `value` must repeat
    /// every [`Pattern::period`] elements.
    fn fill(&self, out: &mut [u8], value: impl Fn(usize) -> f64) {
        let size = self.dtype.size();
        let elems = out.len() / size;
        let first = elems.min(self.period());
        for i in 0..first {
            write_element_from_f64(self.dtype, out, i, value(i));
        }
        // `filled` stays a multiple of the period, so copies keep the phase.
        let mut filled = first * size;
        let total = elems * size;
        while filled < total {
            let n = filled.min(total - filled);
            out.copy_within(0..n, filled);
            filled += n;
        }
    }
}

/// Counts the elements of `got` that differ from `expected`, printing the
/// first few to stderr with `context` (rank and size).
pub(crate) fn count_wrong(dtype: DataType, got: &[u8], expected: &[u8], context: &str) -> u64 {
    if got == expected {
        return 0;
    }
    if got.len() != expected.len() {
        say(&format!(
            "{context}: output has {} bytes, expected {}",
            got.len(),
            expected.len()
        ));
        return (expected.len() / dtype.size()) as u64;
    }
    let size = dtype.size();
    let mut wrong = 0u64;
    for (i, (g, e)) in got
        .chunks_exact(size)
        .zip(expected.chunks_exact(size))
        .enumerate()
    {
        if g != e {
            if (wrong as usize) < MISMATCHES_SHOWN {
                say(&format!(
                    "{context}: element {i} is {}, expected {}",
                    element_as_f64(dtype, got, i),
                    element_as_f64(dtype, expected, i)
                ));
            }
            wrong += 1;
        }
    }
    wrong
}

/// Writes one line to stderr in a single write, so that lines of ranks
/// sharing the terminal do not interleave.
fn say(line: &str) {
    use std::io::Write;
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
}

/// Largest `m` such that every integer in `0..=m` is exact in `dtype`.
fn exact_limit(dtype: DataType) -> usize {
    match dtype {
        DataType::I8 => 127,
        DataType::U8 => 255,
        DataType::Bf16 => 256,
        DataType::F16 => 2048,
        _ => 1 << 24,
    }
}

/// Integer results wrap (two's complement) like the library's arithmetic;
/// float results are returned unchanged.
fn wrap(dtype: DataType, value: f64) -> f64 {
    if dtype.is_float() {
        return value;
    }
    let bits = 8 * dtype.size() as u32;
    let modulus = 1i128 << bits;
    let mut v = (value as i128).rem_euclid(modulus);
    let signed = matches!(dtype, DataType::I8 | DataType::I32 | DataType::I64);
    if signed && v >= modulus / 2 {
        v -= modulus;
    }
    v as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry(c: Collective, dtype: DataType, n: usize, size: u64) -> Geometry {
        c.geometry(size, dtype, n)
    }

    #[test]
    fn results_are_exact_in_every_type() {
        for dtype in DataType::ALL {
            for op in ReduceOp::ALL {
                for n in [1, 2, 3, 8, 60] {
                    let p = Pattern::new(dtype, op, n);
                    for i in 0..2 * p.period() {
                        let r = p.reduced(i);
                        let mut b = vec![0u8; 8];
                        write_element_from_f64(dtype, &mut b, 0, r);
                        assert_eq!(element_as_f64(dtype, &b, 0), r, "{dtype} {op} n={n} i={i}");
                        assert!(
                            r >= 1.0,
                            "{dtype} {op} n={n}: result {r} could be a zeroed buffer"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn periodic_fill_matches_direct_fill() {
        let p = Pattern::new(DataType::F16, ReduceOp::Sum, 3);
        let g = geometry(Collective::AllReduce, DataType::F16, 3, 1000);
        let bytes = p.send_bytes(2, &g);
        for i in 0..g.send_len {
            assert_eq!(element_as_f64(DataType::F16, &bytes, i), p.input(2, i));
        }
    }

    #[test]
    fn expected_outputs_follow_the_definitions() {
        let (dtype, n) = (DataType::I32, 3);
        let p = Pattern::new(dtype, ReduceOp::Sum, n);
        let g = geometry(Collective::AllToAll, dtype, n, 3 * 4 * 5);
        let exp = p.expected_bytes(Collective::AllToAll, 1, 0, &g).unwrap();
        // Block b of rank 1's output is block 1 of rank b's input.
        for b in 0..n {
            for i in 0..g.count {
                assert_eq!(
                    element_as_f64(dtype, &exp, b * g.count + i),
                    p.input(b, g.count + i)
                );
            }
        }
        let g = geometry(Collective::ReduceScatter, dtype, n, 3 * 4 * 5);
        let exp = p
            .expected_bytes(Collective::ReduceScatter, 2, 0, &g)
            .unwrap();
        assert_eq!(element_as_f64(dtype, &exp, 1), p.reduced(2 * g.count + 1));
        let g = geometry(Collective::Reduce, dtype, n, 16);
        assert!(p.expected_bytes(Collective::Reduce, 1, 0, &g).is_none());
    }

    #[test]
    fn integer_sums_wrap() {
        assert_eq!(wrap(DataType::I8, 130.0), -126.0);
        assert_eq!(wrap(DataType::U8, 256.0), 0.0);
        assert_eq!(wrap(DataType::F16, 70000.0), 70000.0);
    }

    #[test]
    fn mismatches_are_counted() {
        let exp: Vec<u8> = [1.0f32, 2.0, 3.0]
            .iter()
            .flat_map(|x| x.to_ne_bytes())
            .collect();
        let mut got = exp.clone();
        assert_eq!(count_wrong(DataType::F32, &got, &exp, "test"), 0);
        got[4..8].copy_from_slice(&7.0f32.to_ne_bytes());
        assert_eq!(count_wrong(DataType::F32, &got, &exp, "test"), 1);
    }
}
