//! Property-based fuzzing of every decoder that reads untrusted input: bytes
//! from the network or shared memory (bootstrap hellos and replies, tcp
//! hellos and frame headers, endpoints, the call signatures in slot headers),
//! unique ids handed between processes, and the text of launcher and
//! `STREAMCOMM_*` environment variables and of `streamcomm-run`'s arguments.
//!
//! Four kinds of property, for every decoder:
//!
//! 1. arbitrary input never panics: the decoder returns `Ok` or `Err`;
//! 2. `encode` then `decode` gives back any valid value;
//! 3. truncations and single-byte mutations of valid encodings never panic,
//!    and are rejected or decode to a value that re-encodes consistently;
//! 4. a tcp frame header announcing more than the slot size is rejected from
//!    the header alone (except the two control lengths `CLOSE_LEN` and
//!    `ABORT_LEN`).
//!
//! The bootstrap wire decoders are crate-private, so they are fuzzed through
//! the public surface: strangers throw garbage at a live root while real ranks
//! join and gather, and a fake root feeds arbitrary replies to a real client.
//!
//! Each property runs `PROPTEST_CASES` cases (default 2000; the socket ones
//! run a fraction of that). A failing case is printed, shrunk, by proptest;
//! no regression files are written. The garbage thrown at a live root comes
//! from `FUZZ_SEED` (printed; random when unset).
//!
//! Bugs the fuzzing found (a panic on a huge `STREAMCOMM_TIMEOUT`, a secret
//! quoted in a parse error, UTF-8 split by `Endpoint::encode`, a truncated
//! `STREAMCOMM_SPIN`) are fixed; the `bug_*` tests keep them fixed.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::{
    Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, SocketAddrV4, SocketAddrV6, TcpListener, TcpStream,
};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::Config as ProptestConfig;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use streamcomm::barrier::{BarrierAlgo, Inter};
use streamcomm::bootstrap::{Bootstrap, RootOptions, RootServer, UniqueId, MAX_RANKS};
use streamcomm::comm::Endpoint;
use streamcomm::config::{Config, HostsOverride};
use streamcomm::launch::cli::parse_args;
use streamcomm::launch::env::{detect, RootSpec};
use streamcomm::plan::{build, signature, Collective, PlanParams};
use streamcomm::transport::ring::RingShape;
use streamcomm::transport::tcp::frame::{
    FrameHeader, Hello as TcpHello, ABORT_LEN, CLOSE_LEN, HEADER_BYTES, HELLO_BYTES,
};
use streamcomm::{DataType, Error, ReduceOp};

// ---------------------------------------------------------------------------
// Configuration and shared strategies
// ---------------------------------------------------------------------------

/// Cases per property: `PROPTEST_CASES`, or 2000.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(2000)
}

/// The configuration of the pure (in-memory) properties.
fn config() -> ProptestConfig {
    ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// The configuration of properties that open sockets and threads per case.
fn socket_config(divisor: u32) -> ProptestConfig {
    ProptestConfig {
        cases: (cases() / divisor).max(8),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// A fixed-size byte array.
fn bytes_n<const N: usize>() -> impl Strategy<Value = [u8; N]> {
    prop::collection::vec(any::<u8>(), N)
        .prop_map(|v| <[u8; N]>::try_from(v).expect("strategy yields N bytes"))
}

/// Any socket address whose text and binary forms can be exact (IPv6 flow
/// info is carried by neither, so it is 0; scope ids are).
fn socket_addr() -> impl Strategy<Value = SocketAddr> {
    prop_oneof![
        (any::<[u8; 4]>(), any::<u16>())
            .prop_map(|(ip, port)| SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from(ip), port))),
        (bytes_n::<16>(), any::<u16>(), any::<u32>()).prop_map(|(ip, port, scope)| {
            SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from(ip), port, 0, scope))
        }),
        (bytes_n::<16>(), any::<u16>()).prop_map(|(ip, port)| {
            SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from(ip), port, 0, 0))
        }),
    ]
}

/// A string of at most `max` bytes, often right at the limit and often with
/// multi-byte characters.
fn string_upto(max: usize) -> impl Strategy<Value = String> {
    let fill = move |chars: Vec<char>| {
        let mut s = String::new();
        for c in chars {
            if s.len() + c.len_utf8() > max {
                break;
            }
            s.push(c);
        }
        s
    };
    prop_oneof![
        prop::collection::vec(any::<char>(), 0..=max / 2 + 8).prop_map(fill),
        prop::collection::vec(prop::char::range(' ', '~'), 0..=max + 8).prop_map(fill),
    ]
}

/// A cut (a strict prefix length) of an encoding of `len` bytes, and a
/// mutation: a byte index and a non-zero value to xor it with.
fn mutations(len: usize) -> impl Strategy<Value = (usize, usize, u8)> {
    (0..len.max(1), 0..len.max(1), 1..=255u8)
}

/// Text that a fuzzer of environment values should try: numbers of every
/// shape, arbitrary Unicode, and pieces of the real syntaxes.
fn env_value() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u64..10).prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        Just("18446744073709551616".to_string()),
        Just("99999999999999999999999999".to_string()),
        (0u64..10).prop_map(|n| format!("  {n}\t")),
        (0u64..10).prop_map(|n| format!("+{n}")),
        Just(String::new()),
        Just(" ".to_string()),
        ".{0,24}",
        "[0-9a-fA-F]{30,34}",
        "[0-9kKmMgG. eE+-]{0,12}",
        slurm_task_list(),
        unique_id_text(),
    ]
}

/// Slurm's compressed task lists (`2(x3),1`), well- and ill-formed.
fn slurm_task_list() -> impl Strategy<Value = String> {
    prop::collection::vec(
        (
            0usize..6,
            prop_oneof![Just(None), (0usize..5).prop_map(Some), Just(Some(1 << 20))],
            any::<bool>(),
        ),
        1..5,
    )
    .prop_map(|items| {
        items
            .iter()
            .map(|&(count, times, closed)| match times {
                None => count.to_string(),
                Some(t) if closed => format!("{count}(x{t})"),
                Some(t) => format!("{count}(x{t}"),
            })
            .collect::<Vec<_>>()
            .join(",")
    })
}

/// A unique id's text form, valid or damaged.
fn unique_id_text() -> impl Strategy<Value = String> {
    (
        socket_addr(),
        any::<[u8; 16]>(),
        0usize..60,
        any::<char>(),
        any::<bool>(),
    )
        .prop_map(|(addr, secret, at, c, damage)| {
            let text = UniqueId::from_parts(addr, secret).to_string();
            if !damage {
                return text;
            }
            let mut chars: Vec<char> = text.chars().collect();
            let at = at % chars.len();
            chars[at] = c;
            chars.into_iter().collect()
        })
}

