//! Each creation stage alone, on one rank (the multi-rank paths run in
//! every integration test).

use super::*;
use crate::Error;

#[test]
fn prepare_names_a_bad_size_or_rank() {
    let id = UniqueId::new().unwrap();
    let e = prepare::prepare(&id, 0, 0, Config::default())
        .err()
        .unwrap();
    assert!(
        matches!(&e, Error::InvalidArgument(m) if m.contains("size")),
        "{e}"
    );
    let e = prepare::prepare(&id, 3, 2, Config::default())
        .err()
        .unwrap();
    assert!(
        matches!(&e, Error::InvalidArgument(m) if m.contains("rank 3")),
        "{e}"
    );
}

#[test]
fn the_stages_of_one_rank_produce_no_peers_and_no_engine_work() {
    let id = UniqueId::new().unwrap();
    let mut local = prepare::prepare(&id, 0, 1, Config::default()).unwrap();
    assert!(local.listener.is_none(), "one rank listens for nobody");
    let endpoints = exchange::exchange(&mut local).unwrap();
    assert_eq!(endpoints.len(), 1);
    assert_eq!(endpoints[0].pid, std::process::id());
    let engine = Engine::new().unwrap();
    let links = connect::connect(&mut local, &endpoints, &id, engine.handle().kick()).unwrap();
    assert!(links.peers.iter().all(Option::is_none));
    assert!(links.sources.is_empty(), "no proxied transport, no source");
    let agreed = agree::agree(&local, &endpoints, &links.peers).unwrap();
    assert_eq!(
        (agreed.topology.nhosts, agreed.topology.local_ranks),
        (1, 1)
    );
}
