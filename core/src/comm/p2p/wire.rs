//! The payload of a shared-memory rendezvous request: where the sender's
//! data lies, so that the receiver can pull part of it itself.

/// The sender's data as the receiver can reach it (cross-memory attach).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Source {
    /// Address of the data in the sender's address space.
    pub addr: u64,
    /// Bytes of data.
    pub len: u64,
    /// The sender's process id.
    pub pid: u32,
}

/// Bytes of an encoded [`Source`].
pub(crate) const SOURCE_BYTES: usize = 24;

impl Source {
    /// This process's `data`.
    pub(super) fn of((addr, len): (u64, usize)) -> Source {
        Source {
            addr,
            len: len as u64,
            pid: std::process::id(),
        }
    }

    /// Little-endian `addr, len, pid`.
    pub(super) fn encode(self) -> [u8; SOURCE_BYTES] {
        let mut out = [0; SOURCE_BYTES];
        out[..8].copy_from_slice(&self.addr.to_le_bytes());
        out[8..16].copy_from_slice(&self.len.to_le_bytes());
        out[16..].copy_from_slice(&u64::from(self.pid).to_le_bytes());
        out
    }

    /// Decodes a request's payload; `None` unless it is exactly one
    /// [`Source`] with a plausible pid.
    pub(super) fn decode(bytes: &[u8]) -> Option<Source> {
        let b: &[u8; SOURCE_BYTES] = bytes.try_into().ok()?;
        let word = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
        Some(Source {
            addr: word(0),
            len: word(8),
            pid: u32::try_from(word(16)).ok().filter(|&p| p > 0)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_junk() {
        let s = Source {
            addr: 0xdead_beef_0000,
            len: 1 << 40,
            pid: 4242,
        };
        assert_eq!(Source::decode(&s.encode()), Some(s));
        assert_eq!(Source::decode(&s.encode()[..23]), None);
        assert_eq!(Source::decode(&[0; SOURCE_BYTES]), None);
        let mut huge = s.encode();
        huge[20] = 1; // pid beyond u32
        assert_eq!(Source::decode(&huge), None);
    }
}
