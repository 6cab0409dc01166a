//! Pairwise exchange (all-to-all).
//!
//! All-to-all has no reduction and every pair of ranks has its own data, so
//! the schedule is the classic pairwise exchange (MPICH's
//! `MPIR_Alltoall_intra_pairwise`): in round `s` rank `r` sends to `r + s`
//! and receives from `r - s`, so each round is a permutation and no link
//! carries two rounds' traffic. Chunks of a round are interleaved (send one,
//! receive one), which keeps the exchange deadlock-free with a single slot per
//! connection.

use super::Geometry;
use super::step::{DataStep, Region};

/// Pairwise all-to-all: the local block is copied, then `n - 1` rounds of
/// interleaved chunk sends and receives.
pub(super) fn all_to_all(g: &Geometry) -> Vec<DataStep> {
    let (n, r, count) = (g.nranks, g.rank, g.count);
    if count == 0 {
        return Vec::new();
    }
    let mut steps = vec![DataStep::copy(
        Region::send(r * count, count),
        Region::recv(r * count, count),
    )];
    for s in 1..n {
        let to = (r + s) % n;
        let from = (r + n - s) % n;
        for (off, len) in g.chunks(count) {
            steps.push(DataStep::send(to, Region::send(to * count + off, len)));
            steps.push(DataStep::recv(from, Region::recv(from * count + off, len)));
        }
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::plan::geom;

    #[test]
    fn all_to_all_rounds_are_permutations() {
        let g = geom(1, 3, 6);
        let steps = all_to_all(&g);
        // 1 copy + 2 rounds x 2 chunks x (send + recv).
        assert_eq!(steps.len(), 1 + 2 * 2 * 2);
        assert_eq!(
            steps[0],
            DataStep::copy(Region::send(6, 6), Region::recv(6, 6))
        );
        assert_eq!(steps[1], DataStep::send(2, Region::send(12, 4)));
        assert_eq!(steps[2], DataStep::recv(0, Region::recv(0, 4)));
        assert_eq!(steps[3], DataStep::send(2, Region::send(16, 2)));
        assert_eq!(steps[5], DataStep::send(0, Region::send(0, 4)));
        assert_eq!(steps[6], DataStep::recv(2, Region::recv(12, 4)));
    }
}
