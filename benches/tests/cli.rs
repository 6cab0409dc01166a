//! End-to-end runs of the built `streamcomm-bench` with two local ranks
//! (the bootstrap's, with up to 320 rank processes).
//!
//! Each run starts real rank processes through the benchmark's own
//! launcher, checks the exit status and parses the JSON it writes to stdout.
//! A watchdog kills a run that hangs, so a library deadlock fails the test
//! in seconds instead of stalling CI.

use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

mod support;

/// Longest a run may take (they take a second or two).
const WATCHDOG: Duration = Duration::from_secs(90);

/// One benchmark at a time: ranks spin, and two jobs on a small machine
/// would measure each other (and the machine-limit measurement, whose two
/// threads spin too, would crawl).
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs the benchmark's `command_line` with `--json -`, returning its
/// parsed stdout.
fn run_bench(command_line: &str) -> Value {
    run_bench_with(command_line, &[])
}

/// Runs the benchmark's `command_line` with `--json -` and the environment
/// variables `envs`, returning its parsed stdout.
fn run_bench_with(command_line: &str, envs: &[(&str, &str)]) -> Value {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let mut command = support::bench(command_line, envs);
    command.args(["--json", "-"]);
    let out = streamcomm_testkit::run_limited(command, WATCHDOG);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "streamcomm-bench {command_line} failed ({}):\n{stderr}\n{stdout}",
        out.status
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!("stdout of {command_line} is not JSON ({e}):\n{stdout}\nstderr:\n{stderr}")
    })
}

#[test]
fn all_reduce_sweep_is_correct() {
    let doc = run_bench("all_reduce -b 8 -e 64K -f 8 -n 2 -w 1 -c 1 --ranks 2");
    assert_eq!(doc["collective"], "all_reduce");
    assert_eq!(doc["ranks"], 2);
    assert_eq!(doc["dtype"], "f32");
    assert_eq!(doc["op"], "sum");
    let rows = doc["rows"].as_array().expect("rows");
    // 8, 64, 512, 4K, 32K bytes.
    let sizes: Vec<u64> = rows
        .iter()
        .map(|r| r["bytes"].as_u64().expect("bytes"))
        .collect();
    assert_eq!(sizes, [8, 64, 512, 4096, 32768]);
    for row in rows {
        assert_eq!(row["wrong"], 0, "{row}");
        assert_eq!(
            row["count"].as_u64(),
            Some(row["bytes"].as_u64().unwrap() / 4)
        );
        assert!(row["time_us"].as_f64().expect("time") > 0.0, "{row}");
        // Two ranks: busbw = algbw * 2(n-1)/n = algbw.
        assert_eq!(row["busbw"], row["algbw"]);
    }
    assert_eq!(doc["wrong_total"], 0);
    assert!(doc["machine"]["memcpy_gbps"].as_f64().expect("memcpy") > 0.0);
    assert_eq!(doc["machine"]["measured_by"], "launcher");
    assert_eq!(doc["barrier"].as_array().map(Vec::len), Some(0));
    // Two ranks of one host talk through shared memory: no raw tcp figures.
    assert_eq!(doc["machine"]["transport_to_rank1"], "shm");
    assert!(doc["machine"]["tcp"].is_null());
    assert!(doc["vs_tcp"].is_null());
}

