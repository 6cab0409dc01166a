//! `streamcomm-run` end to end: environment, prefixed output, failure
//! handling (with and without `--keep-going`) and argument errors, running
//! the real binary. (Multi-node jobs, which need core's test helpers for
//! network namespaces, are tested in `core/tests/processes/launcher_nodes.rs`.)

use std::process::{Command, Output, Stdio};

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};
use streamcomm::launch::detect_from_process_env;
use streamcomm::testing::bootstrap::Bootstrap;

const BIN: &str = env!("CARGO_BIN_EXE_streamcomm-run");

/// Runs the launcher with `args`, failing the test if it takes over `limit`.
fn launch(args: &[&str], limit: Duration) -> (Output, Duration) {
    launch_with_env(args, &[], limit)
}

fn launch_with_env(args: &[&str], env: &[(&str, &str)], limit: Duration) -> (Output, Duration) {
    let child = Command::new(BIN)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start streamcomm-run");
    let pid = child.id();
    let start = Instant::now();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => (out.expect("wait for streamcomm-run"), start.elapsed()),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("streamcomm-run {args:?} did not finish within {limit:?}");
        }
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn ranks_get_their_environment_and_prefixed_output() {
    let script = "echo rank=$RANK size=$WORLD_SIZE local=$LOCAL_RANK/$LOCAL_WORLD_SIZE \
                  master=$MASTER_ADDR:$MASTER_PORT id=${STREAMCOMM_UNIQUE_ID%/*}; echo err$RANK >&2";
    let (out, _) = launch(
        &["-n", "3", "--", "sh", "-c", script],
        Duration::from_secs(30),
    );
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert!(
        out.status.success(),
        "status {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    let mut lines: Vec<&str> = stdout.lines().collect();
    lines.sort();
    assert_eq!(lines.len(), 3, "{stdout}");
    for (rank, line) in lines.iter().enumerate() {
        let expected = format!("[rank {rank}] rank={rank} size=3 local={rank}/3 master=");
        assert!(
            line.starts_with(&expected),
            "{line:?} should start with {expected:?}"
        );
        // MASTER_ADDR:MASTER_PORT is the root of STREAMCOMM_UNIQUE_ID.
        let (master, id) = line[expected.len()..].split_once(" id=").expect("id field");
        assert_eq!(master, id, "{line}");
    }
    for rank in 0..3 {
        assert!(
            stderr.contains(&format!("[rank {rank}] err{rank}\n")),
            "{stderr}"
        );
    }
}

#[test]
fn a_failing_rank_stops_the_others() {
    let script = "if [ $RANK = 1 ]; then exit 3; fi; sleep 60";
    let (out, took) = launch(&["-n", "3", "sh", "-c", script], Duration::from_secs(30));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "stderr:\n{stderr}");
    assert!(stderr.contains("rank 1 exited with status 3"), "{stderr}");
    assert!(
        took < Duration::from_secs(10),
        "took {took:?}: the sleepers were not stopped"
    );
}