// ---------------------------------------------------------------------------
// UniqueId: binary and text forms
// ---------------------------------------------------------------------------

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
fn id_like_bytes() -> impl Strategy<Value = Vec<u8>> {
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

// ---------------------------------------------------------------------------
// Endpoint: the record every rank all-gathers at bootstrap
// ---------------------------------------------------------------------------

/// Longest string an endpoint carries (`MAX_STRING` in endpoint.rs).
const ENDPOINT_MAX_STRING: usize = 256;

/// Any endpoint `encode` can carry exactly (strings within the limit).
fn endpoint() -> impl Strategy<Value = Endpoint> {
    (
        string_upto(ENDPOINT_MAX_STRING),
        any::<u32>(),
        string_upto(ENDPOINT_MAX_STRING),
        any::<u64>(),
        any::<u64>(),
        prop::option::of(socket_addr()),
    )
        .prop_map(|(host, pid, shm_name, nsteps, slot_bytes, tcp)| Endpoint {
            host,
            pid,
            shm_name,
            shape: RingShape {
                nsteps: nsteps as usize,
                slot_bytes: slot_bytes as usize,
            },
            tcp,
        })
}

/// One length-prefixed string field of an endpoint: usually well formed
/// (text, an address, empty), sometimes too long, not UTF-8, or with a length
/// that disagrees with what follows.
fn endpoint_string_field() -> impl Strategy<Value = Vec<u8>> {
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
}

/// A fixed-width field of `n` bytes, sometimes short.
fn endpoint_fixed_field(n: usize) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        8 => prop::collection::vec(any::<u8>(), n),
        1 => prop::collection::vec(any::<u8>(), 0..n + 2),
    ]
}

/// Bytes shaped like an endpoint, field by field (version, host, pid, shm
/// name, nsteps, slot bytes, tcp address, then perhaps trailing bytes), each
/// field usually well formed, so that decoding gets past the first checks.
fn endpoint_like_bytes() -> impl Strategy<Value = Vec<u8>> {
    (
        prop_oneof![8 => Just(1u8), 1 => any::<u8>()],
        endpoint_string_field(),
        endpoint_fixed_field(4),
        endpoint_string_field(),
        endpoint_fixed_field(8),
        endpoint_fixed_field(8),
        endpoint_string_field(),
        prop_oneof![8 => Just(Vec::new()), 1 => prop::collection::vec(any::<u8>(), 1..4)],
    )
        .prop_map(|(v, host, pid, shm, nsteps, slot, tcp, tail)| {
            let mut b = vec![v];
            for f in [host, pid, shm, nsteps, slot, tcp, tail] {
                b.extend(f);
            }
            b
        })
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
        let e = Endpoint {
            host,
            pid: 1,
            shm_name,
            shape: RingShape { nsteps: 8, slot_bytes: 4096 },
            tcp: None,
        };
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
    let e = Endpoint {
        host: format!("{}é", "a".repeat(255)),
        pid: 1,
        shm_name: String::new(),
        shape: RingShape {
            nsteps: 8,
            slot_bytes: 4096,
        },
        tcp: None,
    };
    let decoded = Endpoint::decode(&e.encode());
    assert!(decoded.is_ok(), "{decoded:?}");
}

// ---------------------------------------------------------------------------
// tcp transport: hello and frame header
// ---------------------------------------------------------------------------

/// Any tcp hello.
fn tcp_hello() -> impl Strategy<Value = TcpHello> {
    (any::<[u8; 16]>(), any::<u32>(), any::<u32>(), any::<u32>()).prop_map(
        |(secret, from, to, socket)| TcpHello {
            secret,
            from,
            to,
            socket,
        },
    )
}

/// Slot sizes: small, around the control values, and beyond `u32`.
fn max_len() -> impl Strategy<Value = usize> {
    prop_oneof![
        0usize..5000,
        any::<u32>().prop_map(|n| n as usize),
        Just(ABORT_LEN as usize - 1),
        Just(u32::MAX as usize),
        Just(usize::MAX),
    ]
}

/// A payload length: any `u32`, with extra weight on the edges.
fn frame_len() -> impl Strategy<Value = u32> {
    prop_oneof![
        any::<u32>(),
        0u32..5000,
        Just(CLOSE_LEN),
        Just(ABORT_LEN),
        Just(ABORT_LEN - 1),
    ]
}

/// A frame header.
fn header(len: u32, seq: u64, sig: u64) -> FrameHeader {
    FrameHeader { len, seq, sig }
}

