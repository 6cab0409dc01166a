//! Predicted time of each algorithm, from the shape of its schedule.
//!
//! As NCCL's `graph/tuning.cc`, the model is a latency/bandwidth formula per
//! algorithm, but written from what our plans actually do: a rank executes
//! its steps one after another, and a step moving `b` bytes over a link costs
//! `alpha + b beta` (plus `b gamma` when it reduces). Each algorithm is
//! described as *phases*: how many steps its busiest rank (or its critical
//! path, when pipeline filling dominates) runs, how big they are, whether
//! they reduce, and how far apart the two ranks of a step are, which decides
//! the link: ranks are placed `ranks_per_host` consecutive ranks per host,
//! so a step between ranks at least that far apart crosses hosts (tcp), a
//! closer one stays inside (shared memory). Along a ring or chain over
//! several hosts, `hosts` of the `ranks` hops cross hosts (their latency is
//! averaged in) and the pipeline runs no faster than the tcp link carries
//! bytes; tree steps cross hosts on the top `log2 hosts` levels.
//!
//! The prediction is the time per call of calls issued back to back on a
//! stream, as a training loop issues them and `streamcomm-bench` times
//! them. With a core per rank it is the larger of the critical path and the
//! work of all ranks of one host divided by its cores. With more ranks than
//! cores (8 ranks on 2 cores here) a waiting rank does not spin (spin
//! budget 0), it gives its core to a rank that has work, and a rank that
//! finished its part of one call starts the next. So a rooted collective
//! (broadcast, reduce), whose calls pipeline into each other, costs its
//! work alone; the others cost the larger of the work and the critical
//! path with each hop waiting about one turn of the ranks sharing a core.
//! A step then costs the crowded `alpha`, which includes handing a core
//! over.
//!
//! Bytes cost the cached `beta` while the buffers of all the ranks on a
//! host fit in a quarter of its last-level cache (where `calibrate`
//! measures it), the memory one beyond. A copy inside a rank (its input
//! into its output) costs no step and one copy of its bytes.
//!
//! Between hosts, rounds in which every rank crosses at once share the
//! host's link.
//!
//! Measured on 2 cores, 1000 back-to-back calls a point up to 32 KiB
//! (`benches/results/2026-11-30f`, three measurement runs): the model is
//! within 35% at 70-75% of 460 points, where the model without these
//! regimes and counts (one `alpha`, one `beta`, work alone when crowded)
//! was at 55-57% on the same measurements.
//!
//! A waiting rank spins a little (`spin`; not at all when ranks outnumber
//! cores), yields for a while (`yields`), then sleeps, and a rank that slept
//! runs again only once woken and given a core (`wake`: tens of µs idle,
//! milliseconds on a busy machine). So a phase whose steps take longer than
//! that patience (its step time, times the ranks per core when they
//! outnumber the cores, since a rank then waits for the others' steps too)
//! pays one wake-up on the critical path: each phase is a round that waits
//! for a peer's fresh data once, its later slots arriving while the rank
//! is busy. All three are measured by `streamcomm-bench calibrate`; the
//! wake-up is latency, not work, so only the critical path pays it.

use super::params::{CostParams, LinkCost};
use crate::plan::{Algorithm, Collective};

/// Where the ranks are, and the slot size that cuts messages into steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Ranks in the communicator.
    pub ranks: usize,
    /// Ranks per host (consecutive ranks share a host).
    pub ranks_per_host: usize,
    /// Number of hosts.
    pub hosts: usize,
    /// Bytes per slot.
    pub slot_bytes: usize,
    /// Ranks sharing one machine's cores (`ranks_per_host` unless links
    /// between ranks of one machine are forced onto tcp, which makes them
    /// separate hosts for the links but not for the cores).
    pub sharing: usize,
}

