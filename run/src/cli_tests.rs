//! Unit tests of the `streamcomm-run` command line.

use super::*;

fn parse(words: &[&str]) -> Result<Parsed> {
    parse_args(words.iter().map(OsString::from))
}

fn run(words: &[&str]) -> RunArgs {
    match parse(words) {
        Ok(Parsed::Run(r)) => r,
        other => panic!("{words:?}: {other:?}"),
    }
}

fn nodes(words: &[&str]) -> NodeArgs {
    let r = run(words);
    r.nodes
        .unwrap_or_else(|| panic!("{words:?}: expected node options"))
}

/// `words` run `prog a` as `nproc` ranks on this host alone.
fn run_prog_a(words: &[&str], nproc: usize) -> RunArgs {
    let r = run(words);
    assert_eq!(
        (r.nproc, r.program.to_str(), &r.nodes),
        (nproc, Some("prog"), &None),
        "{words:?}"
    );
    assert_eq!(r.args, vec![OsString::from("a")], "{words:?}");
    r
}

/// Node 1 of 2, node 0 at 10.0.0.1.
const NODE_1_OF_2: [&str; 6] = [
    "--nnodes",
    "2",
    "--node-rank",
    "1",
    "--master-addr",
    "10.0.0.1",
];

fn message(words: &[&str]) -> String {
    match parse(words) {
        Err(Error::InvalidArgument(m)) => m,
        other => panic!("{words:?}: expected an error, got {other:?}"),
    }
}

#[test]
fn accepted_forms() {
    for words in [
        &["-n", "3", "prog", "a"][..],
        &["--nproc", "3", "prog", "a"],
        &["--nproc=3", "prog", "a"],
        &["--nproc-per-node", "3", "prog", "a"],
        &["--nproc_per_node=3", "prog", "a"],
        &["-n3", "prog", "a"],
        &["-n", "3", "--", "prog", "a"],
        &["-n", "1", "-n", "3", "prog", "a"],
    ] {
        run_prog_a(words, 3);
    }
    // The program's own options are passed through, even ours.
    let r = run(&["-n", "2", "--", "-weird", "-n", "5", "--help"]);
    assert_eq!(r.program, "-weird");
    assert_eq!(r.args, ["-n", "5", "--help"].map(OsString::from).to_vec());
    let r = run(&["-n", "2", "prog", "--nnodes", "2"]);
    assert_eq!((r.nodes, r.args.len()), (None, 2));
    assert_eq!(parse(&["-h"]).ok(), Some(Parsed::Help));
    assert_eq!(
        parse(&["-n", "2", "--help", "prog"]).ok(),
        Some(Parsed::Help)
    );
}

#[test]
fn node_options() {
    let explicit = NodeArgs {
        nnodes: 2,
        node_rank: Some(1),
        master_addr: "10.0.0.1".into(),
        master_port: 1234,
        hosts: Vec::new(),
    };
    for words in [
        [
            &NODE_1_OF_2[..],
            &["--master-port", "1234", "-n", "4", "prog"],
        ]
        .concat(),
        vec![
            "--nnodes=2",
            "--node_rank=1",
            "--master_addr=10.0.0.1",
            "--master_port=1234",
            "--nproc_per_node=4",
            "--",
            "prog",
        ],
    ] {
        assert_eq!(nodes(&words), explicit, "{words:?}");
        assert_eq!(run(&words).nproc, 4);
    }
    // Defaults: port 29500; one node needs neither rank nor address.
    let n = nodes(&[
        "--nnodes",
        "2",
        "--node-rank",
        "0",
        "--master-addr",
        "h",
        "-n1",
        "p",
    ]);
    assert_eq!(n.master_port, DEFAULT_MASTER_PORT);
    let n = nodes(&["--master-port", "4000", "-n", "2", "p"]);
    assert_eq!(
        (n.nnodes, n.node_rank, n.master_addr.as_str(), n.master_port),
        (1, Some(0), "127.0.0.1", 4000)
    );
}