/// A slot size and a (non-control) length above it.
fn over_max_len() -> impl Strategy<Value = (usize, u32)> {
    prop_oneof![0u32..5000, 0..ABORT_LEN - 1]
        .prop_flat_map(|max| (Just(max as usize), (max + 1)..ABORT_LEN))
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn tcp_hello_from_arbitrary_bytes(
        b in bytes_n::<HELLO_BYTES>(),
        secret in any::<[u8; 16]>(),
        use_header in any::<bool>(),
        use_secret in any::<bool>(),
    ) {
        // Often plant a valid magic and version, or the expected secret, so
        // that decoding gets further.
        let mut b = b;
        if use_header {
            let valid = TcpHello { secret, from: 0, to: 0, socket: 0 }.encode();
            b[0..8].copy_from_slice(&valid[0..8]);
        }
        if use_secret {
            b[8..24].copy_from_slice(&secret);
        }
        if let Ok(h) = TcpHello::decode(&b, &secret) {
            prop_assert_eq!(h.secret, secret);
            let mut expect = b;
            expect[36..].fill(0); // padding: ignored on decode, zero on encode
            prop_assert_eq!(h.encode(), expect);
        }
    }

    #[test]
    fn tcp_hello_round_trips_and_rejects_mutations(
        h in tcp_hello(),
        other in any::<[u8; 16]>(),
        at in 0..HELLO_BYTES,
        flip in 1..=255u8,
    ) {
        let b = h.encode();
        prop_assert_eq!(TcpHello::decode(&b, &h.secret).expect("decode"), h);
        if other != h.secret {
            prop_assert!(TcpHello::decode(&b, &other).is_err());
        }
        let mut bad = b;
        bad[at] ^= flip;
        match TcpHello::decode(&bad, &h.secret) {
            // Magic, version and secret are all checked.
            Ok(got) => {
                prop_assert!(at >= 24, "mutated byte {} of the header accepted", at);
                prop_assert_eq!(got.secret, h.secret);
                let mut expect = bad;
                expect[36..].fill(0);
                prop_assert_eq!(got.encode(), expect);
            }
            Err(e) => {
                prop_assert!(at < 24, "mutated byte {} rejected: {}", at, e);
                prop_assert!(matches!(e, Error::Bootstrap(_)));
            }
        }
    }

    #[test]
    fn frame_header_from_arbitrary_bytes(
        b in bytes_n::<HEADER_BYTES>(),
        good_magic in any::<bool>(),
        max in max_len(),
        expected_seq in any::<u64>(),
        plant_len in prop::option::of(frame_len()),
        plant_seq in any::<bool>(),
    ) {
        // Often plant a valid magic, a plausible length and the expected
        // sequence number, so that decoding gets further.
        let mut b = b;
        if good_magic {
            b[0..4].copy_from_slice(&header(0, 0, 0).encode()[0..4]);
        }
        if let Some(len) = plant_len {
            b[4..8].copy_from_slice(&len.to_le_bytes());
        }
        if plant_seq {
            b[8..16].copy_from_slice(&expected_seq.to_le_bytes());
        }
        if let Ok(h) = FrameHeader::decode(&b, max, expected_seq) {
            if h.len == CLOSE_LEN {
                prop_assert_eq!(h.seq, expected_seq);
                prop_assert_eq!(&header(CLOSE_LEN, 0, h.sig).encode()[16..], &b[16..]);
            } else {
                // Data and abort frames re-encode to exactly what was read.
                prop_assert_eq!(h.encode(), b);
                if h.len != ABORT_LEN {
                    prop_assert!(h.len as usize <= max);
                    prop_assert_eq!(h.seq, expected_seq);
                }
            }
        }
    }

    #[test]
    fn frame_header_round_trips(
        len in frame_len(),
        seq in any::<u64>(),
        sig in any::<u64>(),
        slack in 0usize..3,
    ) {
        let h = header(len, seq, sig);
        let max = (len as usize).saturating_add(slack);
        let got = FrameHeader::decode(&h.encode(), max, seq).expect("decode");
        prop_assert_eq!(got, h);
    }

    #[test]
    fn frame_header_over_max_len_is_rejected_before_the_seq(
        (max, len) in over_max_len(),
        seq in any::<u64>(),
        sig in any::<u64>(),
        expected in any::<u64>(),
    ) {
        prop_assert!(len != CLOSE_LEN && len != ABORT_LEN && len as usize > max);
        let err = FrameHeader::decode(&header(len, seq, sig).encode(), max, expected)
            .expect_err("oversized frame accepted");
        // The length is judged first, whatever the (untrusted) sequence number.
        prop_assert!(err.contains("exceeds"), "{}", err);
    }

    #[test]
    fn frame_header_control_lengths_pass_any_max_len(
        max in max_len(),
        seq in any::<u64>(),
        sig in any::<u64>(),
        expected in any::<u64>(),
    ) {
        let close = FrameHeader::decode(&header(CLOSE_LEN, seq, sig).encode(), max, expected);
        prop_assert_eq!(close, Ok(header(CLOSE_LEN, expected, sig)));
        let abort = FrameHeader::decode(&header(ABORT_LEN, seq, sig).encode(), max, expected);
        prop_assert_eq!(abort, Ok(header(ABORT_LEN, seq, sig)));
    }

    #[test]
    fn frame_header_mutations(
        len in 0u32..=4096,
        seq in any::<u64>(),
        sig in any::<u64>(),
        at in 0..HEADER_BYTES,
        flip in 1..=255u8,
    ) {
        let max = 4096usize;
        let mut b = header(len, seq, sig).encode();
        b[at] ^= flip;
        match FrameHeader::decode(&b, max, seq) {
            Ok(h) => {
                prop_assert!(at >= 4, "mutated magic byte {} accepted", at);
                prop_assert!(!(8..16).contains(&at), "mutated seq byte {} accepted", at);
                prop_assert_eq!(h.encode(), b);
                prop_assert!(h.len as usize <= max);
            }
            Err(_) => prop_assert!(at < 16, "mutated signature byte {} rejected", at),
        }
    }
}

// ---------------------------------------------------------------------------
// Slot signatures: read from every slot header (shared memory and tcp)
// ---------------------------------------------------------------------------

/// One call: collective, element type, operator, count, and the ranks.
type Call = (Collective, DataType, ReduceOp, usize, PlanParams);

/// Any call on up to 8 ranks (not all of them valid).
fn call() -> impl Strategy<Value = Call> {
    (1usize..9, 0usize..8, 0usize..(1 << 20))
        .prop_flat_map(|(nranks, pick, count)| {
            let rank = 0..nranks;
            (Just((nranks, pick, count)), rank, 0..nranks)
        })
        .prop_flat_map(|((nranks, pick, count), rank, root)| {
            let collective = match pick {
                0 => Collective::AllReduce,
                1 => Collective::AllGather,
                2 => Collective::ReduceScatter,
                3 => Collective::Broadcast { root },
                4 => Collective::Reduce { root },
                5 => Collective::AllToAll,
                6 if nranks > 1 => Collective::Send {
                    peer: (rank + 1) % nranks,
                },
                _ => Collective::Barrier,
            };
            let params = PlanParams {
                rank,
                nranks,
                slot_bytes: 1 << 20,
                nsteps: 8,
            };
            (
                Just(collective),
                prop::sample::select(DataType::ALL.to_vec()),
                prop::sample::select(ReduceOp::ALL.to_vec()),
                Just(count),
                Just(params),
            )
        })
}

