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

use super::step::{Collective, Plan};

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
        Collective::Send { .. } | Collective::Recv { .. } => (6, 0),
        Collective::Barrier => (7, 0),
    };
    let reduces = matches!(
        plan.collective,
        Collective::AllReduce | Collective::ReduceScatter | Collective::Reduce { .. }
    );
    let op = if reduces { plan.op as u64 + 1 } else { 0 };
    let count = plan.send_count.max(plan.recv_count) as u64 & ((1 << 36) - 1);
    (1 << 63)
        | (kind as u64) << 59
        | ((root as u64) & 0xffff) << 43
        | (plan.dtype as u64) << 39
        | op << 35
        | (count >> 1)
        | (count & 1) << 62
}

/// A human description of a signature, for error messages.
pub fn describe(sig: u64) -> String {
    if sig >> 63 == 0 {
        return "an unsigned slot".to_string();
    }
    let kind = KINDS[((sig >> 59) & 0x7) as usize];
    let root = (sig >> 43) & 0xffff;
    let dtype = DataType::from_u8(((sig >> 39) & 0xf) as u8).map_or("?", |d| d.name());
    let op = match (sig >> 35) & 0xf {
        0 => String::new(),
        o => ReduceOp::from_u8((o - 1) as u8).map_or("?".into(), |o| format!(" {o}")),
    };
    let count = ((sig & ((1 << 35) - 1)) << 1) | ((sig >> 62) & 1);
    let root = match kind {
        "broadcast" | "reduce" => format!(" root {root}"),
        _ => String::new(),
    };
    format!("{kind}{root} of {count} {dtype}{op}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{build, PlanParams};

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
    fn differs_by_call_and_describes_it() {
        let base = sig(Collective::AllReduce, DataType::F32, ReduceOp::Sum, 1000);
        assert_eq!(describe(base), "all_reduce of 1000 f32 sum");
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
            steps: Vec::new(),
        };
        assert_eq!(
            describe(of(&big)),
            format!("broadcast root 3 of {} bf16", (1u64 << 36) - 1)
        );
        // Non-reducing calls ignore the operator; send and recv pair up.
        assert_eq!(
            sig(Collective::AllGather, DataType::U8, ReduceOp::Sum, 5),
            sig(Collective::AllGather, DataType::U8, ReduceOp::Max, 5)
        );
        let p0 = PlanParams {
            rank: 0,
            nranks: 2,
            slot_bytes: 64,
            nsteps: 2,
        };
        let p1 = PlanParams { rank: 1, ..p0 };
        let send = build(
            Collective::Send { peer: 1 },
            DataType::I64,
            ReduceOp::Sum,
            9,
            &p0,
        )
        .unwrap();
        let recv = build(
            Collective::Recv { peer: 0 },
            DataType::I64,
            ReduceOp::Sum,
            9,
            &p1,
        )
        .unwrap();
        assert_eq!(of(&send), of(&recv));
        assert_eq!(describe(0), "an unsigned slot");
    }
}
