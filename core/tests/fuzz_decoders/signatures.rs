//! Slot signatures: read from every slot header (shared memory and tcp).

use super::*;

/// One call: collective, element type, operator, count, and the ranks.
type Call = (Collective, DataType, ReduceOp, usize, PlanParams);

/// Any call on up to 8 ranks (not all of them valid).
fn call() -> BoxedStrategy<Call> {
    (1usize..9, 0usize..8, 0usize..(1 << 20))
        .prop_flat_map(|(nranks, pick, count)| {
            let rank = 0..nranks;
            (Just((nranks, pick, count)), rank, 0..nranks)
        })
        .prop_flat_map(|((nranks, pick, count), rank, root)| {
            let collective = match pick {
                0 => Collective::AllReduce,
                1 => Collective::AllGather,
                2 => Collective::ReduceScatter,
                3 => Collective::Broadcast { root },
                4 => Collective::Reduce { root },
                5 => Collective::AllToAll,
                _ => Collective::Barrier,
            };
            let params = PlanParams {
                rank,
                nranks,
                slot_bytes: 1 << 20,
                nsteps: 8,
            };
            (
                Just(collective),
                prop::sample::select(DataType::ALL.to_vec()),
                prop::sample::select(ReduceOp::ALL.to_vec()),
                Just(count),
                Just(params),
            )
        })
        .boxed()
}

/// What a signature must tell apart: collective kind and root, element
/// type, operator (for reductions only) and count.
fn call_identity(c: &Call, sent: usize) -> (String, DataType, Option<ReduceOp>, usize) {
    let (collective, dtype, op, _, _) = c;
    let reduces = matches!(
        collective,
        Collective::AllReduce | Collective::ReduceScatter | Collective::Reduce { .. }
    );
    let kind = format!("{collective:?}");
    (kind, *dtype, reduces.then_some(*op), sent)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn signature_describe_arbitrary(sig in any::<u64>()) {
        let text = signature::describe(sig);
        prop_assert!(!text.is_empty());
        if sig >> 63 == 0 {
            prop_assert_eq!(text, "an unsigned slot");
        }
    }

    #[test]
    fn p2p_signatures_round_trip(kind in 0usize..5, dtype in prop::sample::select(DataType::ALL.to_vec()), count in 0usize..(1 << 36)) {
        let slot = [P2pSlot::Eager, P2pSlot::ReadyToSend, P2pSlot::Data, P2pSlot::Done, P2pSlot::Placed][kind];
        let sig = signature::p2p(slot, dtype, count);
        prop_assert_eq!(signature::parse_p2p(sig), Some((slot, Some(dtype), count as u64)));
        let text = signature::describe(sig);
        prop_assert!(text.starts_with(&format!("send({dtype}, {count}) (")), "{}", text);
    }

    #[test]
    fn p2p_parse_arbitrary(sig in any::<u64>()) {
        // Never panics; a collective's signature is never taken for p2p.
        if let Some((_, _, count)) = signature::parse_p2p(sig) {
            prop_assert!(count < (1 << 36));
            prop_assert!(signature::describe(sig).starts_with("send("));
        }
    }

    #[test]
    fn signature_describes_its_call(c in call()) {
        let (collective, dtype, op, count, params) = c;
        // Not every call is valid (e.g. uneven reduce-scatter counts).
        if let Ok(plan) = build(collective, dtype, op, count, &params) {
            let sig = signature::of(&plan);
            prop_assert!(sig >> 63 == 1, "signature {:#x} looks unsigned", sig);
            let text = signature::describe(sig);
            let n = plan.send_count.max(plan.recv_count);
            if matches!(collective, Collective::Barrier) {
                prop_assert_eq!(text, "barrier");
            } else {
                // e.g. `all_reduce(f32, sum, 1000)`, `broadcast(u8, 7, root 2)`
                prop_assert!(text.contains(&format!("({dtype}")), "{}", text);
                prop_assert!(
                    text.contains(&format!(", {n})")) || text.contains(&format!(", {n}, root")),
                    "{}",
                    text
                );
            }
        }
    }

    #[test]
    fn signatures_tell_calls_apart(a in call(), other in call(), how in 0u8..6) {
        // b is a with one thing changed (or a itself on another rank, or an
        // unrelated call), so that equal identities come up often.
        let mut b = a;
        match how {
            0 => b.4.rank = other.4.rank % a.4.nranks,
            1 => b.1 = other.1,
            2 => b.2 = other.2,
            3 => b.3 = other.3,
            4 => b.0 = other.0,
            _ => b = other,
        }
        let pa = build(a.0, a.1, a.2, a.3, &a.4);
        let pb = build(b.0, b.1, b.2, b.3, &b.4);
        if let (Ok(pa), Ok(pb)) = (pa, pb) {
            let ia = call_identity(&a, pa.send_count.max(pa.recv_count));
            let ib = call_identity(&b, pb.send_count.max(pb.recv_count));
            let (sa, sb) = (signature::of(&pa), signature::of(&pb));
            prop_assert_eq!(
                ia == ib,
                sa == sb,
                "{:?} -> {} vs {:?} -> {}",
                ia,
                signature::describe(sa),
                ib,
                signature::describe(sb)
            );
        }
    }
}