/// What a signature must tell apart: collective kind and root, element
/// type, operator (for reductions only) and count.
fn call_identity(c: &Call, sent: usize) -> (String, DataType, Option<ReduceOp>, usize) {
    let (collective, dtype, op, _, _) = c;
    let reduces = matches!(
        collective,
        Collective::AllReduce | Collective::ReduceScatter | Collective::Reduce { .. }
    );
    let kind = match collective {
        Collective::Send { .. } | Collective::Recv { .. } => "p2p".to_string(),
        other => format!("{other:?}"),
    };
    (kind, *dtype, reduces.then_some(*op), sent)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn signature_describe_arbitrary(sig in any::<u64>()) {
        let text = signature::describe(sig);
        prop_assert!(!text.is_empty());
        if sig >> 63 == 0 {
            prop_assert_eq!(text, "an unsigned slot");
        }
    }

    #[test]
    fn signature_describes_its_call(c in call()) {
        let (collective, dtype, op, count, params) = c;
        // Not every call is valid (e.g. uneven reduce-scatter counts).
        if let Ok(plan) = build(collective, dtype, op, count, &params) {
            let sig = signature::of(&plan);
            prop_assert!(sig >> 63 == 1, "signature {:#x} looks unsigned", sig);
            let text = signature::describe(sig);
            let n = plan.send_count.max(plan.recv_count);
            prop_assert!(text.contains(&format!(" of {n} {dtype}")), "{}", text);
        }
    }

    #[test]
    fn signatures_tell_calls_apart(a in call(), other in call(), how in 0u8..6) {
        // b is a with one thing changed (or a itself on another rank, or an
        // unrelated call), so that equal identities come up often.
        let mut b = a;
        match how {
            0 => b.4.rank = other.4.rank % a.4.nranks,
            1 => b.1 = other.1,
            2 => b.2 = other.2,
            3 => b.3 = other.3,
            4 => b.0 = other.0,
            _ => b = other,
        }
        let pa = build(a.0, a.1, a.2, a.3, &a.4);
        let pb = build(b.0, b.1, b.2, b.3, &b.4);
        if let (Ok(pa), Ok(pb)) = (pa, pb) {
            let ia = call_identity(&a, pa.send_count.max(pa.recv_count));
            let ib = call_identity(&b, pb.send_count.max(pb.recv_count));
            let (sa, sb) = (signature::of(&pa), signature::of(&pb));
            prop_assert_eq!(
                ia == ib,
                sa == sb,
                "{:?} -> {} vs {:?} -> {}",
                ia,
                signature::describe(sa),
                ib,
                signature::describe(sb)
            );
        }
    }
}

// ---------------------------------------------------------------------------
// Launcher environment, configuration, names
// ---------------------------------------------------------------------------

/// Every variable `launch::env::detect` reads, except `MASTER_ADDR` (which is
/// resolved, and so only ever given addresses that need no DNS).
const LAUNCH_VARS: &[&str] = &[
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "STREAMCOMM_LAUNCHER",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_NPROCS",
    "SLURM_LOCALID",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE",
    "SLURM_NODEID",
    "SLURM_NNODES",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "PMI_RANK",
    "PMI_SIZE",
    "MPI_LOCALRANKID",
    "PMI_LOCAL_RANK",
    "MPI_LOCALNRANKS",
    "PMI_LOCAL_SIZE",
    "STREAMCOMM_UNIQUE_ID",
    "MASTER_PORT",
    "STREAMCOMM_ROOT_PORT",
    "TORCHELASTIC_RUN_ID",
    "STREAMCOMM_SECRET",
];

/// `MASTER_ADDR` values that resolve without a name server: IP literals in
/// every accepted spelling, and garbage made unresolvable by a NUL byte.
fn master_addr() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<[u8; 4]>().prop_map(|ip| Ipv4Addr::from(ip).to_string()),
        bytes_n::<16>().prop_map(|ip| Ipv6Addr::from(ip).to_string()),
        bytes_n::<16>().prop_map(|ip| format!("[{}]", Ipv6Addr::from(ip))),
        any::<[u8; 4]>().prop_map(|ip| format!("  {}\n", Ipv4Addr::from(ip))),
        ".{0,16}".prop_map(|s| format!("{s}\0")),
        Just(" ".to_string()),
    ]
}

/// The variables of each launcher family, rank and size first.
const LAUNCH_FAMILIES: &[&[&str]] = &[
    &["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"],
    &[
        "SLURM_PROCID",
        "SLURM_NTASKS",
        "SLURM_NPROCS",
        "SLURM_LOCALID",
        "SLURM_NTASKS_PER_NODE",
        "SLURM_TASKS_PER_NODE",
        "SLURM_NODEID",
        "SLURM_NNODES",
    ],
    &[
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "OMPI_COMM_WORLD_LOCAL_SIZE",
    ],
    &[
        "PMI_RANK",
        "PMI_SIZE",
        "MPI_LOCALRANKID",
        "PMI_LOCAL_RANK",
        "MPI_LOCALNRANKS",
        "PMI_LOCAL_SIZE",
    ],
];

/// The root's variables: a unique id, or an address, port and secret.
fn root_vars() -> impl Strategy<Value = Vec<(&'static str, String)>> {
    let port = prop_oneof![
        8 => (1u32..65536).prop_map(|p| p.to_string()),
        1 => env_value(),
    ];
    prop_oneof![
        1 => unique_id_text().prop_map(|id| vec![("STREAMCOMM_UNIQUE_ID", id)]),
        2 => (
            prop_oneof![
                3 => any::<[u8; 4]>().prop_map(|ip| Ipv4Addr::from(ip).to_string()),
                1 => master_addr(),
            ],
            port.clone(),
            prop::option::of(prop_oneof![
                3 => "[0-9a-fA-F]{32}".boxed(),
                1 => env_value().boxed()
            ]),
            prop::option::of(Just("run-1".to_string())),
            prop::option::of(port),
        )
            .prop_map(|(addr, port, secret, torch, root_port)| {
                let mut v = vec![("MASTER_ADDR", addr), ("MASTER_PORT", port)];
                v.extend(secret.map(|s| ("STREAMCOMM_SECRET", s)));
                v.extend(torch.map(|t| ("TORCHELASTIC_RUN_ID", t)));
                v.extend(root_port.map(|p| ("STREAMCOMM_ROOT_PORT", p)));
                v
            }),
    ]
}

