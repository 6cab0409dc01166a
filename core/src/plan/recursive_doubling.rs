//! All-gather in `ceil(log2 n)` rounds: recursive doubling and Bruck.
//!
//! The ring all-gather takes `n - 1` rounds, so small messages pay `n - 1`
//! latencies. Recursive doubling (Thakur, Rabenseifner and Gropp, "Optimization
//! of Collective Communication Operations in MPICH", 2005) takes `log2 n`:
//! in round `k` rank `r` swaps everything it holds, the aligned group of
//! `2^k` blocks around it, with rank `r xor 2^k`, so the data held doubles
//! each round. It needs a power of two. Bruck's algorithm (Bruck et al.,
//! "Efficient algorithms for all-to-all communications in multiport
//! message-passing systems", 1997) works for any `n`: in round `k` rank `r`
//! sends the blocks `r .. r + 2^k` (mod `n`) it holds to `r - 2^k` and receives
//! blocks `r + 2^k ..` from `r + 2^k`, the last round sending only what is
//! still missing. Blocks are written straight to their place in the output
//! (indexed by rank), so Bruck's final rotation is not needed.
//!
//! Every round is a permutation (each rank sends to one peer and receives
//! from one), and within a round sends and receives alternate chunk by chunk,
//! so the exchange never waits for more than one free slot per connection
//! (as `pairwise.rs` does). Both ends cut a round's data at the same places
//! (the blocks' absolute positions), so chunk lengths always match.

use super::ring::local_copy;
use super::step::{Region, Step};
use super::Geometry;

/// Recursive-doubling all-gather; Bruck's when `n` is not a power of two.
pub(super) fn all_gather(g: &Geometry) -> Vec<Step> {
    if g.nranks.is_power_of_two() {
        doubling(g)
    } else {
        bruck(g)
    }
}

/// Bruck all-gather, for any number of ranks.
pub(super) fn bruck(g: &Geometry) -> Vec<Step> {
    let (n, r, count) = (g.nranks, g.rank, g.count);
    if n == 1 || count == 0 {
        return local_copy(count, false);
    }
    let mut steps = vec![own_block(g)];
    let mut dist = 1;
    while dist < n {
        let blocks = dist.min(n - dist);
        let to = (r + n - dist) % n;
        let from = (r + dist) % n;
        let sends = cyclic_chunks(g, r, blocks);
        let recvs = cyclic_chunks(g, from, blocks);
        exchange(&mut steps, to, &sends, from, &recvs);
        dist *= 2;
    }
    steps
}

/// Recursive-doubling all-gather (`n` a power of two).
fn doubling(g: &Geometry) -> Vec<Step> {
    let (n, r, count) = (g.nranks, g.rank, g.count);
    if n == 1 || count == 0 {
        return local_copy(count, false);
    }
    let mut steps = vec![own_block(g)];
    let mut dist = 1;
    while dist < n {
        let peer = r ^ dist;
        let mine = (r & !(dist - 1)) * count;
        let theirs = (peer & !(dist - 1)) * count;
        let sends: Vec<_> = g.chunks(dist * count).map(|(o, l)| (mine + o, l)).collect();
        let recvs: Vec<_> = g
            .chunks(dist * count)
            .map(|(o, l)| (theirs + o, l))
            .collect();
        exchange(&mut steps, peer, &sends, peer, &recvs);
        dist *= 2;
    }
    steps
}

/// Copies this rank's input into its own block of the output.
fn own_block(g: &Geometry) -> Step {
    Step::copy(
        Region::send(0, g.count),
        Region::recv(g.rank * g.count, g.count),
    )
}

/// `(offset, len)` chunks of the output covering blocks `first ..
/// first + blocks` (mod `n`): cut where the range wraps and at every `chunk`
/// elements, the same way on every rank.
fn cyclic_chunks(g: &Geometry, first: usize, blocks: usize) -> Vec<(usize, usize)> {
    let (n, count) = (g.nranks, g.count);
    let end = first + blocks;
    let mut pieces = vec![(first * count, (end.min(n) - first) * count)];
    if end > n {
        pieces.push((0, (end - n) * count));
    }
    pieces
        .into_iter()
        .flat_map(|(start, len)| g.chunks(len).map(move |(o, l)| (start + o, l)))
        .collect()
}

/// Alternates sends of `sends` to `to` and receives of `recvs` from `from`,
/// all within the output buffer.
fn exchange(
    steps: &mut Vec<Step>,
    to: usize,
    sends: &[(usize, usize)],
    from: usize,
    recvs: &[(usize, usize)],
) {
    for i in 0..sends.len().max(recvs.len()) {
        if let Some(&(off, len)) = sends.get(i) {
            steps.push(Step::send(to, Region::recv(off, len)));
        }
        if let Some(&(off, len)) = recvs.get(i) {
            steps.push(Step::recv(from, Region::recv(off, len)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geom(rank: usize, nranks: usize, count: usize) -> Geometry {
        Geometry {
            rank,
            nranks,
            count,
            chunk: 4,
            breaker: true,
        }
    }

    #[test]
    fn doubling_swaps_growing_groups() {
        let steps = all_gather(&geom(2, 4, 1));
        assert_eq!(
            steps,
            vec![
                Step::copy(Region::send(0, 1), Region::recv(2, 1)),
                Step::send(3, Region::recv(2, 1)),
                Step::recv(3, Region::recv(3, 1)),
                Step::send(0, Region::recv(2, 2)),
                Step::recv(0, Region::recv(0, 2)),
            ]
        );
    }

    #[test]
    fn bruck_wraps_and_sends_only_what_is_missing() {
        // 5 ranks, rank 3: rounds of 1, 2 and 1 blocks.
        let steps = all_gather(&geom(3, 5, 1));
        assert_eq!(
            steps,
            vec![
                Step::copy(Region::send(0, 1), Region::recv(3, 1)),
                Step::send(2, Region::recv(3, 1)),
                Step::recv(4, Region::recv(4, 1)),
                Step::send(1, Region::recv(3, 2)),
                Step::recv(0, Region::recv(0, 2)),
                Step::send(4, Region::recv(3, 1)),
                Step::recv(2, Region::recv(2, 1)),
            ]
        );
        // Wrapping blocks are cut where they wrap, then per chunk.
        assert_eq!(cyclic_chunks(&geom(0, 5, 3), 4, 2), vec![(12, 3), (0, 3)]);
        assert_eq!(cyclic_chunks(&geom(0, 5, 3), 1, 2), vec![(3, 4), (7, 2)]);
    }
}
