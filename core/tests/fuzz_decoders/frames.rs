//! tcp transport: hello and frame header.

use super::*;

/// Any tcp hello.
fn tcp_hello() -> BoxedStrategy<TcpHello> {
    (any::<[u8; 16]>(), any::<u32>(), any::<u32>(), any::<u32>())
        .prop_map(|(secret, from, to, socket)| TcpHello {
            secret,
            from,
            to,
            socket,
        })
        .boxed()
}

/// Slot sizes: small, around the control values, and beyond `u32`.
fn max_len() -> BoxedStrategy<usize> {
    prop_oneof![
        0usize..5000,
        any::<u32>().prop_map(|n| n as usize),
        Just(ABORT_LEN as usize - 1),
        Just(u32::MAX as usize),
        Just(usize::MAX),
    ]
    .boxed()
}

/// A payload length: any `u32`, with extra weight on the edges.
fn frame_len() -> BoxedStrategy<u32> {
    prop_oneof![
        any::<u32>(),
        0u32..5000,
        Just(CLOSE_LEN),
        Just(ABORT_LEN),
        Just(ABORT_LEN - 1),
    ]
    .boxed()
}

/// A frame header.
fn header(len: u32, seq: u64, sig: u64) -> FrameHeader {
    FrameHeader { len, seq, sig }
}

/// A slot size and a (non-control) length above it.
fn over_max_len() -> BoxedStrategy<(usize, u32)> {
    prop_oneof![0u32..5000, 0..ABORT_LEN - 1]
        .prop_flat_map(|max| (Just(max as usize), (max + 1)..ABORT_LEN))
        .boxed()
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
