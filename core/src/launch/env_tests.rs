//! Unit tests of launcher detection: one per launcher, one per error.

use std::collections::HashMap;

use super::*;

const ROOT: [(&str, &str); 2] = [("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29500")];

fn run(vars: &[(&str, &str)]) -> Result<LaunchInfo> {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    detect(&|k| map.get(k).cloned())
}

fn with_root(vars: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
    vars.iter().chain(ROOT.iter()).copied().collect()
}

fn figures(info: &LaunchInfo) -> (usize, usize, usize, usize, &'static str) {
    (
        info.rank,
        info.size,
        info.local_rank,
        info.local_size,
        info.launcher,
    )
}

fn err(vars: &[(&str, &str)]) -> String {
    match run(vars) {
        Ok(info) => panic!("expected an error, got {info:?}"),
        Err(Error::InvalidArgument(msg)) => msg,
        Err(e) => panic!("expected InvalidArgument, got {e}"),
    }
}

#[test]
fn torchrun() {
    let info = run(&with_root(&[
        ("RANK", "5"),
        ("WORLD_SIZE", "8"),
        ("LOCAL_RANK", "1"),
        ("LOCAL_WORLD_SIZE", "4"),
    ]))
    .expect("torchrun");
    assert_eq!(figures(&info), (5, 8, 1, 4, "torchrun"));
    let addr: SocketAddr = "127.0.0.1:29500".parse().expect("addr");
    assert_eq!(
        info.root,
        RootSpec::Address {
            addr,
            secret: derive_secret("127.0.0.1", 29500)
        }
    );
    assert_eq!(info.root.unique_id().addr(), addr);
}

#[test]
fn torchrun_without_local_figures_is_one_host() {
    let info = run(&with_root(&[("RANK", "2"), ("WORLD_SIZE", "3")])).expect("plain");
    assert_eq!(figures(&info), (2, 3, 2, 3, "torchrun"));
}

#[test]
fn streamcomm_run_with_unique_id() {
    let id = UniqueId::from_parts("127.0.0.1:4000".parse().expect("addr"), [0xee; 16]);
    let text = id.to_string();
    let info = run(&[
        ("RANK", "0"),
        ("WORLD_SIZE", "2"),
        ("LOCAL_RANK", "0"),
        ("LOCAL_WORLD_SIZE", "2"),
        ("STREAMCOMM_LAUNCHER", "streamcomm-run"),
        ("STREAMCOMM_UNIQUE_ID", &text),
        // The unique id wins over the torchrun address.
        ("MASTER_ADDR", "10.0.0.1"),
        ("MASTER_PORT", "1"),
    ])
    .expect("streamcomm-run");
    assert_eq!(figures(&info), (0, 2, 0, 2, "streamcomm-run"));
    assert_eq!(info.root, RootSpec::UniqueId(id));
}

#[test]
fn slurm_with_ntasks_per_node() {
    let info = run(&with_root(&[
        ("SLURM_PROCID", "6"),
        ("SLURM_NTASKS", "8"),
        ("SLURM_LOCALID", "2"),
        ("SLURM_NTASKS_PER_NODE", "4"),
    ]))
    .expect("slurm");
    assert_eq!(figures(&info), (6, 8, 2, 4, "slurm"));
}

#[test]
fn slurm_derives_local_size() {
    let base = [
        ("SLURM_PROCID", "6"),
        ("SLURM_NTASKS", "7"),
        ("SLURM_LOCALID", "0"),
    ];
    let mut vars = with_root(&base);
    vars.extend([("SLURM_TASKS_PER_NODE", "3(x2),1"), ("SLURM_NODEID", "2")]);
    assert_eq!(figures(&run(&vars).expect("list")), (6, 7, 0, 1, "slurm"));

    let mut vars = with_root(&[
        ("SLURM_PROCID", "5"),
        ("SLURM_NPROCS", "8"),
        ("SLURM_LOCALID", "1"),
    ]);
    vars.push(("SLURM_NNODES", "2"));
    assert_eq!(figures(&run(&vars).expect("nnodes")), (5, 8, 1, 4, "slurm"));

    let vars = with_root(&[
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "3"),
        ("SLURM_NNODES", "2"),
    ]);
    assert!(err(&vars).contains("SLURM_NTASKS_PER_NODE"));
    let mut vars = with_root(&base);
    vars.extend([("SLURM_TASKS_PER_NODE", "3(x2"), ("SLURM_NODEID", "0")]);
    assert!(err(&vars).contains("SLURM_TASKS_PER_NODE=3(x2 is not a Slurm task list; expected"));
    let mut vars = with_root(&base);
    vars.extend([("SLURM_TASKS_PER_NODE", "4,3"), ("SLURM_NODEID", "2")]);
    assert!(
        err(&vars).starts_with("SLURM_NODEID=2 is out of range; expected a node index below 2")
    );
}

