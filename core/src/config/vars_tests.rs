//! Unit tests of the variable list: every bad value is answered with the
//! variable, the value and what is accepted; the parsers read exactly the
//! listed names; unknown names are warned about once, with a near miss.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};

use super::*;
use crate::config::Config;

fn config_with(vars: &[(&str, &str)]) -> crate::Result<Config> {
    let map: HashMap<&str, &str> = vars.iter().copied().collect();
    Config::default().with_vars(|k| map.get(k).map(|v| v.to_string()))
}

fn message(result: crate::Result<Config>) -> String {
    match result {
        Err(Error::InvalidArgument(msg)) => msg,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

/// Variables that accept any value (nothing to refuse).
const FREE_FORM: [&str; 2] = ["STREAMCOMM_SOCKET_IFNAME", "STREAMCOMM_DEBUG"];

#[test]
fn every_bad_value_names_the_variable_the_value_and_what_is_accepted() {
    let missing_file = std::env::temp_dir().join("streamcomm-no-such-tuning-file");
    let missing_file = missing_file.to_str().expect("temp path is UTF-8");
    let cases: &[(Var, &str)] = &[
        (BUFFSIZE, "lots"),
        (BUFFSIZE, "2G"),
        (BUFFSIZE, "99999999999999999999G"),
        (NSTEPS, "many"),
        (NSTEPS, "0"),
        (NSTEPS, "1025"),
        (SHM_BUDGET, "plenty"),
        (SHM_BUDGET, "1K"),
        (SHM_BUDGET, "65G"),
        (TIMEOUT, "soon"),
        (TIMEOUT, "-1"),
        (TIMEOUT, "0"),
        (TIMEOUT, "inf"),
        (TIMEOUT, "1e300"),
        (PROGRESS, "sideways"),
        (SPIN, "-1"),
        (SPIN, "4294967296"),
        (BARRIER_ALGO, "telepathy"),
        (BARRIER_ALGO, "tree:1"),
        (BARRIER_ALGO, "kway:x"),
        (HOSTS_OVERRIDE, "0"),
        (HOSTS_OVERRIDE, "a,,b"),
        (TRANSPORT, "infiniband"),
        (NCHANNELS, "0"),
        (NCHANNELS, "65"),
        (NCHANNELS, "two"),
        (IB_HCA, "mlx5_0;rm"),
        (IB_GID_INDEX, "-1"),
        (IB_GID_INDEX, "+3"),
        (IB_GID_INDEX, "256"),
        (IB_GID_INDEX, "3x"),
        (P2P_EAGER_LIMIT, "1T"),
        (P2P_DIRECT, "maybe"),
        (CUDA_WINDOW, "100"),
        (CUDA_WINDOW, "lots"),
        (GPUDIRECT, "2"),
        (BIND, "core"),
        (ALGO, "all_reduce=ring,all_reduce=tree"),
        (ALGO, "all_reduce="),
        (TUNING_FILE, missing_file),
        (FAULTS, "send:peer=1:drop"),
        (FAULTS, "explode"),
    ];
    for (var, value) in cases {
        let msg = message(config_with(&[(var.name, value)]));
        println!("{msg}");
        assert!(
            msg.starts_with(&format!("{}={value} is not {}", var.name, var.what))
                || msg.starts_with(&format!("{} rule {value:?}:", var.name)),
            "{}={value}: the message does not start with the variable and value: {msg}",
            var.name
        );
        assert!(
            msg.ends_with(&format!("; expected {}", var.expected)),
            "{}={value}: the message does not end with what is accepted: {msg}",
            var.name
        );
    }
    let covered: BTreeSet<&str> = cases.iter().map(|(v, _)| v.name).collect();
    for var in CONFIG {
        assert!(
            covered.contains(var.name) || FREE_FORM.contains(&var.name),
            "{} has no bad value in this table",
            var.name
        );
    }
    // A value that is not one plain token is quoted.
    let msg = message(config_with(&[("STREAMCOMM_PROGRESS", "in line")]));
    assert!(
        msg.starts_with("STREAMCOMM_PROGRESS=\"in line\" is not"),
        "{msg}"
    );
    let msg = message(config_with(&[("STREAMCOMM_NSTEPS", "")]));
    assert!(msg.starts_with("STREAMCOMM_NSTEPS=\"\" is not"), "{msg}");
}

#[test]
fn infiniband_is_not_a_transport() {
    let msg = message(config_with(&[("STREAMCOMM_TRANSPORT", "infiniband")]));
    assert_eq!(
        msg,
        "STREAMCOMM_TRANSPORT=infiniband is not a transport; expected one of: auto, shm, tcp, verbs"
    );
}

#[test]
fn with_vars_reads_exactly_the_listed_variables() {
    let asked = RefCell::new(BTreeSet::new());
    Config::default()
        .with_vars(|name| {
            asked.borrow_mut().insert(name.to_string());
            None
        })
        .expect("defaults");
    let listed: BTreeSet<String> = CONFIG.iter().map(|v| v.name.to_string()).collect();
    assert_eq!(asked.into_inner(), listed);
    let all: Vec<&str> = known().collect();
    let unique: BTreeSet<&str> = all.iter().copied().collect();
    assert_eq!(all.len(), unique.len(), "a name is listed twice");
    for name in all {
        assert!(
            name.starts_with(PREFIX) && name.len() > PREFIX.len(),
            "{name}"
        );
        assert!(is_known(name), "{name}");
    }
}

#[test]
fn edit_distance_counts_edits() {
    assert_eq!(edit_distance("", ""), 0);
    assert_eq!(edit_distance("abc", ""), 3);
    assert_eq!(edit_distance("", "abc"), 3);
    assert_eq!(edit_distance("TIMOUT", "TIMEOUT"), 1);
    assert_eq!(edit_distance("kitten", "sitting"), 3);
    assert_eq!(edit_distance("flaw", "lawn"), 2);
    assert_eq!(edit_distance("same", "same"), 0);
}

#[test]
fn did_you_mean_finds_near_misses_only() {
    for (typo, want) in [
        ("STREAMCOMM_TIMOUT", Some("STREAMCOMM_TIMEOUT")),
        ("STREAMCOMM_TIMEOUTS", Some("STREAMCOMM_TIMEOUT")),
        ("STREAMCOMM_BUFSIZE", Some("STREAMCOMM_BUFFSIZE")),
        ("STREAMCOMM_TRANSPROT", Some("STREAMCOMM_TRANSPORT")),
        ("STREAMCOMM_NCHANNEL", Some("STREAMCOMM_NCHANNELS")),
        ("STREAMCOMM_BARIER_ALGO", Some("STREAMCOMM_BARRIER_ALGO")),
        ("STREAMCOMM_BIN", Some("STREAMCOMM_BIND")),
        ("streamcomm_timeout", Some("STREAMCOMM_TIMEOUT")),
        ("STREAMCOMM_NVRTC_LIBS", Some("STREAMCOMM_NVRTC_LIB")),
        ("STREAMCOMM_SECRT", Some("STREAMCOMM_SECRET")),
        ("STREAMCOMM_COLOUR", None),
        ("STREAMCOMM_SPEED", None),
        ("STREAMCOMM_X", None),
    ] {
        assert_eq!(did_you_mean(typo), want, "{typo}");
    }
}

#[test]
fn only_unknown_streamcomm_names_are_warned_about() {
    assert_eq!(
        unknown_warning("STREAMCOMM_TIMOUT").as_deref(),
        Some(
            "STREAMCOMM_TIMOUT is set, but streamcomm reads no such variable (ignored); \
             did you mean STREAMCOMM_TIMEOUT?"
        )
    );
    assert_eq!(
        unknown_warning("streamcomm_bind").as_deref(),
        Some(
            "streamcomm_bind is set, but streamcomm reads no such variable (ignored); \
             did you mean STREAMCOMM_BIND? (variable names are case-sensitive)"
        )
    );
    let far = unknown_warning("STREAMCOMM_COLOUR").expect("warned");
    assert!(far.ends_with("the variables are listed in docs/guide/configuration.md"));
    for name in CONFIG.iter().chain(LAUNCH).map(|v| v.name) {
        assert_eq!(unknown_warning(name), None, "{name}");
    }
    for name in ELSEWHERE.iter().copied().chain([
        "STREAMCOMM_BENCH_CALIBRATE_OUT",
        "STREAMCOMM_TEST_LAUNCH_CHILD",
        "STREAMCOMM_NODES_TEST_COMM",
        "RANK",
        "PATH",
        "STREAMCOMMTIMEOUT",
    ]) {
        assert_eq!(unknown_warning(name), None, "{name}");
    }
}

#[test]
fn each_unknown_name_is_warned_about_once() {
    // A known name, a test child's (`_TEST_`: never warned about) and an
    // unknown one, twice: the unknown one is warned about the first time.
    let names = || {
        [
            "STREAMCOMM_UNIT_TEST_ONLY_NSTEP",
            "STREAMCOMM_NSTEPS",
            "STREAMCOMM_UNITTESTONLY_TIMOUT",
        ]
        .map(String::from)
    };
    let first = warn_unknown(names());
    assert_eq!(first.len(), 1, "{first:?}");
    assert!(first[0].starts_with("STREAMCOMM_UNITTESTONLY_TIMOUT is set"));
    assert!(warn_unknown(names()).is_empty());
}
