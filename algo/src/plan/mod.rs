//! Plans: pure functions from a collective call to one rank's ordered steps.
//!
//! No I/O and no threads live here, so every algorithm can be run for many
//! ranks inside one thread by the simulator and checked against a reference.
//! [`build`] checks the call's arguments once and dispatches to one file per
//! family of algorithms (ring, chain, pairwise; the message barrier runs the
//! dissemination barrier's flag steps as messages); those files only emit
//! [`DataStep`]s. [`apply::Interpreter`] is the one interpreter of data steps,
//! shared by the backends and by [`simulate::simulate`]. Barriers over flag
//! memory are written in flag steps, a type of their own with its memory
//! model and interpreter, all in `crate::barrier`, whose flag simulator
//! (`barrier::simulate`) proves them.
//!
//! # Element counts
//!
//! `count` follows NCCL's conventions (elements, not bytes):
//!
//! | collective        | send elements      | recv elements          |
//! |-------------------|--------------------|------------------------|
//! | `AllReduce`       | `count`            | `count`                |
//! | `AllGather`       | `count`            | `nranks * count`       |
//! | `ReduceScatter`   | `nranks * count`   | `count`                |
//! | `Broadcast{root}` | `count` on root, else 0 | `count`           |
//! | `Reduce{root}`    | `count`            | `count` on root, else 0 |
//! | `AllToAll`        | `nranks * count`   | `nranks * count`       |
//! | `Barrier`         | 0 (`count` must be 0) | 0                   |
//!
//! # Slots and deadlock freedom
//!
//! Every step that touches a slot moves at most `slot_bytes / dtype.size()`
//! elements, so large messages are cut into chunks and pipelined. Each rank
//! runs its steps strictly in order, and every plan completes even when each
//! directed connection holds a single slot (`nsteps == 1`); more slots only
//! let more chunks be in flight. NCCL's ring alone would deadlock with one
//! slot, so the rings give rank 0 a slightly different role (the *breaker*,
//! see `ring.rs`); the simulator tests check every size with one slot and
//! with random interleavings.

mod algo;
mod barrier;
mod binomial;
mod chain;
mod halving_doubling;
mod layout;
mod pairwise;
mod recursive_doubling;
mod ring;
mod tree;

pub mod apply;
pub mod signature;
pub mod simulate;
pub mod step;
mod verify;

#[cfg(test)]
mod test_support;

pub use algo::build_with;
pub use apply::{Buffers, Interpreter};
pub use layout::InPlaceLayout;
pub use simulate::{MessageSimConfig, Schedule, simulate, simulate_with};
pub use step::DataStep;
pub use step::Plan;
pub use streamcomm_types::{Algorithm, Collective};

use streamcomm_kernels::{DataType, ReduceOp};

use crate::Error;
use crate::check::rank_in_range;

/// Where a plan is built for: this rank, the communicator size and the slot size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanParams {
    /// The rank the plan is for (`0..nranks`).
    pub rank: usize,
    /// Number of ranks in the communicator (at least 1).
    pub nranks: usize,
    /// Bytes of one slot of a connection's ring (`docs/design/architecture.md`); every step
    /// that touches a slot moves at most `slot_bytes / dtype.size()` elements.
    pub slot_bytes: usize,
    /// Slots per connection the plan may rely on (at least 1). Rings need a
    /// breaker rank only with a single slot (see `ring.rs`); with two or
    /// more they run NCCL's fused steps on every rank.
    pub nsteps: usize,
}

