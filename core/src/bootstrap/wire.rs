//! The bootstrap wire format: length-prefixed frames, the hello, the replies.
//!
//! The root listens on a TCP port that anything on the network can reach, so
//! everything it reads is untrusted until the hello has shown the secret. This
//! module is the one place that turns bytes into messages: every length is
//! checked against a bound *before* anything is allocated, and every decode
//! error says what was wrong without echoing the secret.
//!
//! Frames are a `u32` little-endian length followed by that many bytes.
//! A client opens with a fixed-size [`Hello`]; the root answers with [`Reply`]
//! frames (welcome, a rank's data, or a failure), one kind byte first.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use crate::framed::{HeadError, Protocol};

/// The hello's head (magic, version, secret).
pub(crate) const HELLO: Protocol = Protocol {
    name: "bootstrap hello",
    magic: *b"SCBS",
    version: 1,
};
/// Length of a hello body: magic, version, secret, rank, size.
pub(crate) const HELLO_LEN: usize = 4 + 4 + 16 + 4 + 4;
/// Length of a hello frame on the wire (length prefix included).
pub(crate) const HELLO_FRAME_LEN: usize = 4 + HELLO_LEN;
/// Largest blob one rank may contribute to an all-gather round.
pub const MAX_BLOB: usize = 16 << 20;
/// Largest communicator the bootstrap accepts.
pub const MAX_RANKS: usize = 1 << 20;
/// Longest failure reason the root sends (longer ones are cut).
const MAX_REASON: usize = 1024;

const KIND_WELCOME: u8 = 0;
const KIND_DATA: u8 = 1;
const KIND_FAILURE: u8 = 2;
const NO_PEER: u32 = u32::MAX;

/// The first frame a rank sends to the root.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Hello {
    pub(crate) secret: [u8; 16],
    pub(crate) rank: u32,
    pub(crate) size: u32,
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
        // The body's length is fixed: its two fields are there.
        let mut field = || r.u32().map_err(|_| HeadError::Short);
        Ok(Hello {
            secret: *secret,
            rank: field()?,
            size: field()?,
        })
    }
}

/// A frame from the root to a rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    /// All ranks have joined; rounds may begin.
    Welcome,
    /// One rank's contribution to the current round.
    Data(Vec<u8>),
    /// The root gives up: `peer` is the rank to blame, if any.
    Failure { peer: Option<usize>, reason: String },
}

impl Reply {
    /// Writes the reply as one frame.
    pub(crate) fn write_to(&self, w: &mut impl Write) -> io::Result<()> {
        match self {
            Reply::Welcome => write_frame(w, &[&[KIND_WELCOME]]),
            Reply::Data(bytes) => write_data(w, bytes),
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
    pub(crate) fn decode(mut body: Vec<u8>) -> Result<Reply, String> {
        match body.first().copied() {
            Some(KIND_WELCOME) if body.len() == 1 => Ok(Reply::Welcome),
            Some(KIND_DATA) => {
                body.remove(0);
                Ok(Reply::Data(body))
            }
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

/// Writes a [`Reply::Data`] frame from a borrowed blob.
pub(crate) fn write_data(w: &mut impl Write, bytes: &[u8]) -> io::Result<()> {
    write_frame(w, &[&[KIND_DATA], bytes])
}

/// Largest reply frame body a rank accepts.
pub(crate) const MAX_REPLY: usize = MAX_BLOB + 1;

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
            Reply::Welcome,
            Reply::Data(vec![]),
            Reply::Data(vec![1, 2, 3]),
            Reply::Failure {
                peer: Some(4),
                reason: "gone".into(),
            },
            Reply::Failure {
                peer: None,
                reason: "timed out".into(),
            },
        ] {
            let mut buf = Vec::new();
            reply.write_to(&mut buf).expect("write to a Vec");
            assert_eq!(le_u32(&buf[0..4]) as usize, buf.len() - 4);
            assert_eq!(Reply::decode(buf[4..].to_vec()), Ok(reply));
        }
        assert!(Reply::decode(vec![]).is_err());
        assert!(Reply::decode(vec![9]).is_err());
        // A failure frame too short for its peer field is an error, not a
        // read past its end.
        for len in 1..5 {
            let mut short = vec![0u8; len];
            short[0] = KIND_FAILURE;
            assert!(Reply::decode(short).is_err(), "{len} bytes");
        }
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
