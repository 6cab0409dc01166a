//! Predicted time of each algorithm, from the shape of its schedule.
//!
//! As NCCL's `graph/tuning.cc`, the model is a latency/bandwidth formula per
//! algorithm, but written from what our plans actually do: a rank executes
//! its steps one after another, and a step moving `b` bytes over a link costs
//! `alpha + b beta` (plus `b gamma` when it reduces). Inside a host a step
//! costs `beta` per byte for every third of its weighed passes over it:
//! each input it reads (a slot received, a buffer) counts one, each output
//! it writes (a buffer, a slot sent) `write_weight` (3 here: stores cost
//! about three loads; see [`DEFAULT_WRITE_WEIGHT`](crate::config::cost_params::DEFAULT_WRITE_WEIGHT)). So with
//! a weight of 1 `beta` is a relay's cost (`recvCopySend` or
//! `recvReduceSend`, three passes), a `send` or a `recv` two thirds of it;
//! with 3 a broadcast's relay (one read, two writes) costs 7/5 of a
//! reduce's (two reads, one write), as measured. Between hosts the wire
//! carries a byte once. Each algorithm is
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
//! A phase that leaves ranks out (halving-doubling's folding ranks, or the
//! others while they fold) shares the cores among its own ranks once its
//! steps outlast the waiters' patience: the others are asleep by then, no
//! longer yielding turns. A step costs the crowded `alpha`, which includes
//! handing a core over.
//!
//! Bytes cost the cached `beta` while the buffers of all the ranks on a
//! host fit in a quarter of its last-level cache (where `calibrate`
//! measures it), the memory one beyond. A copy inside a rank (its input
//! into its output) costs no step, only its two passes over the bytes.
//!
//! Between hosts, rounds in which every rank crosses at once share the
//! host's link, as many ranks at a time as the host has cores to run them,
//! and a rank's progress engine carries both what it sends and what it
//! receives: a rank exchanging with another host, or relaying from one host
//! to another (one rank a host), moves each byte twice through it.
//!
//! A tcp step has three figures. Its latency (`tcp_latency`), from the
//! sender handing it over to a waiting receiver seeing it (two network
//! threads and a stream thread woken on the way), is what the critical path
//! of a call that ends with every rank waiting pays: an all-reduce, an
//! all-gather, a reduce-scatter, an all-to-all. What it costs the ranks
//! that run it is less (`tcp.alpha` with a core per rank,
//! `tcp_crowded_alpha` while ranks outnumber cores, as shared memory's
//! step): that is their work, and what paces rooted calls, whose back-to-
//! back calls pipeline (the root hands the next call's data over while
//! this call's is still on its way). Both are measured by `calibrate`;
//! the model's accuracy against measured calls is in
//! `docs/measurements/host-shm.md`, *Cost model*.
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

use crate::config::{CostParams, LinkCost};
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
    Ring {
        /// The fraction of its hops that cross hosts.
        frac: f64,
        /// Whether some rank relays from one host to another (its hop in
        /// and its hop out both cross, as with one rank a host): its
        /// progress engine then carries each byte twice, in and out.
        relay_across: bool,
    },
    /// Along a chain while its pipeline fills, this fraction of its hops
    /// crossing hosts: each hop's full cost, averaged over the hops.
    RingFill(f64),
    /// This many ranks apart.
    Dist(usize),
    /// A round in which ranks send at once, `frac` of them to a rank on
    /// another host, `per_host` of each host's ranks on average: its steps
    /// cost what `frac` of them crossing would on average, and those that
    /// cross share their host's link (as many at a time as it has cores
    /// to run them). Counted from the ranks' placement ([`crossing`]).
    Cross {
        /// The fraction of the senders whose receiver is on another host.
        frac: f64,
        /// Senders per host that cross.
        per_host: f64,
        /// Whether some rank both sends to and receives from other hosts in
        /// the round (an exchange with a rank across): its progress engine
        /// carries its bytes out and its peer's in, one after the other.
        both_ways: bool,
    },
    /// This fraction of the steps cross hosts.
    Mixed(f64),
    /// A copy inside the rank (its input into its output): no slot handed
    /// over, so no per-step cost, and one copy of the bytes where a step
    /// through a slot makes two (into the slot, out of it), which `beta`
    /// prices together.
    Local,
}

