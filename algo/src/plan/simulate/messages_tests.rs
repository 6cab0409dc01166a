//! Unit tests of the simulator's own failure reports (the algorithm matrix
//! lives in `core/tests/sim/plans.rs`).

use super::messages::*;
use crate::Error;
use crate::plan::step::Region;
use crate::plan::step::{DataStep, Plan};
use crate::plan::{Collective, PlanParams, build};
use streamcomm_kernels::{DataType, ReduceOp};

/// A hand-written plan of two-element `U8` buffers for `rank` of `nranks`.
fn plan(collective: Collective, rank: usize, nranks: usize, steps: Vec<DataStep>) -> Plan {
    Plan {
        collective,
        dtype: DataType::U8,
        op: ReduceOp::Sum,
        rank,
        nranks,
        send_count: 2,
        recv_count: 2,
        work_count: 0,
        signature: 0,
        steps,
    }
}

/// Hand-written plans of a two-rank call: `steps[r]` is rank `r`'s plan.
fn two_rank_plans(collective: Collective, steps: [Vec<DataStep>; 2]) -> Vec<Plan> {
    steps
        .into_iter()
        .enumerate()
        .map(|(rank, steps)| plan(collective, rank, 2, steps))
        .collect()
}

/// Zeroed two-element inputs for both ranks of a two-rank call.
fn two_zeroed_inputs() -> Vec<Vec<u8>> {
    vec![vec![0; 2], vec![0; 2]]
}

/// The plans the builder makes for every rank of an `nranks`-rank call.
fn built_plans(
    collective: Collective,
    op: ReduceOp,
    count: usize,
    nranks: usize,
    slot_bytes: usize,
) -> Vec<Plan> {
    (0..nranks)
        .map(|rank| {
            let p = PlanParams {
                rank,
                nranks,
                slot_bytes,
                nsteps: 1,
            };
            build(collective, DataType::U8, op, count, &p).unwrap()
        })
        .collect()
}

/// Rank 0 sends its two elements to rank 1, which receives `recv_len` of them.
fn send_two_recv(recv_len: usize) -> Vec<Plan> {
    two_rank_plans(
        Collective::AllReduce,
        [
            vec![DataStep::send(1, Region::send(0, 2))],
            vec![DataStep::recv(0, Region::recv(0, recv_len))],
        ],
    )
}

#[test]
fn runs_a_small_all_reduce() {
    let plans = built_plans(Collective::AllReduce, ReduceOp::Sum, 4, 3, 1);
    let inputs = vec![vec![1, 2, 3, 4], vec![10, 20, 30, 40], vec![0, 1, 0, 1]];
    for nsteps in [1, 2, 8] {
        let out = simulate(&plans, inputs.clone(), false, nsteps, 1).unwrap();
        assert!(out.iter().all(|o| o == &[11, 23, 33, 45]), "{out:?}");
        let out = simulate(&plans, inputs.clone(), true, nsteps, 1).unwrap();
        assert!(out.iter().all(|o| o == &[11, 23, 33, 45]), "{out:?}");
    }
}

#[test]
fn reports_a_deadlock_naming_each_rank() {
    let plans = two_rank_plans(
        Collective::AllReduce,
        [
            vec![DataStep::wait(1), DataStep::signal(1)],
            vec![DataStep::wait(0), DataStep::signal(0)],
        ],
    );
    let err = simulate(&plans, two_zeroed_inputs(), false, 1, 4).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(&err, MessageSimError::Deadlock { stuck } if stuck.len() == 2),
        "{msg}"
    );
    assert!(
        msg.contains("rank 0 at step 0") && msg.contains("no slot from rank 1"),
        "{msg}"
    );
}

