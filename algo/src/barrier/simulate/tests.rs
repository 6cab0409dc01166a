//! Unit tests of the flag simulator: every barrier algorithm under every
//! schedule, and the simulator's own failure reports (the N = 1..=64
//! matrix lives in `core/tests/sim/barrier.rs`).

use super::memory::SimMemory;
use super::*;
use crate::Error;
use crate::barrier::exec::run;
use crate::barrier::{
    BarrierAlgo, BarrierMemory, BarrierPlan, Epoch, FlagStep, MAX_EPOCH, Word, build,
    build_for_network, wait_for,
};

fn plans(algo: BarrierAlgo, n: usize) -> Vec<BarrierPlan> {
    let hosts: Vec<usize> = (0..n).map(|r| r % 3).collect();
    (0..n).map(|r| build(algo, r, n, &hosts).unwrap()).collect()
}

fn config(schedule: Schedule) -> FlagSimConfig {
    FlagSimConfig {
        epochs: 4,
        schedule,
    }
}

const SCHEDULES: [Schedule; 4] = [
    Schedule::RoundRobin,
    Schedule::Random { seed: 1 },
    Schedule::Laggard { rank: 0, seed: 2 },
    Schedule::Laggard { rank: 4, seed: 3 },
];

#[test]
fn every_algorithm_passes_small() {
    for algo in crate::barrier::flag_algos() {
        for schedule in SCHEDULES {
            let stats = simulate(&plans(algo, 7), &config(schedule))
                .unwrap_or_else(|e| panic!("{algo} {schedule:?}: {e}"));
            assert!(stats.actions >= 7 * 4, "{algo} {schedule:?}");
        }
    }
}

#[test]
fn every_algorithm_passes_for_network_memory_reading_only_its_own_words() {
    for algo in crate::barrier::flag_algos() {
        let hosts: Vec<usize> = (0..7).map(|r| r % 3).collect();
        let p: Vec<BarrierPlan> = (0..7)
            .map(|r| build_for_network(algo, r, 7, &hosts).unwrap())
            .collect();
        for schedule in SCHEDULES {
            simulate(&p, &config(schedule)).unwrap_or_else(|e| panic!("{algo} {schedule:?}: {e}"));
        }
    }
    // The central counter's network plan waits on nothing but its own area.
    for r in 0..7 {
        let plan = build_for_network(BarrierAlgo::CentralCounter, r, 7, &[0; 7]).unwrap();
        assert!(plan.steps.iter().all(|s| match *s {
            FlagStep::WaitRelease { at } => at == r,
            s => !s.is_wait() || s.peer().is_none() || s.peer() == Some(r),
        }));
    }
}

#[test]
fn random_schedules_run_ahead() {
    let p = plans(BarrierAlgo::Dissemination, 8);
    let ahead: u64 = (0..8)
        .map(|seed| {
            simulate(&p, &config(Schedule::Random { seed }))
                .unwrap()
                .ahead
        })
        .sum();
    assert!(
        ahead > 0,
        "no schedule let a rank run into the next barrier"
    );
}

#[test]
fn skipped_wait_is_an_early_exit() {
    let mut p = plans(BarrierAlgo::Dissemination, 6);
    p[3].steps
        .retain(|s| !matches!(s, FlagStep::WaitFlag { round: 2, .. }));
    let caught = (0..6).any(|rank| {
        matches!(
            simulate(&p, &config(Schedule::Laggard { rank, seed: 5 })),
            Err(FlagSimError::EarlyExit { rank: 3, .. })
        )
    });
    assert!(caught);
}

#[test]
fn central_root_counting_short_is_an_early_exit() {
    let mut p = plans(BarrierAlgo::CentralCounter, 5);
    p[0].steps[0] = FlagStep::WaitCounter { count_per_epoch: 3 };
    let err = simulate(&p, &config(Schedule::Laggard { rank: 4, seed: 0 })).unwrap_err();
    match err {
        FlagSimError::EarlyExit { missing, .. } => assert_eq!(missing, vec![4]),
        other => panic!("expected EarlyExit, got {other}"),
    }
}

#[test]
fn missing_notify_is_a_deadlock_naming_the_word() {
    let mut p = plans(BarrierAlgo::Chain, 4);
    p[1].steps.retain(|s| !matches!(s, FlagStep::Notify { .. }));
    let err = simulate(&p, &config(Schedule::RoundRobin)).unwrap_err();
    let FlagSimError::Deadlock { stuck } = &err else {
        panic!("expected Deadlock, got {err}");
    };
    let two = stuck.iter().find(|s| s.rank == 2).unwrap();
    assert_eq!(two.epoch, 1);
    assert_eq!(two.waiting_for.unwrap().word, Word::Flag { src: 1 });
    assert!(err.to_string().contains("flag from rank 1"), "{err}");
}