/// Passes over its bytes of a relay step (`recvCopySend`,
/// `recvReduceSend`: the slot read, the byte written out and into the next
/// slot), the step `beta` prices when a write weighs a read: a step costs
/// `beta` per byte times its weighed passes over this.
const RELAY_PASSES: f64 = 3.0;

/// Passes of a step over its bytes: reads (a slot received, a buffer
/// read) and writes (a buffer written, a slot sent).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Passes {
    /// Inputs read.
    pub reads: f64,
    /// Outputs written.
    pub writes: f64,
}

const fn passes(reads: f64, writes: f64) -> Passes {
    Passes { reads, writes }
}

/// A copy (`send`, `recv`, or a buffer into another): one read, one write.
const COPY: Passes = passes(1.0, 1.0);
/// `recvCopySend`: the slot read, the output and the next slot written.
const COPY_RELAY: Passes = passes(1.0, 2.0);
/// `recvReduceSend`: the slot and the input read, the next slot written.
const REDUCE_RELAY: Passes = passes(2.0, 1.0);
/// A `send` and a `recv` counted as one step.
const EXCHANGE: Passes = passes(2.0, 2.0);
/// A `send` and a receive that reduces into the output.
const REDUCE_EXCHANGE: Passes = passes(3.0, 2.0);
/// The trees going down: a relay to one child, a send to the other.
const TREE_DOWN: Passes = passes(1.25, 1.25);

/// A run of similar steps.
#[derive(Clone, Copy, Debug)]
struct Phase {
    /// Steps on the critical path.
    steps: f64,
    /// Steps of an average rank (for the cores bound).
    avg: f64,
    /// Bytes moved per step.
    bytes: f64,
    /// Passes over those bytes per step: each input (a slot, a buffer) of
    /// the step reads them once, each output writes them once ([`COPY`],
    /// [`COPY_RELAY`], [`EXCHANGE`], ...).
    passes: Passes,
    /// Whether the steps reduce.
    reduce: bool,
    span: Span,
    /// Fraction of the ranks taking part (the others wait for a later
    /// phase and leave their cores to these).
    active: f64,
}

impl Phase {
    fn new(steps: f64, bytes: f64, passes: Passes, reduce: bool, span: Span) -> Phase {
        Phase {
            steps,
            avg: steps,
            bytes,
            passes,
            reduce,
            span,
            active: 1.0,
        }
    }

    /// Work of an average rank with no step on the critical path (its
    /// steps are priced there by a phase of their own).
    fn work(avg: f64, bytes: f64, passes: Passes, reduce: bool, span: Span) -> Phase {
        Phase::new(0.0, bytes, passes, reduce, span).avg(avg)
    }