impl Shape {
    /// `ranks` spread `ranks_per_host` per host.
    pub fn new(ranks: usize, ranks_per_host: usize, slot_bytes: usize) -> Shape {
        let per = ranks_per_host.clamp(1, ranks.max(1));
        Shape {
            ranks,
            ranks_per_host: per,
            hosts: ranks.div_ceil(per).max(1),
            slot_bytes,
            sharing: per,
        }
    }

    /// The same shape with `sharing` ranks on one machine's cores.
    pub fn with_sharing(self, sharing: usize) -> Shape {
        Shape {
            sharing: sharing.clamp(1, self.ranks.max(1)),
            ..self
        }
    }
}

/// How far apart the two ranks of a phase's steps are.
#[derive(Clone, Copy, Debug)]
enum Span {
    /// Along a ring or chain, pipelined: no faster than the slowest link
    /// carries the bytes, and hops' latencies averaged over the ring.
    Ring,
    /// Along a chain while its pipeline fills: each hop's full cost,
    /// averaged over the hops (`hosts` of `ranks` cross hosts).
    RingFill,
    /// This many ranks apart.
    Dist(usize),
    /// This many ranks apart, every rank sending at once: where that
    /// crosses hosts, the ranks of a host share its link, each getting
    /// `1 / ranks_per_host` of its bandwidth.
    Exchange(usize),
    /// This fraction of the steps cross hosts.
    Mixed(f64),
    /// A copy inside the rank (its input into its output): no slot handed
    /// over, so no per-step cost, and one copy of the bytes where a step
    /// through a slot makes two (into the slot, out of it), which `beta`
    /// prices together.
    Local,
}

/// A run of similar steps.
#[derive(Clone, Copy, Debug)]
struct Phase {
    /// Steps on the critical path.
    steps: f64,
    /// Steps of an average rank (for the cores bound).
    avg: f64,
    /// Bytes moved per step.
    bytes: f64,
    /// Whether the steps reduce.
    reduce: bool,
    span: Span,
}

impl Phase {
    fn new(steps: f64, bytes: f64, reduce: bool, span: Span) -> Phase {
        Phase {
            steps,
            avg: steps,
            bytes,
            reduce,
            span,
        }
    }

    fn avg(mut self, avg: f64) -> Phase {
        self.avg = avg;
        self
    }
}