/// A fresh path for a marker file of test `name` (the file does not exist).
fn marker(name: &str) -> std::path::PathBuf {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("streamcomm-run-{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

/// Rank 1 (of the node's ranks) fails at once with status 3; rank 0 sleeps
/// 0.5 s, then writes the file `$MARKER` and succeeds.
const FAIL_WHILE_ONE_SLEEPS: &str =
    "if [ $LOCAL_RANK = 1 ]; then exit 3; fi; sleep 0.5; echo done > \"$MARKER\"; echo done";

#[test]
fn keep_going_lets_the_other_ranks_finish() {
    let mark = marker("keep-going");
    let args = ["--keep-going", "-n", "2", "sh", "-c", FAIL_WHILE_ONE_SLEEPS];
    let env = [("MARKER", mark.to_str().expect("UTF-8 path"))];
    let (out, took) = launch_with_env(&args, &env, Duration::from_secs(30));
    let stderr = text(&out.stderr);
    // Rank 0 was not stopped: it ran to its end, and its output came through.
    assert!(mark.exists(), "rank 0 left no marker\nstderr:\n{stderr}");
    assert_eq!(text(&out.stdout), "[rank 0] done\n", "stderr:\n{stderr}");
    assert!(took >= Duration::from_millis(500), "took {took:?}");
    // The exit status is still the failed rank's.
    assert_eq!(out.status.code(), Some(3), "stderr:\n{stderr}");
    assert!(
        stderr.contains("rank 1 exited with status 3; the other ranks ran to their end"),
        "{stderr}"
    );
    let _ = std::fs::remove_file(&mark);
}

#[test]
fn without_keep_going_a_failed_rank_stops_the_sleeper() {
    let mark = marker("no-keep-going");
    let args = ["-n", "2", "sh", "-c", FAIL_WHILE_ONE_SLEEPS];
    let env = [("MARKER", mark.to_str().expect("UTF-8 path"))];
    let (out, _) = launch_with_env(&args, &env, Duration::from_secs(30));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "stderr:\n{stderr}");
    assert!(
        stderr.contains("rank 1 exited with status 3; stopped the other ranks"),
        "{stderr}"
    );
    // The launcher returns once every rank is reaped: rank 0 was stopped
    // before it woke to write the marker.
    assert!(!mark.exists(), "rank 0 was not stopped\nstderr:\n{stderr}");
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
}

#[test]
fn keep_going_applies_to_a_node_of_a_multi_node_job() {
    // Node 1 of 2 serves no root and its ranks (global 2 and 3) join none,
    // so no port is needed: this only runs the multi-node path of main.
    let mark = marker("keep-going-node");
    let args = [
        "--nnodes",
        "2",
        "--node-rank",
        "1",
        "--master-addr",
        "127.0.0.1",
        "-n",
        "2",
        "--keep-going",
        "sh",
        "-c",
        FAIL_WHILE_ONE_SLEEPS,
    ];
    let env = [("MARKER", mark.to_str().expect("UTF-8 path"))];
    let (out, _) = launch_with_env(&args, &env, Duration::from_secs(30));
    let stderr = text(&out.stderr);
    assert!(
        mark.exists(),
        "global rank 2 left no marker\nstderr:\n{stderr}"
    );
    assert_eq!(text(&out.stdout), "[rank 2] done\n", "stderr:\n{stderr}");
    assert_eq!(out.status.code(), Some(3), "stderr:\n{stderr}");
    assert!(stderr.contains("rank 3 exited with status 3"), "{stderr}");
    let _ = std::fs::remove_file(&mark);
}

#[test]
fn a_rank_killed_by_a_signal_fails_the_job() {
    let script = "if [ $RANK = 0 ]; then kill -9 $$; fi; sleep 60";
    let (out, took) = launch(&["-n", "2", "sh", "-c", script], Duration::from_secs(30));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(128 + 9), "stderr:\n{stderr}");
    assert!(stderr.contains("rank 0 was killed by signal 9"), "{stderr}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
}

#[test]
fn ranks_that_ignore_sigterm_are_killed() {
    let script = "trap '' TERM; if [ $RANK = 0 ]; then sleep 1; exit 1; fi; sleep 60";
    let (out, took) = launch(&["-n", "2", "sh", "-c", script], Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(1), "stderr:\n{}", text(&out.stderr));
    assert!(took < Duration::from_secs(10), "took {took:?}");
}

#[test]
fn output_without_trailing_newline_is_forwarded() {
    let (out, _) = launch(&["-n", "1", "printf", "a\\nb"], Duration::from_secs(30));
    assert!(out.status.success());
    assert_eq!(text(&out.stdout), "[rank 0] a\n[rank 0] b\n");
}

#[test]
fn bad_arguments_give_a_usage_error() {
    for args in [
        &[][..],
        &["-n"],
        &["-n", "abc", "true"],
        &["-n", "0", "true"],
        &["-n", "2"],
        &["true"],
        &["--bogus", "true"],
    ] {
        let (out, _) = launch(args, Duration::from_secs(30));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.starts_with("streamcomm-run: "), "{args:?}: {stderr}");
        assert!(stderr.contains("--help"), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    let (out, _) = launch(&["--help"], Duration::from_secs(30));
    assert!(out.status.success());
    assert!(text(&out.stdout).starts_with("usage: streamcomm-run -n N"));
}

#[test]
fn missing_program_is_reported() {
    let (out, _) = launch(
        &["-n", "2", "/nonexistent/program"],
        Duration::from_secs(30),
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("start rank 0"), "{stderr}");
}

/// Set in the environment of ranks started by `ranks_meet_through_the_launchers_root`.
const CHILD_VAR: &str = "STREAMCOMM_LAUNCHER_TEST_CHILD";

#[test]
fn ranks_meet_through_the_launchers_root() {
    // The ranks are this test binary, running only `rank_entry_point`.
    let exe = std::env::current_exe().expect("test binary path");
    let exe = exe.to_str().expect("UTF-8 path");
    let entry = streamcomm_testkit::test_path(module_path!(), "rank_entry_point");
    let args = [
        "-n",
        "4",
        exe,
        "--exact",
        &entry,
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ];
    let (out, _) = launch_with_env(&args, &[(CHILD_VAR, "1")], Duration::from_secs(60));
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "stdout:\n{stdout}\nstderr:\n{}",
        text(&out.stderr)
    );
    for rank in 0..4 {
        let line = format!("[rank {rank}] ");
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(&line) && l.contains("gathered 0,1,2,3 via streamcomm-run")),
            "no gather line for rank {rank} in:\n{stdout}"
        );
    }
}

