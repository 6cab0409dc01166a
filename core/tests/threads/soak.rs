//! Soak test (ignored by default): a long random mix of collectives and
//! barriers on 4 ranks (threads), every result checked.
//!
//! Each operation is drawn from a seed all ranks share: one of the
//! collectives (all-reduce, all-gather, reduce-scatter, broadcast, reduce,
//! all-to-all) with a random dtype/operator, count (mostly small, sometimes
//! several ring buffers) and placement (in or out of place), or a barrier
//! (stream or host). Collective outputs are poisoned first and every element
//! is compared with an f64 reference; after each barrier a rank checks that
//! every rank had arrived at it.
//!
//! ```text
//! cargo test --release -p streamcomm --test threads -- --ignored soak::    # 1,000,000 operations
//! STREAMCOMM_SOAK_OPS=2000 cargo test -p streamcomm --test threads -- --ignored soak::
//! STREAMCOMM_TRANSPORT=tcp STREAMCOMM_SOAK_OPS=2000 cargo test -p streamcomm --test threads -- --ignored soak::
//! ```
//! It prints the seed (replay with `STREAMCOMM_TEST_SEED`) and the rate.

use crate::common;
use crate::harness;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use streamcomm::Collective;
use streamcomm::host::HostStream;
use streamcomm::{Communicator, Config};

use common::DTYPE_OPS;
use harness::{Case, collectives, reduces, run_case, run_threads};

const RANKS: usize = 4;

fn ops_wanted() -> u64 {
    match std::env::var("STREAMCOMM_SOAK_OPS") {
        Ok(v) => v
            .trim()
            .parse()
            .expect("STREAMCOMM_SOAK_OPS must be a number"),
        Err(_) => 1_000_000,
    }
}

/// A count: mostly tiny, sometimes a few slots, rarely several ring buffers.
fn random_count(rng: &mut StdRng, config: &Config) -> usize {
    match rng.gen_range(0..100) {
        0..=69 => rng.gen_range(0..=64),
        70..=94 => rng.gen_range(65..=2 * config.slot_bytes()),
        _ => rng.gen_range(0..=3 * config.buffsize),
    }
}

/// The shared sequence of operations (as rank `comm.rank()` runs it).
fn soak_rank(comm: &Communicator, seed: u64, ops: u64, arrived: &AtomicU64) -> u64 {
    let stream = HostStream::new().unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let all = collectives(comm.size());
    let mut barriers = 0u64;
    for i in 0..ops {
        if comm.rank() == 0 && i > 0 && i % (ops / 10).max(1) == 0 {
            eprintln!("soak: {i} of {ops} operations");
        }
        if rng.gen_range(0..4) == 0 {
            // Barrier: count this rank in, then all must be in once it returns.
            arrived.fetch_add(1, Ordering::SeqCst);
            if rng.gen_bool(0.5) {
                comm.barrier(&stream).unwrap();
                stream.synchronize().unwrap();
            } else {
                comm.barrier_host().unwrap();
            }
            barriers += 1;
            let n = arrived.load(Ordering::SeqCst);
            assert!(
                n >= barriers * RANKS as u64,
                "op {i}: rank {} passed barrier {barriers} with only {n} arrivals",
                comm.rank()
            );
            continue;
        }
        let collective = all[rng.gen_range(0..all.len())];
        let (dtype, op) = DTYPE_OPS[rng.gen_range(0..DTYPE_OPS.len())];
        let case = Case {
            collective,
            dtype,
            op: if reduces(collective) {
                op
            } else {
                streamcomm::ReduceOp::Sum
            },
            count: random_count(&mut rng, comm.config()),
            in_place: collective != Collective::AllToAll && rng.gen_bool(0.5),
            seed: rng.r#gen(),
        };
        run_case(comm, &stream, &case).unwrap_or_else(|e| panic!("op {i}: {e}"));
    }
    barriers
}

#[test]
#[ignore = "soak: long; run with --ignored (STREAMCOMM_SOAK_OPS sets the length)"]
fn soak() {
    let ops = ops_wanted();
    let seed = streamcomm_testkit::seed();
    let config = {
        let mut c = Config::from_env().unwrap();
        c.buffsize = 8 << 10;
        c.nsteps = 4;
        c.timeout = Duration::from_secs(60);
        c
    };
    let arrived = Arc::new(AtomicU64::new(0));
    let t0 = Instant::now();
    let limit = Duration::from_secs(120) + Duration::from_millis(2 * ops);
    let barriers = run_threads(RANKS, config, limit, move |comm| {
        soak_rank(&comm, seed, ops, &arrived)
    });
    let took = t0.elapsed();
    assert!(barriers.iter().all(|&b| b == barriers[0]));
    eprintln!(
        "soak: {ops} operations ({} barriers) on {RANKS} ranks in {took:.2?}: {:.0} ops/s",
        barriers[0],
        ops as f64 / took.as_secs_f64()
    );
}