/// Predicted seconds for one call of `collective` by `algo` moving `count`
/// elements of `esize` bytes (`count` as in [`crate::plan::build`]), or
/// `None` when `algo` does not implement `collective`.
pub fn predict(
    params: &CostParams,
    collective: Collective,
    algo: Algorithm,
    count: usize,
    esize: usize,
    shape: &Shape,
) -> Option<f64> {
    if !algo.supports(collective) {
        return None;
    }
    let phases = phases(collective, algo, count, esize, shape);
    let crowded = shape.sharing > params.cores;
    let shm_link = LinkCost {
        alpha: if crowded {
            params.crowded_alpha
        } else {
            params.shm.alpha
        },
        beta: if cached(params, collective, count * esize, shape) {
            params.cached_beta
        } else {
            params.shm.beta
        },
    };
    let step = |p: &Phase| {
        if let Span::Local = p.span {
            return p.bytes * shm_link.beta / 2.0;
        }
        let cost = |l: &LinkCost| {
            l.alpha
                + p.bytes * l.beta
                + if p.reduce {
                    p.bytes * params.gamma
                } else {
                    0.0
                }
        };
        let (shm, tcp) = (cost(&shm_link), cost(&params.tcp));
        let multi = shape.hosts > 1;
        match p.span {
            Span::Ring if multi => {
                // Latency: `hosts` of the `ranks` hops cross hosts; bandwidth:
                // the pipeline runs at the pace of the slowest link.
                let f = shape.hosts as f64 / shape.ranks as f64;
                let latency = shm + f * (params.tcp.alpha - shm_link.alpha);
                latency.max(p.bytes * params.tcp.beta)
            }
            Span::RingFill if multi => {
                let f = shape.hosts as f64 / shape.ranks as f64;
                shm + f * (tcp - shm)
            }
            Span::Dist(d) if multi && d >= shape.ranks_per_host => tcp,
            Span::Exchange(d) if multi && d >= shape.ranks_per_host => {
                tcp + p.bytes * params.tcp.beta * (shape.ranks_per_host as f64 - 1.0)
            }
            Span::Mixed(f) if multi => shm + f * (tcp - shm),
            _ => shm,
        }
    };
    let (patience, per_core) = if crowded {
        let per_core = shape.sharing as f64 / params.cores.max(1) as f64;
        (params.yields, per_core)
    } else {
        (params.spin + params.yields, 1.0)
    };
    let wakes = |p: &Phase| {
        let waits = p.steps > 0.0 && !matches!(p.span, Span::Local | Span::Dist(0));
        if waits && step(p) * per_core > patience {
            params.wake
        } else {
            0.0
        }
    };
    let path: f64 = phases.iter().map(|p| p.steps * step(p)).sum();
    let crit = path + phases.iter().map(wakes).sum::<f64>();
    let avg: f64 = phases.iter().map(|p| p.avg * step(p)).sum();
    let sharing = shape.sharing as f64;
    let cores = (params.cores as f64).min(sharing).max(1.0);
    let work = avg * sharing / cores;
    let rooted = matches!(
        collective,
        Collective::Broadcast { .. } | Collective::Reduce { .. }
    );
    Some(match (crowded, rooted) {
        (false, _) => crit.max(work),
        // Crowded, a rooted collective's calls pipeline into each other: a
        // rank starts the next call as soon as its part of this one is
        // done, its peers downstream still busy with it. So only the work
        // counts.
        (true, true) => work,
        // The others end each call with every rank waiting for data that
        // crossed the whole schedule, and each hop of that path waits for
        // its rank to be given a core: about one turn of the ranks sharing
        // it. (Wake-ups are not on it: other ranks' steps fill them.)
        (true, false) => work.max(path * per_core),
    })
}

/// True when the send and receive buffers of all the ranks sharing the
/// host's cores fit in its last-level cache (`params.cache_bytes`), for a
/// call of `bytes` bytes as [`predict`] counts them: calls issued back to
/// back on the same buffers then find them there.
fn cached(params: &CostParams, collective: Collective, bytes: usize, shape: &Shape) -> bool {
    // The root's buffers, the largest (a rooted collective's other ranks
    // pass one buffer, and work in a slot-sized piece of the other).
    let root = match collective {
        Collective::Broadcast { root } | Collective::Reduce { root } => root,
        _ => 0,
    };
    let (send, recv) = crate::plan::buffer_counts(collective, bytes, root, shape.ranks.max(1));
    let per_rank = send.saturating_add(recv);
    // A quarter: the footprint at which `streamcomm-bench calibrate` measures
    // the cached byte (the slots, the rest of the processes and, on a
    // virtual machine, other tenants use the cache too).
    params.cache_bytes > 0 && per_rank.saturating_mul(shape.sharing) <= params.cache_bytes / 4
}