#[test]
fn full_rings_block_and_deadlock() {
    // Both ranks send twice before receiving: fine with 2 slots, a deadlock with 1.
    let steps = |peer| {
        vec![
            DataStep::signal(peer),
            DataStep::signal(peer),
            DataStep::wait(peer),
            DataStep::wait(peer),
        ]
    };
    let plans = two_rank_plans(Collective::Barrier, [steps(1), steps(0)]);
    assert!(simulate(&plans, two_zeroed_inputs(), false, 2, 4).is_ok());
    let err = simulate(&plans, two_zeroed_inputs(), false, 1, 4).unwrap_err();
    assert!(err.to_string().contains("is full"), "{err}");
}

#[test]
fn reports_undelivered_slots() {
    let plans = two_rank_plans(Collective::AllReduce, [vec![DataStep::signal(1)], vec![]]);
    let err = simulate(&plans, two_zeroed_inputs(), false, 1, 4).unwrap_err();
    assert_eq!(
        err.to_string(),
        "undelivered slots at the end: 1 slot(s) from rank 0 to rank 1"
    );
}

#[test]
fn mismatched_lengths_fail_the_step() {
    let plans = send_two_recv(1);
    let err = simulate(&plans, two_zeroed_inputs(), false, 1, 4).unwrap_err();
    assert!(
        matches!(
            &err,
            MessageSimError::Step {
                rank: 1,
                source: Error::RemoteFailed { peer: 0, .. },
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn oversized_steps_and_bad_setups_are_reported() {
    let plans = send_two_recv(2);
    assert!(matches!(
        simulate(&plans, two_zeroed_inputs(), false, 1, 1),
        Err(MessageSimError::SlotOverflow { bytes: 2, .. })
    ));
    assert!(matches!(
        simulate(&plans, vec![vec![0; 2]], false, 1, 4),
        Err(MessageSimError::Setup(_))
    ));
    assert!(matches!(
        simulate(&plans, vec![vec![0; 3], vec![0; 2]], false, 1, 4),
        Err(MessageSimError::Setup(_))
    ));
    assert!(matches!(
        simulate(&plans, two_zeroed_inputs(), false, 0, 4),
        Err(MessageSimError::Setup(_))
    ));
}

#[test]
fn random_schedules_are_reproducible_and_complete() {
    let plans = built_plans(Collective::AllReduce, ReduceOp::Max, 23, 5, 2);
    let inputs: Vec<Vec<u8>> = (0..5u8)
        .map(|r| (0..23u8).map(|i| i.wrapping_mul(7) ^ r).collect())
        .collect();
    let want: Vec<u8> = (0..23)
        .map(|i| inputs.iter().map(|v| v[i]).max().unwrap())
        .collect();
    for seed in 0..20 {
        let config = MessageSimConfig {
            in_place: seed % 2 == 0,
            nsteps: 1,
            slot_bytes: 2,
            schedule: Schedule::Random { seed },
        };
        let out = simulate_with(&plans, inputs.clone(), &config).unwrap();
        assert!(out.iter().all(|o| o == &want), "seed {seed}");
    }
}

#[test]
fn laggard_schedules_complete_and_check_the_laggard() {
    let plans = built_plans(Collective::AllGather, ReduceOp::Sum, 2, 4, 1);
    let inputs: Vec<Vec<u8>> = (0..4u8).map(|r| vec![r, 10 + r]).collect();
    let want = [0, 10, 1, 11, 2, 12, 3, 13];
    let seed = streamcomm_testkit::seed();
    for rank in 0..4 {
        let mut config = MessageSimConfig {
            in_place: false,
            nsteps: 1,
            slot_bytes: 1,
            schedule: Schedule::Laggard { rank, seed },
        };
        let out = simulate_with(&plans, inputs.clone(), &config).unwrap();
        assert!(out.iter().all(|o| o == &want), "seed {seed} laggard {rank}");
        config.schedule = Schedule::Laggard { rank: 4, seed };
        match simulate_with(&plans, inputs.clone(), &config) {
            Err(MessageSimError::Setup(msg)) => assert!(msg.contains("laggard rank 4"), "{msg}"),
            other => panic!("expected Setup, got {other:?}"),
        }
    }
}
