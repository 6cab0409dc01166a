//! Helpers shared by the unit tests of the plan module's files.

use std::ops::RangeInclusive;

use super::step::DataStep;
use super::{Geometry, geom};

/// Checks, for every size in `sizes` and count in `counts`, that the
/// all-reduce plans `all_reduce` builds for all ranks (on [`geom`]'s
/// geometry) finalize each element `times(nranks)` times in all.
pub(crate) fn assert_finalized_times(
    all_reduce: fn(&Geometry) -> Vec<DataStep>,
    sizes: RangeInclusive<usize>,
    counts: &[usize],
    times: impl Fn(usize) -> usize,
) {
    for n in sizes {
        for &count in counts {
            let mut seen = vec![0; count];
            for r in 0..n {
                for s in all_reduce(&geom(r, n, count)) {
                    if s.finalize {
                        let d = s.dst.unwrap();
                        seen[d.offset..d.end()].iter_mut().for_each(|c| *c += 1);
                    }
                }
            }
            let want = times(n);
            assert!(seen.iter().all(|&c| c == want), "n={n} count={count}");
        }
    }
}
