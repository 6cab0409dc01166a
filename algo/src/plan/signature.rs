//! Call signatures: what a slot says about the call that sent it.
//!
//! Every slot carries, beside its length, a 64-bit signature of the call
//! that produced it: which collective (and root), element type, operator and
//! element count. The receiver compares it with its own call's before using
//! the data, so ranks that called different collectives, types, operators or
//! counts at the same point get an error naming both calls instead of
//! corrupted results. The cost is one store and one compare per slot.
//!
//! The signature is packed, not hashed, so an error can say what the peer
//! called: kind (3 bits), root (16), dtype (4), op (4), count (36).

use streamcomm_kernels::{DataType, ReduceOp};

use super::step::Plan;
use streamcomm_types::{CallDesc, Collective, Error, Mismatch, MismatchNote};

const KINDS: [&str; 8] = [
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "broadcast",
    "reduce",
    "all_to_all",
    "send/recv",
    "barrier",
];

/// The signature of `plan`'s call (never 0: a zeroed slot header is unsigned).
pub fn of(plan: &Plan) -> u64 {
    let (kind, root) = match plan.collective {
        Collective::AllReduce => (0, 0),
        Collective::AllGather => (1, 0),
        Collective::ReduceScatter => (2, 0),
        Collective::Broadcast { root } => (3, root),
        Collective::Reduce { root } => (4, root),
        Collective::AllToAll => (5, 0),
        Collective::Barrier => (7, 0),
    };
    let reduces = matches!(
        plan.collective,
        Collective::AllReduce | Collective::ReduceScatter | Collective::Reduce { .. }
    );
    let op = if reduces { plan.op as u64 + 1 } else { 0 };
    let count = plan.send_count.max(plan.recv_count) as u64;
    pack(kind, root as u64, plan.dtype, op, count)
}

/// What a point-to-point slot carries (`docs/design/p2p.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum P2pSlot {
    /// Eager: the message's bytes, one slot-sized piece per slot.
    Eager = 0,
    /// Rendezvous request to send: the message is too large for eager.
    ReadyToSend = 1,
    /// Rendezvous data streamed through the ring (when the sender cannot
    /// write into the receiver's memory directly).
    Data = 2,
    /// Rendezvous done: the whole message is in the receiver's buffer.
    Done = 3,
    /// Rendezvous data that the receiver's proxy already placed in the
    /// receive buffer (never sent: the receiving side marks the slot).
    Placed = 4,
}

impl P2pSlot {
    const ALL: [P2pSlot; 5] = [
        P2pSlot::Eager,
        P2pSlot::ReadyToSend,
        P2pSlot::Data,
        P2pSlot::Done,
        P2pSlot::Placed,
    ];

    fn name(self) -> &'static str {
        match self {
            P2pSlot::Eager => "eager",
            P2pSlot::ReadyToSend => "rendezvous",
            P2pSlot::Data => "rendezvous data",
            P2pSlot::Done => "rendezvous end",
            P2pSlot::Placed => "rendezvous data, placed",
        }
    }
}

const P2P_KIND: u64 = 6;

/// The signature of a point-to-point slot of a message of `count` elements
/// of `dtype` (kind `send/recv`; the root field says which slot it is).
#[inline]
pub fn p2p(slot: P2pSlot, dtype: DataType, count: usize) -> u64 {
    pack(P2P_KIND, slot as u64, dtype, 0, count as u64)
}

/// Decodes a point-to-point signature: which slot, the element type and the
/// message's element count; `None` for any other signature.
#[inline]
pub fn parse_p2p(sig: u64) -> Option<(P2pSlot, Option<DataType>, u64)> {
    if sig >> 63 == 0 || (sig >> 59) & 0x7 != P2P_KIND {
        return None;
    }
    let slot = *P2pSlot::ALL.get(((sig >> 43) & 0xffff) as usize)?;
    let dtype = DataType::from_u8(((sig >> 39) & 0xf) as u8);
    Some((slot, dtype, unpack_count(sig)))
}

#[inline]
fn pack(kind: u64, root: u64, dtype: DataType, op: u64, count: u64) -> u64 {
    let count = count & ((1 << 36) - 1);
    (1 << 63)
        | kind << 59
        | (root & 0xffff) << 43
        | (dtype as u64) << 39
        | op << 35
        | (count >> 1)
        | (count & 1) << 62
}

#[inline]
fn unpack_count(sig: u64) -> u64 {
    ((sig & ((1 << 35) - 1)) << 1) | ((sig >> 62) & 1)
}

/// The root field of an all-gather's signature that says it is the
/// exchange of `Communicator::split`.
const SPLIT_ROOT: u64 = 0x5917;

/// The signature of the exchange a split makes: an all-gather of `count`
/// `u64` words per rank, told apart from a user's all-gather.
pub fn split(count: usize) -> u64 {
    pack(1, SPLIT_ROOT, DataType::U64, 0, count as u64)
}

/// The root field of the signature [`recv`] makes: no slot carries it.
const RECV_SLOT: u64 = 0xffff;

/// The signature that stands for a receive of up to `count` elements of
/// `dtype` in a mismatch record (never sent in a slot).
#[inline]
pub fn recv(dtype: DataType, count: usize) -> u64 {
    pack(P2P_KIND, RECV_SLOT, dtype, 0, count as u64)
}

