//! The bootstrap wire format: length-prefixed frames, the hellos, the
//! replies, and the frames ranks exchange among themselves.
//!
//! The root listens on a TCP port that anything on the network can reach, so
//! everything it reads is untrusted until the hello has shown the secret. This
//! module is the one place that turns bytes into messages: every length is
//! checked against a bound *before* anything is allocated, and every decode
//! error says what was wrong without echoing the secret.
//!
//! Frames are a `u32` little-endian length followed by that many bytes.
//! A client opens with a fixed-size [`Hello`] (which carries the address
//! where it accepts its peers); the root answers with [`Reply`] frames
//! (welcome with the addresses this rank sends to, a round's release, or a
//! failure), one kind byte first; a rank tells the root that it has a
//! round's records, or of a peer it found gone (a failure frame too). Between ranks, a connection opens with a [`PeerHello`], and
//! each step of an all-gather is one frame of records (see
//! [`super::gather`]).
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::time::Instant;

use crate::framed::{FrameReader, HeadError, Protocol};

/// The hello's head (magic, version, secret).
pub(crate) const HELLO: Protocol = Protocol {
    name: "bootstrap hello",
    magic: *b"SCBS",
    version: 2,
};
/// Bytes of an address on the wire: family (4 or 6), 16 address bytes
/// (an IPv4 address in the first 4), port.
pub(crate) const ADDR_LEN: usize = 1 + 16 + 2;
/// Length of a hello body: magic, version, secret, rank, size, the
/// address where the rank accepts its peers.
pub(crate) const HELLO_LEN: usize = 4 + 4 + 16 + 4 + 4 + ADDR_LEN;
/// Length of a hello frame on the wire (length prefix included).
pub(crate) const HELLO_FRAME_LEN: usize = 4 + HELLO_LEN;
/// Largest blob one rank may contribute to an all-gather round.
pub const MAX_BLOB: usize = 16 << 20;
/// Largest communicator the bootstrap accepts.
pub const MAX_RANKS: usize = 1 << 20;
/// Longest failure reason the root sends (longer ones are cut).
const MAX_REASON: usize = 1024;

const KIND_WELCOME: u8 = 0;
const KIND_FAILURE: u8 = 2;
const KIND_ARRIVED: u8 = 3;
const KIND_RELEASE: u8 = 4;
const NO_PEER: u32 = u32::MAX;

/// The head of the first frame one rank sends another (magic, version,
/// secret).
pub(crate) const PEER_HELLO: Protocol = Protocol {
    name: "bootstrap peer hello",
    magic: *b"SCBP",
    version: 1,
};
/// Length of a peer hello body: magic, version, secret, rank, step.
pub(crate) const PEER_HELLO_LEN: usize = 4 + 4 + 16 + 4 + 4;
/// Most all-gather steps (and so peers a rank sends to): the bootstrap's
/// largest size is 2^20 ranks.
pub(crate) const MAX_STEPS: usize = 20;

/// The first frame a rank sends to the root.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Hello {
    pub(crate) secret: [u8; 16],
    pub(crate) rank: u32,
    pub(crate) size: u32,
    /// Where this rank accepts its peers' connections.
    pub(crate) gather: SocketAddr,
}

impl std::fmt::Debug for Hello {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hello")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

impl Hello {
    /// The whole frame, length prefix included.
    pub(crate) fn encode(&self) -> [u8; HELLO_FRAME_LEN] {
        let body = HELLO
            .writer(&self.secret)
            .u32(self.rank)
            .u32(self.size)
            .bytes(&encode_addr(self.gather))
            .finish();
        let mut out = [0u8; HELLO_FRAME_LEN];
        out[0..4].copy_from_slice(&(HELLO_LEN as u32).to_le_bytes());
        out[4..].copy_from_slice(&body);
        out
    }

    /// Decodes a hello body (without its length prefix) and checks it against
    /// the expected secret.
    ///
    /// # Errors
    /// What was wrong with its head.
    pub(crate) fn decode(body: &[u8; HELLO_LEN], secret: &[u8; 16]) -> Result<Hello, HeadError> {
        let mut r = HELLO.reader(body, secret)?;
        // The body's length is fixed: its fields are there.
        let rank = r.u32().map_err(|_| HeadError::Short)?;
        let size = r.u32().map_err(|_| HeadError::Short)?;
        let addr = r.bytes(ADDR_LEN).map_err(|_| HeadError::Short)?;
        Ok(Hello {
            secret: *secret,
            rank,
            size,
            gather: decode_addr(addr).ok_or(HeadError::Short)?,
        })
    }
}

/// The first frame one rank sends another it connects to: who it is, and
/// for which step of the all-gather the connection is.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct PeerHello {
    pub(crate) rank: u32,
    pub(crate) step: u32,
}

