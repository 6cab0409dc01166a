//! Ranks on several "hosts": network namespaces joined by a bridge, 2 ranks
//! each, so shared memory inside a host and tcp between hosts, with traffic
//! really crossing veth interfaces. Every collective and the barrier, fresh
//! random data against f64 references; a 256 MiB all-reduce whose memory
//! stays bounded by the rings; a host whose ranks die mid-collective.
//!
//! Needs root and iproute2; skipped with a printed reason otherwise, except
//! under `CI=true`, where it must run.

use crate::harness;
use crate::netns;

use std::time::Duration;

use netns::{Netns, ready_or_skip};
use streamcomm::host::HostBuffer;
use streamcomm::{ReduceOp, Transport};

use crate::harness::scenario::SCENARIO;
const SEED: &str = "STREAMCOMM_TEST_SEED";
const SECRET: &str = "0123456789abcdef0123456789abcdef";
const LIMIT: Duration = Duration::from_secs(300);

fn job(hosts: usize, ranks_per_host: usize, scenario: &str, extra: &[(&str, &str)]) -> String {
    let net = Netns::up(hosts).unwrap_or_else(|e| panic!("{e}"));
    let exe = std::env::current_exe().unwrap();
    let seed = streamcomm_testkit::seed().to_string();
    let proof = streamcomm_testkit::ChildProof::new(scenario);
    let (proof_key, proof_dir) = proof.env();
    let args = streamcomm_testkit::child_args!("child");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut env = vec![
        (proof_key, proof_dir.as_str()),
        (SCENARIO, scenario),
        (SEED, seed.as_str()),
        ("STREAMCOMM_SECRET", SECRET),
        ("STREAMCOMM_TIMEOUT", "60"),
    ];
    env.extend_from_slice(extra);
    let out = net
        .run_job(hosts, ranks_per_host, &exe, &args, &env, LIMIT)
        .unwrap_or_else(|e| panic!("{e}"));
    let stdout = netns::text(&out.stdout);
    assert!(
        out.status.success(),
        "{scenario} failed:\n{stdout}\n{}",
        netns::text(&out.stderr)
    );
    proof.assert_ran(hosts * ranks_per_host);
    stdout
}

#[test]
#[ignore = "entry point of the child processes"]
fn child() {
    let Some((scenario, seed, comm, stream)) = harness::scenario::child(SCENARIO) else {
        return;
    };
    let (rank, n) = (comm.rank(), comm.size());
    let per_host = std::env::var("LOCAL_WORLD_SIZE")
        .unwrap()
        .parse::<usize>()
        .unwrap();
    // Same host (namespace): shared memory; other hosts: tcp.
    for p in (0..n).filter(|&p| p != rank) {
        let want = if p / per_host == rank / per_host {
            Transport::Shm
        } else {
            Transport::Tcp
        };
        assert_eq!(comm.transport_to(p), Some(want), "rank {rank} -> {p}");
    }
    match scenario.as_str() {
        "matrix" | "thin" => {
            let ops = [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Avg];
            if scenario == "matrix" {
                harness::run_slice(&comm, &stream, seed, &ops);
            } else {
                harness::run_thin_slice(&comm, &stream, seed, &ops);
            }
            for _ in 0..500 {
                comm.barrier_host().unwrap();
                comm.barrier(&stream).unwrap();
            }
            stream.synchronize().unwrap();
            println!("rank {rank}: {scenario} and 1000 barriers OK");
        }
        "big" => {
            // 256 MiB of f32 per rank; element i of rank r is (r + i) % 5.
            let count = 64 << 20;
            let input: Vec<f32> = (0..count).map(|i| ((rank + i) % 5) as f32).collect();
            let send = HostBuffer::from_slice(&input);
            drop(input);
            let mut recv = HostBuffer::<f32>::zeroed(count);
            recv.fill_bytes(0xff);
            let before = vm_hwm_mib();
            comm.all_reduce(&send, &mut recv, ReduceOp::Sum, &stream)
                .unwrap();
            stream.synchronize().unwrap();
            let after = vm_hwm_mib();
            recv.with(|got| {
                for (i, &g) in got.iter().enumerate() {
                    let want: usize = (0..n).map(|r| (r + i) % 5).sum();
                    assert_eq!(g, want as f32, "element {i}");
                }
            });
            // The collective itself may only add ring-sized memory, never a copy of the message.
            assert!(
                after - before < 64,
                "peak memory grew by {} MiB during a 256 MiB all_reduce",
                after - before
            );
            println!(
                "rank {rank}: 256 MiB all_reduce OK, peak memory +{} MiB",
                after - before
            );
        }
        other => panic!("unknown scenario {other}"),
    }
    comm.barrier_host().unwrap();
    streamcomm_testkit::child_ran();
}

/// Peak resident memory of this process, MiB.
fn vm_hwm_mib() -> i64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<i64>()
        .unwrap()
        / 1024
}

#[test]
fn collectives_across_two_and_three_hosts() {
    if !ready_or_skip("collectives_across_two_and_three_hosts") {
        return;
    }
    let small = [("STREAMCOMM_BUFFSIZE", "8K"), ("STREAMCOMM_NSTEPS", "4")];
    // The full slice on 2 hosts, a thin one on 3 (6 ranks on 2 cores).
    for (hosts, scenario) in [(2, "matrix"), (3, "thin")] {
        let out = job(hosts, 2, scenario, &small);
        assert_eq!(
            out.matches(&format!("{scenario} and 1000 barriers OK"))
                .count(),
            2 * hosts,
            "{out}"
        );
    }
}

#[test]
fn a_256_mib_all_reduce_across_hosts_stays_bounded() {
    if !ready_or_skip("a_256_mib_all_reduce_across_hosts_stays_bounded") {
        return;
    }
    let out = job(2, 2, "big", &[]);
    assert_eq!(out.matches("256 MiB all_reduce OK").count(), 4, "{out}");
}