/// The call a signature describes.
pub fn call(sig: u64) -> CallDesc {
    let kind = ((sig >> 59) & 0x7) as usize;
    let root = (sig >> 43) & 0xffff;
    let dtype = DataType::from_u8(((sig >> 39) & 0xf) as u8);
    let reduce = match (sig >> 35) & 0xf {
        0 => None,
        o => ReduceOp::from_u8((o - 1) as u8),
    };
    let op = match KINDS[kind] {
        "send/recv" if root == RECV_SLOT => "recv",
        "send/recv" => "send",
        "all_gather" if root == SPLIT_ROOT => "split",
        k => k,
    };
    let root = matches!(op, "broadcast" | "reduce").then_some(root as usize);
    CallDesc::decoded(op, dtype, reduce, unpack_count(sig), root, sig)
}

/// The [`Error::Mismatch`] that `note` tells, seen from `rank` during `op`
/// (`ours`: this rank's own call, when it was in a collective).
pub fn mismatch_error(
    op: &str,
    rank: usize,
    note: MismatchNote,
    ours: Option<u64>,
    confirmed: bool,
) -> Error {
    Error::Mismatch(Box::new(Mismatch::between(
        op.to_string(),
        rank,
        (note.suspect, call(note.suspect_sig)),
        (note.witness, call(note.witness_sig)),
        ours.map(call),
        confirmed,
    )))
}

/// A human description of a signature, for error messages.
pub fn describe(sig: u64) -> String {
    if sig >> 63 == 0 {
        return "an unsigned slot".to_string();
    }
    match parse_p2p(sig) {
        Some((slot, ..)) => format!("{} ({})", call(sig), slot.name()),
        None => call(sig).to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{PlanParams, build};

    fn sig(c: Collective, dtype: DataType, op: ReduceOp, count: usize) -> u64 {
        let p = PlanParams {
            rank: 0,
            nranks: 4,
            slot_bytes: 64,
            nsteps: 2,
        };
        of(&build(c, dtype, op, count, &p).unwrap())
    }

    #[test]
    fn a_built_plan_carries_its_calls_signature() {
        let p = PlanParams {
            rank: 1,
            nranks: 3,
            slot_bytes: 64,
            nsteps: 2,
        };
        let mut seen = Vec::new();
        for c in crate::plan::data_collectives(0, 2) {
            for count in [0, 5] {
                let plan = build(c, DataType::F32, ReduceOp::Max, count, &p).unwrap();
                assert_eq!(plan.signature, of(&plan), "{c}, count {count}");
                assert_ne!(plan.signature, 0, "{c}, count {count}");
                seen.push(plan.signature);
            }
        }
        let n = seen.len();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), n, "two calls signed alike");
    }

    #[test]
    fn differs_by_call_and_describes_it() {
        let base = sig(Collective::AllReduce, DataType::F32, ReduceOp::Sum, 1000);
        assert_eq!(describe(base), "all_reduce(f32, sum, 1000)");
        let c = call(base);
        assert_eq!(
            (c.op, c.dtype, c.reduce, c.count, c.root),
            (
                "all_reduce",
                Some(DataType::F32),
                Some(ReduceOp::Sum),
                1000,
                None
            )
        );
        let r = call(recv(DataType::I32, 77));
        assert_eq!((r.op, r.count), ("recv", 77));
        assert_eq!(r.to_string(), "recv(i32, up to 77)");
        assert_eq!(parse_p2p(recv(DataType::I32, 77)), None);
        for other in [
            sig(Collective::AllReduce, DataType::F32, ReduceOp::Max, 1000),
            sig(Collective::AllReduce, DataType::I32, ReduceOp::Sum, 1000),
            sig(Collective::AllReduce, DataType::F32, ReduceOp::Sum, 1001),
            sig(
                Collective::Broadcast { root: 1 },
                DataType::F32,
                ReduceOp::Sum,
                1000,
            ),
            sig(
                Collective::Reduce { root: 0 },
                DataType::F32,
                ReduceOp::Sum,
                1000,
            ),
        ] {
            assert_ne!(other, base, "{}", describe(other));
        }
        let big = Plan {
            collective: Collective::Broadcast { root: 3 },
            dtype: DataType::Bf16,
            op: ReduceOp::Avg,
            rank: 0,
            nranks: 4,
            send_count: 0,
            recv_count: (1 << 36) - 1,
            work_count: 0,
            signature: 0,
            steps: Vec::new(),
        };
        assert_eq!(
            describe(of(&big)),
            format!("broadcast(bf16, {}, root 3)", (1u64 << 36) - 1)
        );
        // Non-reducing calls ignore the operator; send and recv pair up.
        assert_eq!(
            sig(Collective::AllGather, DataType::U8, ReduceOp::Sum, 5),
            sig(Collective::AllGather, DataType::U8, ReduceOp::Max, 5)
        );
        let eager = p2p(P2pSlot::Eager, DataType::I64, 9);
        assert_eq!(describe(eager), "send(i64, 9) (eager)");
        assert_eq!(
            parse_p2p(eager),
            Some((P2pSlot::Eager, Some(DataType::I64), 9))
        );
        let rts = p2p(P2pSlot::ReadyToSend, DataType::U8, (1 << 36) - 1);
        assert_eq!(
            parse_p2p(rts),
            Some((P2pSlot::ReadyToSend, Some(DataType::U8), (1 << 36) - 1))
        );
        assert_ne!(eager, p2p(P2pSlot::Done, DataType::I64, 9));
        assert_eq!(parse_p2p(base), None);
        assert_eq!(describe(0), "an unsigned slot");
    }
}