/// A launcher environment: either any of the variables with fuzzed values,
/// or one launcher's variables with mostly small numbers and a root (so that
/// many cases get all the way through), plus a stray variable or two.
fn launch_env() -> impl Strategy<Value = BTreeMap<String, String>> {
    let anything = (
        prop::collection::btree_map(prop::sample::select(LAUNCH_VARS), env_value(), 0..10),
        prop::option::of(master_addr()),
    )
        .prop_map(|(vars, addr)| {
            let mut map: BTreeMap<String, String> =
                vars.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
            if let Some(addr) = addr {
                map.insert("MASTER_ADDR".into(), addr);
            }
            map
        });
    let small = prop_oneof![
        10 => (0u8..4).prop_map(|n| n.to_string()),
        1 => slurm_task_list(),
        1 => env_value(),
    ];
    let launcher = (
        prop::sample::select(LAUNCH_FAMILIES.to_vec()),
        prop::collection::vec((prop::bool::weighted(0.85), small), 8),
        root_vars(),
        prop::collection::btree_map(prop::sample::select(LAUNCH_VARS), env_value(), 0..2),
        prop::option::of(prop_oneof![
            Just("streamcomm-run".to_string()),
            Just("torchrun".to_string())
        ]),
    )
        .prop_map(|(family, values, root, stray, name)| {
            let mut map = BTreeMap::new();
            for (var, (present, value)) in family.iter().zip(values) {
                if present {
                    map.insert(var.to_string(), value);
                }
            }
            map.extend(root.into_iter().map(|(k, v)| (k.to_string(), v)));
            map.extend(stray.into_iter().map(|(k, v)| (k.to_string(), v)));
            if let Some(name) = name {
                map.insert("STREAMCOMM_LAUNCHER".into(), name);
            }
            map
        });
    // Consistent figures under one launcher's names, one of them perhaps
    // replaced by a fuzzed value.
    let consistent = (
        prop::sample::select(vec![
            ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"],
            [
                "SLURM_PROCID",
                "SLURM_NTASKS",
                "SLURM_LOCALID",
                "SLURM_NTASKS_PER_NODE",
            ],
            [
                "OMPI_COMM_WORLD_RANK",
                "OMPI_COMM_WORLD_SIZE",
                "OMPI_COMM_WORLD_LOCAL_RANK",
                "OMPI_COMM_WORLD_LOCAL_SIZE",
            ],
            ["PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"],
        ]),
        (1usize..9)
            .prop_flat_map(|size| (Just(size), 0..size, 1..=size))
            .prop_flat_map(|(size, rank, local_size)| {
                (Just((size, rank, local_size)), 0..local_size)
            }),
        root_vars(),
        prop::option::of((0usize..4, env_value())),
    )
        .prop_map(
            |(names, ((size, rank, local_size), local_rank), root, fuzz)| {
                let mut values = [rank, size, local_rank, local_size].map(|n| n.to_string());
                if let Some((i, v)) = fuzz {
                    values[i] = v;
                }
                let mut map: BTreeMap<String, String> = names
                    .iter()
                    .zip(values)
                    .map(|(k, v)| (k.to_string(), v))
                    .collect();
                map.extend(root.into_iter().map(|(k, v)| (k.to_string(), v)));
                map
            },
        );
    prop_oneof![1 => anything, 2 => launcher, 2 => consistent]
}

/// Every variable `Config::with_vars` reads.
const CONFIG_VARS: &[&str] = &[
    "STREAMCOMM_BUFFSIZE",
    "STREAMCOMM_NSTEPS",
    "STREAMCOMM_TIMEOUT",
    "STREAMCOMM_PROGRESS",
    "STREAMCOMM_SPIN",
    "STREAMCOMM_BARRIER_ALGO",
    "STREAMCOMM_HOSTS_OVERRIDE",
    "STREAMCOMM_TRANSPORT",
    "STREAMCOMM_NCHANNELS",
    "STREAMCOMM_SOCKET_IFNAME",
    "STREAMCOMM_DEBUG",
];

/// Values aimed at the config parsers, plus the generic ones.
fn config_value() -> impl Strategy<Value = String> {
    prop_oneof![
        env_value(),
        (
            0u64..5000,
            prop::sample::select(vec!["", "k", "K", "m", "M", "g", "G"])
        )
            .prop_map(|(n, unit)| format!("{n}{unit}")),
        any::<f64>().prop_map(|f| f.to_string()),
        (0.0f64..1e6).prop_map(|f| format!("{f}")),
        prop::sample::select(vec![
            "inline", "PROXY", "auto", "shm", "tcp", "", "nan", "inf", "-0", "0.0"
        ])
        .prop_map(str::to_string),
        barrier_algo_text(),
        hosts_text(),
    ]
}

/// Names of barrier algorithms, real and mangled.
fn barrier_algo_text() -> impl Strategy<Value = String> {
    let family = prop::sample::select(vec![
        "central_counter",
        "central_flags",
        "chain",
        "tree",
        "dissemination",
        "kway",
        "hierarchical",
        "hierarchical:tree",
        "hierarchical:dissemination",
        "Tree",
        "KWAY",
        "",
        "auto",
    ]);
    let param = prop_oneof![
        Just(String::new()),
        (0u64..10).prop_map(|k| format!(":{k}")),
        any::<u64>().prop_map(|k| format!(":{k}")),
        ":[^:]{0,6}".boxed(),
        Just(":4:4".to_string()),
        Just("::".to_string()),
    ];
    (family, param, any::<bool>()).prop_map(|(f, p, pad)| {
        if pad {
            format!("  {f}{p} ")
        } else {
            format!("{f}{p}")
        }
    })
}

/// Host override texts: counts and label lists.
fn hosts_text() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u64..100).prop_map(|k| k.to_string()),
        prop::collection::vec("[a-c ]{0,3}", 0..6).prop_map(|l| l.join(",")),
        "[a-z0-9, ]{0,20}",
    ]
}

/// Any valid barrier algorithm.
fn barrier_algo() -> impl Strategy<Value = BarrierAlgo> {
    prop_oneof![
        Just(BarrierAlgo::CentralCounter),
        Just(BarrierAlgo::CentralFlags),
        Just(BarrierAlgo::Chain),
        (2usize..=usize::MAX).prop_map(|fanout| BarrierAlgo::Tree { fanout }),
        Just(BarrierAlgo::Dissemination),
        (1usize..=usize::MAX).prop_map(|k| BarrierAlgo::KWayDissemination { k }),
        Just(BarrierAlgo::Hierarchical {
            inter: Inter::Dissemination
        }),
        (2usize..=usize::MAX).prop_map(|fanout| BarrierAlgo::Hierarchical {
            inter: Inter::Tree { fanout }
        }),
    ]
}

/// Randomly re-cases ASCII letters, as the name parsers ignore case.
fn recase(s: &str, mask: u64) -> String {
    s.chars()
        .enumerate()
        .map(|(i, c)| {
            if mask >> (i % 64) & 1 == 1 {
                c.to_ascii_uppercase()
            } else {
                c
            }
        })
        .collect()
}

