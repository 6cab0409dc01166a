//! Endpoint: the record every rank all-gathers at bootstrap.

use super::*;

/// Longest string an endpoint carries (`MAX_STRING` in endpoint.rs).
const ENDPOINT_MAX_STRING: usize = 256;

prop_compose! {
    /// Any endpoint `encode` can carry exactly (strings within the limit).
    fn endpoint()(
        host in string_upto(ENDPOINT_MAX_STRING), pid in any::<u32>(),
        shm_name in string_upto(ENDPOINT_MAX_STRING),
        nsteps in any::<u64>(), slot_bytes in any::<u64>(), shm_budget in any::<u64>(),
        tcp in prop::option::of(socket_addr()), verbs in 0..=2u8, verbs_atomics in any::<bool>(),
        recovery in prop::option::of(socket_addr()), verbs_shake in prop::option::of(socket_addr()),
    ) -> Endpoint {
        let shape = RingShape { nsteps: nsteps as usize, slot_bytes: slot_bytes as usize };
        Endpoint {
            host, pid, shm_name, shape, shm_budget, tcp, verbs, verbs_atomics, recovery, verbs_shake,
        }
    }
}

/// One length-prefixed string field of an endpoint: usually well formed
/// (text, an address, empty), sometimes too long, not UTF-8, or with a length
/// that disagrees with what follows.
fn endpoint_string_field() -> BoxedStrategy<Vec<u8>> {
    let prefixed = |body: &[u8]| {
        let mut b = (body.len() as u16).to_le_bytes().to_vec();
        b.extend_from_slice(body);
        b
    };
    prop_oneof![
        4 => string_upto(ENDPOINT_MAX_STRING + 40).prop_map(move |t| prefixed(t.as_bytes())),
        4 => socket_addr().prop_map(move |a| prefixed(a.to_string().as_bytes())),
        2 => Just(prefixed(b"")),
        1 => prop::collection::vec(any::<u8>(), 0..20).prop_map(move |b| prefixed(&b)),
        1 => (any::<u16>(), prop::collection::vec(any::<u8>(), 0..40)).prop_map(|(n, body)| {
            let mut b = n.to_le_bytes().to_vec();
            b.extend(body);
            b
        }),
    ]
    .boxed()
}

/// A fixed-width field of `n` bytes, sometimes short.
fn endpoint_fixed_field(n: usize) -> BoxedStrategy<Vec<u8>> {
    prop_oneof![
        8 => prop::collection::vec(any::<u8>(), n),
        1 => prop::collection::vec(any::<u8>(), 0..n + 2),
    ]
    .boxed()
}

/// Bytes shaped like an endpoint, field by field (version, host, pid, shm
/// name, nsteps, slot bytes, shared-memory budget, tcp address, verbs
/// stance, verbs atomics, recovery and verbs handshake addresses, then
/// perhaps trailing bytes), each
/// field usually well formed, so that decoding gets past the first checks.
fn endpoint_like_bytes() -> BoxedStrategy<Vec<u8>> {
    (
        prop_oneof![8 => Just(6u8), 1 => any::<u8>()],
        endpoint_string_field(),
        endpoint_fixed_field(4),
        endpoint_string_field(),
        (
            endpoint_fixed_field(8),
            endpoint_fixed_field(8),
            endpoint_fixed_field(8),
        ),
        endpoint_string_field(),
        prop_oneof![8 => (0..=2u8).prop_map(|x| vec![x]), 1 => endpoint_fixed_field(1)],
        prop_oneof![8 => (0..=1u8).prop_map(|x| vec![x]), 1 => endpoint_fixed_field(1)],
        (
            endpoint_string_field(),
            endpoint_string_field(),
            prop_oneof![8 => Just(Vec::new()), 1 => prop::collection::vec(any::<u8>(), 1..4)],
        ),
    )
        .prop_map(
            |(
                v,
                host,
                pid,
                shm,
                (nsteps, slot, budget),
                tcp,
                verbs,
                atomics,
                (recovery, shake, tail),
            )| {
                let mut b = vec![v];
                for f in [
                    host, pid, shm, nsteps, slot, budget, tcp, verbs, atomics, recovery, shake,
                    tail,
                ] {
                    b.extend(f);
                }
                b
            },
        )
        .boxed()
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn endpoint_from_arbitrary_bytes(
        bytes in prop_oneof![prop::collection::vec(any::<u8>(), 0..200), endpoint_like_bytes()]
    ) {
        if let Ok(e) = Endpoint::decode(&bytes) {
            prop_assert_eq!(Endpoint::decode(&e.encode()).expect("re-decode"), e);
        }
    }

    #[test]
    fn endpoint_round_trips(e in endpoint()) {
        prop_assert_eq!(Endpoint::decode(&e.encode()).expect("decode"), e);
    }

    #[test]
    fn endpoint_truncated_extended_or_mutated(
        e in endpoint(),
        cut in any::<prop::sample::Index>(),
        at in any::<prop::sample::Index>(),
        flip in 1..=255u8,
    ) {
        let bytes = e.encode();
        // Every field is needed, so every strict prefix is rejected.
        let cut = cut.index(bytes.len());
        prop_assert!(Endpoint::decode(&bytes[..cut]).is_err(), "prefix of {} bytes accepted", cut);
        let mut longer = bytes.clone();
        longer.push(flip);
        prop_assert!(Endpoint::decode(&longer).is_err(), "trailing byte accepted");
        let mut bad = bytes.clone();
        let at = at.index(bad.len());
        bad[at] ^= flip;
        match Endpoint::decode(&bad) {
            Ok(d) => {
                prop_assert!(at > 0, "a wrong version was accepted");
                prop_assert_eq!(Endpoint::decode(&d.encode()).expect("re-decode"), d);
            }
            Err(err) => prop_assert!(matches!(err, Error::Bootstrap(_)), "{err}"),
        }
    }

    /// Over-long strings are cut by `encode`; the result must still decode.
    /// Ignored: fails today (see `bug_endpoint_encode_splits_a_character`).
    #[test]
    fn endpoint_with_long_strings_still_decodes(
        host in string_upto(2 * ENDPOINT_MAX_STRING),
        shm_name in string_upto(2 * ENDPOINT_MAX_STRING),
    ) {
        let e = plain_endpoint(host, shm_name);
        let d = Endpoint::decode(&e.encode());
        prop_assert!(d.is_ok(), "an encoded endpoint does not decode: {:?}", d);
        let d = d.expect("checked");
        prop_assert!(e.host.starts_with(&d.host) && e.shm_name.starts_with(&d.shm_name));
    }
}

/// Regression for a bug found by the fuzzer: `Endpoint::encode` keeps the
/// first 256 *bytes* of a longer string, which may end inside a multi-byte
/// character; the peer's `decode` then fails with "endpoint string is not
/// UTF-8" and the communicator cannot bootstrap.
#[test]
fn bug_endpoint_encode_splits_a_character() {
    let e = plain_endpoint(format!("{}é", "a".repeat(255)), String::new());
    let decoded = Endpoint::decode(&e.encode());
    assert!(decoded.is_ok(), "{decoded:?}");
}

/// An endpoint of a shared-memory-only rank named by `host` and
/// `shm_name` (its other fields ordinary).
fn plain_endpoint(host: String, shm_name: String) -> Endpoint {
    Endpoint {
        host,
        pid: 1,
        shm_name,
        shape: RingShape {
            nsteps: 8,
            slot_bytes: 4096,
        },
        shm_budget: 1 << 26,
        tcp: None,
        verbs: 0,
        verbs_atomics: false,
        recovery: None,
        verbs_shake: None,
    }
}
