//! Multi-node `streamcomm-run`: several launchers, one job.
//!
//! First on this host (two launchers as nodes 0 and 1, the root on
//! 127.0.0.1), then across pretend hosts made of network namespaces
//! ([`netns`]), where node 1 reaches node 0's bootstrap root only over the
//! bridge. The ranks are `sh -c` scripts (environment checks) or this test
//! binary itself, running one of the `*_entry_point` tests below (bootstrap
//! only, or a communicator with an all-reduce and a barrier).

use crate::common;
use crate::netns;

use std::process::{Command, Output};
use std::time::Duration;

use common::unused_port as free_port;
use netns::{Netns, host_addr, launcher as launcher_path, ready_or_skip, run_all, text};
use rand::{Rng, SeedableRng};
use streamcomm::host::{HostBuffer, HostStream};
use streamcomm::launch::detect_from_process_env;
use streamcomm::testing::bootstrap::Bootstrap;
use streamcomm::{Communicator, ReduceOp};

const LIMIT: Duration = Duration::from_secs(90);
/// Set in the environment of ranks that run `bootstrap_entry_point`.
const BOOT_CHILD: &str = "STREAMCOMM_NODES_TEST_BOOTSTRAP";
/// Set in the environment of ranks that run `communicator_entry_point`.
const COMM_CHILD: &str = "STREAMCOMM_NODES_TEST_COMM";
/// A secret for jobs that set one.
const SECRET: &str = "00112233445566778899aabbccddeeff";
/// Prints what a rank was told; checked by [`check_env_lines`].
const ECHO: &str = "echo env $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $NODE_RANK \
                    $GROUP_RANK $GROUP_WORLD_SIZE $MASTER_ADDR $MASTER_PORT \
                    ${STREAMCOMM_UNIQUE_ID%/*}";

/// `streamcomm-run` on this host with `args` and `env`.
fn launcher(args: &[String], env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(launcher_path());
    cmd.args(args).envs(env.iter().copied());
    cmd
}

/// Launcher arguments of node `k` of `nodes` with `n` ranks each.
fn node_args(
    nodes: usize,
    k: usize,
    master: &str,
    port: u16,
    n: usize,
    rest: &[&str],
) -> Vec<String> {
    let mut words: Vec<String> = [
        "--nnodes".to_string(),
        nodes.to_string(),
        "--node-rank".into(),
        k.to_string(),
        "--master-addr".into(),
        master.into(),
        "--master-port".into(),
        port.to_string(),
        "-n".into(),
        n.to_string(),
        "--".into(),
    ]
    .to_vec();
    words.extend(rest.iter().map(|w| w.to_string()));
    words
}

/// The rank program: this test binary running only `entry`.
fn self_as_rank(entry: &str) -> Vec<String> {
    let exe = std::env::current_exe().expect("test binary path");
    let exe = exe.to_str().expect("UTF-8 path").to_string();
    [
        exe,
        "--exact".into(),
        streamcomm_testkit::test_path(module_path!(), entry),
        "--ignored".into(),
        "--nocapture".into(),
        "--test-threads=1".into(),
    ]
    .to_vec()
}

fn expect_success(out: &Output) -> String {
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "status {}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        text(&out.stderr)
    );
    stdout
}

/// Checks the `ECHO` lines of a job of `nodes` x `n` ranks rooted at `master:port`.
fn check_env_lines(stdout: &str, nodes: usize, n: usize, master: &str, port: u16) {
    let lines: Vec<&str> = stdout.lines().filter(|l| l.contains("] env ")).collect();
    assert_eq!(lines.len(), nodes * n, "{stdout}");
    for rank in 0..nodes * n {
        let (node, local) = (rank / n, rank % n);
        let want = format!(
            "[rank {rank}] env {rank} {} {local} {n} {node} {node} {nodes} {master} {port} {master}:{port}",
            nodes * n
        );
        assert!(
            lines.contains(&want.as_str()),
            "no line {want:?} in:\n{stdout}"
        );
    }
}

/// The line of `rank`'s output that contains `fragment` (a rank running
/// an entry point prints after libtest's `test NAME ... `).
fn rank_line<'a>(stdout: &'a str, rank: usize, fragment: &str) -> &'a str {
    let prefix = format!("[rank {rank}] ");
    stdout
        .lines()
        .find(|l| l.starts_with(&prefix) && l.contains(fragment))
        .unwrap_or_else(|| panic!("no {fragment:?} from rank {rank} in:\n{stdout}"))
}

/// Lines `rank R OK size=S hosts=H` of a communicator job, one per rank.
fn check_ok_lines(stdout: &str, size: usize, hosts: usize) {
    for rank in 0..size {
        rank_line(
            stdout,
            rank,
            &format!("rank {rank} OK size={size} hosts={hosts}"),
        );
    }
}