/// Words for `streamcomm-run`'s command line.
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
            "--master-addr",
            "--master-port",
            "--hosts",
            "--nnodes=2",
            "--master-port=0",
            "--hosts=a,b",
            "-n4",
            "-n0",
            "--bogus",
            "prog",
        ])
        .prop_map(str::to_string),
        env_value(),
        "--[a-z-]{0,10}=.{0,6}",
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn launch_detect_never_panics(vars in launch_env()) {
        let get = |k: &str| vars.get(k).cloned();
        if let Ok(info) = detect(&get) {
            prop_assert!(info.rank < info.size, "{:?}", info);
            prop_assert!(info.local_rank < info.local_size, "{:?}", info);
            prop_assert!(info.local_size <= info.size, "{:?}", info);
            prop_assert!(
                ["streamcomm-run", "torchrun", "slurm", "openmpi", "pmi"].contains(&info.launcher)
            );
            let has_id = vars
                .get("STREAMCOMM_UNIQUE_ID")
                .is_some_and(|v| !v.trim().is_empty());
            prop_assert_eq!(matches!(info.root, RootSpec::UniqueId(_)), has_id);
        }
    }

    #[test]
    fn config_with_arbitrary_vars(
        vars in prop::collection::btree_map(prop::sample::select(CONFIG_VARS), config_value(), 0..6)
    ) {
        let get = |k: &str| vars.get(k).cloned();
        if let Ok(c) = Config::default().with_vars(get) {
            prop_assert!(c.validate().is_ok(), "{:?}", c);
            prop_assert!(c.slot_bytes() >= 64 && c.slot_bytes() % 64 == 0);
        }
    }

    #[test]
    fn hosts_override_parse(text in prop_oneof![".{0,30}".boxed(), hosts_text().boxed()], size in 0usize..300) {
        match HostsOverride::parse(&text) {
            Ok(HostsOverride::RanksPerHost(k)) => {
                prop_assert!(k > 0);
                prop_assert_eq!(HostsOverride::RanksPerHost(k).labels(size).expect("labels").len(), size);
            }
            Ok(HostsOverride::Labels(labels)) => {
                prop_assert!(!labels.is_empty());
                for l in &labels {
                    prop_assert!(!l.is_empty() && !l.contains(',') && l.trim() == l, "{:?}", l);
                }
                // Written back, the list parses to itself.
                let again = HostsOverride::parse(&labels.join(",")).expect("re-parse");
                prop_assert_eq!(again, HostsOverride::Labels(labels.clone()));
                let got = HostsOverride::Labels(labels.clone()).labels(size);
                prop_assert_eq!(got.is_ok(), labels.len() == size);
            }
            Err(e) => prop_assert!(matches!(e, Error::InvalidArgument(_))),
        }
    }

    #[test]
    fn barrier_algo_parse_arbitrary(text in prop_oneof![".{0,30}".boxed(), barrier_algo_text().boxed()]) {
        if let Ok(algo) = BarrierAlgo::parse(&text) {
            prop_assert!(algo.validate().is_ok());
            prop_assert_eq!(BarrierAlgo::parse(&algo.to_string()).expect("re-parse"), algo);
        }
    }

    #[test]
    fn barrier_algo_round_trips(algo in barrier_algo(), mask in any::<u64>()) {
        let text = recase(&algo.to_string(), mask);
        prop_assert_eq!(BarrierAlgo::parse(&format!(" {text}\t")).expect("parse"), algo);
    }

    #[test]
    fn data_type_and_reduce_op_names(text in ".{0,12}", mask in any::<u64>(), byte in any::<u8>()) {
        if let Some(t) = DataType::parse(&text) {
            prop_assert_eq!(DataType::parse(t.name()), Some(t));
        }
        if let Some(op) = ReduceOp::parse(&text) {
            prop_assert_eq!(ReduceOp::parse(op.name()), Some(op));
        }
        for t in DataType::ALL {
            prop_assert_eq!(DataType::parse(&recase(t.name(), mask)), Some(t));
        }
        for op in ReduceOp::ALL {
            prop_assert_eq!(ReduceOp::parse(&recase(op.name(), mask)), Some(op));
        }
        if let Some(t) = DataType::from_u8(byte) {
            prop_assert_eq!(t as u8, byte);
        }
        if let Some(op) = ReduceOp::from_u8(byte) {
            prop_assert_eq!(op as u8, byte);
        }
    }

    #[test]
    fn cli_parse_args_never_panics(words in prop::collection::vec(cli_word(), 0..8)) {
        let _ = parse_args(words.into_iter().map(OsString::from));
    }
}

/// Regression for a bug found by the fuzzer: a finite `STREAMCOMM_TIMEOUT`
/// too large for a `Duration` (e.g. `1e20` seconds) panics in
/// `Duration::from_secs_f64` inside `Config::with_vars` (config.rs) instead
/// of returning `Error::InvalidArgument`.
#[test]
fn bug_config_huge_timeout_panics() {
    for v in [
        "1e20",
        "18446744073709551616",
        "1.8446744073709552e19",
        "1e308",
    ] {
        let r = Config::default().with_vars(|k| (k == "STREAMCOMM_TIMEOUT").then(|| v.to_string()));
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{v}: {r:?}");
    }
}

/// Regression for a bug found by the fuzzer: `STREAMCOMM_SPIN` is parsed as
/// a `usize` and cast to `u32`, so `4294967296` silently becomes 0 (and
/// `4294967297` becomes 1) instead of being rejected.
#[test]
fn bug_config_spin_truncates() {
    let r = Config::default().with_vars(|k| (k == "STREAMCOMM_SPIN").then(|| "4294967296".into()));
    assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
}

// ---------------------------------------------------------------------------
// Bootstrap wire format, through real sockets
// ---------------------------------------------------------------------------

/// The bootstrap protocol, as documented in bootstrap/wire.rs: frames are a
/// `u32` little-endian length then the body; a hello body is magic `SCBS`,
/// version 1, the secret, rank and size; a reply body is a kind byte
/// (0 welcome, 1 data, 2 failure with a `u32` peer, `u32::MAX` for none,
/// then the reason).
mod wire {
    /// Bytes of a hello frame, length prefix included.
    pub const HELLO_FRAME: usize = 4 + 32;

    /// A hello frame.
    pub fn hello(secret: [u8; 16], rank: u32, size: u32) -> Vec<u8> {
        let mut f = 32u32.to_le_bytes().to_vec();
        f.extend_from_slice(b"SCBS");
        f.extend_from_slice(&1u32.to_le_bytes());
        f.extend_from_slice(&secret);
        f.extend_from_slice(&rank.to_le_bytes());
        f.extend_from_slice(&size.to_le_bytes());
        f
    }

    /// One frame around `body`.
    pub fn frame(body: &[u8]) -> Vec<u8> {
        let mut f = (body.len() as u32).to_le_bytes().to_vec();
        f.extend_from_slice(body);
        f
    }

    /// A reply from the root.
    #[derive(Clone, Debug)]
    pub enum Reply {
        Welcome,
        Data(Vec<u8>),
        Failure { peer: Option<u32>, reason: String },
    }

