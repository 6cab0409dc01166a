//! What each optional feature adds, and what a build without it refuses,
//! with a clear error rather than a silent fallback. The assertions follow
//! the build's features, so this binary runs in both builds: CI runs the
//! whole suite with `--all-features` and this binary alone in a default
//! build (`cargo test -p streamcomm --test features`). The map of all test
//! binaries is in `threads/main.rs`.

use std::time::Duration;

use streamcomm::Transport;
use streamcomm::bootstrap::UniqueId;
use streamcomm::{Communicator, Config, Error};

fn rdma_device_here() -> bool {
    std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some())
}

fn verbs_config() -> Config {
    {
        let mut c = Config::default();
        c.transport = Transport::Verbs.into();
        c.timeout = Duration::from_secs(60);
        c
    }
}

/// `STREAMCOMM_TRANSPORT=verbs` with peers: `Error::Unavailable` naming
/// verbs, from a build without the feature or a host without a device;
/// `auto` and a single rank still form communicators.
#[test]
fn forced_verbs_without_a_device_is_unavailable_and_auto_still_works() {
    if cfg!(feature = "verbs") && rdma_device_here() {
        streamcomm_testkit::skip(
            &streamcomm_testkit::current_test(),
            "an RDMA device is present: the verbs tests cover it",
        );
        return;
    }
    let id = UniqueId::new().unwrap();
    let handles: Vec<_> = (0..2)
        .map(|rank| {
            std::thread::spawn(move || {
                Communicator::builder()
                    .unique_id(&id)
                    .rank(rank)
                    .size(2)
                    .config(verbs_config())
                    .build()
                    .map(|_| ())
            })
        })
        .collect();
    for h in handles {
        match h.join().unwrap() {
            Err(Error::Unavailable(msg)) => {
                assert!(msg.contains("verbs"), "{msg}");
                if !cfg!(feature = "verbs") {
                    assert!(msg.contains("`verbs` feature"), "names the feature: {msg}");
                }
            }
            other => panic!("expected Error::Unavailable, got {other:?}"),
        }
    }
    // One rank has no peers: no device needed.
    let id = UniqueId::new().unwrap();
    let one = Communicator::builder()
        .unique_id(&id)
        .rank(0)
        .size(1)
        .config(verbs_config())
        .build();
    assert!(one.is_ok(), "{:?}", one.err());
}

/// Fault rules are applied by builds with `fault-injection` and refused,
/// naming the feature, by builds without it; no rules is fine in both.
#[test]
fn fault_rules_need_the_fault_injection_feature() {
    // Reading the rules validates the configuration.
    let checked = Config::default()
        .with_vars(|name| (name == "STREAMCOMM_FAULTS").then(|| "send:peer=1:nth=2:drop".into()))
        .and_then(|config| config.validate());
    if cfg!(feature = "fault-injection") {
        assert!(checked.is_ok(), "{:?}", checked.err());
    } else {
        let err = checked.unwrap_err().to_string();
        assert!(err.contains("fault-injection"), "{err}");
    }
    assert!(Config::default().validate().is_ok());
}
