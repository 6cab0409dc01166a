//! The small vocabulary every algorithm is written in.
//!
//! A plan is an ordered list of [`DataStep`]s for one rank (NCCL's device
//! primitives `send`, `recv`, `recvReduceSend`, `recvReduceCopySend`,
//! `recvCopySend` are all one [`DataStep`] with different fields set). The host
//! backend, the CUDA backend and the simulator interpret the same steps, so an
//! algorithm is written once.
//!
//! A step has up to two inputs and up to two outputs:
//! - inputs: the next slot arriving from `recv_from`, and the local region `src`;
//!   with both, the result is `src op slot`; with one, the result is that input;
//!   with none, `count` must be 0 (a pure signal, used by barriers);
//! - outputs: the local region `dst` and/or the next slot sent to `send_to`.
//!
//! Data steps are one of the two kinds of step: barriers over flag memory
//! are written in flag steps (`FlagStep`, in `barrier/`), a type of their
//! own, so a plan of one kind cannot hold a step of the other and each
//! interpreter takes only its own kind.
//!
//! Slots travel over per-peer FIFO rings of `nsteps` slots of `slot_bytes` bytes
//! (`docs/design/architecture.md`); a step's `count * dtype.size()` never exceeds `slot_bytes`
//! when it touches a slot. Each slot carries its byte length, and the receiver
//! checks it against its own step (a mismatch is an error, never a silent
//! truncation).

use streamcomm_kernels::{DataType, ReduceOp};
use streamcomm_types::Collective;

/// Which buffer of the collective call a [`Region`] lies in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BufId {
    /// The call's input buffer.
    Send,
    /// The call's output buffer.
    Recv,
}

/// A range of elements (not bytes) in one of the call's buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Region {
    /// Which buffer.
    pub buf: BufId,
    /// First element.
    pub offset: usize,
    /// Number of elements.
    pub count: usize,
}

impl Region {
    /// A region of the send buffer.
    pub const fn send(offset: usize, count: usize) -> Region {
        Region {
            buf: BufId::Send,
            offset,
            count,
        }
    }

    /// A region of the receive buffer.
    pub const fn recv(offset: usize, count: usize) -> Region {
        Region {
            buf: BufId::Recv,
            offset,
            count,
        }
    }

    /// One past the last element.
    pub const fn end(&self) -> usize {
        self.offset + self.count
    }
}

/// One step of a plan: consume, combine, produce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataStep {
    /// Consume the next slot arriving from this rank (an input).
    pub recv_from: Option<usize>,
    /// Local input region (its `count` equals the step's `count`).
    pub src: Option<Region>,
    /// Local output region (its `count` equals the step's `count`).
    pub dst: Option<Region>,
    /// Fill the next slot of the ring towards this rank (an output).
    pub send_to: Option<usize>,
    /// Elements moved by this step.
    pub count: usize,
    /// Apply the operator's finalisation to the result before writing it
    /// (for [`ReduceOp::Avg`]: divide by the number of ranks). Set on exactly
    /// the step that produces a fully reduced element, once per element.
    pub finalize: bool,
}

impl DataStep {
    const EMPTY: DataStep = DataStep {
        recv_from: None,
        src: None,
        dst: None,
        send_to: None,
        count: 0,
        finalize: false,
    };

    /// `send`: copy `src` into a slot for `peer`.
    pub const fn send(peer: usize, src: Region) -> DataStep {
        DataStep {
            src: Some(src),
            send_to: Some(peer),
            count: src.count,
            ..DataStep::EMPTY
        }
    }

    /// `recv`: copy the next slot from `peer` into `dst`.
    pub const fn recv(peer: usize, dst: Region) -> DataStep {
        DataStep {
            recv_from: Some(peer),
            dst: Some(dst),
            count: dst.count,
            ..DataStep::EMPTY
        }
    }

    /// `copy`: local copy `src` -> `dst`.
    pub const fn copy(src: Region, dst: Region) -> DataStep {
        DataStep {
            src: Some(src),
            dst: Some(dst),
            count: src.count,
            ..DataStep::EMPTY
        }
    }

