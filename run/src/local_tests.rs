//! Unit tests of the local launcher: outcomes, errors, a node's slice of ranks.

use super::*;

#[test]
fn exit_codes() {
    assert_eq!(Outcome::Success.exit_code(), 0);
    let status = ExitStatus::from_raw(3 << 8);
    let failed = Outcome::RankFailed {
        rank: 1,
        status,
        cause: None,
    };
    assert_eq!(failed.exit_code(), 3);
    assert_eq!(failed.to_string(), "rank 1 exited with status 3");
    let killed = Outcome::RankFailed {
        rank: 2,
        status: ExitStatus::from_raw(libc::SIGKILL),
        cause: None,
    };
    assert_eq!(killed.exit_code(), 128 + libc::SIGKILL);
    assert_eq!(
        killed.to_string(),
        format!("rank 2 was killed by signal {}", libc::SIGKILL)
    );
    assert_eq!(Outcome::Interrupted { signal: 2 }.exit_code(), 130);
}

#[test]
fn zero_ranks_is_an_error() {
    let err = LocalLauncher::new(0, "true").run().expect_err("0 ranks");
    assert!(matches!(err, Error::InvalidArgument(_)));
}

#[test]
fn missing_program_is_an_os_error() {
    let err = LocalLauncher::new(2, "/nonexistent/streamcomm-test-program")
        .run()
        .expect_err("no program");
    assert!(
        matches!(&err, Error::Os { call, .. } if call.contains("start rank 0")),
        "{err}"
    );
}

#[test]
fn a_node_runs_its_slice_of_the_ranks() {
    let id = UniqueId::from_parts("127.0.0.1:9".parse().expect("addr"), [7; 16]);
    let script = format!(
        "test $RANK = $((2 + LOCAL_RANK)) && test $WORLD_SIZE = 4 \
         && test $LOCAL_WORLD_SIZE = 2 && test $NODE_RANK = 1 && test $GROUP_RANK = 1 \
         && test $GROUP_WORLD_SIZE = 2 && test $MASTER_ADDR = head && test $MASTER_PORT = 9 \
         && test $STREAMCOMM_UNIQUE_ID = 127.0.0.1:9/{}",
        "07".repeat(16)
    );
    let job = LocalLauncher::new(2, "sh")
        .args(["-c", script.as_str()])
        .unique_id(id)
        .node(1, 2)
        .master_addr("head")
        .prefix_output(false);
    assert_eq!(job.run().expect("run"), Outcome::Success);
    let failing = LocalLauncher::new(2, "sh")
        .args(["-c", "test $LOCAL_RANK = 0"])
        .unique_id(id)
        .node(1, 2)
        .prefix_output(false)
        .kill_grace(Duration::from_millis(100));
    assert!(matches!(
        failing.run().expect("run"),
        Outcome::RankFailed { rank: 3, .. }
    ));
    let err = LocalLauncher::new(2, "true")
        .node(2, 2)
        .run()
        .expect_err("bad node");
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
}

#[test]
fn unprefixed_job_runs() {
    let outcome = LocalLauncher::new(2, "sh")
        .args([
            "-c",
            "test \"$WORLD_SIZE\" = 2 && test -n \"$STREAMCOMM_UNIQUE_ID\"",
        ])
        .prefix_output(false)
        .run()
        .expect("run");
    assert_eq!(outcome, Outcome::Success);
}

#[test]
fn the_rank_the_errors_name_is_listed_first() {
    let blames = Blames::default();
    assert_eq!(blames.named(), None);
    blames.scan(
        0,
        b"all_reduce #0: ... [culprit: rank 2, whose call differs]",
    );
    blames.scan(0, b"later: [culprit: rank 0, ...]"); // a rank's first line counts
    blames.scan(3, b"no marker here");
    blames.scan(3, b"x [culprit: rank 1, y]");
    blames.scan(1, b"[culprit: rank 2]");
    blames.scan(1, b"[culprit: rank ]");
    assert_eq!(blames.named(), Some(2));
    let status = ExitStatus::from_raw(101 << 8);
    let outcome = Outcome::RankFailed {
        rank: 0,
        status,
        cause: Some(2),
    };
    assert_eq!(outcome.exit_code(), 101);
    let text = outcome.to_string();
    assert!(text.starts_with("rank 2 caused the failure"), "{text}");
    assert!(text.ends_with("rank 0 exited with status 101"), "{text}");
    let tie = Blames::default();
    tie.scan(0, b"[culprit: rank 3");
    tie.scan(1, b"[culprit: rank 1");
    assert_eq!(tie.named(), Some(1));
}