/// The phases of one call (empty when nothing moves).
fn phases(
    collective: Collective,
    algo: Algorithm,
    count: usize,
    esize: usize,
    shape: &Shape,
) -> Vec<Phase> {
    let n = shape.ranks;
    let chunk = (shape.slot_bytes / esize.max(1)).max(1);
    let nf = n as f64;
    let bytes = (count * esize) as f64;
    // Slot-sized pieces of `elems` elements: (pieces, bytes per piece).
    let cut = |elems: usize| -> (f64, f64) {
        let m = elems.div_ceil(chunk).max(1);
        (m as f64, (elems * esize) as f64 / m as f64)
    };
    if count == 0 {
        return Vec::new();
    }
    if n == 1 {
        return vec![Phase::new(1.0, bytes, false, Span::Local)];
    }
    let levels = n.next_power_of_two().trailing_zeros() as usize;
    match (collective, algo) {
        (Collective::AllReduce, Algorithm::Ring) => {
            let blk = chunk.min(count.div_ceil(n));
            let loops = count.div_ceil(n * blk) as f64;
            let filled = count.min(n) as f64 / nf;
            let b = bytes / (loops * nf).min(count as f64);
            let hops = (nf - 1.0) * loops;
            vec![
                Phase::new(hops, b, true, Span::Ring).avg(hops * filled),
                Phase::new(hops, b, false, Span::Ring).avg(hops * filled),
            ]
        }
        (Collective::AllGather | Collective::ReduceScatter, Algorithm::Ring) => {
            let (m, b) = cut(count);
            let reduce = collective == Collective::ReduceScatter;
            // Per chunk, `n - 1` hops along the ring; then the all-gather's
            // copy of the rank's own input into its output, and for the
            // reduce-scatter a step more: its first send and last receive
            // each wait on a slot, with no hop to overlap them, and the
            // receive finalises. (Measured 2026-11-30, 1000 calls: at
            // 3 ranks and 504 B, 7.1 µs a call against the all-gather's
            // 4.9 µs.)
            let last = if reduce {
                Phase::new(m, b, false, Span::Dist(0))
            } else {
                Phase::new(m, b, false, Span::Local)
            };
            vec![Phase::new(m * (nf - 1.0), b, reduce, Span::Ring), last]
        }
        (Collective::Broadcast { .. } | Collective::Reduce { .. }, Algorithm::Chain) => {
            let (m, b) = cut(count);
            let reduce = matches!(collective, Collective::Reduce { .. });
            // The first chunk crosses `n - 1` hops, each a copy into the
            // slot then a copy out of it, one after the other; the others
            // follow at the pace of one step, both copies overlapping.
            vec![
                Phase::new(nf - 1.0, 2.0 * b, reduce, Span::RingFill).avg(0.0),
                Phase::new(m - 1.0, b, reduce, Span::Ring).avg(m),
            ]
        }
        (Collective::AllToAll, _) => {
            let (m, b) = cut(count);
            let per = shape.ranks_per_host.min(n) as f64;
            vec![
                Phase::new(1.0, bytes, false, Span::Local),
                Phase::new(2.0 * m * (per - 1.0), b, false, Span::Dist(1)),
                Phase::new(2.0 * m * (nf - per), b, false, Span::Exchange(usize::MAX)),
            ]
        }
        (Collective::Broadcast { .. } | Collective::Reduce { .. }, Algorithm::Binomial) => {
            // Reduce is the same tree upwards, each level reducing.
            let (m, b) = cut(count);
            let reduce = matches!(collective, Collective::Reduce { .. });
            (0..levels)
                .map(|j| {
                    let drain = if j + 1 < levels { 1.0 } else { 0.0 };
                    Phase::new(m + drain, b, reduce, Span::Dist(1 << j)).avg(m / levels as f64)
                })
                .collect()
        }
        (Collective::AllReduce, Algorithm::Tree) => {
            let (m, b) = cut(count.div_ceil(2));
            let depth = n.ilog2() as f64;
            let cross = if shape.hosts > 1 {
                (shape.hosts.next_power_of_two().trailing_zeros() as f64 / (depth + 1.0)).min(1.0)
            } else {
                0.0
            };
            let span = Span::Mixed(cross);
            // The first chunk pair climbs `depth` hops and comes back down
            // as many (both trees at once); each further pair costs the
            // busiest rank's six steps, reducing two of them. (Measured at
            // two ranks, 8 B-4 KiB, 1000 calls: 1.7-2.2 µs, two steps'
            // worth, where six and both depths made eight.)
            let more = m - 1.0;
            vec![
                Phase::new(2.0 * more + depth, b, true, span).avg(1.5 * m),
                Phase::new(more, b, false, span).avg(m),
                Phase::new(3.0 * more + depth, b, false, span).avg(2.5 * m),
            ]
        }
        (Collective::AllReduce, Algorithm::HalvingDoubling) => {
            let p = 1usize << n.ilog2();
            let mut out = Vec::new();
            if p < n {
                let (m, b) = cut(count);
                out.push(Phase::new(m, b, true, Span::Dist(1)));
                out.push(Phase::new(m, b, false, Span::Dist(1)));
            }
            let mut mask = p / 2;
            let mut elems = count;
            while mask > 0 {
                elems = elems.div_ceil(2);
                let (m, b) = cut(elems);
                // Each round sends m slots and receives m, alternating: a
                // send is one copy (into the partner's slot), a receive the
                // other (out of ours), so a pair costs one step of `b` bytes
                // (beta counts both copies), halving reducing, doubling not.
                out.push(Phase::new(m, b, true, Span::Exchange(mask)));
                out.push(Phase::new(m, b, false, Span::Exchange(mask)));
                mask /= 2;
            }
            out
        }
        (Collective::AllGather, Algorithm::RecursiveDoubling | Algorithm::Bruck) => {
            let mut out = vec![Phase::new(1.0, bytes, false, Span::Local)];
            let pow2 = n.is_power_of_two() && algo == Algorithm::RecursiveDoubling;
            let mut dist = 1;
            while dist < n {
                let blocks = dist.min(n - dist);
                let (m, b) = cut(blocks * count);
                let wrap = if pow2 { 0.0 } else { 0.5 };
                // Each round sends `m` slots to one partner and receives `m`
                // from another, at once: `m` steps as a ring counts them
                // (one slot out, one in).
                out.push(Phase::new(m + wrap, b, false, Span::Exchange(dist)));
                dist *= 2;
            }
            out
        }
        // Point-to-point, barriers and unsupported pairs: `predict` filters.
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(c: Collective, a: Algorithm, bytes: usize, n: usize, per_host: usize) -> f64 {
        let shape = Shape::new(n, per_host, 512 << 10);
        predict(&CostParams::default(), c, a, bytes / 4, 4, &shape).unwrap()
    }

    #[test]
    fn latency_bound_sizes_favour_logarithmic_algorithms() {
        let ar = Collective::AllReduce;
        for n in [64, 512, 4096] {
            assert!(t(ar, Algorithm::Tree, 8, n, 8) < t(ar, Algorithm::Ring, 8, n, 8));
            assert!(t(ar, Algorithm::HalvingDoubling, 8, n, 8) < t(ar, Algorithm::Ring, 8, n, 8));
            let bc = Collective::Broadcast { root: 0 };
            assert!(t(bc, Algorithm::Binomial, 8, n, 8) < t(bc, Algorithm::Chain, 8, n, 8));
        }
    }

    #[test]
    fn bandwidth_bound_sizes_favour_the_ring_on_few_ranks() {
        let ar = Collective::AllReduce;
        let big = 256 << 20;
        assert!(t(ar, Algorithm::Ring, big, 8, 8) < t(ar, Algorithm::Tree, big, 8, 8));
        let bc = Collective::Broadcast { root: 0 };
        assert!(t(bc, Algorithm::Chain, big, 8, 8) < t(bc, Algorithm::Binomial, big, 8, 8));
    }

    #[test]
    fn a_wake_up_per_phase_once_steps_outlast_the_patience() {
        let ar = Collective::AllReduce;
        let p = |wake: f64| CostParams {
            cores: 2,
            wake,
            spin: 5e-6,
            yields: 40e-6,
            ..CostParams::default()
        };
        let at = |p: &CostParams, n: usize, bytes: usize| {
            let shape = Shape::new(n, n, 1 << 20);
            predict(p, ar, Algorithm::Ring, bytes / 4, 4, &shape).unwrap()
        };
        // Short steps are caught while spinning or yielding.
        assert_eq!(at(&p(0.0), 2, 64), at(&p(1e-3), 2, 64));
        assert_eq!(at(&p(0.0), 4, 64), at(&p(1e-3), 4, 64));
        // A 2-rank ring of 1 MiB: two phases of 512 KiB steps (~130 µs at
        // the default beta), each waits once.
        let extra = at(&p(1e-3), 2, 1 << 20) - at(&p(0.0), 2, 1 << 20);
        assert!((extra - 2e-3).abs() < 1e-9, "{extra}");
        // 64 KiB steps (~38 µs) are within two spinning ranks' patience.
        assert_eq!(at(&p(0.0), 2, 128 << 10), at(&p(1e-3), 2, 128 << 10));
        // Three ranks on two cores are work-bound (module docs): a wake-up
        // is latency, which other ranks' steps fill, so it adds nothing.
        let (with, without) = (at(&p(1e-3), 3, 192 << 10), at(&p(0.0), 3, 192 << 10));
        assert_eq!(with, without);
    }

    #[test]
    fn crowded_ranks_pay_the_crowded_step_and_cached_buffers_the_cached_byte() {
        let p = CostParams {
            cores: 2,
            shm: LinkCost {
                alpha: 1e-6,
                beta: 0.2e-9,
            },
            crowded_alpha: 3e-6,
            cached_beta: 0.05e-9,
            cache_bytes: 64 << 20,
            gamma: 0.0,
            ..CostParams::default()
        };
        let at = |p: &CostParams, c: Collective, n: usize, bytes: usize| {
            let shape = Shape::new(n, n, 512 << 10);
            predict(p, c, Algorithm::Ring, bytes, 1, &shape).unwrap()
        };
        let ar = Collective::AllReduce;
        // 8 bytes: per-step cost only, the crowded one where 4 ranks share
        // 2 cores.
        let with = |alpha: f64, crowded_alpha: f64| CostParams {
            shm: LinkCost { alpha, ..p.shm },
            crowded_alpha,
            ..p
        };
        assert!(at(&with(2e-6, 3e-6), ar, 2, 8) > 1.9 * at(&p, ar, 2, 8));
        assert_eq!(at(&with(2e-6, 3e-6), ar, 4, 8), at(&p, ar, 4, 8));
        assert!(at(&with(1e-6, 6e-6), ar, 4, 8) > 1.9 * at(&p, ar, 4, 8));
        // 1 MiB on 2 ranks: 4 MiB of buffers, within a quarter of the
        // 64 MiB cache; 16 MiB: 64 MiB of buffers, out of memory.
        let slower = CostParams {
            cached_beta: 0.1e-9,
            ..p
        };
        assert!(at(&slower, ar, 2, 1 << 20) > 1.8 * at(&p, ar, 2, 1 << 20));
        assert_eq!(at(&slower, ar, 2, 16 << 20), at(&p, ar, 2, 16 << 20));
        // Without a cache size, nothing counts as cached.
        let unknown = CostParams {
            cache_bytes: 0,
            ..slower
        };
        assert_eq!(
            at(&unknown, ar, 2, 1 << 20),
            at(
                &CostParams {
                    cached_beta: 0.2e-9,
                    ..unknown
                },
                ar,
                2,
                1 << 20
            )
        );
    }

    #[test]
    fn ranks_crossing_hosts_at_once_share_the_link() {
        // 16 ranks, 8 per host: the last recursive-doubling round (8 apart)
        // sends 8 blocks from every rank across, 8 ranks through each
        // host's link; the other rounds stay inside.
        let p = CostParams {
            cores: 64,
            wake: 0.0,
            ..CostParams::default()
        };
        let shape = Shape::new(16, 8, 512 << 10);
        let block = 1 << 20;
        let at = |tcp_beta: f64| {
            let p = CostParams {
                tcp: LinkCost {
                    beta: tcp_beta,
                    ..p.tcp
                },
                ..p
            };
            let ag = Collective::AllGather;
            predict(&p, ag, Algorithm::RecursiveDoubling, block, 1, &shape).unwrap()
        };
        let across = at(1e-9) - at(0.0);
        let expected = 8.0 * block as f64 * 1e-9 * 8.0;
        assert!(
            (across / expected - 1.0).abs() < 1e-9,
            "{across} {expected}"
        );
    }

    #[test]
    fn a_copy_inside_a_rank_costs_no_step() {
        let p = CostParams {
            cores: 64,
            ..CostParams::default()
        };
        // A 2-rank ring all-gather of 8 bytes: one hop; copying the rank's
        // own block into its output adds bytes, not a step.
        let shape = Shape::new(2, 2, 512 << 10);
        let t = predict(&p, Collective::AllGather, Algorithm::Ring, 2, 4, &shape).unwrap();
        assert!(t >= p.shm.alpha && t < 1.01 * p.shm.alpha, "{t}");
    }

    #[test]
    fn ranks_outnumbering_cores_are_priced_by_their_work() {
        let t = |cores, algo, n, count| {
            let p = CostParams {
                cores,
                ..CostParams::default()
            };
            let shape = Shape::new(n, n, 1 << 20);
            predict(&p, Collective::AllReduce, algo, count, 4, &shape).unwrap()
        };
        // 8 ranks on 2 or on 4 cores, crowded either way: the ranks' work
        // divided by the cores, so twice the cores take half the time.
        for algo in [Algorithm::Ring, Algorithm::Tree, Algorithm::HalvingDoubling] {
            for count in [2, 1 << 10, 1 << 20] {
                let (two, four) = (t(2, algo, 8, count), t(4, algo, 8, count));
                assert!(
                    (two - 2.0 * four).abs() < 1e-12,
                    "{algo:?} {count}: {two} {four}"
                );
            }
        }
        // A core per rank: the critical path, at least one step a hop.
        let p = CostParams::default();
        assert!(t(8, Algorithm::Ring, 8, 2) >= 2.0 * p.shm.alpha);
    }

    #[test]
    fn ranks_on_one_machine_share_its_cores_even_over_tcp() {
        let p = CostParams {
            cores: 2,
            ..CostParams::default()
        };
        let ar = Collective::AllReduce;
        // Four ranks forced onto tcp on one 2-core machine: tcp links, but
        // their steps serialise on the cores as over shared memory.
        let apart = Shape::new(4, 1, 1 << 20);
        let together = apart.with_sharing(4);
        let t = |s: &Shape| predict(&p, ar, Algorithm::Ring, 1 << 20, 4, s).unwrap();
        assert!(
            t(&together) > 1.5 * t(&apart),
            "{} {}",
            t(&together),
            t(&apart)
        );
        assert_eq!(apart.with_sharing(99).sharing, 4);
    }

    #[test]
    fn predictions_grow_with_size_and_are_finite() {
        for c in [
            Collective::AllReduce,
            Collective::AllGather,
            Collective::ReduceScatter,
            Collective::Broadcast { root: 0 },
            Collective::Reduce { root: 0 },
            Collective::AllToAll,
        ] {
            for &a in Algorithm::candidates(c) {
                for n in [1, 2, 3, 8, 100, 4096] {
                    let mut last = 0.0;
                    for bytes in [8, 1 << 10, 1 << 20, 1 << 30] {
                        let v = t(c, a, bytes, n, 8);
                        assert!(v.is_finite() && v >= last, "{c:?} {a} n={n} {bytes}: {v}");
                        last = v;
                    }
                }
            }
        }
        let shape = Shape::new(4, 4, 1 << 20);
        let p = CostParams::default();
        assert_eq!(
            predict(&p, Collective::AllGather, Algorithm::Tree, 8, 4, &shape),
            None
        );
        assert_eq!(
            predict(&p, Collective::AllReduce, Algorithm::Ring, 0, 4, &shape),
            Some(0.0)
        );
    }
}
