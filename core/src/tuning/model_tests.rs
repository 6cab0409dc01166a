//! Tests of the cost model ([`super`]).

use super::*;

/// The collectives the model prices.
const COLLECTIVES: [Collective; 6] = [
    Collective::AllReduce,
    Collective::AllGather,
    Collective::ReduceScatter,
    Collective::Broadcast { root: 0 },
    Collective::Reduce { root: 0 },
    Collective::AllToAll,
];

/// The default parameters on `cores` cores.
fn on_cores(cores: usize) -> CostParams {
    CostParams {
        cores,
        ..CostParams::default()
    }
}

/// [`on_cores`]'s parameters for ranks that wake up at no cost.
fn awake_on(cores: usize) -> CostParams {
    CostParams {
        wake: 0.0,
        ..on_cores(cores)
    }
}

/// [`awake_on`]'s parameters with the tcp link's cost changed by `set`.
fn tcp_set(cores: usize, set: impl FnOnce(&mut LinkCost)) -> CostParams {
    let mut p = awake_on(cores);
    set(&mut p.tcp);
    p
}

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
fn recursive_doubling_takes_small_all_reduces_and_leaves_large_ones() {
    let (ar, rd) = (Collective::AllReduce, Algorithm::RecursiveDoubling);
    for n in [2, 4, 8] {
        // Half the rounds of halving-doubling, where bytes cost nothing.
        for other in [Algorithm::Ring, Algorithm::HalvingDoubling] {
            assert!(
                t(ar, rd, 8, n, n) < t(ar, other, 8, n, n),
                "{n} ranks vs {other}"
            );
        }
        // `log2 n` times the data, where bytes are what costs.
        let big = 64 << 20;
        assert!(
            t(ar, Algorithm::Ring, big, n, n) < t(ar, rd, big, n, n),
            "{n} ranks"
        );
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
        wake,
        spin: 5e-6,
        yields: 40e-6,
        // Every pass alike: the step times below.
        write_weight: 1.0,
        ..on_cores(2)
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
        shm: LinkCost {
            alpha: 1e-6,
            beta: 0.2e-9,
        },
        crowded_alpha: 3e-6,
        cached_beta: 0.05e-9,
        cache_bytes: 64 << 20,
        gamma: 0.0,
        ..on_cores(2)
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
    let shape = Shape::new(16, 8, 512 << 10);
    let block = 1 << 20;
    let at = |tcp_beta: f64| {
        let p = tcp_set(64, |tcp| tcp.beta = tcp_beta);
        let ag = Collective::AllGather;
        predict(&p, ag, Algorithm::RecursiveDoubling, block, 1, &shape).unwrap()
    };
    // (From 1 to 2 ns/B: with a free wire the ranks' copies would bound
    // the call instead.)
    let across = at(2e-9) - at(1e-9);
    let expected = 8.0 * block as f64 * 1e-9 * 8.0;
    assert!(
        (across / expected - 1.0).abs() < 1e-9,
        "{across} {expected}"
    );
}

#[test]
fn a_copy_inside_a_rank_costs_no_step() {
    let p = on_cores(64);
    // A 2-rank ring all-gather of 8 bytes: one hop; copying the rank's
    // own block into its output adds bytes, not a step.
    let shape = Shape::new(2, 2, 512 << 10);
    let t = predict(&p, Collective::AllGather, Algorithm::Ring, 2, 4, &shape).unwrap();
    assert!(t >= p.shm.alpha && t < 1.01 * p.shm.alpha, "{t}");
}

#[test]
fn ranks_outnumbering_cores_are_priced_by_their_work() {
    let t = |cores, algo, n, count| {
        let p = on_cores(cores);
        let shape = Shape::new(n, n, 1 << 20);
        predict(&p, Collective::AllReduce, algo, count, 4, &shape).unwrap()
    };
    // 8 ranks on 2 or on 4 cores, crowded either way: the ranks' work
    // divided by the cores, so twice the cores take half the time.
    for algo in Algorithm::candidates(Collective::AllReduce).iter().copied() {
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
    let p = on_cores(2);
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
    for c in COLLECTIVES {
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

/// Bytes an average rank's steps read and write in `collective` by `algo`
/// among `n` ranks (each step's inputs, a slot received or a buffer read,
/// and its outputs, a buffer written or a slot sent), from the plans
/// themselves.
fn plan_passes(collective: Collective, algo: Algorithm, count: usize, n: usize) -> Passes {
    use crate::plan::{PlanParams, build_with};
    let (mut reads, mut writes) = (0usize, 0usize);
    for rank in 0..n {
        let params = PlanParams {
            rank,
            nranks: n,
            slot_bytes: 512 << 10,
            nsteps: 8,
        };
        let plan = build_with(
            collective,
            crate::DataType::U8,
            crate::ReduceOp::Sum,
            count,
            &params,
            Some(algo),
        )
        .unwrap();
        for s in &plan.steps {
            let count_of = |ops: [bool; 2]| s.count * ops.iter().filter(|&&o| o).count();
            reads += count_of([s.recv_from.is_some(), s.src.is_some()]);
            writes += count_of([s.dst.is_some(), s.send_to.is_some()]);
        }
    }
    passes(reads as f64 / n as f64, writes as f64 / n as f64)
}

/// The same as the model's phases count them.
fn model_passes(collective: Collective, algo: Algorithm, count: usize, n: usize) -> Passes {
    let shape = Shape::new(n, n, 512 << 10);
    let phases = phases(collective, algo, count, 1, &shape);
    let sum = |f: fn(&Passes) -> f64| phases.iter().map(|p| p.avg * p.bytes * f(&p.passes)).sum();
    passes(sum(|p| p.reads), sum(|p| p.writes))
}

#[test]
fn phases_pass_over_the_bytes_as_often_as_the_plans_do() {
    // Per rank, summed over a call of 64 slots: exact for the ring,
    // chain, halving-doubling and pairwise schedules; recursive doubling
    // and Bruck within the half slot their last round may send; the trees
    // (whose inner and leaf ranks differ most) within a quarter.
    for c in COLLECTIVES {
        for &a in Algorithm::candidates(c) {
            for n in [2, 3, 4, 5, 6, 8, 16] {
                let count = match c {
                    Collective::AllGather | Collective::ReduceScatter | Collective::AllToAll => {
                        (32 << 20) / n
                    }
                    _ => 32 << 20,
                };
                let (model, plan) = (model_passes(c, a, count, n), plan_passes(c, a, count, n));
                let tolerance = match a {
                    Algorithm::Tree | Algorithm::Binomial if n > 2 => 0.25,
                    Algorithm::Tree | Algorithm::Binomial => continue,
                    Algorithm::RecursiveDoubling | Algorithm::Bruck => 0.06,
                    _ => 0.001,
                };
                for (what, model, plan) in [
                    ("reads", model.reads, plan.reads),
                    ("writes", model.writes, plan.writes),
                ] {
                    assert!(
                        (model / plan - 1.0).abs() <= tolerance,
                        "{} {a} n={n}: {what}: model {model:.0} plan {plan:.0}",
                        c.name()
                    );
                }
            }
        }
    }
}

#[test]
fn ranks_a_phase_leaves_out_free_their_cores_once_they_sleep() {
    // Three ranks on two cores: halving-doubling's fold keeps two busy,
    // its one round the other two. With long steps the third is asleep
    // and each phase has a core per rank: the critical path, as with a
    // core for every rank. With short ones it yields its turns, and each
    // step waits for them.
    let p = |cores| CostParams {
        crowded_alpha: 1e-6,
        shm: LinkCost {
            alpha: 1e-6,
            beta: 0.2e-9,
        },
        ..awake_on(cores)
    };
    let shape = Shape::new(3, 3, 512 << 10);
    let ar = Collective::AllReduce;
    let hd = |cores, count| predict(&p(cores), ar, Algorithm::HalvingDoubling, count, 1, &shape);
    let (crowded, spread) = (hd(2, 16 << 20).unwrap(), hd(64, 16 << 20).unwrap());
    assert!((crowded / spread - 1.0).abs() < 1e-9, "{crowded} {spread}");
    let (crowded, spread) = (hd(2, 8).unwrap(), hd(64, 8).unwrap());
    assert!((crowded / spread - 1.5).abs() < 1e-9, "{crowded} {spread}");
}

#[test]
fn writes_weigh_more_than_reads_by_the_write_weight() {
    // A chain broadcast's relay writes two passes and reads one, a chain
    // reduce's the other way round: priced alike when a write weighs a
    // read, and in the ratio of their relays' weighed passes, (1 + 2 w) /
    // (2 + w), when it weighs `w` (16 ranks with a core each and 16 MiB:
    // the relays of the pipeline dominate; no reduction cost).
    let p = |w: f64| CostParams {
        gamma: 0.0,
        write_weight: w,
        ..on_cores(64)
    };
    let shape = Shape::new(16, 16, 512 << 10);
    let (bc, rd) = (
        Collective::Broadcast { root: 0 },
        Collective::Reduce { root: 0 },
    );
    let at = |w, c| predict(&p(w), c, Algorithm::Chain, 16 << 20, 1, &shape).unwrap();
    assert!((at(1.0, bc) / at(1.0, rd) - 1.0).abs() < 0.01);
    let ratio = at(3.0, bc) / at(3.0, rd);
    assert!((ratio / (7.0 / 5.0) - 1.0).abs() < 0.05, "{ratio}");
}

/// Two ranks with a core each and no wake-up cost: each call's critical
/// path, in steps.
fn two_ranks_on_two_cores() -> (CostParams, Shape) {
    (awake_on(2), Shape::new(2, 2, 512 << 10))
}

#[test]
fn an_all_to_all_exchange_with_a_peer_is_one_step() {
    // Two ranks, two cores, 8-byte blocks: one slot out and one in, at
    // once, as recursive doubling's round is counted (fails when the send
    // and the receive are two steps).
    let (p, shape) = two_ranks_on_two_cores();
    let a2a = predict(&p, Collective::AllToAll, Algorithm::Pairwise, 8, 1, &shape).unwrap();
    let rd = Algorithm::RecursiveDoubling;
    let ag = predict(&p, Collective::AllGather, rd, 8, 1, &shape).unwrap();
    assert!((a2a / p.shm.alpha - 1.0).abs() < 0.01, "{a2a}");
    assert!((a2a / ag - 1.0).abs() < 0.01, "{a2a} {ag}");
}

#[test]
fn with_a_core_per_rank_waits_are_latency_not_work() {
    // Two ranks, two cores, 8 bytes: the tree's first pair climbs one hop
    // and comes down one, two steps, though each rank runs four.
    let (p, shape) = two_ranks_on_two_cores();
    let t = predict(&p, Collective::AllReduce, Algorithm::Tree, 8, 1, &shape).unwrap();
    assert!((t / (2.0 * p.shm.alpha) - 1.0).abs() < 0.01, "{t}");
}

#[test]
fn tcp_steps_arrive_after_the_latency_and_cost_the_ranks_their_step() {
    // Two pretend hosts of 4 ranks on one 2-core machine.
    let crowded = Shape::new(8, 4, 512 << 10).with_sharing(8);
    let params = |cores: usize, tcp_latency: f64, tcp_crowded_alpha: f64| CostParams {
        tcp_latency,
        tcp_crowded_alpha,
        ..awake_on(cores)
    };
    let (ar, bc) = (Collective::AllReduce, Collective::Broadcast { root: 0 });
    let t = |c: Collective, a: Algorithm, p: &CostParams, shape: &Shape| {
        predict(p, c, a, 2, 4, shape).unwrap()
    };
    let (early, late) = (params(2, 30e-6, 30e-6), params(2, 90e-6, 30e-6));
    // A ring all-reduce ends with every rank waiting for data that crossed
    // both hosts: of its 14 hops a quarter cross, and each of those 3.5
    // arrives 60 µs later. The turns its hops wait for a core are the
    // other ranks' steps, which the latency does not lengthen.
    let (ring_early, ring_late) = (
        t(ar, Algorithm::Ring, &early, &crowded),
        t(ar, Algorithm::Ring, &late, &crowded),
    );
    let later = (ring_late - ring_early) / (3.5 * 60e-6);
    assert!((later - 1.0).abs() < 0.01, "{ring_early} {ring_late}");
    let slower_steps = params(2, 30e-6, 60e-6);
    let ring_slower = t(ar, Algorithm::Ring, &slower_steps, &crowded);
    assert!(ring_slower > ring_early, "{ring_early} {ring_slower}");
    // A chain broadcast's calls pipeline into each other: only the ranks'
    // work counts, crowded steps, whatever the latency.
    let chain = |p: &CostParams| t(bc, Algorithm::Chain, p, &crowded);
    assert_eq!(chain(&late), chain(&early));
    assert!(chain(&params(2, 30e-6, 60e-6)) > chain(&early));
    // With a core per rank the crowded step plays no part; the latency
    // still does where calls end waiting (ring, tree, halving-doubling).
    let spread = Shape::new(8, 4, 512 << 10);
    for algo in Algorithm::candidates(Collective::AllReduce).iter().copied() {
        let at = |latency: f64, crowded: f64| t(ar, algo, &params(64, latency, crowded), &spread);
        assert_eq!(at(30e-6, 90e-6), at(30e-6, 30e-6), "{algo:?}");
        assert!(at(90e-6, 30e-6) > at(30e-6, 30e-6), "{algo:?}");
    }
}

#[test]
fn calls_that_pipeline_pay_the_tcp_step_the_others_its_latency() {
    // Two ranks, a host each, a core each, 8 bytes.
    let shape = Shape::new(2, 1, 512 << 10);
    let p = CostParams {
        tcp_latency: 45e-6,
        ..tcp_set(64, |tcp| tcp.alpha = 15e-6)
    };
    let t = |c: Collective, a: Algorithm| predict(&p, c, a, 8, 1, &shape).unwrap();
    let near = |got: f64, want: f64| (got / want - 1.0).abs() < 0.01;
    // Back-to-back broadcasts and reduces: one step each, paced by it.
    for c in [
        Collective::Broadcast { root: 0 },
        Collective::Reduce { root: 1 },
    ] {
        for a in [Algorithm::Chain, Algorithm::Binomial] {
            assert!(near(t(c, a), 15e-6), "{c:?} {a:?}: {}", t(c, a));
        }
    }
    // A ring all-reduce waits twice for its peer, a ring all-gather once;
    // the tree climbs one hop and comes down one, both crossing.
    assert!(near(t(Collective::AllReduce, Algorithm::Ring), 90e-6));
    assert!(near(t(Collective::AllGather, Algorithm::Ring), 45e-6));
    assert!(near(t(Collective::AllReduce, Algorithm::Tree), 90e-6));
}

#[test]
fn a_network_thread_carries_what_its_rank_sends_and_what_it_receives() {
    // What one more ns a byte on tcp adds (a host a rank, a core each,
    // bytes dominating): the bytes each rank's progress engine moves.
    let bytes = 4 << 19;
    let per_byte = |c: Collective, algo: Algorithm, n: usize| {
        let shape = Shape::new(n, 1, 512 << 10);
        let at = |beta: f64| {
            let p = tcp_set(64, |tcp| tcp.beta = beta);
            predict(&p, c, algo, bytes, 1, &shape).unwrap()
        };
        (at(2e-6) - at(1e-6)) / 1e-6 / bytes as f64
    };
    let near = |got: f64, want: f64| (got / want - 1.0).abs() < 0.01;
    let bc = Collective::Broadcast { root: 0 };
    // Two ranks: the root sends, the leaf receives, each byte once.
    let two = per_byte(bc, Algorithm::Chain, 2);
    assert!(near(two, 1.0), "{two}");
    // Three: the middle rank relays from one host to the other, each byte
    // in and out (its four slots: two filling the pipe, one each after).
    let three = per_byte(bc, Algorithm::Chain, 3);
    assert!(near(three, 2.0), "{three}");
    // An exchange between two hosts: each rank sends its block and
    // receives the other's.
    let ag = per_byte(Collective::AllGather, Algorithm::RecursiveDoubling, 2);
    assert!(near(ag, 2.0), "{ag}");
    // The ring all-gather too: every rank's hops in and out cross.
    let ring = per_byte(Collective::AllGather, Algorithm::Ring, 2);
    assert!(near(ring, 2.0), "{ring}");
}

#[test]
fn ranks_cross_hosts_at_once_only_as_many_as_the_cores_run() {
    // 16 ranks, 8 per host, on two pretend hosts sharing the cores: the
    // last recursive-doubling round's 8 blocks cross from every rank, but
    // only `cores` ranks run at a time to share the link.
    let shape = Shape::new(16, 8, 512 << 10).with_sharing(16);
    let block = 1 << 20;
    let across = |cores: usize| {
        let at = |tcp_beta: f64| {
            let p = tcp_set(cores, |tcp| tcp.beta = tcp_beta);
            let ag = Collective::AllGather;
            predict(&p, ag, Algorithm::RecursiveDoubling, block, 1, &shape).unwrap()
        };
        at(2e-9) - at(1e-9)
    };
    // The wire's time a byte, times the ranks crossing with it, times the
    // turns a crossing rank waits for a core (16 ranks on the cores).
    for cores in [2, 4] {
        let expected = 8.0 * block as f64 * 1e-9 * cores as f64 * (16 / cores) as f64;
        assert!(
            (across(cores) / expected - 1.0).abs() < 1e-9,
            "{cores} cores: {} {expected}",
            across(cores)
        );
    }
}

/// How many tcp steps the critical path of a call of `c` by `algo` holds
/// on `n` ranks, `per_host` a host: what one more second of tcp alpha adds
/// to it (a core per rank, tiny messages).
fn tcp_steps(c: Collective, algo: Algorithm, n: usize, per_host: usize) -> f64 {
    let shape = Shape::new(n, per_host, 512 << 10);
    let at = |alpha: f64| {
        let p = CostParams {
            tcp_latency: alpha,
            ..tcp_set(64, |tcp| tcp.alpha = alpha)
        };
        predict(&p, c, algo, 2, 4, &shape).unwrap()
    };
    at(1.0 + 30e-6) - at(30e-6)
}

#[test]
fn rounds_cross_hosts_where_the_ranks_partners_are() {
    let close = |got: f64, want: f64| (got - want).abs() < 1e-6;
    let ag = Collective::AllGather;
    // Bruck on 8 ranks, 4 a host: in the rounds 1, 2 and 4 ranks down the
    // ring, 1, 2 and all 4 of a host's ranks send to the other host (each
    // round a step and a half: its partners are not paired).
    let bruck = tcp_steps(ag, Algorithm::Bruck, 8, 4);
    assert!(close(bruck, 1.5 * (0.25 + 0.5 + 1.0)), "{bruck}");
    // Recursive doubling pairs by xor: only the round 4 apart crosses.
    let rd = tcp_steps(ag, Algorithm::RecursiveDoubling, 8, 4);
    assert!(close(rd, 1.0), "{rd}");
    // Halving-doubling on 6 ranks, 3 a host: rank 2 folds into rank 3 on
    // the other host (one fold of two), and in each of the four rounds
    // one pair of two crosses (real ranks 1-4 and 3-5, then 1-3 and 4-5).
    let ar = Collective::AllReduce;
    let hd = tcp_steps(ar, Algorithm::HalvingDoubling, 6, 3);
    assert!(close(hd, 0.5 + 0.5 + 4.0 * 0.5), "{hd}");
    // On one host nothing crosses.
    assert_eq!(tcp_steps(ag, Algorithm::Bruck, 8, 8), 0.0);
}

#[test]
fn a_chain_crosses_hosts_where_its_hops_do() {
    let close = |got: f64, want: f64| (got - want).abs() < 1e-6;
    // 4 ranks, 2 a host. A broadcast from rank 0 runs 0-1-2-3: one hop
    // crosses; a reduce to rank 0 runs 1-2-3-0: two do. From rank 2 the
    // broadcast runs 2-3-0-1 and the reduce 3-0-1-2: one and two again.
    for root in [0, 2] {
        let bc = tcp_steps(Collective::Broadcast { root }, Algorithm::Chain, 4, 2);
        assert!(close(bc, 1.0), "broadcast from {root}: {bc}");
        let rd = tcp_steps(Collective::Reduce { root }, Algorithm::Chain, 4, 2);
        assert!(close(rd, 2.0), "reduce to {root}: {rd}");
    }
    // From rank 1 the reduce runs 2-3-0-1: one hop crosses.
    let rd = tcp_steps(Collective::Reduce { root: 1 }, Algorithm::Chain, 4, 2);
    assert!(close(rd, 1.0), "reduce to 1: {rd}");
}

#[test]
fn with_a_host_a_rank_every_tree_step_crosses() {
    // Two ranks: one hop up, one down, both between the hosts.
    let tree = tcp_steps(Collective::AllReduce, Algorithm::Tree, 2, 1);
    assert!((tree - 2.0).abs() < 1e-6, "{tree}");
}