/// Builds the plan of one rank for one collective call.
///
/// `count` is in elements, with NCCL's meaning per collective (see the
/// module docs). A collective with `count == 0` has no steps; a `Barrier`'s
/// count must be 0. (Point-to-point is not a plan: see `comm::p2p`.)
///
/// # Errors
///
/// [`Error::InvalidArgument`] naming the bad value when `nranks` is 0, `rank`
/// is not below `nranks`, a root is out of range, `slot_bytes` cannot hold
/// one element, a barrier
/// has a non-zero count, or the buffer sizes overflow `usize`.
///
/// # Examples
///
/// ```
/// use streamcomm_algo::plan::{build, PlanParams};
/// use streamcomm_types::Collective;
/// use streamcomm_types::{DataType, ReduceOp};
///
/// let params = PlanParams { rank: 1, nranks: 4, slot_bytes: 1 << 20, nsteps: 8 };
/// let plan = build(Collective::AllReduce, DataType::F32, ReduceOp::Sum, 1024, &params)?;
/// assert_eq!((plan.send_count, plan.recv_count), (1024, 1024));
/// // Ring: send, 2 x recvReduceSend, recvReduceCopySend, 2 x recvCopySend, recv.
/// assert_eq!(plan.steps.len(), 2 * 4 - 1);
/// # Ok::<(), streamcomm_types::Error>(())
/// ```
pub fn build(
    collective: Collective,
    dtype: DataType,
    op: ReduceOp,
    count: usize,
    params: &PlanParams,
) -> Result<Plan, Error> {
    let g = validate(collective, dtype, count, params)?;
    let steps = match collective {
        Collective::AllReduce => ring::all_reduce(&g),
        Collective::AllGather => ring::all_gather(&g),
        Collective::ReduceScatter => ring::reduce_scatter(&g),
        Collective::Broadcast { root } => chain::broadcast(&g, root),
        Collective::Reduce { root } => chain::reduce(&g, root),
        Collective::AllToAll => pairwise::all_to_all(&g),
        Collective::Barrier => barrier::steps(&g)?,
    };
    verified_plan(collective, dtype, op, &g, 0, steps)
}

/// The plan of `g`'s rank running `steps` over NCCL's buffer sizes (and
/// `work_count` elements of scratch), checked by [`Plan::verify`].
fn verified_plan(
    collective: Collective,
    dtype: DataType,
    op: ReduceOp,
    g: &Geometry,
    work_count: usize,
    steps: Vec<DataStep>,
) -> Result<Plan, Error> {
    let (send_count, recv_count) = buffer_counts(collective, g.count, g.rank, g.nranks);
    let mut plan = Plan {
        collective,
        dtype,
        op,
        rank: g.rank,
        nranks: g.nranks,
        send_count,
        recv_count,
        work_count,
        signature: 0,
        steps,
    };
    plan.signature = signature::of(&plan);
    plan.verify()?;
    Ok(plan)
}

/// Elements of rank `rank`'s send and receive buffers for a call of
/// `count` among `nranks` (NCCL's meaning of `count`, whatever the
/// algorithm): the broadcast's root sends, the reduce's root receives, the
/// other ranks pass no buffer there.
pub fn buffer_counts(
    collective: Collective,
    count: usize,
    rank: usize,
    nranks: usize,
) -> (usize, usize) {
    match collective {
        Collective::AllReduce => (count, count),
        Collective::AllGather => (count, nranks * count),
        Collective::ReduceScatter => (nranks * count, count),
        Collective::Broadcast { root } => (if rank == root { count } else { 0 }, count),
        Collective::Reduce { root } => (count, if rank == root { count } else { 0 }),
        Collective::AllToAll => (nranks * count, nranks * count),
        Collective::Barrier => (0, 0),
    }
}

/// The lengths of the buffers a call was given, in elements: what every
/// face knows before NCCL's `count` is derived ([`count_from`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lens {
    /// Distinct input and output.
    Separate {
        /// Elements of the send buffer.
        send: usize,
        /// Elements of the receive buffer.
        recv: usize,
    },
    /// One buffer at NCCL's in-place offsets.
    InPlace(usize),
}

/// Every collective that moves data, broadcasting from `broadcast_root` and
/// reducing to `reduce_root`: what a sweep over the plans (the algorithm
/// files' tests, the simulators' tests in `core`) runs.
///
/// # Examples
/// ```
/// use streamcomm_algo::plan::{Collective, data_collectives};
/// let all = data_collectives(0, 1);
/// assert!(all.contains(&Collective::Reduce { root: 1 }));
/// assert!(!all.contains(&Collective::Barrier));
/// ```
pub fn data_collectives(broadcast_root: usize, reduce_root: usize) -> [Collective; 6] {
    [
        Collective::AllReduce,
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::Broadcast {
            root: broadcast_root,
        },
        Collective::Reduce { root: reduce_root },
        Collective::AllToAll,
    ]
}

/// Which buffer of a separate call gives its count (and element type).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CountFrom {
    /// The send buffer.
    Send,
    /// The receive buffer.
    Recv,
    /// The one in-place buffer.
    InPlace,
}