impl std::fmt::Debug for PeerHello {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerHello")
            .field("rank", &self.rank)
            .field("step", &self.step)
            .finish()
    }
}

impl PeerHello {
    /// The whole frame carrying `secret`, length prefix included.
    pub(crate) fn encode(&self, secret: &[u8; 16]) -> Vec<u8> {
        let body = PEER_HELLO
            .writer(secret)
            .u32(self.rank)
            .u32(self.step)
            .finish();
        let mut out = (PEER_HELLO_LEN as u32).to_le_bytes().to_vec();
        out.extend_from_slice(&body);
        out
    }

    /// Decodes a peer hello body (without its length prefix), checking it
    /// carries `secret`.
    ///
    /// # Errors
    /// What was wrong with its head.
    pub(crate) fn decode(body: &[u8], secret: &[u8; 16]) -> Result<PeerHello, HeadError> {
        if body.len() != PEER_HELLO_LEN {
            return Err(HeadError::Short);
        }
        let mut r = PEER_HELLO.reader(body, secret)?;
        let rank = r.u32().map_err(|_| HeadError::Short)?;
        let step = r.u32().map_err(|_| HeadError::Short)?;
        Ok(PeerHello { rank, step })
    }
}

/// A frame from the root to a rank (and, a failure, from a rank to the
/// root: the peer it found gone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    /// All ranks have joined: the addresses this rank sends to, one for
    /// each step of an all-gather (see [`super::gather`]).
    Welcome { targets: Vec<SocketAddr> },
    /// The root gives up (or a rank tells it why it should): `peer` is the
    /// rank to blame, if any.
    Failure { peer: Option<usize>, reason: String },
    /// A rank to the root: it has every record of the round.
    Arrived,
    /// The root to every rank: every rank has the round's records.
    Release,
}

impl Reply {
    /// Writes the reply as one frame.
    pub(crate) fn write_to(&self, w: &mut impl Write) -> io::Result<()> {
        match self {
            Reply::Welcome { targets } => {
                let mut body = vec![KIND_WELCOME];
                body.extend_from_slice(&(targets.len() as u32).to_le_bytes());
                for t in targets {
                    body.extend_from_slice(&encode_addr(*t));
                }
                write_frame(w, &[&body])
            }
            Reply::Arrived => write_frame(w, &[&[KIND_ARRIVED]]),
            Reply::Release => write_frame(w, &[&[KIND_RELEASE]]),
            Reply::Failure { peer, reason } => {
                let peer = peer.map_or(NO_PEER, |p| u32::try_from(p).unwrap_or(NO_PEER));
                let mut cut = reason.len().min(MAX_REASON);
                while !reason.is_char_boundary(cut) {
                    cut -= 1;
                }
                let reason = &reason.as_bytes()[..cut];
                write_frame(w, &[&[KIND_FAILURE], &peer.to_le_bytes(), reason])
            }
        }
    }

    /// Decodes a reply frame body.
    pub(crate) fn decode(body: Vec<u8>) -> Result<Reply, String> {
        match body.first().copied() {
            Some(KIND_WELCOME) if body.len() >= 5 => {
                let mut r = FrameReader::over(&body[1..]);
                let count = r.count(MAX_STEPS, "welcome targets")?;
                let mut targets = Vec::with_capacity(count);
                for _ in 0..count {
                    let bytes = r.bytes(ADDR_LEN)?;
                    targets.push(
                        decode_addr(bytes)
                            .ok_or_else(|| "a welcome target of no family".to_string())?,
                    );
                }
                if r.left() != 0 {
                    return Err(format!("{} bytes after the welcome's targets", r.left()));
                }
                Ok(Reply::Welcome { targets })
            }
            Some(KIND_ARRIVED) if body.len() == 1 => Ok(Reply::Arrived),
            Some(KIND_RELEASE) if body.len() == 1 => Ok(Reply::Release),
            Some(KIND_FAILURE) if body.len() >= 5 => {
                let peer = le_u32(&body[1..5]);
                let reason = String::from_utf8_lossy(&body[5..]).into_owned();
                let peer = (peer != NO_PEER).then_some(peer as usize);
                Ok(Reply::Failure { peer, reason })
            }
            Some(kind) => Err(format!(
                "unexpected reply kind {kind} ({} bytes)",
                body.len()
            )),
            None => Err("empty reply frame".to_string()),
        }
    }
}