    /// `recvReduceSend`: `slot(from) op src` -> slot for `to`.
    pub const fn recv_reduce_send(from: usize, src: Region, to: usize) -> DataStep {
        DataStep {
            recv_from: Some(from),
            src: Some(src),
            send_to: Some(to),
            count: src.count,
            ..DataStep::EMPTY
        }
    }

    /// `recvReduce`: `slot(from) op src` -> `dst` (`src` may equal `dst`).
    pub const fn recv_reduce(from: usize, src: Region, dst: Region) -> DataStep {
        DataStep {
            recv_from: Some(from),
            src: Some(src),
            dst: Some(dst),
            count: src.count,
            ..DataStep::EMPTY
        }
    }

    /// `recvReduceCopySend`: `slot(from) op src` -> `dst` and slot for `to`.
    pub const fn recv_reduce_copy_send(
        from: usize,
        src: Region,
        dst: Region,
        to: usize,
    ) -> DataStep {
        DataStep {
            recv_from: Some(from),
            src: Some(src),
            dst: Some(dst),
            send_to: Some(to),
            count: src.count,
            ..DataStep::EMPTY
        }
    }

    /// `recvCopySend`: slot from `from` -> `dst` and slot for `to`.
    pub const fn recv_copy_send(from: usize, dst: Region, to: usize) -> DataStep {
        DataStep {
            recv_from: Some(from),
            dst: Some(dst),
            send_to: Some(to),
            count: dst.count,
            ..DataStep::EMPTY
        }
    }

    /// `copySend`: `src` -> `dst` and a slot for `to`.
    pub const fn copy_send(src: Region, dst: Region, to: usize) -> DataStep {
        DataStep {
            src: Some(src),
            dst: Some(dst),
            send_to: Some(to),
            count: src.count,
            ..DataStep::EMPTY
        }
    }

    /// A zero-byte message to `peer` (barrier signal).
    pub const fn signal(peer: usize) -> DataStep {
        DataStep {
            send_to: Some(peer),
            ..DataStep::EMPTY
        }
    }

    /// Wait for a zero-byte message from `peer` (barrier wait).
    pub const fn wait(peer: usize) -> DataStep {
        DataStep {
            recv_from: Some(peer),
            ..DataStep::EMPTY
        }
    }

    /// Marks this step as the one that finalises its elements.
    pub const fn finalized(mut self) -> DataStep {
        self.finalize = true;
        self
    }

    /// [`DataStep::finalized`] when `last`, else the step unchanged.
    pub const fn finalized_if(self, last: bool) -> DataStep {
        if last { self.finalized() } else { self }
    }
}

/// An ordered list of data steps for one rank, with what is needed to
/// interpret them.
///
/// Its steps are data steps only; a flag step does not fit:
///
/// ```compile_fail
/// use streamcomm_algo::barrier::FlagStep;
/// use streamcomm_algo::plan::{build, PlanParams};
/// use streamcomm_types::{Collective, DataType, ReduceOp};
///
/// let params = PlanParams { rank: 0, nranks: 2, slot_bytes: 64, nsteps: 1 };
/// let mut plan = build(Collective::Barrier, DataType::U8, ReduceOp::Sum, 0, &params)?;
/// plan.steps.push(FlagStep::Notify { peer: 1, round: 0 });
/// # Ok::<(), streamcomm_types::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// What this plan computes.
    pub collective: Collective,
    /// Element type of every region and slot.
    pub dtype: DataType,
    /// Reduction operator (ignored by steps with a single input).
    pub op: ReduceOp,
    /// The rank this plan is for.
    pub rank: usize,
    /// Number of ranks (the `Avg` divisor).
    pub nranks: usize,
    /// Elements the send buffer must hold.
    pub send_count: usize,
    /// Elements the receive buffer must hold.
    pub recv_count: usize,
    /// Elements of working memory the plan uses as its receive buffer on a
    /// rank whose call has none (an inner rank of a binomial reduce, which
    /// combines several children's partial results): the runtime supplies a
    /// temporary buffer of this size there. 0 for every other plan.
    pub work_count: usize,
    /// The signature every slot of the call carries
    /// ([`super::signature::of`]): computed once, when the plan is built,
    /// and read by every run of it.
    pub signature: u64,
    /// The steps, in execution order.
    pub steps: Vec<DataStep>,
}