/// NCCL's `count` of a `collective` call over `size` ranks given buffers of
/// `lens` elements, and the buffer it comes from: the send buffer's length
/// (its blocks' for all-to-all), the receive buffer's for broadcast and
/// reduce-scatter (whose send side is the root's only, or `size` blocks),
/// and in place the buffer's (its blocks' for all-gather and
/// reduce-scatter). The one rule of every face (host streams, CUDA
/// streams, raw pointers); the plan then checks the buffers against the
/// lengths the count needs.
///
/// # Errors
/// [`Error::InvalidArgument`] when a length that holds `size` blocks is not
/// divisible by `size`.
pub fn count_from(
    collective: Collective,
    lens: Lens,
    size: usize,
) -> Result<(usize, CountFrom), Error> {
    let per_rank = |len: usize| {
        if size == 0 || !len.is_multiple_of(size) {
            return Err(Error::invalid(format!(
                "{}: buffer of {len} elements is not divisible by the {size} ranks",
                collective.name()
            )));
        }
        Ok(len / size)
    };
    Ok(match (collective, lens) {
        (Collective::AllGather | Collective::ReduceScatter, Lens::InPlace(len)) => {
            (per_rank(len)?, CountFrom::InPlace)
        }
        (_, Lens::InPlace(len)) => (len, CountFrom::InPlace),
        (Collective::Broadcast { .. } | Collective::ReduceScatter, Lens::Separate { recv, .. }) => {
            (recv, CountFrom::Recv)
        }
        (Collective::AllToAll, Lens::Separate { send, .. }) => (per_rank(send)?, CountFrom::Send),
        (_, Lens::Separate { send, .. }) => (send, CountFrom::Send),
    })
}

/// The geometry the algorithm files' unit tests use: 4-element slots
/// with a breaker.
#[cfg(test)]
pub(crate) fn geom(rank: usize, nranks: usize, count: usize) -> Geometry {
    Geometry {
        rank,
        nranks,
        count,
        chunk: 4,
        breaker: true,
    }
}

/// What the algorithm files need: who we are, how much, and the chunk size.
#[derive(Clone, Copy, Debug)]
pub struct Geometry {
    /// This rank.
    pub rank: usize,
    /// Number of ranks.
    pub nranks: usize,
    /// The call's `count` (elements).
    pub count: usize,
    /// Most elements one slot holds (at least 1).
    pub chunk: usize,
    /// Whether ring plans need a breaker rank (single-slot connections).
    pub breaker: bool,
}

impl Geometry {
    /// The next rank on the ring.
    pub fn next(&self) -> usize {
        (self.rank + 1) % self.nranks
    }

    /// The previous rank on the ring.
    pub fn prev(&self) -> usize {
        (self.rank + self.nranks - 1) % self.nranks
    }

    /// `(offset, len)` pieces of at most `chunk` elements covering
    /// `[0, len)`; nothing when `len` is 0.
    pub fn chunks(&self, len: usize) -> impl Iterator<Item = (usize, usize)> + use<> {
        let chunk = self.chunk;
        (0..len)
            .step_by(chunk)
            .map(move |off| (off, chunk.min(len - off)))
    }
}