    impl Reply {
        /// The reply as one frame.
        pub fn encode(&self) -> Vec<u8> {
            match self {
                Reply::Welcome => frame(&[0]),
                Reply::Data(d) => {
                    let mut b = vec![1];
                    b.extend_from_slice(d);
                    frame(&b)
                }
                Reply::Failure { peer, reason } => {
                    let mut b = vec![2];
                    b.extend_from_slice(&peer.unwrap_or(u32::MAX).to_le_bytes());
                    b.extend_from_slice(reason.as_bytes());
                    frame(&b)
                }
            }
        }
    }
}

/// A root's loopback address with a free port.
fn loopback() -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, 0))
}

/// Runs `f` on a thread and fails if it takes longer than `limit`.
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => v,
        Err(_) => panic!("did not finish within {limit:?}"),
    }
}

/// The blob `rank` contributes to `round`.
fn blob(rank: usize, round: usize) -> Vec<u8> {
    let len = [0, 1, 7, 300, 5000][round % 5];
    (0..len)
        .map(|i| (i * 31 + rank * 7 + round) as u8)
        .collect()
}

/// `size` real ranks as threads: connect, `rounds` all-gathers, a barrier.
fn real_ranks(id: UniqueId, size: usize, rounds: usize) -> Vec<thread::JoinHandle<()>> {
    staggered_ranks(id, size, rounds, Duration::ZERO)
}

/// Like [`real_ranks`], rank `r` starting `r * stagger` late.
fn staggered_ranks(
    id: UniqueId,
    size: usize,
    rounds: usize,
    stagger: Duration,
) -> Vec<thread::JoinHandle<()>> {
    (0..size)
        .map(|rank| {
            thread::spawn(move || {
                thread::sleep(stagger * rank as u32);
                let timeout = Duration::from_secs(20);
                let mut boot = Bootstrap::connect(&id, rank, size, timeout)
                    .unwrap_or_else(|e| panic!("rank {rank} connect: {e}"));
                for round in 0..rounds {
                    let all = boot
                        .all_gather(&blob(rank, round))
                        .unwrap_or_else(|e| panic!("rank {rank} round {round}: {e}"));
                    let want: Vec<Vec<u8>> = (0..size).map(|r| blob(r, round)).collect();
                    assert!(all == want, "rank {rank} round {round}: wrong blobs");
                }
                boot.barrier().expect("barrier");
            })
        })
        .collect()
}

/// One stranger's behaviour towards the root: connect, say so on
/// `connected` (with whether it could), wait a little, send garbage.
fn throw_garbage(addr: SocketAddr, secret: [u8; 16], seed: u64, connected: mpsc::Sender<bool>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let s = TcpStream::connect(addr);
    let _ = connected.send(s.is_ok());
    let Ok(mut s) = s else {
        return; // the rendezvous is over and the listener closed
    };
    thread::sleep(Duration::from_millis(rng.gen_range(0..40)));
    let mut wrong = secret;
    wrong[rng.gen_range(0..16)] ^= rng.gen_range(1..=255u8);
    let random = |rng: &mut StdRng, n: usize| (0..n).map(|_| rng.gen()).collect::<Vec<u8>>();
    let mut linger = Duration::ZERO;
    let payload: Vec<u8> = match rng.gen_range(0..12) {
        // Random bytes.
        0 => {
            let n = rng.gen_range(0..256);
            random(&mut rng, n)
        }
        // A partial hello with the right secret, then close.
        1 => {
            let n = rng.gen_range(0..wire::HELLO_FRAME);
            wire::hello(secret, 0, 3)[..n].to_vec()
        }
        // A partial hello with the right secret, then silence.
        2 => {
            linger = Duration::from_millis(2500);
            let n = rng.gen_range(0..wire::HELLO_FRAME);
            wire::hello(secret, 1, 3)[..n].to_vec()
        }
        // A length prefix that is not a hello's (often huge), then bytes.
        3 => {
            let len: u32 = match rng.gen_range(0..3) {
                0 => u32::MAX,
                1 => rng.gen_range(33..=u32::MAX),
                _ => rng.gen_range(0..32),
            };
            let mut b = len.to_le_bytes().to_vec();
            let n = rng.gen_range(0..64);
            b.extend(random(&mut rng, n));
            b
        }
        // A hello with a wrong secret.
        4 => wire::hello(wrong, rng.gen_range(0..3), 3),
        // The right secret under a wrong magic or version.
        5 => {
            let mut b = wire::hello(secret, 2, 3);
            let at = rng.gen_range(4..12);
            b[at] ^= rng.gen_range(1..=255u8);
            b
        }
        // The right secret, with a rank or size that is refused whatever
        // else has happened (a secret holder that could take a slot is not a
        // stranger).
        6 => match rng.gen_range(0..4) {
            0 => wire::hello(secret, 0, 0),
            1 => wire::hello(secret, 0, MAX_RANKS as u32 + 1),
            2 => wire::hello(secret, 3, 3),
            _ => wire::hello(secret, u32::MAX, u32::MAX),
        },
        // Oversized: a megabyte of noise.
        7 => random(&mut rng, 1 << 20),
        // Connect and leave at once.
        8 => Vec::new(),
        // A whole hello with a wrong secret followed by more noise.
        9 => {
            let mut b = wire::hello(wrong, 0, 3);
            let n = rng.gen_range(1..512);
            b.extend(random(&mut rng, n));
            b
        }
        // Silence.
        10 => {
            linger = Duration::from_millis(2500);
            Vec::new()
        }
        // Byte by byte, slowly: a wrong-secret hello.
        _ => {
            for b in wire::hello(wrong, 1, 3) {
                if s.write_all(&[b]).is_err() {
                    return;
                }
                thread::sleep(Duration::from_millis(rng.gen_range(0..5)));
            }
            Vec::new()
        }
    };
    let _ = s.write_all(&payload);
    if !linger.is_zero() {
        thread::sleep(linger);
    }
    if rng.gen() {
        let _ = s.shutdown(Shutdown::Write);
        // Drain whatever the root says until it closes.
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        let mut sink = [0u8; 256];
        while matches!(s.read(&mut sink), Ok(n) if n > 0) {}
    }
}

/// A seed for the socket fuzzing: `FUZZ_SEED`, or a fresh one (printed, so
/// that a failure can be replayed).
fn fuzz_seed() -> u64 {
    let seed = std::env::var("FUZZ_SEED")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| rand::thread_rng().gen());
    eprintln!("socket fuzzing with FUZZ_SEED={seed}");
    seed
}