#[test]
fn hosts_option() {
    let n = nodes(&["--hosts", "a,b,c", "-n", "2", "prog"]);
    assert_eq!(
        n,
        NodeArgs {
            nnodes: 3,
            node_rank: None,
            master_addr: "a".into(),
            master_port: DEFAULT_MASTER_PORT,
            hosts: vec!["a".into(), "b".into(), "c".into()],
        }
    );
    // Consistent extras are accepted.
    let n = nodes(&[
        "--hosts=a, b",
        "--nnodes",
        "2",
        "--master-addr",
        "a",
        "--node-rank",
        "1",
        "-n1",
        "p",
    ]);
    assert_eq!((n.nnodes, n.node_rank, n.hosts.len()), (2, Some(1), 2));
    // One host: node 0, no search needed.
    assert_eq!(nodes(&["--hosts", "solo", "-n1", "p"]).node_rank, Some(0));
}

#[test]
fn errors() {
    assert_eq!(message(&[]), "no program to run");
    assert_eq!(message(&["-n", "2"]), "no program to run");
    assert_eq!(message(&["-n", "2", "--"]), "no program to run");
    assert_eq!(message(&["prog"]), "missing -n N (the number of ranks)");
    assert_eq!(message(&["-n"]), "-n needs a value");
    assert!(message(&["-n", "x", "prog"]).contains("got \"x\""));
    assert!(message(&["-n", "0", "prog"]).contains("between 1 and"));
    assert!(message(&["--nproc=99999", "prog"]).contains("between 1 and"));
    assert_eq!(message(&["-x", "prog"]), "unknown option \"-x\"");
    assert_eq!(
        message(&["--bogus=1", "prog"]),
        "unknown option \"--bogus=1\""
    );
}

#[test]
fn node_errors() {
    let m = |words: &[&str]| {
        let mut all = words.to_vec();
        all.extend(["-n", "2", "prog"]);
        message(&all)
    };
    for (words, want) in [
        (
            &["--nnodes", "2", "--master-addr", "h"][..],
            "--nnodes 2 needs --node-rank K (0..=1) on each node, or --hosts",
        ),
        (
            &["--nnodes", "2", "--node-rank", "1"],
            "--nnodes 2 needs --master-addr (the address of node 0), or --hosts",
        ),
        (
            &["--nnodes", "2", "--node-rank", "2", "--master-addr", "h"],
            "--node-rank 2 is out of range for 2 nodes (0..=1)",
        ),
        (
            &["--node-rank", "1"],
            "--node-rank 1 is out of range for 1 nodes (0..=0)",
        ),
        (
            &["--hosts", "a,b", "--nnodes", "3"],
            "--hosts lists 2 hosts but --nnodes is 3",
        ),
        (
            &["--hosts", "a,b", "--master-addr", "b"],
            "--master-addr b is not the first of --hosts (a), which is the master",
        ),
        (
            &["--master-addr", " "],
            "--master-addr needs an address, got \"\"",
        ),
    ] {
        assert_eq!(m(words), want, "{words:?}");
    }
    assert!(m(&["--hosts", "a,,b"]).starts_with("--hosts needs a comma-separated list"));
    assert!(m(&["--hosts", ""]).starts_with("--hosts needs a comma-separated list"));
    assert!(m(&["--nnodes", "0"]).contains("between 1 and"));
    assert!(m(&["--node-rank", "-1"]).contains("got \"-1\""));
    assert!(m(&["--master-port", "0"]).contains("between 1 and 65535"));
    assert!(m(&["--master-port", "70000"]).contains("between 1 and 65535"));
    assert_eq!(message(&["--hosts"]), "--hosts needs a value");
    assert!(
        message(&[
            "--nnodes",
            "1000000",
            "--node-rank",
            "0",
            "--master-addr",
            "h",
            "-n",
            "4096",
            "p"
        ])
        .contains("more than")
    );
}

