//! Bootstrap wire format, through real sockets.

use super::*;

/// The bootstrap protocol, as documented in bootstrap/wire.rs: frames are a
/// `u32` little-endian length then the body; a hello body is magic `SCBS`,
/// version 2, the secret, rank, size and the address where the rank
/// accepts its all-gather peers (family byte 4 or 6, 16 address bytes, a
/// `u16` port); a reply body is a kind byte (0 welcome with a `u32` count
/// of addresses and each address, 2 failure with a `u32` peer, `u32::MAX`
/// for none, then the reason).
mod wire {
    use std::net::SocketAddr;

    /// Bytes of a hello frame, length prefix included.
    pub(super) const HELLO_FRAME: usize = 4 + 51;
    /// Bytes of a hello frame before its address.
    pub(super) const HELLO_BEFORE_ADDR: usize = 4 + 32;

    /// An address as the protocol writes it.
    pub(super) fn addr(a: SocketAddr) -> Vec<u8> {
        let mut b = vec![0u8; 19];
        match a {
            SocketAddr::V4(v4) => {
                b[0] = 4;
                b[1..5].copy_from_slice(&v4.ip().octets());
            }
            SocketAddr::V6(v6) => {
                b[0] = 6;
                b[1..17].copy_from_slice(&v6.ip().octets());
            }
        }
        b[17..].copy_from_slice(&a.port().to_le_bytes());
        b
    }

    /// A hello frame (its all-gather address 127.0.0.1:1).
    pub(super) fn hello(secret: [u8; 16], rank: u32, size: u32) -> Vec<u8> {
        let mut f = 51u32.to_le_bytes().to_vec();
        f.extend_from_slice(b"SCBS");
        f.extend_from_slice(&2u32.to_le_bytes());
        f.extend_from_slice(&secret);
        f.extend_from_slice(&rank.to_le_bytes());
        f.extend_from_slice(&size.to_le_bytes());
        f.extend_from_slice(&addr("127.0.0.1:1".parse().expect("addr")));
        f
    }

    /// One frame around `body`.
    pub(super) fn frame(body: &[u8]) -> Vec<u8> {
        let mut f = (body.len() as u32).to_le_bytes().to_vec();
        f.extend_from_slice(body);
        f
    }

    /// A reply from the root.
    #[derive(Clone, Debug)]
    pub(super) enum Reply {
        Welcome(Vec<SocketAddr>),
        Failure { peer: Option<u32>, reason: String },
    }

    impl Reply {
        /// The reply as one frame.
        pub(super) fn encode(&self) -> Vec<u8> {
            match self {
                Reply::Welcome(targets) => {
                    let mut b = vec![0];
                    b.extend_from_slice(&(targets.len() as u32).to_le_bytes());
                    for t in targets {
                        b.extend_from_slice(&addr(*t));
                    }
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

use streamcomm_testkit::within;

fn loopback() -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, 0))
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
    let random = |rng: &mut StdRng, n: usize| (0..n).map(|_| rng.r#gen()).collect::<Vec<u8>>();
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
    if rng.r#gen() {
        let _ = s.shutdown(Shutdown::Write);
        // Drain whatever the root says until it closes.
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        let mut sink = [0u8; 256];
        while matches!(s.read(&mut sink), Ok(n) if n > 0) {}
    }
}

#[test]
fn garbage_at_a_live_root_does_not_disturb_real_ranks() {
    let seed = streamcomm_testkit::seed();
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
                .unwrap_or_else(|_| panic!("rank {rank} failed (STREAMCOMM_TEST_SEED={seed})"));
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
/// damaged, perhaps followed or replaced by noise. A welcome names
/// all-gather peers where nothing listens (port 1).
fn root_replies() -> BoxedStrategy<(Vec<wire::Reply>, Vec<u8>)> {
    let nowhere: SocketAddr = "127.0.0.1:1".parse().expect("addr");
    let reply = prop_oneof![
        4 => (0usize..3).prop_map(move |n| wire::Reply::Welcome(vec![nowhere; n])),
        1 => (prop::option::of(prop_oneof![0u32..8, any::<u32>()]), ".{0,20}")
            .prop_map(|(peer, reason)| wire::Reply::Failure { peer, reason }),
    ];
    let replies = prop::collection::vec(reply, 0..4);
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
        .boxed()
}

/// What the client should make of a clean (undamaged) reply stream: a
/// lone rank welcomed with no peers gathers its own blob; any other start
/// is an error (a welcome naming peers for one rank, or peers where
/// nothing listens, or no welcome).
fn expected_gather(replies: &[wire::Reply], size: usize) -> Option<Vec<Vec<u8>>> {
    match replies.first() {
        Some(wire::Reply::Welcome(t)) if t.is_empty() && size == 1 => Some(vec![b"mine".to_vec()]),
        _ => None,
    }
}

proptest! {
    #![proptest_config(socket_config(8))]

    /// A fake root feeds a real client arbitrary replies: the client returns
    /// `Ok` or `Err` (never panics, never waits past its timeout: 10 s,
    /// within 2 s), and when the replies are a clean welcome for a lone rank
    /// it gathers its own blob; its hello says who it is and where it
    /// accepts its peers.
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
            let want = wire::hello([9; 16], 0, size as u32);
            assert_eq!(hello[..wire::HELLO_BEFORE_ADDR], want[..wire::HELLO_BEFORE_ADDR]);
            // An IPv4 address (loopback's); a lone rank, which accepts no
            // peers, names 0.0.0.0:0.
            let addr = &hello[wire::HELLO_BEFORE_ADDR..];
            assert_eq!(addr[0], 4, "its all-gather address's family");
            assert_eq!(addr[1..].iter().all(|&b| b == 0), size == 1, "{addr:?}");
            let _ = s.write_all(&bytes);
            let _ = s.shutdown(Shutdown::Write);
            // Drain until the client hangs up, so its writes never fail.
            let mut sink = [0u8; 256];
            while matches!(s.read(&mut sink), Ok(n) if n > 0) {}
        });
        let start = Instant::now();
        let timeout = Duration::from_secs(10);
        let got = Bootstrap::connect(&id, 0, size, timeout)
            .and_then(|mut boot| boot.all_gather(b"mine"));
        // A damaged welcome may name a peer at an address nothing answers
        // from (126.0.0.1, say, where a network namespace has no route):
        // the client then waits out its timeout, and no longer.
        let took = start.elapsed();
        prop_assert!(took < timeout + Duration::from_secs(2), "took {:?}", took);
        fake_root.join().expect("fake root");
        match (&expected, &got) {
            (Some(want), Ok(all)) => prop_assert_eq!(want, all),
            (Some(_), Err(e)) => prop_assert!(false, "clean replies refused: {}", e),
            (None, Ok(all)) => prop_assert_eq!(all.len(), size),
            (None, Err(_)) => {}
        }
    }
}
