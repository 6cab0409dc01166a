//! Algorithm selection on live communicators (ranks as threads): forced
//! choices are used and reported, the model's choice is the same on every
//! rank, and ranks that disagree on `STREAMCOMM_ALGO` fail at creation.

use crate::harness;

use std::sync::mpsc;
use std::time::Duration;

use streamcomm::bootstrap::UniqueId;
use streamcomm::config::AlgoOverride;
use streamcomm::config::HostsOverride;
use streamcomm::host::HostStream;
use streamcomm::{Algorithm, Collective};
use streamcomm::{Communicator, DataType, Error, ReduceOp};

#[test]
fn forced_and_modelled_choices_are_reported_and_run() {
    let config = {
        let mut c = harness::small_config();
        c.algo = AlgoOverride::parse("all_reduce=halving_doubling,broadcast=binomial").unwrap();
        c
    };
    let results = harness::run_threads(5, config, Duration::from_secs(60), |comm| {
        let f32s = DataType::F32;
        assert_eq!(
            comm.algorithm(Collective::AllReduce, f32s, 1000),
            Some(Algorithm::HalvingDoubling)
        );
        assert_eq!(
            comm.algorithm(Collective::Broadcast { root: 1 }, f32s, 7),
            Some(Algorithm::Binomial)
        );
        assert_eq!(comm.algorithm(Collective::Barrier, f32s, 0), None);
        let t = comm.predict(Collective::AllGather, Algorithm::Bruck, f32s, 100);
        assert!(t.is_some_and(|t| t > 0.0), "{t:?}");
        assert_eq!(
            comm.predict(Collective::AllGather, Algorithm::Tree, f32s, 100),
            None
        );
        let stream = HostStream::new().unwrap();
        for (i, count) in [0, 1, 3000].into_iter().enumerate() {
            for collective in [Collective::AllReduce, Collective::Broadcast { root: 4 }] {
                let case = harness::Case {
                    collective,
                    dtype: DataType::I32,
                    op: ReduceOp::Sum,
                    count,
                    in_place: i % 2 == 1,
                    seed: 77 + i as u64,
                };
                harness::run_case(&comm, &stream, &case).unwrap();
            }
        }
        // The model's pick for all-gather, the same on every rank.
        comm.algorithm(Collective::AllGather, DataType::U8, 64)
    });
    assert!(results.iter().all(|a| *a == results[0] && a.is_some()));
}

#[test]
fn ranks_that_disagree_on_the_algorithm_fail_at_creation() {
    let id = UniqueId::new().unwrap();
    let (tx, rx) = mpsc::channel();
    for rank in 0..2 {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let algo = if rank == 0 { "tree" } else { "ring" };
            let config = {
                let mut c = harness::small_config();
                c.algo = AlgoOverride::parse(algo).unwrap();
                c
            };
            let r = Communicator::builder()
                .unique_id(&id)
                .rank(rank)
                .size(2)
                .config(config)
                .build();
            let _ = tx.send(r.err());
        });
    }
    for _ in 0..2 {
        let err = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("watchdog: creation hung");
        match err {
            Some(Error::InvalidArgument(msg)) => {
                assert!(msg.contains("STREAMCOMM_ALGO"), "{msg}")
            }
            other => panic!("expected an InvalidArgument, got {other:?}"),
        }
    }
}

#[test]
fn pretend_hosts_change_the_barriers_not_the_links_the_model_prices() {
    // STREAMCOMM_HOSTS_OVERRIDE splits 4 ranks of this machine into two
    // pretend hosts for the barriers' topology; their links stay shared
    // memory, so the model must price them as one host's, not as tcp.
    let predictions = |hosts_override: Option<&str>| {
        let config = {
            let mut c = harness::small_config();
            c.hosts_override = hosts_override.map(|o| HostsOverride::parse(o).unwrap());
            c
        };
        harness::run_threads(4, config, Duration::from_secs(60), |comm| {
            Algorithm::candidates(Collective::AllReduce)
                .iter()
                .map(|&a| comm.predict(Collective::AllReduce, a, DataType::F32, 1 << 10))
                .collect::<Vec<_>>()
        })
    };
    let (alone, pretend) = (predictions(None), predictions(Some("2")));
    assert_eq!(alone, pretend);
    assert!(
        alone.iter().all(|p| p.iter().all(|t| t.is_some())),
        "{alone:?}"
    );
}