#[test]
fn two_launchers_on_one_host_make_one_job() {
    let port = free_port();
    let commands = (0..2)
        .map(|k| {
            launcher(
                &node_args(2, k, "127.0.0.1", port, 2, &["sh", "-c", ECHO]),
                &[],
            )
        })
        .collect();
    let out = run_all(commands, LIMIT).unwrap_or_else(|e| panic!("{e}"));
    let stdout = expect_success(&out);
    check_env_lines(&stdout, 2, 2, "127.0.0.1", port);
    // No STREAMCOMM_SECRET: every node says the secret is weak.
    let stderr = text(&out.stderr);
    assert_eq!(
        stderr.matches("STREAMCOMM_SECRET is not set").count(),
        2,
        "{stderr}"
    );
}

#[test]
fn a_communicator_spans_two_launchers() {
    let port = free_port();
    let rank = self_as_rank("communicator_entry_point");
    let rank: Vec<&str> = rank.iter().map(String::as_str).collect();
    let env = [(COMM_CHILD, "1"), ("STREAMCOMM_SECRET", SECRET)];
    let commands = (0..2)
        .map(|k| launcher(&node_args(2, k, "127.0.0.1", port, 2, &rank), &env))
        .collect();
    let out = run_all(commands, LIMIT).unwrap_or_else(|e| panic!("{e}"));
    let stdout = expect_success(&out);
    check_ok_lines(&stdout, 4, 1);
    assert!(!text(&out.stderr).contains("STREAMCOMM_SECRET is not set"));
}

#[test]
fn a_failing_rank_on_one_node_fails_its_launcher() {
    let port = free_port();
    let script = "if [ $RANK = 3 ]; then exit 3; fi";
    let commands = (0..2)
        .map(|k| {
            launcher(
                &node_args(2, k, "127.0.0.1", port, 2, &["sh", "-c", script]),
                &[],
            )
        })
        .collect();
    let out = run_all(commands, LIMIT).unwrap_or_else(|e| panic!("{e}"));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("rank 3 exited with status 3"), "{stderr}");
}

#[test]
fn hosts_gives_the_node_its_rank() {
    // 203.0.113.0/24 is for documentation: not this host, so 127.0.0.1 is node 1.
    let port = free_port().to_string();
    let args = [
        "--hosts",
        "203.0.113.1,127.0.0.1",
        "--master-port",
        &port,
        "-n",
        "2",
        "sh",
        "-c",
        ECHO,
    ];
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let out = run_all(vec![launcher(&args, &[])], LIMIT).unwrap_or_else(|e| panic!("{e}"));
    let stdout = expect_success(&out);
    for local in 0..2 {
        let rank = 2 + local;
        let want = format!(
            "[rank {rank}] env {rank} 4 {local} 2 1 1 2 203.0.113.1 {port} 203.0.113.1:{port}"
        );
        assert!(
            stdout.lines().any(|l| l == want),
            "no {want:?} in:\n{stdout}"
        );
    }
}

/// Launcher options, environment, and the message they must be refused with.
type Refusal = (
    &'static [&'static str],
    &'static [(&'static str, &'static str)],
    &'static str,
);

#[test]
fn bad_node_setups_are_refused() {
    let cases: [Refusal; 4] = [
        (
            &["--hosts", "203.0.113.1,203.0.113.2"],
            &[],
            "none of --hosts is an address of this host",
        ),
        (
            &[
                "--nnodes",
                "2",
                "--node-rank",
                "0",
                "--master-addr",
                "203.0.113.1",
            ],
            &[],
            "is not an address of this host",
        ),
        (
            &[
                "--nnodes",
                "2",
                "--node-rank",
                "1",
                "--master-addr",
                "127.0.0.1",
            ],
            &[("STREAMCOMM_SECRET", "not-hex")],
            "STREAMCOMM_SECRET (value not shown) is not a secret (has the wrong length); expected exactly 32 hex digits",
        ),
        (
            &["--nnodes", "2", "--master-addr", "127.0.0.1"],
            &[],
            "needs --node-rank",
        ),
    ];
    for (options, env, message) in cases {
        let mut args: Vec<String> = options.iter().map(|a| a.to_string()).collect();
        args.extend(["-n", "1", "true"].map(String::from));
        let out = run_all(vec![launcher(&args, env)], LIMIT).unwrap_or_else(|e| panic!("{e}"));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{options:?}: {stderr}");
        assert!(stderr.contains(message), "{options:?}: {stderr}");
    }
}

#[test]
fn a_job_that_overruns_is_stopped() {
    let port = free_port();
    let commands = (0..2)
        .map(|k| {
            launcher(
                &node_args(2, k, "127.0.0.1", port, 1, &["sleep", "60"]),
                &[],
            )
        })
        .collect();
    let start = std::time::Instant::now();
    let err = run_all(commands, Duration::from_secs(1)).expect_err("overran");
    assert!(err.contains("did not end within"), "{err}");
    // SIGTERM reached the launchers, which stopped their ranks.
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    assert!(err.contains("interrupted by signal 15"), "{err}");
}

