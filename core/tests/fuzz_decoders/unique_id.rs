//! UniqueId: binary and text forms.

use super::*;

/// Checks what every decoded id must satisfy: both encodings give it back.
fn assert_id_consistent(id: &UniqueId) {
    assert_eq!(
        UniqueId::from_bytes(&id.to_bytes()).expect("re-decode"),
        *id
    );
    assert_eq!(id.to_string().parse::<UniqueId>().expect("re-parse"), *id);
}

/// 44 bytes that pass the magic and version checks (to reach deeper code),
/// with any address family byte.
fn id_like_bytes() -> BoxedStrategy<Vec<u8>> {
    (
        prop_oneof![Just(4u8), Just(6u8), any::<u8>()],
        prop::collection::vec(any::<u8>(), UniqueId::BYTES - 6),
    )
        .prop_map(|(family, rest)| {
            let mut b = b"SCID\x01".to_vec();
            b.push(family);
            b.extend(rest);
            b
        })
        .boxed()
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn unique_id_from_arbitrary_bytes(
        bytes in prop_oneof![prop::collection::vec(any::<u8>(), 0..100), id_like_bytes()]
    ) {
        if let Ok(id) = UniqueId::from_bytes(&bytes) {
            prop_assert_eq!(bytes.len(), UniqueId::BYTES);
            assert_id_consistent(&id);
        }
    }

    #[test]
    fn unique_id_round_trips(addr in socket_addr(), secret in any::<[u8; 16]>()) {
        let id = UniqueId::from_parts(addr, secret);
        prop_assert_eq!(UniqueId::from_bytes(&id.to_bytes()).expect("decode"), id);
        prop_assert_eq!(id.to_string().parse::<UniqueId>().expect("parse"), id);
        prop_assert_eq!((id.addr(), *id.secret()), (addr, secret));
    }

    #[test]
    fn unique_id_truncated_or_mutated(
        addr in socket_addr(),
        secret in any::<[u8; 16]>(),
        (cut, at, flip) in mutations(UniqueId::BYTES),
    ) {
        let bytes = UniqueId::from_parts(addr, secret).to_bytes();
        prop_assert!(UniqueId::from_bytes(&bytes[..cut]).is_err());
        let mut longer = bytes.to_vec();
        longer.push(flip);
        prop_assert!(UniqueId::from_bytes(&longer).is_err());
        let mut bad = bytes;
        bad[at] ^= flip;
        match UniqueId::from_bytes(&bad) {
            Ok(id) => {
                // Magic and version are always checked (a family byte
                // flipped from 4 to 6 is another valid id).
                prop_assert!(at >= 5, "mutated header byte {} accepted", at);
                assert_id_consistent(&id);
            }
            Err(e) => prop_assert!(matches!(e, Error::InvalidArgument(_)), "{e}"),
        }
    }

    #[test]
    fn unique_id_from_arbitrary_text(text in prop_oneof![".{0,80}".boxed(), unique_id_text().boxed()]) {
        if let Ok(id) = text.parse::<UniqueId>() {
            assert_id_consistent(&id);
        }
    }

    #[test]
    fn unique_id_parse_errors_hide_the_secret(
        addr in ".{0,30}",
        secret in any::<[u8; 16]>(),
        // Not '/': see `bug_unique_id_parse_error_echoes_the_secret`.
        extra in prop_oneof![Just(String::new()), "[^0-9a-fA-F/]"],
    ) {
        let hex: String = secret.iter().map(|b| format!("{b:02x}")).collect();
        let text = format!("{addr}/{hex}{extra}");
        if let Err(e) = text.parse::<UniqueId>() {
            let msg = e.to_string();
            prop_assert!(
                addr.contains(&hex) || !msg.contains(&hex),
                "error message repeats the secret: {msg}"
            );
        }
    }
}

/// Regression for a bug found by the fuzzer: the text form's parse errors
/// must not repeat the secret, but a trailing `/` makes the parser take
/// everything before it, secret included, for the address, and the error
/// quotes it: `"/000…0/"` fails with `malformed unique id: "/000…0" is not an
/// IP address with a port` (bootstrap/id.rs, `FromStr for UniqueId`). A
/// mistyped `STREAMCOMM_UNIQUE_ID` with a trailing slash thus logs the secret.
#[test]
fn bug_unique_id_parse_error_echoes_the_secret() {
    let hex = "0123456789abcdef0123456789abcdef";
    for text in [format!("127.0.0.1:1/{hex}/"), format!("/{hex}/")] {
        let msg = text.parse::<UniqueId>().expect_err("malformed").to_string();
        assert!(!msg.contains(hex), "{msg}");
    }
}
