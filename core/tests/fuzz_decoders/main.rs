//! Property-based fuzzing of every decoder that reads untrusted input: bytes
//! from the network or shared memory (bootstrap hellos and replies, tcp
//! hellos and frame headers, endpoints, the call signatures in slot headers),
//! unique ids handed between processes, and the text of launcher and
//! `STREAMCOMM_*` environment variables. (`streamcomm-run`'s arguments are
//! fuzzed in its own crate.)
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
//! from `STREAMCOMM_TEST_SEED` (printed; random when unset).
//!
//! Bugs the fuzzing found (a panic on a huge `STREAMCOMM_TIMEOUT`, a secret
//! quoted in a parse error, UTF-8 split by `Endpoint::encode`, a truncated
//! `STREAMCOMM_SPIN`) are fixed; the `bug_*` tests keep them fixed.

use std::collections::BTreeMap;
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
use streamcomm::Collective;
use streamcomm::barrier::{BarrierAlgo, Inter};
use streamcomm::bootstrap::MAX_RANKS;
use streamcomm::bootstrap::UniqueId;
use streamcomm::config::{Config, HostsOverride};
use streamcomm::launch::RootSpec;
use streamcomm::testing::bootstrap::{Bootstrap, RootOptions, RootServer};
use streamcomm::testing::comm::Endpoint;
use streamcomm::testing::launch::detect;
use streamcomm::testing::transport::RingShape;
use streamcomm::testing::transport::tcp_frame::{
    ABORT_LEN, CLOSE_LEN, FrameHeader, HEADER_BYTES, HELLO_BYTES, Hello as TcpHello,
};
use streamcomm::{DataType, Error, ReduceOp};
use streamcomm_algo::plan::signature::P2pSlot;
use streamcomm_algo::plan::{PlanParams, build, signature};

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
fn bytes_n<const N: usize>() -> BoxedStrategy<[u8; N]> {
    prop::collection::vec(any::<u8>(), N)
        .prop_map(|v| <[u8; N]>::try_from(v).expect("strategy yields N bytes"))
        .boxed()
}

/// Any socket address whose text and binary forms can be exact (IPv6 flow
/// info is carried by neither, so it is 0; scope ids are).
fn socket_addr() -> BoxedStrategy<SocketAddr> {
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
    .boxed()
}

/// A string of at most `max` bytes, often right at the limit and often with
/// multi-byte characters.
fn string_upto(max: usize) -> BoxedStrategy<String> {
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
    .boxed()
}

/// A cut (a strict prefix length) of an encoding of `len` bytes, and a
/// mutation: a byte index and a non-zero value to xor it with.
fn mutations(len: usize) -> BoxedStrategy<(usize, usize, u8)> {
    (0..len.max(1), 0..len.max(1), 1..=255u8).boxed()
}

/// Text that a fuzzer of environment values should try: numbers of every
/// shape, arbitrary Unicode, and pieces of the real syntaxes.
fn env_value() -> BoxedStrategy<String> {
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
    .boxed()
}

/// Slurm's compressed task lists (`2(x3),1`), well- and ill-formed.
fn slurm_task_list() -> BoxedStrategy<String> {
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
    .boxed()
}

/// A unique id's text form, valid or damaged.
fn unique_id_text() -> BoxedStrategy<String> {
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
        .boxed()
}

mod endpoint;
mod environment;
mod frames;
mod signatures;
mod unique_id;
mod wire_sockets;