#[test]
fn launchers_meet_across_namespaces() {
    if !ready_or_skip("launchers_meet_across_namespaces") {
        return;
    }
    let net = Netns::up(2).unwrap_or_else(|e| panic!("{e}"));
    // The environment, with --hosts: each node finds its own index.
    let out = net
        .run_launchers(
            2,
            &|_| {
                [
                    "--hosts",
                    "10.233.0.1,10.233.0.2",
                    "--master-port",
                    "29400",
                    "-n",
                    "2",
                    "sh",
                    "-c",
                    ECHO,
                ]
                .map(String::from)
                .to_vec()
            },
            &[],
            LIMIT,
        )
        .unwrap_or_else(|e| panic!("{e}"));
    check_env_lines(&expect_success(&out), 2, 2, "10.233.0.1", 29400);
    // The bootstrap: node 1's ranks join the root node 0's launcher serves.
    let rank = self_as_rank("bootstrap_entry_point");
    let args: Vec<&str> = rank[1..].iter().map(String::as_str).collect();
    let env = [(BOOT_CHILD, "1"), ("STREAMCOMM_SECRET", SECRET)];
    let out = net
        .run_job(2, 2, rank[0].as_ref(), &args, &env, LIMIT)
        .unwrap_or_else(|e| panic!("{e}"));
    let stdout = expect_success(&out);
    let want = format!("gathered 0@0,1@0,2@1,3@1 root {}:29500", host_addr(0));
    for rank in 0..4 {
        rank_line(&stdout, rank, &want);
    }
}

#[test]
fn a_communicator_spans_namespaces() {
    if !ready_or_skip("a_communicator_spans_namespaces") {
        return;
    }
    let net = Netns::up(2).unwrap_or_else(|e| panic!("{e}"));
    let rank = self_as_rank("communicator_entry_point");
    let args: Vec<&str> = rank[1..].iter().map(String::as_str).collect();
    let env = [(COMM_CHILD, "1"), ("STREAMCOMM_SECRET", SECRET)];
    let out = net
        .run_job(2, 2, rank[0].as_ref(), &args, &env, LIMIT)
        .unwrap_or_else(|e| panic!("{e}"));
    // Two namespaces are two hosts: host identity includes the netns.
    check_ok_lines(&expect_success(&out), 4, 2);
}

/// A rank that all-gathers `rank@node` through the bootstrap; does nothing
/// unless started by a test above.
#[test]
#[ignore = "entry point of the child processes"]
fn bootstrap_entry_point() {
    if std::env::var_os(BOOT_CHILD).is_none() {
        return;
    }
    let info = detect_from_process_env().expect("launcher environment");
    let node = std::env::var("NODE_RANK").expect("NODE_RANK");
    let id = info.root.unique_id();
    let mut boot =
        Bootstrap::connect(&id, info.rank, info.size, Duration::from_secs(60)).expect("connect");
    let all = boot
        .all_gather(format!("{}@{node}", info.rank).as_bytes())
        .expect("all_gather");
    let all: Vec<String> = all.iter().map(|b| text(b)).collect();
    println!("gathered {} root {}", all.join(","), id.addr());
}

/// A rank that all-reduces random `f64`s, checks them against an all-gather
/// reference, runs a host barrier and prints `rank R OK size=S hosts=H`;
/// does nothing unless started by a test above.
#[test]
#[ignore = "entry point of the child processes"]
fn communicator_entry_point() {
    if std::env::var_os(COMM_CHILD).is_none() {
        return;
    }
    const COUNT: usize = 10_007;
    let comm = Communicator::from_env().expect("communicator from the environment");
    let (rank, size) = (comm.rank(), comm.size());
    let stream = HostStream::new().expect("stream");
    let mut rng =
        rand::rngs::StdRng::seed_from_u64(streamcomm_testkit::seed() ^ (rank as u64) << 32);
    let input: Vec<f64> = (0..COUNT).map(|_| rng.gen_range(-1.0..1.0)).collect();
    let send = HostBuffer::from_slice(&input);
    let mut everyone = HostBuffer::<f64>::zeroed(COUNT * size);
    let mut sum = HostBuffer::<f64>::zeroed(COUNT);
    comm.all_gather(&send, &mut everyone, &stream)
        .expect("all_gather");
    comm.all_reduce(&send, &mut sum, ReduceOp::Sum, &stream)
        .expect("all_reduce");
    stream.synchronize().expect("synchronize");
    let (all, got) = (everyone.to_vec(), sum.to_vec());
    assert_eq!(
        &all[rank * COUNT..(rank + 1) * COUNT],
        &input[..],
        "rank {rank}: own slot"
    );
    for (i, &g) in got.iter().enumerate() {
        let want: f64 = (0..size).map(|r| all[r * COUNT + i]).sum();
        assert!(
            (g - want).abs() <= 1e-12 * size as f64,
            "rank {rank}: [{i}] = {g}, want {want}"
        );
    }
    comm.barrier_host().expect("barrier_host");
    println!("rank {rank} OK size={size} hosts={}", comm.num_hosts());
}