#[test]
fn all_reduce_over_tcp_reports_raw_tcp() {
    let doc = run_bench_with(
        "all_reduce -b 8 -e 1M -f 32 -n 2 -w 1 -c 1 --ranks 2",
        // 1 MiB per raw bandwidth run instead of 256 MiB.
        &[
            ("STREAMCOMM_TRANSPORT", "tcp"),
            ("STREAMCOMM_BENCH_TCP_BYTES", "1M"),
        ],
    );
    assert_eq!(doc["wrong_total"], 0);
    let rows = doc["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 4, "8 B, 256 B, 8 KiB, 256 KiB");
    let machine = &doc["machine"];
    assert_eq!(machine["transport_to_rank1"], "tcp");
    let tcp = &machine["tcp"];
    let positive = |k: &str| {
        let v = tcp[k].as_f64().unwrap_or_else(|| panic!("tcp.{k}: {tcp}"));
        assert!(v > 0.0 && v.is_finite(), "tcp.{k} = {v}");
        v
    };
    assert!(positive("round_trip_us") <= positive("round_trip_p99_us"));
    let (single, multi) = (
        positive("single_socket_gbps"),
        positive("multi_socket_gbps"),
    );
    assert_eq!(positive("best_gbps"), single.max(multi));
    assert_eq!(tcp["bytes"], 1 << 20);
    assert_eq!(tcp["sockets"], machine["tcp_sockets"]);
    for row in rows {
        assert!(row["busbw_vs_tcp"].as_f64().is_some(), "{row}");
    }
    assert_eq!(doc["vs_tcp"]["largest_bytes"], 256 << 10);
    assert!(
        doc["vs_tcp"]["busbw_vs_tcp_at_largest"]
            .as_f64()
            .expect("ratio")
            > 0.0
    );
}

#[test]
fn barrier_reports_percentiles() {
    let doc = run_bench("barrier --ranks 2 --barrier-iters 200 --algo ALL");
    assert_eq!(doc["collective"], "barrier");
    assert_eq!(doc["ranks"], 2);
    assert_eq!(doc["rows"].as_array().map(Vec::len), Some(0));
    let results = doc["barrier"].as_array().expect("barrier results");
    // Every algorithm but multicast, which shared memory cannot run (the
    // benchmark says so and goes on).
    assert_eq!(
        results.len(),
        streamcomm::barrier::BarrierAlgo::ALL.len() - 1
    );
    for result in results {
        check_barrier(result);
    }
    assert!(doc["machine"]["c2c_round_trip_us"].as_f64().expect("c2c") > 0.0);
}

fn check_barrier(result: &serde_json::Value) {
    assert!(result["algo"].is_string(), "{result}");
    for (flavour, iters) in [("host", 200), ("stream", 40)] {
        let stats = &result[flavour];
        assert_eq!(stats["iters"], iters, "{flavour}");
        for view in ["rank0", "slowest"] {
            let p = &stats[view];
            let get = |k: &str| {
                p[k].as_f64()
                    .unwrap_or_else(|| panic!("{flavour}.{view}.{k}: {p}"))
            };
            assert!(get("p50") > 0.0);
            assert!(
                get("p50") <= get("p99") && get("p99") <= get("p999") && get("p999") <= get("max")
            );
        }
        assert!(stats["slowest"]["max"].as_f64() >= stats["rank0"]["max"].as_f64());
    }
}

#[test]
fn wrong_arguments_fail_cleanly() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let command = support::bench("broadcast -r 5 --ranks 2", &[]);
    let out = streamcomm_testkit::run_limited(command, WATCHDOG);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("-r 5"));
}

#[test]
fn sendrecv_with_fewer_latency_iterations_than_percentiles_need() {
    // `--latency-iters` below 3 used to panic (a clamp with min > max);
    // the table then takes the 3 samples its percentiles need.
    let doc = run_bench("sendrecv -b 8 -e 64 -f 8 -n 2 -w 1 --latency-iters 1 --ranks 2");
    let rows = doc["sendrecv"].as_array().expect("sendrecv rows");
    assert_eq!(rows.len(), 2, "{doc}");
    for row in rows {
        assert_eq!(row["latency_iters"], 3, "{row}");
        assert_eq!(row["wrong"], 0, "{row}");
        assert!(row["latency"]["p50"].as_f64().expect("p50") > 0.0, "{row}");
    }
    assert_eq!(doc["wrong_total"], 0);
}

