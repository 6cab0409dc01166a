//! Statistics over samples, and over ranks through the communicator itself.
//!
//! Latencies are summarised by percentiles (the tail is what a barrier-bound
//! program feels, `docs/design/architecture.md`), and every figure printed for the job is the
//! slowest rank's: each rank's numbers are combined with an all_reduce `Max`
//! (or `Sum` for counts) of a small `f64` buffer, after the timed loops.

use streamcomm::host::{HostBuffer, HostStream};
use streamcomm::{Communicator, ReduceOp, Result};

/// Percentiles of a latency distribution, in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub(crate) struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest sample.
    pub max: f64,
}

impl Percentiles {
    /// Percentiles of `samples` (sorted in place); all zero when empty.
    pub(crate) fn of(samples: &mut [f64]) -> Percentiles {
        samples.sort_by(f64::total_cmp);
        Percentiles {
            p50: percentile(samples, 0.50),
            p99: percentile(samples, 0.99),
            p999: percentile(samples, 0.999),
            max: samples.last().copied().unwrap_or(0.0),
        }
    }

    /// The four values, in field order.
    pub(crate) fn to_array(self) -> [f64; 4] {
        [self.p50, self.p99, self.p999, self.max]
    }

    /// From [`Percentiles::to_array`]'s order.
    pub(crate) fn from_array(a: [f64; 4]) -> Percentiles {
        Percentiles {
            p50: a[0],
            p99: a[1],
            p999: a[2],
            max: a[3],
        }
    }

    /// Each value divided by `unit` (e.g. the core-to-core round trip).
    pub(crate) fn scaled(self, unit: f64) -> Percentiles {
        Percentiles::from_array(self.to_array().map(|v| v / unit))
    }
}

/// Nearest-rank percentile `q` (0..=1) of sorted samples; 0 when empty.
pub(crate) fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// `value / unit`, NaN when `unit` is not positive (a limit that could not
/// be measured).
pub(crate) fn fraction(value: f64, unit: f64) -> f64 {
    if unit > 0.0 { value / unit } else { f64::NAN }
}

/// Combines `values` element-wise over all ranks with `op` (an all_reduce
/// on `stream`, synchronized); every rank gets the result.
///
/// # Errors
/// As the all_reduce and the stream's synchronize.
pub(crate) fn across_ranks(
    comm: &Communicator,
    stream: &HostStream,
    values: &[f64],
    op: ReduceOp,
) -> Result<Vec<f64>> {
    let send = HostBuffer::from_slice(values);
    let mut recv = HostBuffer::<f64>::zeroed(values.len());
    comm.all_reduce(&send, &mut recv, op, stream)?;
    stream.synchronize()?;
    Ok(recv.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut s: Vec<f64> = (1..=1000).rev().map(f64::from).collect();
        let p = Percentiles::of(&mut s);
        assert_eq!(
            p,
            Percentiles {
                p50: 500.0,
                p99: 990.0,
                p999: 999.0,
                max: 1000.0
            }
        );
        assert_eq!(Percentiles::of(&mut []), Percentiles::default());
        assert_eq!(percentile(&[3.0], 0.5), 3.0);
    }
}