#[test]
fn open_mpi() {
    let info = run(&with_root(&[
        ("OMPI_COMM_WORLD_RANK", "3"),
        ("OMPI_COMM_WORLD_SIZE", "4"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
    ]))
    .expect("ompi");
    assert_eq!(figures(&info), (3, 4, 1, 2, "openmpi"));
}

#[test]
fn pmi() {
    let info = run(&with_root(&[("PMI_RANK", "2"), ("PMI_SIZE", "4")])).expect("pmi");
    assert_eq!(figures(&info), (2, 4, 0, 1, "pmi"));
    let info = run(&with_root(&[
        ("PMI_RANK", "2"),
        ("PMI_SIZE", "4"),
        ("PMI_LOCAL_RANK", "1"),
    ]))
    .expect("pmi local");
    assert_eq!(figures(&info), (2, 4, 1, 4, "pmi"));
    let info = run(&with_root(&[
        ("PMI_RANK", "3"),
        ("PMI_SIZE", "4"),
        ("MPI_LOCALRANKID", "1"),
        ("MPI_LOCALNRANKS", "2"),
    ]))
    .expect("pmi hydra");
    assert_eq!(figures(&info), (3, 4, 1, 2, "pmi"));
}

#[test]
fn launcher_priority() {
    let info = run(&with_root(&[
        ("RANK", "1"),
        ("WORLD_SIZE", "2"),
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "1"),
        ("OMPI_COMM_WORLD_RANK", "0"),
        ("OMPI_COMM_WORLD_SIZE", "1"),
    ]))
    .expect("torchrun inside slurm");
    assert_eq!(info.launcher, "torchrun");
    let info = run(&with_root(&[
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "1"),
        ("SLURM_NTASKS_PER_NODE", "1"),
        ("PMI_RANK", "0"),
        ("PMI_SIZE", "1"),
    ]))
    .expect("slurm with pmi");
    assert_eq!(info.launcher, "slurm");
}

#[test]
fn rank_errors_name_the_variable() {
    assert_eq!(
        err(&with_root(&[("RANK", "abc"), ("WORLD_SIZE", "4")])),
        "RANK=abc is not a number; expected a non-negative integer"
    );
    assert_eq!(
        err(&with_root(&[("RANK", "5"), ("WORLD_SIZE", "4")])),
        "RANK=5 is out of range; expected an integer below WORLD_SIZE=4"
    );
    assert_eq!(
        err(&with_root(&[("RANK", "-1"), ("WORLD_SIZE", "4")])),
        "RANK=-1 is not a number; expected a non-negative integer"
    );
    assert!(
        err(&with_root(&[("RANK", "0"), ("WORLD_SIZE", "0")]))
            .contains("WORLD_SIZE=0 is not a number of ranks")
    );
    assert!(err(&with_root(&[("RANK", "0")])).contains("RANK is set but WORLD_SIZE is not"));
    assert!(err(&with_root(&[("WORLD_SIZE", "2")])).contains("WORLD_SIZE is set but RANK is not"));
    let msg = err(&with_root(&[
        ("RANK", "0"),
        ("WORLD_SIZE", "4"),
        ("LOCAL_WORLD_SIZE", "x"),
    ]));
    assert_eq!(
        msg,
        "LOCAL_WORLD_SIZE=x is not a number; expected a non-negative integer"
    );
    let msg = err(&with_root(&[
        ("RANK", "0"),
        ("WORLD_SIZE", "4"),
        ("LOCAL_RANK", "2"),
        ("LOCAL_WORLD_SIZE", "2"),
    ]));
    assert_eq!(
        msg,
        "LOCAL_RANK=2 is out of range; expected an integer below LOCAL_WORLD_SIZE=2"
    );
    let msg = err(&with_root(&[
        ("RANK", "0"),
        ("WORLD_SIZE", "2"),
        ("LOCAL_WORLD_SIZE", "3"),
    ]));
    assert_eq!(
        msg,
        "LOCAL_WORLD_SIZE=3 is out of range; expected an integer from 1 to WORLD_SIZE=2"
    );
    assert_eq!(
        err(&with_root(&[("SLURM_PROCID", "x"), ("SLURM_NTASKS", "2")])),
        "SLURM_PROCID=x is not a number; expected a non-negative integer"
    );
    assert_eq!(
        err(&with_root(&[
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_SIZE", "2")
        ])),
        "OMPI_COMM_WORLD_RANK=3 is out of range; expected an integer below OMPI_COMM_WORLD_SIZE=2"
    );
    assert!(err(&with_root(&[("PMI_RANK", "0")])).contains("PMI_RANK is set but PMI_SIZE is not"));
}

