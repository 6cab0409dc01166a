//! What the fault tests expect of an error, said once: a transport error
//! naming the peer whose slot was wrong, a timeout naming who was waited
//! for, and the test pairs that run one scenario over shared memory and
//! over tcp.

#![cfg(feature = "fault-injection")]

use streamcomm::Error;

/// Panics unless `error` (of the rank `who`) is a transport error about
/// rank `peer` whose cause says `says`.
pub(crate) fn transport_error_from(error: &Option<Error>, peer: usize, says: &str, who: &str) {
    match error {
        Some(e @ Error::Transport { peer: p, cause, .. }) if *p == peer => {
            assert!(cause.contains(says), "{who}: {e}")
        }
        other => panic!(
            "{who} must report a transport error about rank {peer} saying `{says}`: {other:?}"
        ),
    }
}

/// Panics unless `error` (of rank 1) is a timeout of a call named `op…`
/// waiting for rank 0 over `transport`, after its 1 s timeout (the upper
/// bound only tells it apart from the tests' long timeout, with room for
/// a loaded machine).
pub(crate) fn timeout_waiting_for_rank_0(error: &Option<Error>, op: &str, transport: &str) {
    match error {
        Some(Error::Timeout {
            op: named,
            what,
            waited_ms,
        }) => {
            assert!(named.starts_with(op), "{named}");
            assert!(
                what.contains("rank 0") && what.contains(transport),
                "{what}"
            );
            assert!(*waited_ms >= 1000 && *waited_ms < 21_000, "{waited_ms}");
        }
        other => panic!("rank 1 must time out waiting for rank 0: {other:?}"),
    }
}

/// Writes a test over shared memory and one over tcp for each line
/// `name_shm, name_tcp => scenario(args…);`, each calling the scenario
/// with its transport first.
macro_rules! shm_and_tcp {
    ($($shm:ident, $tcp:ident => $body:ident($($arg:expr),*);)*) => {
        $(
            #[test]
            fn $shm() {
                $body(streamcomm::Transport::Shm $(, $arg)*);
            }

            #[test]
            fn $tcp() {
                $body(streamcomm::Transport::Tcp $(, $arg)*);
            }
        )*
    };
}
pub(crate) use shm_and_tcp;