#[test]
fn clap_definition_is_consistent() {
    use clap::CommandFactory;
    Cli::command().debug_assert();
}

#[test]
fn words_that_are_not_utf8_pass_through() {
    use std::os::unix::ffi::OsStringExt;
    let odd = OsString::from_vec(vec![b'p', 0xff]);
    let arg = OsString::from_vec(vec![b'-', 0xfe]);
    let words = [OsString::from("-n"), "2".into(), odd.clone(), arg.clone()];
    match parse_args(words) {
        Ok(Parsed::Run(r)) => assert_eq!((r.program, r.args), (odd, vec![arg])),
        other => panic!("{other:?}"),
    }
}

#[test]
fn usage_is_the_help_clap_renders() {
    use clap::CommandFactory;
    let help = Cli::command().render_help().to_string();
    assert_eq!(help.trim_end(), USAGE);
    assert!(USAGE.starts_with("usage: streamcomm-run -n N"));
}

/// The flag `flag` (read back by `given`): off unless given, on in every
/// place among the options, for a node of a multi-node job too, the
/// program's own word after the program, and refused with a value.
fn check_flag(flag: &str, given: fn(&RunArgs) -> bool) {
    assert!(!given(&run(&["-n", "2", "prog"])), "{flag}");
    for words in [
        &[flag, "-n", "2", "prog", "a"][..],
        &["-n", "2", flag, "prog", "a"],
        &["-n", "2", flag, "--", "prog", "a"],
        &[flag, flag, "-n2", "prog", "a"],
    ] {
        // Not a node option: the job stays a single-node one.
        assert!(given(&run_prog_a(words, 2)), "{words:?}");
    }
    // With the node options, for a node of a multi-node job.
    let r = run(&[&NODE_1_OF_2[..], &[flag, "-n", "4", "prog"]].concat());
    assert!(given(&r), "{flag}");
    assert_eq!(r.nodes.map(|n| (n.nnodes, n.node_rank)), Some((2, Some(1))));
    // After the program it is the program's.
    let r = run(&["-n", "2", "prog", flag]);
    assert!(!given(&r), "{flag}");
    assert_eq!(r.args, vec![OsString::from(flag)]);
    // A flag, not an option with a value.
    for value in ["yes", "1"] {
        assert_eq!(
            message(&[&format!("{flag}={value}"), "-n", "2", "prog"]),
            format!("{flag} takes no value, got \"{value}\"")
        );
    }
    assert!(USAGE.contains(flag), "{flag}");
}

#[test]
fn keep_going_option() {
    // Off unless given: a failed rank stops the others.
    check_flag("--keep-going", |r| r.keep_going);
    assert_eq!(
        message(&["--keep_going", "-n", "2", "prog"]),
        "unknown option \"--keep_going\""
    );
}

#[test]
fn cuda_stand_in_option() {
    // Off unless given: the ranks load whatever libcuda the system has.
    check_flag("--cuda-stand-in", |r| r.cuda_stand_in);
    let words = [
        "-n",
        "2",
        "--cuda-stand-in",
        "--keep-going",
        "--",
        "prog",
        "a",
    ];
    let r = run_prog_a(&words, 2);
    assert!(r.cuda_stand_in && r.keep_going);
}

#[test]
fn nccl_option() {
    // Off unless given: the ranks load whatever NCCL the system has.
    check_flag("--nccl", |r| r.nccl);
    let plain = run(&["-n", "2", "prog"]);
    assert!(!plain.nccl && !plain.cuda_stand_in);
    let r = run(&["--nccl", "--cuda-stand-in", "-n", "2", "prog", "--nccl"]);
    assert!(r.nccl && r.cuda_stand_in);
    // After PROGRAM, the word is the program's.
    assert_eq!(r.args, vec![OsString::from("--nccl")]);
    let r = run(&["-n", "3", "--nccl", "--", "prog"]);
    assert!(r.nccl && !r.cuda_stand_in);
}