#[test]
fn no_launcher() {
    let msg = err(&with_root(&[]));
    assert!(
        msg.starts_with("no launcher environment found: set RANK/WORLD_SIZE"),
        "{msg}"
    );
    assert!(
        msg.contains("SLURM_PROCID")
            && msg.contains("OMPI_COMM_WORLD_RANK")
            && msg.contains("PMI_RANK")
    );
    // Empty variables count as unset.
    assert!(err(&with_root(&[("RANK", ""), ("WORLD_SIZE", " ")])).starts_with("no launcher"));
}

#[test]
fn root_errors() {
    let ranks = [("RANK", "0"), ("WORLD_SIZE", "1")];
    assert!(err(&ranks).starts_with("no bootstrap root"));
    let mut v = ranks.to_vec();
    v.push(("MASTER_ADDR", "127.0.0.1"));
    assert_eq!(err(&v), "MASTER_ADDR is set but MASTER_PORT is not");
    let mut v = ranks.to_vec();
    v.push(("MASTER_PORT", "1"));
    assert_eq!(err(&v), "MASTER_PORT is set but MASTER_ADDR is not");
    let mut v = ranks.to_vec();
    v.extend([("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "99999")]);
    assert_eq!(
        err(&v),
        "MASTER_PORT=99999 is not a port number; expected an integer from 0 to 65535"
    );
    let mut v = ranks.to_vec();
    v.extend([
        ("MASTER_ADDR", "no-such-host.invalid"),
        ("MASTER_PORT", "1"),
    ]);
    let msg = err(&v);
    assert!(
        msg.starts_with("MASTER_ADDR=no-such-host.invalid cannot be resolved"),
        "{msg}"
    );
    assert!(msg.ends_with("expected a host name or an IP address (IPv6 bracketed or bare)"));
    let mut v = with_root(&ranks);
    v.push(("STREAMCOMM_SECRET", "0123456789abcdef"));
    let msg = err(&v);
    assert_eq!(
        msg,
        "STREAMCOMM_SECRET (value not shown) is not a secret (has the wrong length); \
         expected exactly 32 hex digits (e.g. from `openssl rand -hex 16`)"
    );
    assert!(
        !msg.contains("0123456789abcdef"),
        "the secret leaked: {msg}"
    );
    let mut v = ranks.to_vec();
    v.push((
        "STREAMCOMM_UNIQUE_ID",
        "127.0.0.1:1/0123456789abcdef0123456789abcdeX",
    ));
    let msg = err(&v);
    assert!(
        msg.starts_with("STREAMCOMM_UNIQUE_ID (value not shown) is not a unique id ("),
        "{msg}"
    );
    assert!(
        msg.contains("; expected ADDRESS:PORT/SECRET with SECRET 32 hex digits"),
        "{msg}"
    );
    assert!(
        !msg.contains("0123456789abcdef"),
        "the secret leaked: {msg}"
    );
}

#[test]
fn root_addresses_and_secrets() {
    let ranks = [("RANK", "0"), ("WORLD_SIZE", "1")];
    let mut v = ranks.to_vec();
    v.extend([("MASTER_ADDR", "localhost"), ("MASTER_PORT", "29500")]);
    let RootSpec::Address { addr, secret } = run(&v).expect("localhost").root else {
        panic!("expected an address");
    };
    assert!(addr.ip().is_loopback() && addr.port() == 29500, "{addr}");
    assert_eq!(secret, derive_secret("localhost", 29500));
    assert_ne!(secret, derive_secret("localhost", 29501));

    let hex = "AB".repeat(16);
    let mut v = ranks.to_vec();
    v.extend([
        ("MASTER_ADDR", "[::1]"),
        ("MASTER_PORT", "7"),
        ("STREAMCOMM_SECRET", &hex),
    ]);
    let info = run(&v).expect("ipv6 with secret");
    let addr: SocketAddr = "[::1]:7".parse().expect("addr");
    assert_eq!(
        info.root,
        RootSpec::Address {
            addr,
            secret: [0xab; 16]
        }
    );
}

#[test]
fn tasks_per_node_lists() {
    assert_eq!(parse_tasks_per_node("4"), Some(vec![4]));
    assert_eq!(parse_tasks_per_node("2(x3),1"), Some(vec![2, 2, 2, 1]));
    assert_eq!(parse_tasks_per_node("1,2(x2)"), Some(vec![1, 2, 2]));
    assert_eq!(parse_tasks_per_node("x"), None);
    assert_eq!(parse_tasks_per_node("2(x)"), None);
}

#[test]
fn torchrun_agent_port_is_left_to_torchrun() {
    let mut vars = with_root(&[("RANK", "0"), ("WORLD_SIZE", "2")]);
    vars.push(("TORCHELASTIC_RUN_ID", "job"));
    let info = run(&vars).expect("torchrun agent");
    assert_eq!(info.root.unique_id().addr().port(), 29501);
    vars.push(("STREAMCOMM_ROOT_PORT", "40000"));
    let info = run(&vars).expect("explicit root port");
    assert_eq!(info.root.unique_id().addr().port(), 40000);
    vars.pop();
    vars.push(("STREAMCOMM_ROOT_PORT", "x"));
    assert_eq!(
        err(&vars),
        "STREAMCOMM_ROOT_PORT=x is not a port; expected a port number, an integer from 0 to 65535"
    );
}

#[test]
fn reads_exactly_the_listed_streamcomm_variables() {
    use std::cell::RefCell;
    use std::collections::BTreeSet;
    // Every path through `detect` that reads a STREAMCOMM_* variable: the
    // unique id; the address with a secret; torchrun's root port.
    let scenarios: [&[(&str, &str)]; 3] = [
        &[
            ("RANK", "0"),
            ("WORLD_SIZE", "1"),
            ("STREAMCOMM_UNIQUE_ID", "x"),
        ],
        &[
            ("RANK", "0"),
            ("WORLD_SIZE", "1"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "1"),
        ],
        &[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "1"),
            ("SLURM_NTASKS_PER_NODE", "1"),
        ],
    ];
    let asked = RefCell::new(BTreeSet::new());
    for vars in scenarios {
        let map: HashMap<&str, &str> = vars.iter().copied().collect();
        let _ = detect(&|k| {
            if k.starts_with("STREAMCOMM_") {
                asked.borrow_mut().insert(k.to_string());
            }
            map.get(k).map(|v| v.to_string())
        });
    }
    let listed: BTreeSet<String> = vars::LAUNCH.iter().map(|v| v.name.to_string()).collect();
    assert_eq!(asked.into_inner(), listed);
}

#[test]
fn every_bad_number_names_the_variable_the_value_and_the_format() {
    let slurm = [
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "2"),
        ("SLURM_NTASKS_PER_NODE", "2"),
    ];
    let slurm_nodes = [("SLURM_PROCID", "0"), ("SLURM_NTASKS", "2")];
    let ompi = [("OMPI_COMM_WORLD_RANK", "0"), ("OMPI_COMM_WORLD_SIZE", "2")];
    let pmi = [("PMI_RANK", "0"), ("PMI_SIZE", "2")];
    let torch = [("RANK", "0"), ("WORLD_SIZE", "2")];
    let cases: [(&[(&str, &str)], &str); 16] = [
        (&torch, "RANK"),
        (&torch, "WORLD_SIZE"),
        (&torch, "LOCAL_RANK"),
        (&torch, "LOCAL_WORLD_SIZE"),
        (&slurm, "SLURM_PROCID"),
        (&slurm, "SLURM_NTASKS"),
        (&slurm, "SLURM_LOCALID"),
        (&slurm, "SLURM_NTASKS_PER_NODE"),
        (&slurm_nodes, "SLURM_NNODES"),
        (&ompi, "OMPI_COMM_WORLD_RANK"),
        (&ompi, "OMPI_COMM_WORLD_SIZE"),
        (&ompi, "OMPI_COMM_WORLD_LOCAL_RANK"),
        (&ompi, "OMPI_COMM_WORLD_LOCAL_SIZE"),
        (&pmi, "PMI_RANK"),
        (&pmi, "MPI_LOCALRANKID"),
        (&pmi, "MPI_LOCALNRANKS"),
    ];
    for (base, var) in cases {
        let mut vars: Vec<(&str, &str)> = base.iter().copied().filter(|(k, _)| *k != var).collect();
        vars.extend(ROOT);
        vars.push((var, "two"));
        assert_eq!(
            err(&vars),
            format!("{var}=two is not a number; expected a non-negative integer")
        );
    }
}
