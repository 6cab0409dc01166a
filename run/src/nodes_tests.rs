//! Unit tests of a node's part of a multi-node job.

use super::*;

fn args(nnodes: usize, node_rank: Option<usize>, hosts: &[&str]) -> NodeArgs {
    NodeArgs {
        nnodes,
        node_rank,
        master_addr: hosts.first().copied().unwrap_or("127.0.0.1").into(),
        master_port: 29500,
        hosts: hosts.iter().map(|h| h.to_string()).collect(),
    }
}

#[test]
fn local_addresses() {
    assert!(is_local_address("127.0.0.1".parse().expect("ip")));
    assert!(!is_local_address("0.0.0.0".parse().expect("ip")));
    assert!(!is_local_address("203.0.113.77".parse().expect("ip")));
}

#[test]
fn node_rank_from_hosts() {
    let job = NodeJob::resolve(
        &args(3, None, &["203.0.113.1", "localhost", "203.0.113.3"]),
        2,
        &|_| None,
    )
    .expect("resolve");
    assert_eq!(
        (job.node_rank(), job.first_rank(), job.world_size()),
        (1, 2, 6)
    );
    let none = find_node_rank(&["203.0.113.1".into(), "203.0.113.2".into()]).expect_err("none");
    assert!(
        none.to_string().contains("203.0.113.2 = 203.0.113.2"),
        "{none}"
    );
    let both = find_node_rank(&["127.0.0.1".into(), "127.0.0.2".into()]).expect_err("both");
    assert!(both.to_string().contains("[0, 1]"), "{both}");
}

#[test]
fn secrets() {
    let secret = "0f".repeat(16);
    let get = |k: &str| (k == "STREAMCOMM_SECRET").then(|| secret.clone());
    let job = NodeJob::resolve(&args(2, Some(0), &[]), 1, &get).expect("resolve");
    assert_eq!(*job.unique_id().secret(), [0x0f; 16]);
    // Loopback master with two nodes: only the reachability warning.
    assert_eq!(job.warnings().len(), 1);
    assert!(job.warnings()[0].contains("loopback"));
    // Derived secrets agree across nodes and with the environment path.
    let a = NodeJob::resolve(&args(2, Some(0), &[]), 1, &|_| None).expect("a");
    let b = NodeJob::resolve(&args(2, Some(1), &[]), 1, &|_| None).expect("b");
    assert_eq!(a.unique_id(), b.unique_id());
    assert_eq!(
        a.unique_id().addr(),
        "127.0.0.1:29500".parse().expect("addr")
    );
    // One node: a random secret, no warning about it.
    let one = NodeJob::resolve(&args(1, Some(0), &[]), 1, &|_| None).expect("one");
    assert_ne!(one.unique_id(), a.unique_id());
    assert!(one.warnings().is_empty());
    let bad = |k: &str| (k == "STREAMCOMM_SECRET").then(|| "xyz".to_string());
    let err = NodeJob::resolve(&args(2, Some(0), &[]), 1, &bad).expect_err("bad secret");
    assert!(err.to_string().contains("STREAMCOMM_SECRET"), "{err}");
}

#[test]
fn node_zero_must_own_the_master_address() {
    let mut a = args(2, Some(0), &[]);
    a.master_addr = "203.0.113.9".into();
    let job = NodeJob::resolve(&a, 1, &|_| None).expect("resolve");
    let err = job.launcher("true", ["x"]).expect_err("not local");
    assert!(
        err.to_string().contains("not an address of this host"),
        "{err}"
    );
    // Other nodes do not serve, so they need not own it.
    a.node_rank = Some(1);
    let job = NodeJob::resolve(&a, 1, &|_| None).expect("resolve");
    assert!(job.launcher("true", ["x"]).is_ok());
}
