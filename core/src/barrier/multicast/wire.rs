//! The multicast barrier's datagrams on the wire.
//!
//! Every datagram starts with the communicator's tag, so a datagram of
//! another communicator (or job) that shares the group, or a stray one, is
//! recognised and ignored. Two kinds follow:
//!
//! ```text
//! offset  bytes  field
//!      0      8  tag (little-endian)
//!      8      1  kind: 1 = arrived, 2 = missing
//!      9      3  zero
//!     12      4  rank of the sender
//!     16      8  epoch
//!     24    8·W  (missing only) bitmap of the ranks asked for, W = ⌈size/64⌉ words
//! ```
//!
//! `arrived(rank, e)`: `rank` has reached barrier `e`. `missing(rank, e,
//! ranks)`: `rank` waits at `e` and has not heard from `ranks`, which are
//! asked to send their last arrival again.

/// Bytes before the bitmap.
pub(crate) const HEADER_BYTES: usize = 24;

const ARRIVED: u8 = 1;
const MISSING: u8 = 2;

/// One datagram of the protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Datagram {
    /// The sender has reached barrier `epoch`.
    Arrived {
        /// The sender.
        rank: usize,
        /// The barrier.
        epoch: u64,
    },
    /// The sender waits at barrier `epoch` without the arrivals of the
    /// ranks whose bits are set in `ranks`.
    Missing {
        /// The sender.
        rank: usize,
        /// The barrier it waits at.
        epoch: u64,
        /// Bit `r % 64` of word `r / 64`: rank r is asked to re-send.
        ranks: Vec<u64>,
    },
}

/// Words of the bitmap for `size` ranks.
pub(crate) const fn bitmap_words(size: usize) -> usize {
    size.div_ceil(64)
}

/// Bytes of the largest datagram for `size` ranks (a `missing`).
pub(crate) const fn max_bytes(size: usize) -> usize {
    HEADER_BYTES + 8 * bitmap_words(size)
}

impl Datagram {
    /// Writes the datagram, tagged `tag`, over `out` (cleared first).
    pub(crate) fn encode(&self, tag: u64, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&tag.to_le_bytes());
        let (kind, rank, epoch) = match self {
            Datagram::Arrived { rank, epoch } => (ARRIVED, *rank, *epoch),
            Datagram::Missing { rank, epoch, .. } => (MISSING, *rank, *epoch),
        };
        out.extend_from_slice(&[kind, 0, 0, 0]);
        out.extend_from_slice(&(rank as u32).to_le_bytes());
        out.extend_from_slice(&epoch.to_le_bytes());
        if let Datagram::Missing { ranks, .. } = self {
            for w in ranks {
                out.extend_from_slice(&w.to_le_bytes());
            }
        }
    }

    /// Reads a datagram of the communicator tagged `tag` with `size`
    /// ranks: `None` for another tag, an unknown kind, a rank out of range
    /// or a wrong length (such datagrams are ignored, never trusted).
    pub(crate) fn decode(tag: u64, size: usize, bytes: &[u8]) -> Option<Datagram> {
        let u64_at = |o: usize| -> Option<u64> {
            Some(u64::from_le_bytes(bytes.get(o..o + 8)?.try_into().ok()?))
        };
        if bytes.len() < HEADER_BYTES || u64_at(0)? != tag || bytes[9..12] != [0, 0, 0] {
            return None;
        }
        let rank = u32::from_le_bytes(bytes[12..16].try_into().ok()?) as usize;
        let epoch = u64_at(16)?;
        if rank >= size {
            return None;
        }
        match bytes[8] {
            ARRIVED if bytes.len() == HEADER_BYTES => Some(Datagram::Arrived { rank, epoch }),
            MISSING if bytes.len() == max_bytes(size) => {
                let ranks = (0..bitmap_words(size))
                    .map(|w| u64_at(HEADER_BYTES + 8 * w))
                    .collect::<Option<Vec<u64>>>()?;
                Some(Datagram::Missing { rank, epoch, ranks })
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_what_is_not_ours() {
        let tag = 0x1234_5678_9abc_def0;
        let mut buf = Vec::new();
        for size in [1, 2, 63, 64, 65, 200] {
            let mut ranks = vec![0u64; bitmap_words(size)];
            ranks[(size - 1) / 64] |= 1 << ((size - 1) % 64);
            for d in [
                Datagram::Arrived {
                    rank: size - 1,
                    epoch: 7,
                },
                Datagram::Missing {
                    rank: 0,
                    epoch: u64::MAX,
                    ranks,
                },
            ] {
                d.encode(tag, &mut buf);
                assert_eq!(Datagram::decode(tag, size, &buf), Some(d.clone()));
                assert_eq!(Datagram::decode(tag ^ 1, size, &buf), None, "other tag");
                assert_eq!(Datagram::decode(tag, size, &buf[..buf.len() - 1]), None);
                let mut longer = buf.clone();
                longer.push(0);
                assert_eq!(Datagram::decode(tag, size, &longer), None);
            }
        }
        Datagram::Arrived { rank: 4, epoch: 1 }.encode(tag, &mut buf);
        assert_eq!(Datagram::decode(tag, 4, &buf), None, "rank out of range");
        buf[8] = 9;
        assert_eq!(Datagram::decode(tag, 8, &buf), None, "unknown kind");
        assert_eq!(Datagram::decode(tag, 8, &[]), None);
    }
}
