//! What travels on a tcp connection: a hello each way, then slot frames.
//!
//! Every byte read from a socket is untrusted: a frame's length is checked
//! against the slot size before anything is read into a slot, the sequence
//! number must be the one expected on that socket, and the hello carries the
//! communicator's secret, compared in constant time.

use crate::framed::Protocol;
use crate::{Error, Result};

/// Bytes of a [`Hello`].
pub const HELLO_BYTES: usize = 40;
/// Bytes of a [`FrameHeader`].
pub const HEADER_BYTES: usize = 24;
/// The hello's head (magic, version, secret).
const HELLO: Protocol = Protocol {
    name: "tcp hello",
    magic: *b"HTCS",
    version: 2,
};
const FRAME_MAGIC: u32 = 0x5343_5446; // "SCTF"

/// First message on every data socket, each way: who is connecting, to
/// which socket index (the answer swaps the ranks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    /// The communicator's secret (from the UniqueId).
    pub secret: [u8; 16],
    /// Rank of the connecting side.
    pub from: u32,
    /// Rank it wants to reach.
    pub to: u32,
    /// Which of the pair's sockets this is.
    pub socket: u32,
}

impl Hello {
    /// Fixed-size encoding.
    pub fn encode(&self) -> [u8; HELLO_BYTES] {
        let body = HELLO
            .writer(&self.secret)
            .u32(self.from)
            .u32(self.to)
            .u32(self.socket)
            .finish();
        let mut b = [0u8; HELLO_BYTES];
        b[..body.len()].copy_from_slice(&body);
        b
    }

    /// Decodes and checks a hello against the expected secret.
    ///
    /// # Errors
    /// [`Error::Bootstrap`] for a wrong magic, version or secret.
    pub fn decode(b: &[u8; HELLO_BYTES], secret: &[u8; 16]) -> Result<Hello> {
        let mut r = HELLO
            .reader(b, secret)
            .map_err(|e| Error::Bootstrap(HELLO.describe(&e)))?;
        // The hello's length is fixed: its three fields are there.
        let mut field = || {
            r.u32()
                .map_err(|e| Error::Bootstrap(format!("tcp hello: {e}")))
        };
        Ok(Hello {
            secret: *secret,
            from: field()?,
            to: field()?,
            socket: field()?,
        })
    }
}

/// Length value that marks a goodbye frame: the sender closed its
/// communicator cleanly, after every slot it staged was sent.
pub const CLOSE_LEN: u32 = u32::MAX;

/// Length value that marks an abort frame: the sender's communicator failed
/// (its `seq` field carries the rank that failed first; its `sig` field, when
/// not 0, the ranks of the mismatch record the note frame before it carried:
/// `1 + suspect` in the low 32 bits, `1 + witness` in the high ones).
pub const ABORT_LEN: u32 = u32::MAX - 1;

/// Length value that marks a note frame, sent just before an abort frame when
/// ranks' calls differed: `seq` carries the suspect's signature, `sig` the
/// witness's (see [`crate::plan::signature`]).
pub(crate) const NOTE_LEN: u32 = u32::MAX - 3;

/// Header of one slot on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// Payload bytes that follow.
    pub len: u32,
    /// Index of the slot in the connection's stream of slots.
    pub seq: u64,
    /// Signature of the call that filled the slot ([`crate::plan::signature`]).
    pub sig: u64,
}

impl FrameHeader {
    /// Fixed-size encoding.
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut b = [0u8; HEADER_BYTES];
        b[0..4].copy_from_slice(&FRAME_MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&self.len.to_le_bytes());
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..24].copy_from_slice(&self.sig.to_le_bytes());
        b
    }

    /// Decodes a header, checking its magic, its length against `max_len`
    /// (before any payload is read) and its sequence number. A goodbye frame
    /// decodes with `len == CLOSE_LEN`, an abort frame with `len ==
    /// ABORT_LEN` and the failed rank in `seq`.
    ///
    /// # Errors
    /// A message naming what was wrong.
    pub fn decode(
        b: &[u8; HEADER_BYTES],
        max_len: usize,
        expected_seq: u64,
    ) -> std::result::Result<FrameHeader, String> {
        let magic = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        if magic != FRAME_MAGIC {
            return Err(format!("bad frame magic {magic:#x}"));
        }
        let len = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        let mut sig = [0u8; 8];
        sig.copy_from_slice(&b[16..24]);
        let sig = u64::from_le_bytes(sig);
        if len == CLOSE_LEN {
            return Ok(FrameHeader {
                len,
                seq: expected_seq,
                sig,
            });
        }
        if len == ABORT_LEN || len == NOTE_LEN {
            let mut failed = [0u8; 8];
            failed.copy_from_slice(&b[8..16]);
            return Ok(FrameHeader {
                len,
                seq: u64::from_le_bytes(failed),
                sig,
            });
        }
        if len as usize > max_len {
            return Err(format!(
                "frame of {len} bytes exceeds the slot size {max_len}"
            ));
        }
        let mut s = [0u8; 8];
        s.copy_from_slice(&b[8..16]);
        let seq = u64::from_le_bytes(s);
        if seq != expected_seq {
            return Err(format!(
                "frame {seq} arrived where {expected_seq} was expected ({})",
                if seq > expected_seq {
                    "a frame was lost"
                } else {
                    "a frame came twice or out of order"
                }
            ));
        }
        Ok(FrameHeader { len, seq, sig })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejections() {
        let h = Hello {
            secret: [7; 16],
            from: 3,
            to: 5,
            socket: 1,
        };
        assert_eq!(Hello::decode(&h.encode(), &[7; 16]).unwrap(), h);
        assert!(Hello::decode(&h.encode(), &[8; 16]).is_err());
        let mut bad = h.encode();
        bad[0] ^= 1;
        assert!(Hello::decode(&bad, &[7; 16]).is_err());
        let f = FrameHeader {
            len: 100,
            seq: 9,
            sig: 0x8000_0000_0000_0042,
        };
        assert_eq!(FrameHeader::decode(&f.encode(), 100, 9).unwrap(), f);
        assert!(
            FrameHeader::decode(&f.encode(), 99, 9)
                .unwrap_err()
                .contains("exceeds")
        );
        assert!(
            FrameHeader::decode(&f.encode(), 100, 8)
                .unwrap_err()
                .contains("expected")
        );
        let huge = FrameHeader {
            len: u32::MAX - 2,
            seq: 0,
            sig: 0,
        };
        assert!(FrameHeader::decode(&huge.encode(), 1 << 20, 0).is_err());
        let bye = FrameHeader {
            len: CLOSE_LEN,
            seq: 0,
            sig: 0,
        };
        assert_eq!(
            FrameHeader::decode(&bye.encode(), 16, 5).unwrap().len,
            CLOSE_LEN
        );
        let abort = FrameHeader {
            len: ABORT_LEN,
            seq: 3,
            sig: 0,
        };
        assert_eq!(FrameHeader::decode(&abort.encode(), 16, 9).unwrap(), abort);
        let note = FrameHeader {
            len: NOTE_LEN,
            seq: u64::MAX - 5,
            sig: 1 << 63,
        };
        assert_eq!(FrameHeader::decode(&note.encode(), 16, 9).unwrap(), note);
    }
}