/// Largest reply frame body a rank accepts: a welcome with every step's
/// target, or a failure with its reason.
pub(crate) const MAX_REPLY: usize = 5 + MAX_STEPS * ADDR_LEN + MAX_REASON;

/// `addr` as [`ADDR_LEN`] bytes.
pub(crate) fn encode_addr(addr: SocketAddr) -> [u8; ADDR_LEN] {
    let mut out = [0u8; ADDR_LEN];
    match addr.ip() {
        IpAddr::V4(ip) => {
            out[0] = 4;
            out[1..5].copy_from_slice(&ip.octets());
        }
        IpAddr::V6(ip) => {
            out[0] = 6;
            out[1..17].copy_from_slice(&ip.octets());
        }
    }
    out[17..].copy_from_slice(&addr.port().to_le_bytes());
    out
}

/// The address [`encode_addr`] wrote, or `None` for an unknown family.
pub(crate) fn decode_addr(bytes: &[u8]) -> Option<SocketAddr> {
    let bytes: &[u8; ADDR_LEN] = bytes.try_into().ok()?;
    let port = u16::from_le_bytes([bytes[17], bytes[18]]);
    let ip = match bytes[0] {
        4 => IpAddr::V4(Ipv4Addr::new(bytes[1], bytes[2], bytes[3], bytes[4])),
        6 => {
            let mut octets = [0u8; 16];
            octets.copy_from_slice(&bytes[1..17]);
            IpAddr::V6(Ipv6Addr::from(octets))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// Writes one frame made of `parts`, prefixed by their total length (the
/// caller flushes buffered writers).
pub(crate) fn write_frame(w: &mut impl Write, parts: &[&[u8]]) -> io::Result<()> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let len = u32::try_from(len)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame over 4 GiB"))?;
    w.write_all(&len.to_le_bytes())?;
    for part in parts {
        w.write_all(part)?;
    }
    Ok(())
}

/// What [`read_frame`] found.
#[derive(Debug)]
pub(crate) enum FrameRead {
    /// A whole frame body.
    Frame(Vec<u8>),
    /// The peer closed the connection cleanly before a new frame began.
    Eof,
    /// The announced length exceeds the bound; nothing was allocated.
    TooLarge(u64),
}

/// Reads one frame from a blocking stream, giving up at `deadline` (if any).
///
/// The length is checked against `max` before the body is allocated. A
/// connection closed in the middle of a frame is an `UnexpectedEof` error; one
/// closed between frames is [`FrameRead::Eof`].
pub(crate) fn read_frame(
    stream: &mut TcpStream,
    max: usize,
    deadline: Option<Instant>,
) -> io::Result<FrameRead> {
    let mut header = [0u8; 4];
    if read_full(stream, &mut header, deadline)? == 0 {
        return Ok(FrameRead::Eof);
    }
    let len = u32::from_le_bytes(header);
    if len as u64 > max as u64 {
        return Ok(FrameRead::TooLarge(len as u64));
    }
    let mut body = vec![0u8; len as usize];
    let got = read_full(stream, &mut body, deadline)?;
    if got != body.len() {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(FrameRead::Frame(body))
}

/// Fills `buf` completely, returning 0 when the peer closed before the first
/// byte, and `UnexpectedEof` when it closed after some bytes. Every read call
/// is bounded by the time left until `deadline`.
fn read_full(
    stream: &mut TcpStream,
    buf: &mut [u8],
    deadline: Option<Instant>,
) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        if let Some(deadline) = deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::ErrorKind::TimedOut.into());
            }
            stream.set_read_timeout(Some(left))?;
        }
        match stream.read(&mut buf[filled..]) {
            Ok(0) if filled == 0 => return Ok(0),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// True for the error kinds a socket timeout produces.
pub(crate) fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

fn le_u32(bytes: &[u8]) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&bytes[..4]);
    u32::from_le_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_round_trip_and_rejections() {
        let secret = [7u8; 16];
        let hello = Hello {
            secret,
            rank: 3,
            size: 8,
            gather: "10.1.2.3:4567".parse().expect("addr"),
        };
        let frame = hello.encode();
        assert_eq!(le_u32(&frame[0..4]) as usize, HELLO_LEN);
        let mut body = [0u8; HELLO_LEN];
        body.copy_from_slice(&frame[4..]);
        assert_eq!(Hello::decode(&body, &secret), Ok(hello));
        assert_eq!(Hello::decode(&body, &[8u8; 16]), Err(HeadError::Secret));
        let mut bad = body;
        bad[0] = b'X';
        assert_eq!(Hello::decode(&bad, &secret), Err(HeadError::Magic));
        let mut bad = body;
        bad[4] = 9;
        assert_eq!(Hello::decode(&bad, &secret), Err(HeadError::Version(9)));
    }

    #[test]
    fn replies_round_trip() {
        for reply in [
            Reply::Welcome { targets: vec![] },
            Reply::Welcome {
                targets: vec![
                    "127.0.0.1:9".parse().expect("v4"),
                    "[fe80::1]:65535".parse().expect("v6"),
                ],
            },
            Reply::Failure {
                peer: Some(4),
                reason: "gone".into(),
            },
            Reply::Failure {
                peer: None,
                reason: "timed out".into(),
            },
            Reply::Arrived,
            Reply::Release,
        ] {
            let mut buf = Vec::new();
            reply.write_to(&mut buf).expect("write to a Vec");
            assert_eq!(le_u32(&buf[0..4]) as usize, buf.len() - 4);
            assert_eq!(Reply::decode(buf[4..].to_vec()), Ok(reply));
        }
        assert!(Reply::decode(vec![]).is_err());
        assert!(Reply::decode(vec![9]).is_err());
        // A welcome that announces more targets than it carries, or more
        // than any size needs, is refused before anything is allocated.
        let mut short = vec![KIND_WELCOME];
        short.extend_from_slice(&3u32.to_le_bytes());
        assert!(Reply::decode(short).is_err());
        let mut many = vec![KIND_WELCOME];
        many.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(Reply::decode(many).is_err());
        // A failure frame too short for its peer field is an error, not a
        // read past its end.
        for len in 1..5 {
            let mut short = vec![0u8; len];
            short[0] = KIND_FAILURE;
            assert!(Reply::decode(short).is_err(), "{len} bytes");
        }
    }

    #[test]
    fn peer_hello_round_trip_and_rejections() {
        let secret = [3u8; 16];
        let hello = PeerHello { rank: 5, step: 2 };
        let frame = hello.encode(&secret);
        assert_eq!(le_u32(&frame[0..4]) as usize, PEER_HELLO_LEN);
        assert_eq!(PeerHello::decode(&frame[4..], &secret), Ok(hello));
        assert_eq!(
            PeerHello::decode(&frame[4..], &[4u8; 16]),
            Err(HeadError::Secret)
        );
        assert_eq!(
            PeerHello::decode(&frame[4..frame.len() - 1], &secret),
            Err(HeadError::Short)
        );
        // A root's hello is not a peer's.
        let root = Hello {
            secret,
            rank: 5,
            size: 8,
            gather: "127.0.0.1:1".parse().expect("addr"),
        }
        .encode();
        assert!(PeerHello::decode(&root[4..4 + PEER_HELLO_LEN], &secret).is_err());
    }

    #[test]
    fn addresses_round_trip_and_unknown_families_are_refused() {
        for text in [
            "0.0.0.0:0",
            "192.168.7.9:12345",
            "[::1]:80",
            "[2001:db8::7]:1",
        ] {
            let addr: SocketAddr = text.parse().expect("addr");
            assert_eq!(decode_addr(&encode_addr(addr)), Some(addr), "{text}");
        }
        let mut bad = encode_addr("127.0.0.1:1".parse().expect("addr"));
        bad[0] = 5;
        assert_eq!(decode_addr(&bad), None);
        assert_eq!(decode_addr(&bad[..ADDR_LEN - 1]), None);
    }

    #[test]
    fn long_failure_reason_is_cut_on_a_char_boundary() {
        let reason = "é".repeat(MAX_REASON);
        let mut buf = Vec::new();
        Reply::Failure { peer: None, reason }
            .write_to(&mut buf)
            .expect("write");
        assert!(buf.len() <= 4 + 5 + MAX_REASON);
        assert!(matches!(
            Reply::decode(buf[4..].to_vec()),
            Ok(Reply::Failure { .. })
        ));
    }
}