/// Checks the arguments of [`build`] and returns the geometry they describe.
fn validate(
    collective: Collective,
    dtype: DataType,
    count: usize,
    params: &PlanParams,
) -> Result<Geometry, Error> {
    let PlanParams {
        rank,
        nranks,
        slot_bytes,
        ..
    } = *params;
    let name = collective.name();
    rank_in_range(name, rank, nranks)?;
    if slot_bytes < dtype.size() {
        return Err(Error::invalid(format!(
            "{name}: slot_bytes {slot_bytes} cannot hold one {dtype} element ({} bytes)",
            dtype.size()
        )));
    }
    match collective {
        Collective::Broadcast { root } | Collective::Reduce { root } if root >= nranks => {
            return Err(Error::invalid(format!(
                "{name}: root {root} is out of range for {nranks} ranks"
            )));
        }
        Collective::Barrier if count != 0 => {
            return Err(Error::invalid(format!(
                "barrier: count must be 0, got {count}"
            )));
        }
        _ => {}
    }
    // The largest buffer is nranks * count elements; its byte size must fit.
    let fits = count
        .checked_mul(nranks)
        .and_then(|elems| elems.checked_mul(dtype.size()))
        .is_some();
    if !fits {
        return Err(Error::invalid(format!(
            "{name}: count {count} x {nranks} ranks of {dtype} overflows the address space"
        )));
    }
    Ok(Geometry {
        rank,
        nranks,
        count,
        chunk: slot_bytes / dtype.size(),
        breaker: params.nsteps < 2,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::data_collectives;

    fn params(rank: usize, nranks: usize) -> PlanParams {
        PlanParams {
            rank,
            nranks,
            slot_bytes: 16,
            nsteps: 1,
        }
    }

    fn err(c: Collective, count: usize, p: PlanParams) -> String {
        match build(c, DataType::F32, ReduceOp::Sum, count, &p) {
            Err(Error::InvalidArgument(msg)) => msg,
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }

    #[test]
    fn rejects_bad_arguments_naming_the_value() {
        assert!(err(Collective::AllReduce, 1, params(0, 0)).contains("nranks is 0"));
        assert!(err(Collective::AllReduce, 1, params(4, 4)).contains("rank 4"));
        let msg = err(Collective::Broadcast { root: 7 }, 1, params(0, 4));
        assert!(msg.contains("root 7"), "{msg}");
        let msg = err(Collective::Reduce { root: 4 }, 1, params(0, 4));
        assert!(msg.contains("root 4"), "{msg}");
        assert!(err(Collective::Barrier, 3, params(0, 4)).contains("got 3"));
        let tiny = PlanParams {
            slot_bytes: 3,
            ..params(0, 2)
        };
        assert!(err(Collective::AllReduce, 1, tiny).contains("slot_bytes 3"));
        assert!(err(Collective::AllGather, usize::MAX / 2, params(0, 4)).contains("overflows"));
    }

    #[test]
    fn counts_follow_nccl() {
        let p = params(1, 3);
        let counts = |c| {
            let plan = build(c, DataType::F32, ReduceOp::Sum, 5, &p).unwrap();
            (plan.send_count, plan.recv_count)
        };
        assert_eq!(counts(Collective::AllReduce), (5, 5));
        assert_eq!(counts(Collective::AllGather), (5, 15));
        assert_eq!(counts(Collective::ReduceScatter), (15, 5));
        assert_eq!(counts(Collective::Broadcast { root: 1 }), (5, 5));
        assert_eq!(counts(Collective::Broadcast { root: 0 }), (0, 5));
        assert_eq!(counts(Collective::Reduce { root: 1 }), (5, 5));
        assert_eq!(counts(Collective::Reduce { root: 2 }), (5, 0));
        assert_eq!(counts(Collective::AllToAll), (15, 15));
    }

    #[test]
    fn slot_steps_never_exceed_a_slot() {
        for c in data_collectives(2, 0) {
            for rank in 0..5 {
                let plan = build(c, DataType::F32, ReduceOp::Sum, 37, &params(rank, 5)).unwrap();
                for s in &plan.steps {
                    if s.recv_from.is_some() || s.send_to.is_some() {
                        assert!(s.count <= 4, "{c:?} rank {rank}: {s:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn zero_count_collectives_have_no_steps() {
        for c in data_collectives(0, 0) {
            let plan = build(c, DataType::U8, ReduceOp::Max, 0, &params(0, 3)).unwrap();
            assert!(plan.steps.is_empty(), "{c:?}");
        }
    }

    #[test]
    fn the_count_comes_from_the_buffer_each_collective_names() {
        let sep = Lens::Separate { send: 12, recv: 4 };
        let one = Lens::InPlace(8);
        let cases = [
            (Collective::AllReduce, sep, (12, CountFrom::Send)),
            (Collective::Reduce { root: 1 }, sep, (12, CountFrom::Send)),
            (Collective::Broadcast { root: 1 }, sep, (4, CountFrom::Recv)),
            (Collective::AllGather, sep, (12, CountFrom::Send)),
            (Collective::ReduceScatter, sep, (4, CountFrom::Recv)),
            (Collective::AllToAll, sep, (3, CountFrom::Send)),
            (Collective::AllReduce, one, (8, CountFrom::InPlace)),
            (Collective::AllGather, one, (2, CountFrom::InPlace)),
            (Collective::ReduceScatter, one, (2, CountFrom::InPlace)),
            (Collective::AllToAll, one, (8, CountFrom::InPlace)),
        ];
        for (c, lens, want) in cases {
            assert_eq!(count_from(c, lens, 4).unwrap(), want, "{c:?} {lens:?}");
        }
        let odd = count_from(Collective::AllGather, Lens::InPlace(10), 4).unwrap_err();
        assert!(
            odd.to_string()
                .contains("all_gather: buffer of 10 elements is not divisible by the 4 ranks"),
            "{odd}"
        );
        assert!(count_from(Collective::AllToAll, sep, 0).is_err());
    }
}
