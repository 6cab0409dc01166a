//! What a communicator keeps resident, read from `/proc/self/status` in
//! real rank processes: a rank maps every local peer's segment, and only
//! the rings it uses may become resident (its ring neighbours' at
//! creation, others when first used); over tcp, a rank's local rings
//! become resident as they are used, not at creation. Every rank checks
//! its own figures against ceilings derived from the ring size, far below
//! what a full mesh of touched rings holds (here 8 x 7 rings of 4 MiB,
//! 224 MiB, over shared memory; 2 x 3 rings, 24 MiB, over tcp). A
//! shared-memory budget shrinks every rank's slots alike, and collectives
//! stay correct on them.

use crate::harness;
use crate::harness::scenario::{SCENARIO, checked_all_reduce, launch_scenario, status_kb};

use std::time::Duration;

use streamcomm::{Communicator, ReduceOp};

/// The default ring: 4 MiB of slots (`STREAMCOMM_BUFFSIZE`).
const RING_KB: u64 = 4 << 10;

fn launch(n: usize, scenario: &str, extra: &[(&str, &str)]) {
    let mut env = vec![("STREAMCOMM_TIMEOUT", "60"), ("STREAMCOMM_BUFFSIZE", "4M")];
    env.extend_from_slice(extra);
    launch_scenario(module_path!(), n, scenario, &env, Duration::from_secs(300));
}

#[test]
fn shared_memory_holds_the_rings_a_rank_uses_not_every_pair() {
    launch(8, "shm", &[("STREAMCOMM_TRANSPORT", "shm")]);
}

#[test]
fn a_shared_memory_budget_shrinks_every_ranks_slots_alike() {
    launch(4, "budget", &[("STREAMCOMM_SHM_BUDGET", "1M")]);
}

#[test]
fn tcp_rings_become_resident_as_they_are_used() {
    launch(4, "tcp", &[("STREAMCOMM_TRANSPORT", "tcp")]);
}

#[test]
#[ignore = "entry point of the child processes"]
fn child() {
    let Ok(scenario) = std::env::var(SCENARIO) else {
        return;
    };
    let anon_before = status_kb("RssAnon");
    let comm = Communicator::from_env().unwrap();
    let rank = comm.rank();
    if scenario == "budget" {
        // Three inbound rings of 8 slots in 1 MiB: slots of whole 64 bytes
        // under (1 MiB / 3 - ring header) / 8 - slot header.
        let slot = comm.config().slot_bytes();
        assert_eq!(slot, (((1 << 20) / 3 - 256) / 8 - 64) & !63, "rank {rank}");
        assert_eq!(comm.config().buffsize, 8 * slot);
        // Every collective, every element checked, on the shrunk slots
        // (one element, and several slots a call).
        let stream = streamcomm::host::HostStream::new().unwrap();
        harness::run_thin_slice(
            &comm,
            &stream,
            streamcomm_testkit::seed(),
            &[ReduceOp::Sum, ReduceOp::Max],
        );
        drop(comm);
        streamcomm_testkit::child_ran();
        return;
    }
    // 1 MiB each: several passes through a neighbour's 4 MiB ring.
    checked_all_reduce(&comm, 1 << 18);
    comm.barrier_host().unwrap();
    match scenario.as_str() {
        "shm" => {
            // Its ring neighbours' rings both ways (4), headers and flag
            // areas: at most 5 rings' worth.
            let shmem = status_kb("RssShmem");
            eprintln!("rank {rank}: RssShmem {shmem} kB");
            assert!(
                shmem <= 5 * RING_KB,
                "rank {rank}: {shmem} kB of shared memory resident, more than the 5 rings \
                 ({} kB) that a ring all-reduce touches",
                5 * RING_KB
            );
        }
        "tcp" => {
            // Staging and inbound rings of its ring neighbours (4), and
            // the library's own bookkeeping: at most 5 rings' worth.
            let grown = status_kb("RssAnon").saturating_sub(anon_before);
            eprintln!("rank {rank}: RssAnon grew by {grown} kB");
            assert!(
                grown <= 5 * RING_KB,
                "rank {rank}: {grown} kB of anonymous memory became resident, more than the \
                 5 rings ({} kB) that a ring all-reduce touches",
                5 * RING_KB
            );
        }
        other => panic!("unknown scenario {other}"),
    }
    drop(comm);
    streamcomm_testkit::child_ran();
}