#[test]
fn garbage_at_a_live_root_does_not_disturb_real_ranks() {
    let seed = fuzz_seed();
    within(Duration::from_secs(40), move || {
        let id = UniqueId::new().expect("unique id and root");
        let (addr, secret) = (id.addr(), *id.secret());
        let (tx, connected) = mpsc::channel();
        let strangers = |from: u64| -> Vec<thread::JoinHandle<()>> {
            (from..from + 25)
                .map(|i| {
                    let (seed, tx) = (seed.wrapping_add(i), tx.clone());
                    thread::spawn(move || throw_garbage(addr, secret, seed, tx))
                })
                .collect()
        };
        // Half the strangers connect before the ranks (and send while they
        // join), half while the ranks join one by one, 30 ms apart.
        let mut all = strangers(0);
        let early = connected.iter().take(25).filter(|&ok| ok).count();
        assert_eq!(early, 25, "strangers could not reach the root");
        let ranks = staggered_ranks(id, 3, 6, Duration::from_millis(30));
        all.extend(strangers(25));
        for (rank, h) in ranks.into_iter().enumerate() {
            h.join()
                .unwrap_or_else(|_| panic!("rank {rank} failed (FUZZ_SEED={seed})"));
        }
        for h in all {
            h.join().expect("stranger thread");
        }
        let late = connected.try_iter().filter(|&ok| ok).count();
        eprintln!("{early} strangers connected before the ranks, {late} during the rendezvous");
    });
}

proptest! {
    #![proptest_config(socket_config(20))]

    /// Whatever one stranger sends (arbitrary bytes, or a damaged hello),
    /// the root still admits the real ranks and ends cleanly after them.
    #[test]
    fn stranger_bytes_then_real_ranks(
        bytes in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..200).boxed(),
            (any::<u32>(), any::<u32>(), 0usize..wire::HELLO_FRAME, any::<u8>()).prop_map(
                |(rank, size, at, flip)| {
                // A hello under an all-zero (wrong) secret, one byte changed.
                let mut b = wire::hello([0; 16], rank, size);
                b[at] ^= flip;
                b
            }).boxed(),
        ],
        stay in any::<bool>(),
    ) {
        within(Duration::from_secs(30), move || {
            let opts = RootOptions::default()
                .with_timeout(Duration::from_secs(20))
                .with_handshake_timeout(Duration::from_millis(500));
            let root = RootServer::start(loopback(), [0x5c; 16], opts).expect("root");
            let mut s = TcpStream::connect(root.id().addr()).expect("stranger");
            let _ = s.write_all(&bytes);
            if !stay {
                drop(s);
            }
            for h in real_ranks(root.id(), 2, 2) {
                h.join().expect("rank");
            }
            root.join().expect("the root ends cleanly");
        });
    }
}

/// What a fake root sends a real client: well-formed replies, perhaps
/// damaged, perhaps followed or replaced by noise.
fn root_replies() -> impl Strategy<Value = (Vec<wire::Reply>, Vec<u8>)> {
    let reply = prop_oneof![
        1 => Just(wire::Reply::Welcome),
        8 => prop::collection::vec(any::<u8>(), 0..64).prop_map(wire::Reply::Data),
        1 => (prop::option::of(prop_oneof![0u32..8, any::<u32>()]), ".{0,20}")
            .prop_map(|(peer, reason)| wire::Reply::Failure { peer, reason }),
    ];
    let replies = prop::collection::vec(reply, 0..6).prop_map(|mut r| {
        // Usually start as a root would, with a welcome.
        if r.len() % 3 != 0 {
            r.insert(0, wire::Reply::Welcome);
        }
        r
    });
    (
        replies,
        prop_oneof![3 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8), 1 => Just(3u8)],
        any::<prop::sample::Index>(),
        1..=255u8,
        prop::collection::vec(any::<u8>(), 0..40),
    )
        .prop_map(|(replies, how, at, flip, noise)| {
            let mut bytes: Vec<u8> = replies.iter().flat_map(wire::Reply::encode).collect();
            match how {
                0 => {}
                1 if !bytes.is_empty() => {
                    let at = at.index(bytes.len());
                    bytes[at] ^= flip;
                }
                2 => bytes.truncate(at.index(bytes.len() + 1)),
                _ => bytes.extend(noise),
            }
            (replies, bytes)
        })
}

/// What the client should make of a clean (undamaged) reply stream.
fn expected_gather(replies: &[wire::Reply], size: usize) -> Option<Vec<Vec<u8>>> {
    match replies.first() {
        Some(wire::Reply::Welcome) => {}
        _ => return None,
    }
    let data: Vec<Vec<u8>> = replies[1..]
        .iter()
        .take(size)
        .map_while(|r| match r {
            wire::Reply::Data(d) => Some(d.clone()),
            _ => None,
        })
        .collect();
    (data.len() == size).then_some(data)
}

proptest! {
    #![proptest_config(socket_config(8))]

    /// A fake root feeds a real client arbitrary replies: the client returns
    /// `Ok` or `Err` (never panics, never waits past its timeout), and when
    /// the replies are a clean welcome and `size` data frames it returns them.
    #[test]
    fn client_survives_a_hostile_root(
        (replies, bytes) in root_replies(),
        size in 1usize..4,
    ) {
        let clean: Vec<u8> = replies.iter().flat_map(wire::Reply::encode).collect();
        let expected = (clean == bytes).then(|| expected_gather(&replies, size)).flatten();
        let listener = TcpListener::bind(loopback()).expect("bind");
        let id = UniqueId::from_parts(listener.local_addr().expect("addr"), [9; 16]);
        let fake_root = thread::spawn(move || {
            let (mut s, _) = listener.accept().expect("accept");
            let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
            let mut hello = [0u8; wire::HELLO_FRAME];
            s.read_exact(&mut hello).expect("hello");
            assert_eq!(hello.to_vec(), wire::hello([9; 16], 0, size as u32));
            let _ = s.write_all(&bytes);
            let _ = s.shutdown(Shutdown::Write);
            // Drain until the client hangs up, so its writes never fail.
            let mut sink = [0u8; 256];
            while matches!(s.read(&mut sink), Ok(n) if n > 0) {}
        });
        let start = Instant::now();
        let got = Bootstrap::connect(&id, 0, size, Duration::from_secs(10))
            .and_then(|mut boot| boot.all_gather(b"mine"));
        prop_assert!(start.elapsed() < Duration::from_secs(9), "took {:?}", start.elapsed());
        fake_root.join().expect("fake root");
        match (&expected, &got) {
            (Some(want), Ok(all)) => prop_assert_eq!(want, all),
            (Some(_), Err(e)) => prop_assert!(false, "clean replies refused: {}", e),
            (None, Ok(all)) => prop_assert_eq!(all.len(), size),
            (None, Err(_)) => {}
        }
    }
}
