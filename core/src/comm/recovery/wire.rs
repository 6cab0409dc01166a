//! The frames survivors exchange while they shrink a communicator.
//!
//! A frame is small and self-checking: the framed head (magic, version,
//! the communicator's secret, so that only its ranks are heard: see
//! [`crate::framed`]), the kind, the sender's rank, a list of ranks and, in
//! a decision, the new communicator's id. Every length is checked before
//! anything is allocated: these bytes come from the network.

use std::io::{Read, Write};

use crate::bootstrap::{MAX_RANKS, UniqueId};
use crate::framed::{HEAD_BYTES, Protocol};
use crate::{Error, Result};

const SHRINK: Protocol = Protocol {
    name: "shrink frame",
    magic: *b"SCRV",
    version: 2,
};
/// Bytes before the rank list: the framed head, kind, rank, count, has-id.
const HEAD: usize = HEAD_BYTES + 1 + 4 + 4 + 1;

/// What a frame says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A survivor asks the coordinator to take it in; `ranks` are the ranks
    /// it found dead on its way.
    Join = 1,
    /// The coordinator checks that a rank is alive; no answer is due.
    Probe = 2,
    /// The coordinator took the joiner in: a decision follows.
    Ack = 3,
    /// The new communicator: `ranks` (parent ranks, in new rank order) and `id`.
    Decision = 4,
    /// The joiner is on the exclusion list: it has no place.
    Refuse = 5,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        [
            Kind::Join,
            Kind::Probe,
            Kind::Ack,
            Kind::Decision,
            Kind::Refuse,
        ]
        .into_iter()
        .find(|k| *k as u8 == v)
    }
}

/// One frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Frame {
    pub kind: Kind,
    /// The sender's rank in the communicator being shrunk.
    pub rank: usize,
    pub ranks: Vec<usize>,
    pub id: Option<UniqueId>,
}

impl Frame {
    /// A frame of `kind` from `rank` with no list and no id.
    pub(super) fn bare(kind: Kind, rank: usize) -> Frame {
        Frame {
            kind,
            rank,
            ranks: Vec::new(),
            id: None,
        }
    }

    /// The frame's bytes, carrying `secret`.
    pub(super) fn encode(&self, secret: &[u8; 16]) -> Vec<u8> {
        let mut w = SHRINK
            .writer(secret)
            .u8(self.kind as u8)
            .u32(self.rank as u32)
            .u32(self.ranks.len() as u32)
            .u8(u8::from(self.id.is_some()));
        for r in &self.ranks {
            w = w.u32(*r as u32);
        }
        if let Some(id) = &self.id {
            w = w.bytes(&id.to_bytes());
        }
        w.finish()
    }

    /// Writes the frame to `w`.
    ///
    /// # Errors
    /// [`Error::Os`] from the write.
    pub(super) fn send(&self, w: &mut impl Write, secret: &[u8; 16]) -> Result<()> {
        w.write_all(&self.encode(secret))
            .map_err(|e| Error::os("write a shrink frame", e))
    }

    /// Reads one frame from `r`, which must carry `secret` and name a rank
    /// below `size`.
    ///
    /// # Errors
    /// [`Error::Os`] from the read (a timeout or a closed connection among
    /// them); [`Error::Bootstrap`] naming what is malformed.
    pub(super) fn read(r: &mut impl Read, secret: &[u8; 16], size: usize) -> Result<Frame> {
        let mut head = [0u8; HEAD];
        r.read_exact(&mut head)
            .map_err(|e| Error::os("read a shrink frame", e))?;
        let bad = |what: String| Error::Bootstrap(format!("shrink frame: {what}"));
        let mut h = SHRINK
            .reader(&head, secret)
            .map_err(|e| Error::Bootstrap(SHRINK.describe(&e)))?;
        // The head's length is fixed: its fields are there.
        let (kind, rank, count, has_id) = (|| -> std::result::Result<_, String> {
            Ok((
                h.u8()?,
                h.u32()? as usize,
                h.count(size.min(MAX_RANKS), "ranks listed")?,
                h.u8()?,
            ))
        })()
        .map_err(bad)?;
        let kind = Kind::from_u8(kind).ok_or_else(|| bad(format!("kind {kind}")))?;
        if rank >= size {
            return Err(bad(format!("rank {rank} of {size}")));
        }
        let mut list = vec![0u8; 4 * count];
        r.read_exact(&mut list)
            .map_err(|e| Error::os("read a shrink frame's ranks", e))?;
        let ranks: Vec<usize> = list
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as usize)
            .collect();
        if let Some(r) = ranks.iter().find(|&&r| r >= size) {
            return Err(bad(format!("rank {r} listed, of {size}")));
        }
        let id = match has_id {
            0 => None,
            1 => {
                let mut b = [0u8; UniqueId::BYTES];
                r.read_exact(&mut b)
                    .map_err(|e| Error::os("read a shrink frame's id", e))?;
                Some(UniqueId::from_bytes(&b)?)
            }
            v => return Err(bad(format!("id flag {v}"))),
        };
        Ok(Frame {
            kind,
            rank,
            ranks,
            id,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_garbage_is_refused() {
        let secret = [7u8; 16];
        let id = UniqueId::from_parts("127.0.0.1:999".parse().unwrap(), [1; 16]);
        let f = Frame {
            kind: Kind::Decision,
            rank: 2,
            ranks: vec![0, 2, 3],
            id: Some(id),
        };
        let bytes = f.encode(&secret);
        assert_eq!(Frame::read(&mut &bytes[..], &secret, 4).unwrap(), f);
        for cut in 0..bytes.len() {
            assert!(Frame::read(&mut &bytes[..cut], &secret, 4).is_err());
        }
        assert!(
            Frame::read(&mut &bytes[..], &[8u8; 16], 4).is_err(),
            "secret"
        );
        assert!(
            Frame::read(&mut &bytes[..], &secret, 3).is_err(),
            "rank 3 of 3"
        );
        let mut bad = bytes.clone();
        bad[HEAD_BYTES] = 9;
        assert!(Frame::read(&mut &bad[..], &secret, 4).is_err(), "kind");
        let mut huge = bytes;
        huge[HEAD_BYTES + 5..HEAD_BYTES + 9].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Frame::read(&mut &huge[..], &secret, 4).is_err(), "count");
        let probe = Frame::bare(Kind::Probe, 1);
        assert_eq!(
            Frame::read(&mut &probe.encode(&secret)[..], &secret, 4).unwrap(),
            probe
        );
    }
}
