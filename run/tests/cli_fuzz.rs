//! Property-based fuzzing of `streamcomm-run`'s command line: any words
//! parse to a job or to an error, never a panic, and a job that parses keeps
//! the guarantees [`NodeArgs`] documents.

use std::ffi::OsString;

use proptest::prelude::*;
use proptest::test_runner::Config as ProptestConfig;
use streamcomm::Error;
use streamcomm::bootstrap::MAX_RANKS;
use streamcomm_run::cli::{MAX_NPROC, NodeArgs, Parsed, parse_args};

/// Cases: `PROPTEST_CASES`, or 2000.
fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(2000);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Words for the command line: ours, near misses and arbitrary text.
fn cli_word() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "-n",
            "-h",
            "--",
            "--nproc",
            "--nproc-per-node",
            "--nproc_per_node",
            "--nnodes",
            "--node-rank",
            "--node_rank",
            "--master-addr",
            "--master-port",
            "--hosts",
            "--keep-going",
            "--keep-going=1",
            "--nnodes=2",
            "--master-port=0",
            "--hosts=a,b",
            "--hosts=127.0.0.1,b",
            "-n4",
            "-n0",
            "-n=2",
            "-hn",
            "-",
            "--bogus",
            "prog",
            "0",
            "1",
            "2",
            "127.0.0.1",
        ])
        .prop_map(str::to_string),
        ".{0,12}",
        "--[a-z_-]{0,12}(=.{0,6})?",
        "-[a-z]{1,3}",
    ]
}

/// The guarantees of [`NodeArgs`] for a job of `nproc` ranks per node.
fn check_nodes(nodes: &NodeArgs, nproc: usize) -> Result<(), TestCaseError> {
    prop_assert!(nodes.nnodes >= 1);
    if let Some(k) = nodes.node_rank {
        prop_assert!(k < nodes.nnodes);
    } else {
        prop_assert!(!nodes.hosts.is_empty());
    }
    if !nodes.hosts.is_empty() {
        prop_assert_eq!(nodes.hosts.len(), nodes.nnodes);
        prop_assert_eq!(&nodes.hosts[0], &nodes.master_addr);
    }
    prop_assert!(nodes.master_port > 0);
    prop_assert!(nodes.nnodes * nproc <= MAX_RANKS);
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn parse_args_never_panics(words in prop::collection::vec(cli_word(), 0..8)) {
        match parse_args(words.iter().map(OsString::from)) {
            Ok(Parsed::Help) => prop_assert!(words.iter().any(|w| w.starts_with("-h") || w == "--help")),
            Ok(Parsed::Run(run)) => {
                prop_assert!((1..=MAX_NPROC).contains(&run.nproc));
                // The program is one of the words, and its arguments follow it untouched.
                let tail: Vec<OsString> = words.iter().rev().take(run.args.len()).rev().map(OsString::from).collect();
                prop_assert_eq!(&tail, &run.args);
                if let Some(nodes) = &run.nodes {
                    check_nodes(nodes, run.nproc)?;
                }
            }
            Err(e) => prop_assert!(matches!(e, Error::InvalidArgument(ref m) if !m.is_empty()), "{e:?}"),
        }
    }
}