/// A rank of `ranks_meet_through_the_launchers_root`; does nothing otherwise.
#[test]
#[ignore = "entry point of the child processes"]
fn rank_entry_point() {
    if std::env::var_os(CHILD_VAR).is_none() {
        return;
    }
    let info = detect_from_process_env().expect("launcher environment");
    let id = info.root.unique_id();
    let mut boot =
        Bootstrap::connect(&id, info.rank, info.size, Duration::from_secs(30)).expect("connect");
    let all = boot
        .all_gather(info.rank.to_string().as_bytes())
        .expect("all_gather");
    let all: Vec<String> = all.iter().map(|b| text(b)).collect();
    println!("gathered {} via {}", all.join(","), info.launcher);
}

/// `--cuda-stand-in` with a fake library (`STREAMCOMM_STANDIN_LIB`, so no
/// GPU code is built or loaded): each rank finds, first on its
/// `LD_LIBRARY_PATH`, a directory with `libcuda.so` and `libcuda.so.1`
/// linking to the library; the launcher says once that the ranks run on the
/// stand-in, and removes the directory when they are done.
#[test]
fn cuda_stand_in_puts_driver_links_first_on_the_ranks_library_path() {
    let lib = marker("fake-standin.so");
    std::fs::write(&lib, "not a real library").expect("write the fake library");
    let lib_path = lib.to_str().expect("UTF-8 path");
    let script = r#"d=${LD_LIBRARY_PATH%%:*}; echo "dir=$d rest=${LD_LIBRARY_PATH#*:}";
                    echo "so=$(readlink "$d/libcuda.so") so1=$(readlink "$d/libcuda.so.1")""#;
    let env = [
        ("STREAMCOMM_STANDIN_LIB", lib_path),
        ("LD_LIBRARY_PATH", "/opt/before"),
    ];
    let args = ["--cuda-stand-in", "-n", "2", "--", "sh", "-c", script];
    let (out, _) = launch_with_env(&args, &env, Duration::from_secs(30));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let real = lib
        .canonicalize()
        .expect("the fake library")
        .display()
        .to_string();
    let mut dirs = Vec::new();
    for rank in 0..2 {
        let prefix = format!("[rank {rank}] dir=");
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&prefix))
            .unwrap_or_else(|| panic!("no dir line of rank {rank}:\n{stdout}"));
        let (dir, rest) = line[prefix.len()..].split_once(" rest=").expect("rest");
        assert_eq!(rest, "/opt/before", "the launcher's path follows: {line}");
        assert!(!dir.is_empty() && dir != "/opt/before", "{line}");
        dirs.push(dir.to_string());
        assert!(
            stdout.contains(&format!("[rank {rank}] so={real} so1={real}\n")),
            "both names link to {real}:\n{stdout}"
        );
    }
    assert_eq!(dirs[0], dirs[1], "one directory for the job");
    assert_eq!(
        stderr.matches("CPU stand-in").count(),
        1,
        "said once:\n{stderr}"
    );
    assert!(stderr.contains("not a GPU"), "{stderr}");
    assert!(
        !std::path::Path::new(&dirs[0]).exists(),
        "the directory is removed after the job"
    );
    let _ = std::fs::remove_file(lib);
}

#[test]
fn cuda_stand_in_without_a_library_says_how_to_build_one() {
    let missing = marker("no-such-standin.so");
    let env = [("STREAMCOMM_STANDIN_LIB", missing.to_str().expect("UTF-8"))];
    let args = ["--cuda-stand-in", "-n", "1", "--", "true"];
    let (out, _) = launch_with_env(&args, &env, Duration::from_secs(30));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr:\n{stderr}");
    assert!(stderr.contains("STREAMCOMM_STANDIN_LIB"), "{stderr}");
}