#[test]
fn init_reports_creation_and_each_ranks_footprint() {
    let doc = run_bench("init --ranks 2 --bytes 256K --pair-bytes 4K");
    assert_eq!(doc["ranks"], 2);
    let create = doc["create_us"]["max"].as_u64().expect("create_us");
    assert!(create > 0 && create >= doc["create_us"]["median"].as_u64().unwrap());
    let stages = doc["stages"].as_array().expect("stages");
    let names: Vec<&str> = stages
        .iter()
        .map(|s| s["after"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["created", "all_reduce", "all_gather", "all_to_all"]);
    for s in stages {
        let (rss, shmem) = (
            s["rss_kb"]["max"].as_u64().unwrap(),
            s["shmem_kb"]["max"].as_u64().unwrap(),
        );
        assert!(rss > 0 && shmem > 0 && shmem <= rss, "{s}");
        assert!(s["fds"]["max"].as_u64().unwrap() >= 3, "{s}");
        assert!(s["threads"]["max"].as_u64().unwrap() >= 1, "{s}");
    }
}

#[test]
fn the_bootstrap_root_takes_320_ranks_joining_at_once() {
    // More than the root's 256 handshakes in flight: the rest wait in the
    // listener's backlog (they were refused, each rank told "wrong secret").
    let doc = run_bench("bootstrap --ranks 320 --rounds 2");
    assert_eq!(doc["ranks"], 320);
    // Its listener and one connection per rank, sampled while all are joined.
    let sockets = doc["root"]["sockets"].as_u64().expect("sockets");
    assert!((160..=321).contains(&sockets), "{doc}");
    assert_eq!(doc["rounds_us"].as_array().expect("rounds").len(), 2);
    // By the protocol: the root writes each rank its 9 all-gather peers
    // once (a 9-byte head and 19 bytes a peer) and a 5-byte release each
    // of the 2 rounds. Each rank sends 9 frames a round (an 8-byte length
    // each) carrying 319 records (4 + 256 bytes).
    let written = 320.0 * (9.0 + 19.0 * 9.0) + 2.0 * 320.0 * 5.0;
    assert_eq!(doc["root"]["written"], written, "{doc}");
    assert_eq!(doc["rank_per_round"]["frames"], 9.0);
    assert_eq!(
        doc["rank_per_round"]["sent_bytes"],
        9.0 * 8.0 + 319.0 * 260.0
    );
}

/// The hard limit on open files here, from the shell.
fn hard_fd_limit() -> u64 {
    let out = Command::new("sh")
        .args(["-c", "ulimit -Hn"])
        .output()
        .expect("sh");
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if text == "unlimited" {
        u64::MAX
    } else {
        text.parse().expect("a number")
    }
}

/// Runs `streamcomm-bench bootstrap --ranks 128` under `limits` (a
/// `ulimit` command line); returns whether it succeeded, its stderr and
/// how long it took.
fn bootstrap_under(limits: &str) -> (bool, String, Duration) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let started = Instant::now();
    let out = Command::new("sh")
        .args(["-c", &format!("{limits} && exec \"$0\" \"$@\"")])
        .arg(env!("CARGO_BIN_EXE_streamcomm-bench"))
        .args(["bootstrap", "--ranks", "128", "--timeout", "60"])
        .stdin(Stdio::null())
        .output()
        .expect("start sh");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.success(), stderr, started.elapsed())
}

#[test]
fn a_root_out_of_descriptors_tells_every_rank_at_once() {
    // 100 descriptors, soft and hard: the root (one socket per rank) runs out.
    let (ok, stderr, took) = bootstrap_under("ulimit -n 100");
    assert!(!ok, "{stderr}");
    let told = stderr
        .lines()
        .filter(|l| {
            l.contains("join the bootstrap root") && l.contains("ran out of file descriptors")
        })
        .count();
    assert_eq!(told, 128, "every rank names the cause:\n{stderr}");
    assert!(
        stderr.contains("the bootstrap root's process ran out of file descriptors"),
        "{stderr}"
    );
    // Not after the rendezvous timeout (60 s) as before.
    assert!(took < Duration::from_secs(30), "took {took:?}");
}

#[test]
fn a_root_raises_its_soft_descriptor_limit_when_it_runs_out() {
    if hard_fd_limit() < 400 {
        streamcomm_testkit::skip(
            "a_root_raises_its_soft_descriptor_limit_when_it_runs_out",
            "the hard limit on open files is under 400 here",
        );
        return;
    }
    let (ok, stderr, _) = bootstrap_under("ulimit -Sn 100");
    assert!(ok, "{stderr}");
}