#[test]
fn rounds_going_backwards_are_a_regression() {
    // Rank 0 notifies rank 1 in round 1, then round 0: a backwards store.
    let mut p = plans(BarrierAlgo::Dissemination, 2);
    p[0].steps.insert(0, FlagStep::Notify { peer: 1, round: 1 });
    let err = simulate(&p, &config(Schedule::RoundRobin)).unwrap_err();
    assert!(
        matches!(err, FlagSimError::Regression { writer: 0, .. }),
        "{err}"
    );
}

#[test]
fn rejects_bad_setups() {
    let setup = |p: &[BarrierPlan], c: FlagSimConfig| match simulate(p, &c) {
        Err(FlagSimError::Setup(msg)) => msg,
        other => panic!("expected Setup, got {other:?}"),
    };
    assert!(setup(&[], config(Schedule::RoundRobin)).contains("no plans"));
    let p = plans(BarrierAlgo::Chain, 3);
    let bad = config(Schedule::Laggard { rank: 3, seed: 0 });
    assert!(setup(&p, bad).contains("laggard rank 3"));
    let mut swapped = p.clone();
    swapped.swap(0, 1);
    assert!(setup(&swapped, config(Schedule::RoundRobin)).contains("plans[0]"));
    let mut mixed = p.clone();
    mixed[2] = build(BarrierAlgo::Dissemination, 2, 3, &[0; 3]).unwrap();
    assert!(setup(&mixed, config(Schedule::RoundRobin)).contains("dissemination"));
    let mut far = p;
    far[1].steps.push(FlagStep::Release { peer: 9 });
    assert!(setup(&far, config(Schedule::RoundRobin)).contains("beyond 3"));
}

#[test]
fn zero_epochs_do_nothing() {
    let stats = simulate(
        &plans(BarrierAlgo::Chain, 3),
        &FlagSimConfig {
            epochs: 0,
            schedule: Schedule::RoundRobin,
        },
    )
    .unwrap();
    assert_eq!(stats, SimStats::default());
}

#[test]
fn executor_runs_when_nothing_blocks_and_errors_on_bad_epochs() {
    let mem = SimMemory::new(2);
    let p = plans(BarrierAlgo::CentralFlags, 2);
    // Rank 1 arrives; rank 0 then finds everything ready and releases.
    assert!(
        run(&p[1], Epoch::uniform(1), &mem).is_err(),
        "rank 1 would have to block"
    );
    assert_eq!(mem.load_flag(0, 1), 256);
    run(&p[0], Epoch::uniform(1), &mem).unwrap();
    assert_eq!(mem.load_release(1), 256);
    run(&p[1], Epoch::uniform(1), &mem).unwrap();
    let dynamic: &dyn BarrierMemory = &mem;
    for epoch in [0, MAX_EPOCH + 1] {
        match run(&p[0], Epoch::uniform(epoch), dynamic) {
            Err(Error::InvalidArgument(msg)) => assert!(msg.contains(&epoch.to_string())),
            other => panic!("epoch {epoch}: {other:?}"),
        }
    }
}

#[test]
fn counter_target_overflow_is_an_error() {
    let step = FlagStep::WaitCounter {
        count_per_epoch: u64::MAX,
    };
    assert!(matches!(
        wait_for(0, &step, Epoch::uniform(2)),
        Err(Error::InvalidArgument(m)) if m.contains("overflows")
    ));
}

#[test]
fn the_counter_target_follows_the_counter_epoch() {
    let step = FlagStep::WaitCounter { count_per_epoch: 3 };
    // Barrier 5, the second to use the counter: two barriers' arrivals.
    let on = wait_for(
        0,
        &step,
        Epoch {
            number: 5,
            counter: 2,
        },
    )
    .unwrap()
    .unwrap();
    assert_eq!((on.owner, on.word, on.target), (0, Word::Counter, 6));
    let refused = |number, counter| {
        matches!(
            wait_for(0, &step, Epoch { number, counter }),
            Err(Error::InvalidArgument(m)) if m.contains("counter epoch")
        )
    };
    assert!(refused(2, 3), "a counter epoch above the barrier's");
    assert!(refused(2, 0), "a counter wait in no counter barrier");
}
