//! Every barrier algorithm, for every communicator size from 1 to 64 and
//! several host layouts, run by the plan simulator's flag part for consecutive
//! epochs under round-robin, random and laggard schedules; broken plans are
//! caught; and the executor runs every algorithm for real over atomics with
//! one thread per rank.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use streamcomm::Error;
use streamcomm::barrier::{BarrierAlgo, Inter};
use streamcomm::testing::wait::{Notifier, WaitPolicy};
use streamcomm_algo::barrier::{BarrierMemory, BarrierPlan, Epoch, FlagStep, WaitFor, build, run};
use streamcomm_algo::barrier::{FlagSimConfig, FlagSimError, Schedule, simulate};

const MAX_RANKS: usize = 64;
const EPOCHS: u64 = 5;
const LAGGARD_MAX_RANKS: usize = 64;

/// A named host layout: `layout(n)[r]` is rank r's host.
type Layout = (&'static str, fn(usize) -> Vec<usize>);

const LAYOUTS: [Layout; 4] = [
    ("one host", |n| vec![0; n]),
    ("one rank per host", |n| (0..n).collect()),
    // Hosts of 3, 2, 1, 3, 2, 1, ... ranks, contiguous: [0,0,0,1,1,2,3,...].
    ("uneven", |n| {
        let mut hosts = Vec::with_capacity(n);
        let mut host = 0;
        while hosts.len() < n {
            for _ in 0..[3, 2, 1][host % 3] {
                hosts.push(host);
            }
            host += 1;
        }
        hosts.truncate(n);
        hosts
    }),
    // Round-robin placement with sparse host ids: hosts are not contiguous.
    ("interleaved", |n| {
        (0..n).map(|r| 10 * (r % 3) + 7).collect()
    }),
];

/// Every algorithm configuration the matrix covers, with whether it
/// depends on the host layout.
fn algorithms() -> Vec<(BarrierAlgo, bool)> {
    let mut algos = vec![
        (BarrierAlgo::CentralCounter, false),
        (BarrierAlgo::CentralFlags, false),
        (BarrierAlgo::Chain, false),
        (BarrierAlgo::Dissemination, false),
        (BarrierAlgo::KWayDissemination { k: 2 }, false),
        (BarrierAlgo::KWayDissemination { k: 3 }, false),
    ];
    for fanout in [2, 3, 4, 8] {
        algos.push((BarrierAlgo::Tree { fanout }, true));
    }
    for inter in [
        Inter::Dissemination,
        Inter::Tree { fanout: 2 },
        Inter::Tree { fanout: 4 },
    ] {
        algos.push((BarrierAlgo::Hierarchical { inter }, true));
    }
    algos
}

/// Every algorithm of [`algorithms`] with each host layout it runs on:
/// every layout where it depends on them, the first alone elsewhere.
fn algorithm_layouts() -> Vec<(BarrierAlgo, Layout)> {
    algorithms()
        .into_iter()
        .flat_map(|(algo, uses_hosts)| {
            let layouts = if uses_hosts {
                &LAYOUTS[..]
            } else {
                &LAYOUTS[..1]
            };
            layouts.iter().map(move |&layout| (algo, layout))
        })
        .collect()
}

fn plans(algo: BarrierAlgo, hosts: &[usize]) -> Vec<BarrierPlan> {
    let n = hosts.len();
    (0..n)
        .map(|rank| build(algo, rank, n, hosts).unwrap_or_else(|e| panic!("{algo}: {e}")))
        .collect()
}

/// Round-robin, three random seeds, and two laggards picked per size.
fn schedules(n: usize) -> Vec<Schedule> {
    let mut s = vec![Schedule::RoundRobin];
    s.extend((1..=3).map(|seed| Schedule::Random { seed }));
    s.push(Schedule::Laggard {
        rank: n - 1,
        seed: 11,
    });
    s.push(Schedule::Laggard {
        rank: (n * 7 / 11) % n,
        seed: 12,
    });
    s
}

#[test]
fn every_algorithm_every_size_every_layout() {
    let mut ahead = 0;
    for (algo, (layout, hosts_of)) in algorithm_layouts() {
        for n in 1..=MAX_RANKS {
            let plans = plans(algo, &hosts_of(n));
            for schedule in schedules(n) {
                let config = FlagSimConfig {
                    epochs: EPOCHS,
                    schedule,
                };
                let stats = simulate(&plans, &config)
                    .unwrap_or_else(|e| panic!("{algo}, {layout}, n={n}, {schedule:?}: {e}"));
                ahead += stats.ahead;
            }
        }
    }
    assert!(
        ahead > 0,
        "no schedule ever ran a rank into the next barrier"
    );
}

/// Every rank as the laggard, every size: by the simulator's persistence
/// argument (see `streamcomm_algo::barrier`) this checks the barrier
/// property for every interleaving of the first `LAGGARD_EPOCHS` barriers.
#[test]
fn laggard_at_every_rank_is_exhaustive() {
    const LAGGARD_EPOCHS: u64 = 3;
    for (algo, (layout, hosts_of)) in algorithm_layouts() {
        for n in 2..=LAGGARD_MAX_RANKS {
            let plans = plans(algo, &hosts_of(n));
            for rank in 0..n {
                let config = FlagSimConfig {
                    epochs: LAGGARD_EPOCHS,
                    schedule: Schedule::Laggard { rank, seed: 3 },
                };
                if let Err(e) = simulate(&plans, &config) {
                    panic!("{algo}, {layout}, n={n}, laggard {rank}: {e}");
                }
            }
        }
    }
}

/// Every size's plans stay within the rounds of one epoch and name no rank
/// outside the communicator (the simulator would refuse them otherwise, but
/// say it directly), and every rank waits for something.
#[test]
fn plans_are_well_formed() {
    for (algo, _) in algorithms() {
        for (_, hosts_of) in &LAYOUTS {
            for n in 2..=MAX_RANKS {
                for plan in plans(algo, &hosts_of(n)) {
                    assert!(
                        plan.steps.iter().any(FlagStep::is_wait),
                        "{algo} n={n} rank {} never waits",
                        plan.rank
                    );
                    assert!(plan.steps.iter().all(|s| s.peer().is_none_or(|p| p < n)));
                }
            }
        }
    }
}

/// A rank that skips every wait leaves its barrier before the laggard
/// enters, whatever the algorithm: the checker catches it deterministically.
#[test]
fn a_rank_skipping_its_waits_is_caught() {
    let (layout, hosts_of) = LAYOUTS[2];
    for (algo, _) in algorithms() {
        for n in 2..=16 {
            for broken in 0..n {
                let mut plans = plans(algo, &hosts_of(n));
                plans[broken].steps.retain(|s| !s.is_wait());
                let laggard = (broken + 1) % n;
                let config = FlagSimConfig {
                    epochs: 2,
                    schedule: Schedule::Laggard {
                        rank: laggard,
                        seed: 1,
                    },
                };
                match simulate(&plans, &config) {
                    Err(FlagSimError::EarlyExit { missing, .. }) => {
                        assert!(missing.contains(&laggard), "{algo} n={n}")
                    }
                    other => {
                        panic!("{algo}, {layout}, n={n}, rank {broken} skips waits: {other:?}")
                    }
                }
            }
        }
    }
}

/// A rank that only waits (never signals) blocks everybody: a deadlock,
/// never an early exit.
#[test]
fn a_rank_that_never_signals_deadlocks() {
    for (algo, _) in algorithms() {
        let hosts = (LAYOUTS[2].1)(9);
        for broken in 0..9 {
            let mut plans = plans(algo, &hosts);
            plans[broken].steps.retain(FlagStep::is_wait);
            let config = FlagSimConfig {
                epochs: 2,
                schedule: Schedule::Random { seed: 4 },
            };
            match simulate(&plans, &config) {
                Err(FlagSimError::Deadlock { stuck }) => assert!(!stuck.is_empty()),
                other => panic!("{algo}, rank {broken} never signals: {other:?}"),
            }
        }
    }
}

/// One skipped wait deep inside an algorithm: rank 5 of a dissemination
/// barrier skips its last round. Some laggard exposes it.
#[test]
fn a_single_skipped_wait_is_caught() {
    let n = 11;
    let mut plans = plans(BarrierAlgo::Dissemination, &vec![0; n]);
    let last = plans[5].steps.iter().rposition(FlagStep::is_wait).unwrap();
    plans[5].steps.remove(last);
    let caught = (0..n).any(|rank| {
        let config = FlagSimConfig {
            epochs: 3,
            schedule: Schedule::Laggard { rank, seed: 9 },
        };
        matches!(
            simulate(&plans, &config),
            Err(FlagSimError::EarlyExit { rank: 5, .. })
        )
    });
    assert!(caught, "no laggard exposed rank 5's missing wait");
}

// ---------------------------------------------------------------------------
// The executor over real atomics, one thread per rank.

/// Barrier areas as atomics with one [`Notifier`] per area: the shape the
/// shared-memory implementation takes, minus the segment.
struct AtomicMemory {
    n: usize,
    words: Vec<AtomicU64>,
    notifiers: Vec<Notifier>,
}

impl AtomicMemory {
    fn new(n: usize) -> AtomicMemory {
        AtomicMemory {
            n,
            words: (0..n * (n + 2)).map(|_| AtomicU64::new(0)).collect(),
            notifiers: (0..n).map(|_| Notifier::new()).collect(),
        }
    }

    fn word(&self, owner: usize, index: usize) -> &AtomicU64 {
        &self.words[owner * (self.n + 2) + index]
    }
}

impl BarrierMemory for AtomicMemory {
    fn fetch_add_counter(&self, owner: usize, v: u64) {
        self.word(owner, 0).fetch_add(v, Ordering::AcqRel);
        self.notifiers[owner].notify();
    }

    fn store_flag(&self, owner: usize, src: usize, v: u64) {
        self.word(owner, 2 + src).store(v, Ordering::Release);
        self.notifiers[owner].notify();
    }

    fn store_release(&self, owner: usize, v: u64) {
        self.word(owner, 1).store(v, Ordering::Release);
        self.notifiers[owner].notify();
    }

    fn load_counter(&self, owner: usize) -> u64 {
        self.word(owner, 0).load(Ordering::Acquire)
    }

    fn load_flag(&self, owner: usize, src: usize) -> u64 {
        self.word(owner, 2 + src).load(Ordering::Acquire)
    }

    fn load_release(&self, owner: usize) -> u64 {
        self.word(owner, 1).load(Ordering::Acquire)
    }

    fn wait(&self, on: &WaitFor, ready: &dyn Fn() -> bool) -> Result<(), Error> {
        let policy = WaitPolicy::new(200, Duration::from_secs(60));
        self.notifiers[on.owner]
            .wait_until(&policy, || ready().then_some(()))
            .map_err(|e| Error::InvalidUsage(format!("waiting for {on}: {e:?}")))
    }
}

#[test]
fn executor_runs_every_algorithm_over_atomics() {
    const ITERS: u64 = 300;
    for (algo, _) in algorithms() {
        for n in [1, 2, 3, 6, 9] {
            let hosts = (LAYOUTS[2].1)(n);
            let mem = Arc::new(AtomicMemory::new(n));
            let arrived = Arc::new(AtomicU64::new(0));
            let start = Arc::new(Barrier::new(n));
            let threads: Vec<_> = plans(algo, &hosts)
                .into_iter()
                .map(|plan| {
                    let (mem, arrived, start) = (mem.clone(), arrived.clone(), start.clone());
                    std::thread::spawn(move || {
                        start.wait();
                        for epoch in 1..=ITERS {
                            arrived.fetch_add(1, Ordering::SeqCst);
                            run(&plan, Epoch::uniform(epoch), &*mem).unwrap();
                            let seen = arrived.load(Ordering::SeqCst);
                            assert!(
                                seen >= n as u64 * epoch,
                                "{algo} n={n}: rank {} left barrier {epoch} after {seen} arrivals",
                                plan.rank
                            );
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
        }
    }
}