    fn active(mut self, active: f64) -> Phase {
        self.active = active;
        self
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
    let reduce = |p: &Phase| {
        if p.reduce {
            p.bytes * params.gamma
        } else {
            0.0
        }
    };
    // The bytes a step copies and reduces inside a host: `beta` per relay's
    // worth of passes over them, a write weighing `write_weight` reads.
    let weighed = |p: &Passes| p.reads + params.write_weight * p.writes;
    let copy = |p: &Phase| p.bytes * shm_link.beta * weighed(&p.passes) / RELAY_PASSES + reduce(p);
    let multi = shape.hosts > 1;
    // Times a rank's progress engine carries a byte: twice where it both
    // sends and receives it across (a relay from host to host, an
    // exchange with a rank across).
    let through = |both: bool| if both { 2.0 } else { 1.0 };
    // The pace of a pipelined ring or chain's link between hosts: a slot's
    // bytes on the wire, through the relaying rank's thread.
    let link = |p: &Phase| match p.span {
        Span::Ring { frac, relay_across } if multi && frac > 0.0 => {
            p.bytes * params.tcp.beta * through(relay_across)
        }
        _ => 0.0,
    };
    // A step's time with a tcp step costing `tcp_alpha` before its bytes.
    let step_with = |p: &Phase, tcp_alpha: f64| {
        if let Span::Local = p.span {
            return copy(p);
        }
        // Between hosts the wire carries a byte once, whatever the copies
        // around it.
        let shm = shm_link.alpha + copy(p);
        let tcp = tcp_alpha + p.bytes * params.tcp.beta + reduce(p);
        match p.span {
            Span::Ring { frac, .. } if multi && frac > 0.0 => {
                // Latency: a fraction `frac` of the hops cross hosts;
                // bandwidth: the pipeline runs at the pace of its link
                // between hosts.
                let latency = shm + frac * (tcp_alpha - shm_link.alpha);
                latency.max(link(p))
            }
            Span::RingFill(f) if multi => shm + f * (tcp - shm),
            Span::Dist(d) if multi && d >= shape.ranks_per_host => tcp,
            Span::Cross {
                frac,
                per_host,
                both_ways,
            } if multi && frac > 0.0 => {
                // The host's link carries the bytes of as many crossing
                // ranks at once as it has cores to run them; a rank's
                // progress engine carries what it sends and what it
                // receives (measured with one rank a host, two pretend
                // hosts, 16 MiB: an all-reduce, `b` bytes each way, took
                // 1.6-2.0x a broadcast of `b`).
                let sharing = per_host.min(params.cores.max(1) as f64).max(1.0);
                let thread = through(both_ways);
                let shared = tcp + p.bytes * params.tcp.beta * (sharing.max(thread) - 1.0);
                shm + frac * (shared - shm)
            }
            Span::Mixed(f) if multi => shm + f * (tcp - shm),
            _ => shm,
        }
    };
    let rooted = matches!(
        collective,
        Collective::Broadcast { .. } | Collective::Reduce { .. }
    );
    // A step as the rank that runs it works on it, and as its peer waits
    // for it: a tcp step reaches a waiting receiver `tcp_latency` after its
    // sender handed it over, later than the sender is done with it. A
    // rooted collective's back-to-back calls pipeline into each other (the
    // root hands the next call's data over while this call's is on its
    // way), so there the step's cost paces the path too.
    let step_alpha = if crowded {
        params.tcp_crowded_alpha
    } else {
        params.tcp.alpha
    };
    let step = |p: &Phase| step_with(p, step_alpha);
    let latency = if rooted {
        params.tcp.alpha
    } else {
        params.tcp_latency
    };
    let arrival = |p: &Phase| step_with(p, latency);
    let patience = if crowded {
        params.yields
    } else {
        params.spin + params.yields
    };
    // How many steps' time a step of the phase takes to get a core: the
    // ranks per core where they outnumber the cores, else 1. Ranks a phase
    // leaves out keep yielding their turns while its steps are short, and
    // are asleep, their cores free, once a step outlasts that patience.
    let turn = |p: &Phase| {
        let cores = params.cores.max(1) as f64;
        let all = (shape.sharing as f64 / cores).max(1.0);
        if arrival(p) * all > patience {
            (shape.sharing as f64 * p.active / cores).max(1.0)
        } else {
            all
        }
    };
    let wakes = |p: &Phase| {
        let waits = p.steps > 0.0 && !matches!(p.span, Span::Local | Span::Dist(0));
        if waits && arrival(p) * turn(p) > patience {
            params.wake
        } else {
            0.0
        }
    };
    let path: f64 = phases.iter().map(|p| p.steps * arrival(p)).sum();
    let crit = path + phases.iter().map(wakes).sum::<f64>();
    // Crowded, a step of a ring or chain costs the average rank what its
    // hops cost on average (`frac` of them between hosts); the pace of the
    // link between hosts is a bound of its own (`paced`).
    let work_step = |p: &Phase| match p.span {
        Span::Ring { frac, relay_across } if multi && frac > 0.0 => {
            let shm = shm_link.alpha + copy(p);
            let bytes = p.bytes * params.tcp.beta * through(relay_across);
            let tcp = step_alpha + bytes + reduce(p);
            shm + frac * (tcp - shm)
        }
        _ => step(p),
    };
    // A rank's work: with a core each, the bytes it copies and reduces (its
    // waits are latency, not work); crowded, whole steps, each a turn on a
    // core.
    let avg: f64 = phases
        .iter()
        .map(|p| p.avg * if crowded { work_step(p) } else { copy(p) })
        .sum();
    // Every slot of a pipelined ring or chain crosses its link between
    // hosts.
    let paced: f64 = phases.iter().map(|p| p.steps * link(p)).sum();
    let sharing = shape.sharing as f64;
    let cores = (params.cores as f64).min(sharing).max(1.0);
    let work = avg * sharing / cores;
    Some(match (crowded, rooted) {
        (false, _) => crit.max(work),
        // Crowded, a rooted collective's calls pipeline into each other: a
        // rank starts the next call as soon as its part of this one is
        // done, its peers downstream still busy with it. So only the work
        // counts, and the pace of a chain's link between hosts.
        (true, true) => work.max(paced),
        // The others end each call with every rank waiting for data that
        // crossed the whole schedule, and each hop of that path waits for
        // its rank to be given a core: about one turn of the ranks sharing
        // it, or of those of them the phase keeps busy, each of whose steps
        // costs its work (the hop's own latency is paid once: turns of
        // latencies overprice 8-rank calls across two hosts by about 1.4x).
        // (Wake-ups are not on it: other ranks' steps fill them.)
        (true, false) => {
            let waited: f64 = phases
                .iter()
                .map(|p| p.steps * (arrival(p) + (turn(p) - 1.0) * step(p)))
                .sum();
            work.max(waited)
        }
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

/// The phases of one call (empty when nothing moves): each algorithm's
/// schedule restated in closed form, held to the plans by the unit test
/// `phases_pass_over_the_bytes_as_often_as_the_plans_do` (why it is not
/// derived from the plans: `docs/design/algorithms.md`, *The cost model*).
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
        return vec![Phase::new(1.0, bytes, COPY, false, Span::Local)];
    }
    let levels = n.next_power_of_two().trailing_zeros() as usize;
    // A ring's `n` hops, `hosts` of them between hosts.
    let ring = Span::Ring {
        frac: shape.hosts as f64 / nf,
        relay_across: shape.ranks_per_host == 1,
    };
    match (collective, algo) {
        (Collective::AllReduce, Algorithm::Ring) => {
            let blk = chunk.min(count.div_ceil(n));
            let loops = count.div_ceil(n * blk) as f64;
            let filled = count.min(n) as f64 / nf;
            let b = bytes / (loops * nf).min(count as f64);
            let hops = (nf - 1.0) * loops;
            // Relays both ways round: `recvReduceSend`, then `recvCopySend`.
            // Per block the plan makes 2 passes more than 2 (n - 1) relays:
            // its 2 n - 1 steps are a `send` and a `recv` (2 passes each),
            // the step turning the reduction into the gather (4), and
            // relays.
            vec![
                Phase::new(hops, b, REDUCE_RELAY, true, ring).avg(hops * filled),
                Phase::new(hops, b, COPY_RELAY, false, ring).avg(hops * filled),
                Phase::new(loops, b, COPY, false, Span::Local).avg(loops * filled),
            ]
        }
        (Collective::AllGather | Collective::ReduceScatter, Algorithm::Ring) => {
            let (m, b) = cut(count);
            let reduce = collective == Collective::ReduceScatter;
            let relay = if reduce { REDUCE_RELAY } else { COPY_RELAY };
            // Per chunk, `n - 1` relays along the ring; then the
            // all-gather's copy of the rank's own input into its output, and
            // for the reduce-scatter a step more: its first send and last
            // receive each wait on a slot, with no hop to overlap them, and
            // the receive finalises (at 3 ranks and 504 B the reduce-scatter
            // takes about 1.4x the all-gather). A block's steps make the passes of `n - 1` relays
            // and 2 more: the reduce-scatter's opening `send`, the
            // all-gather's copy of the rank's own input.
            let last = if reduce {
                Phase::new(m, b, COPY, false, Span::Dist(0))
            } else {
                Phase::new(m, b, COPY, false, Span::Local)
            };
            vec![Phase::new(m * (nf - 1.0), b, relay, reduce, ring), last]
        }
        (Collective::Broadcast { root } | Collective::Reduce { root }, Algorithm::Chain) => {
            let (m, b) = cut(count);
            let reduce = matches!(collective, Collective::Reduce { .. });
            // The chain's `n - 1` hops: a broadcast's from the root out to
            // `root - 1`, a reduce's from `root + 1` in to the root (which
            // crosses hosts once more where the root's host is not the
            // last one).
            let first = if reduce { root + 1 } else { root };
            let hops = (0..n - 1).map(|i| ((first + i) % n, (first + i + 1) % n));
            let f = crossing_fraction(shape, hops.clone());
            let across = |(a, b): (usize, usize)| on_two_hosts(shape, a, b);
            let relay_across = hops
                .clone()
                .zip(hops.skip(1))
                .any(|(into, out)| across(into) && across(out));
            let ring = Span::Ring {
                frac: f,
                relay_across,
            };
            let relay = if reduce { REDUCE_RELAY } else { COPY_RELAY };
            // The first chunk crosses `n - 1` hops, one relay each, one
            // after the other; the others follow at the pace of one relay.
            // A rank's work is a step per chunk, a relay but at the end
            // that receives without sending on: a broadcast's leaf writes
            // one output fewer, a reduce's leaf reads one input fewer.
            let end = 1.0 / nf;
            let work = if reduce {
                passes(2.0 - end, 1.0)
            } else {
                passes(1.0, 2.0 - end)
            };
            vec![
                Phase::new(nf - 1.0, b, relay, reduce, Span::RingFill(f)).avg(0.0),
                Phase::new(m - 1.0, b, relay, reduce, ring).avg(0.0),
                Phase::work(m, b, work, reduce, ring),
            ]
        }
        (Collective::AllToAll, _) => {
            let (m, b) = cut(count);
            let per = shape.ranks_per_host.min(n) as f64;
            // Per slot and peer a `send` and a `recv`, counted as one step
            // (4 passes), as recursive doubling counts its exchanges: the
            // send to one peer does not wait for the receive from the
            // other (as two steps, the small all-to-alls would be priced at
            // 1.4-2.0x their measurement).
            vec![
                Phase::new(1.0, bytes, COPY, false, Span::Local),
                Phase::new(m * (per - 1.0), b, EXCHANGE, false, Span::Dist(1)),
                Phase::new(
                    m * (nf - per),
                    b,
                    EXCHANGE,
                    false,
                    Span::Cross {
                        frac: 1.0,
                        per_host: per,
                        // Pairs exchange: each sends to the rank it
                        // receives from.
                        both_ways: true,
                    },
                ),
            ]
        }
        (Collective::Broadcast { .. } | Collective::Reduce { .. }, Algorithm::Binomial) => {
            // Reduce is the same tree upwards, each level reducing.
            let (m, b) = cut(count);
            let reduce = matches!(collective, Collective::Reduce { .. });
            // A rank receives once and sends to each child from its
            // output, the first send riding on the receive; going up, each
            // child's slot is reduced with the rank's input or partial
            // sum. Over the `n - 1` edges and the `ceil(n / 2)` leaves, an
            // average rank's step makes these passes.
            let leaves = n.div_ceil(2) as f64;
            let step = if reduce {
                passes((2.0 * (nf - 1.0) + leaves) / nf, (nf - 1.0 + leaves) / nf)
            } else {
                passes((nf - 1.0 + leaves) / nf, (2.0 * nf - 1.0) / nf)
            };
            // Level `j`'s edges join `v` to `v + 2^j` for `v` a multiple of
            // `2^(j + 1)` (ranks relative to the root, taken as rank 0). The
            // ranks' work is spread over the levels as their edges are: the
            // few edges of the top levels, which cross hosts, carry as
            // little of it as they are few (a level a step each would price
            // a 4-rank broadcast over two hosts at half its steps between
            // them, where one of its three is).
            (0..levels)
                .map(|j| {
                    let drain = if j + 1 < levels { 1.0 } else { 0.0 };
                    let edges = (0..n)
                        .step_by(2 << j)
                        .filter(|v| v + (1 << j) < n)
                        .map(|v| (v, v + (1 << j)));
                    let share = edges.clone().count() as f64 / (nf - 1.0);
                    let span = Span::Mixed(crossing_fraction(shape, edges));
                    Phase::new(m + drain, b, step, reduce, span).avg(m * share)
                })
                .collect()
        }
        (Collective::AllReduce, Algorithm::Tree) => {
            let (m, b) = cut(count.div_ceil(2));
            let depth = n.ilog2() as f64;
            // The top levels cross hosts (about `log2 hosts` of the
            // `depth + 1` levels of ranks); with one rank a host, every
            // edge does.
            let cross = if shape.hosts <= 1 {
                0.0
            } else if shape.ranks_per_host == 1 {
                1.0
            } else {
                (shape.hosts.next_power_of_two().trailing_zeros() as f64 / (depth + 1.0)).min(1.0)
            };
            let span = Span::Mixed(cross);
            // The first chunk pair climbs `depth` hops and comes back down
            // as many (both trees at once); each further pair costs the
            // busiest rank's six steps, reducing two of them. (Measured at
            // two ranks, 8 B-4 KiB, 1000 calls: 1.7-2.2 µs, two steps'
            // worth, where six and both depths made eight.) Going up, a
            // rank reduces each child's slot (3 passes); coming down it
            // relays to one child and sends its output to the other (3 and
            // 2).
            let more = m - 1.0;
            vec![
                Phase::new(2.0 * more + depth, b, REDUCE_RELAY, true, span).avg(1.5 * m),
                Phase::new(more, b, TREE_DOWN, false, span).avg(m),
                Phase::new(3.0 * more + depth, b, TREE_DOWN, false, span).avg(2.5 * m),
            ]
        }
        (Collective::AllReduce, Algorithm::HalvingDoubling | Algorithm::RecursiveDoubling) => {
            let p = 1usize << n.ilog2();
            let mut out = Vec::new();
            // The `2 (n - p)` folding ranks: half send their input (2
            // passes) for the other half to reduce (3), and get the result
            // back the same way (2 and 2); the `p` others halve and double,
            // or swap whole vectors.
            let (fold, active) = (2.0 * (n - p) as f64 / nf, p as f64 / nf);
            let rem = n - p;
            let real = |v: usize| if v < rem { 2 * v + 1 } else { v + rem };
            if p < n {
                let (m, b) = cut(count);
                // Each even rank below `2 rem` folds into the odd one above.
                let pairs = (0..rem).map(|k| (2 * k, 2 * k + 1));
                let fold_span = crossing(shape, pairs);
                // On the path the receiving half's reduce; the work, on
                // average over the folding ranks, half a `send` and half a
                // reduce: 1.5 reads and a write.
                let fold_in = Phase::new(m, b, REDUCE_RELAY, true, fold_span).avg(0.0);
                out.push(fold_in.active(fold));
                let fold_work = Phase::work(m * fold, b, passes(1.5, 1.0), true, fold_span);
                out.push(fold_work.active(fold));
                let fold_out = Phase::new(m, b, COPY, false, fold_span).avg(m * fold);
                out.push(fold_out.active(fold));
            }
            let halving = algo == Algorithm::HalvingDoubling;
            let mut mask = p / 2;
            let mut elems = count;
            while mask > 0 {
                if halving {
                    elems = elems.div_ceil(2);
                }
                let (m, b) = cut(elems);
                // Virtual ranks `v` and `v ^ mask` pair up; with no fold
                // they are the ranks themselves, paired alike on every host.
                let span = if rem == 0 {
                    round_alike_on_every_host(shape, |r| r ^ mask, |r| r ^ mask)
                } else {
                    crossing(shape, (0..p).map(|v| (real(v), real(v ^ mask))))
                };
                // Each round sends m slots and receives m, alternating: a
                // pair costs one step of `b` bytes, a `send` (2 passes) and
                // a `recv` (2), which reduces (3). Halving rounds are
                // matched by as many doubling rounds, which only copy.
                let round = Phase::new(m, b, REDUCE_EXCHANGE, true, span).avg(m * active);
                out.push(round.active(active));
                if halving {
                    let double = Phase::new(m, b, EXCHANGE, false, span).avg(m * active);
                    out.push(double.active(active));
                }
                mask /= 2;
            }
            out
        }
        (Collective::AllGather, Algorithm::RecursiveDoubling | Algorithm::Bruck) => {
            let mut out = vec![Phase::new(1.0, bytes, COPY, false, Span::Local)];
            let pow2 = n.is_power_of_two() && algo == Algorithm::RecursiveDoubling;
            let mut dist = 1;
            while dist < n {
                let blocks = dist.min(n - dist);
                let (m, b) = cut(blocks * count);
                let wrap = if pow2 { 0.0 } else { 0.5 };
                // Each round sends `m` slots to one partner and receives `m`
                // from another, at once: `m` steps as a ring counts them
                // (one slot out, one in), each a `send` and a `recv`.
                // Partners by xor (recursive doubling on a power of two), or
                // `dist` down the ring (Bruck, and recursive doubling on
                // others): alike on every host.
                let to = |r: usize| if pow2 { r ^ dist } else { (r + n - dist) % n };
                let from = |r: usize| if pow2 { r ^ dist } else { (r + dist) % n };
                let span = round_alike_on_every_host(shape, to, from);
                out.push(Phase::new(m + wrap, b, EXCHANGE, false, span));
                dist *= 2;
            }
            out
        }
        // Point-to-point, barriers and unsupported pairs: `predict` filters.
        _ => Vec::new(),
    }
}

/// The round in which ranks send at once along `pairs` (sender,
/// receiver): [`Span::Cross`], counted.
fn crossing(shape: &Shape, pairs: impl Iterator<Item = (usize, usize)>) -> Span {
    let n = shape.ranks;
    let (mut sends, mut receives) = (vec![false; n], vec![false; n]);
    let (across, all) = count_crossing(
        shape,
        pairs.inspect(|&(a, b)| {
            if on_two_hosts(shape, a, b) && a < n && b < n {
                sends[a] = true;
                receives[b] = true;
            }
        }),
    );
    Span::Cross {
        frac: across as f64 / all.max(1) as f64,
        per_host: across as f64 / shape.hosts.max(1) as f64,
        both_ways: sends.iter().zip(&receives).any(|(&s, &r)| s && r),
    }
}

/// The fraction of `edges` (sender, receiver) that join ranks on two hosts
/// (0 when there are none).
fn crossing_fraction(shape: &Shape, edges: impl Iterator<Item = (usize, usize)>) -> f64 {
    let (across, all) = count_crossing(shape, edges);
    across as f64 / all.max(1) as f64
}

/// The round in which every rank `r` sends to `to(r)` and receives from
/// `from(r)` by a rule that pairs each host's ranks alike (a shift down the
/// ring, a xor): with whole hosts, the first host's ranks tell for all
/// (selection prices every call, so at thousands of ranks this matters);
/// else every rank is counted.
fn round_alike_on_every_host(
    shape: &Shape,
    to: impl Fn(usize) -> usize,
    from: impl Fn(usize) -> usize,
) -> Span {
    let (n, per) = (shape.ranks, shape.ranks_per_host.max(1));
    if n % per != 0 {
        return crossing(shape, (0..n).map(|r| (r, to(r))));
    }
    let across = (0..per).filter(|&r| to(r) >= per).count() as f64;
    Span::Cross {
        frac: across / per as f64,
        per_host: across,
        both_ways: (0..per).any(|r| to(r) >= per && from(r) >= per),
    }
}

/// Whether ranks `a` and `b` are on two hosts.
fn on_two_hosts(shape: &Shape, a: usize, b: usize) -> bool {
    let per = shape.ranks_per_host.max(1);
    a / per != b / per
}

/// How many of `pairs` join ranks on two hosts, and how many there are.
fn count_crossing(shape: &Shape, pairs: impl Iterator<Item = (usize, usize)>) -> (usize, usize) {
    pairs.fold((0, 0), |(across, all), (a, b)| {
        (across + usize::from(on_two_hosts(shape, a, b)), all + 1)
    })
}

#[cfg(test)]
#[path = "model_tests.rs"]
mod tests;
