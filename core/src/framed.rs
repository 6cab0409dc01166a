//! The one idea the three framed tcp protocols share (the bootstrap's
//! hello, the tcp transport's hello, the shrink frames): a frame opens with
//! a magic, a version and the communicator's secret, then little-endian
//! fields, and every count read from the network is bounded before
//! anything is allocated for it.
//!
//! Each protocol keeps its own layout after the head; this module writes
//! the head, checks it (the secret in constant time, so that a stranger
//! learns nothing from how fast it is refused) and reads fields without
//! panicking on short input (the endpoint records the bootstrap gathers
//! are read with the same reader).

/// Bytes of the head: magic, version, secret.
pub(crate) const HEAD_BYTES: usize = 4 + 4 + 16;

/// One protocol's head: who it is and which version it speaks.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Protocol {
    /// What error messages call it ("bootstrap hello", "tcp hello", ...).
    pub(crate) name: &'static str,
    /// The four bytes that open its frames.
    pub(crate) magic: [u8; 4],
    /// Its version; a peer speaking another is refused.
    pub(crate) version: u32,
}

/// Why a head was refused (before the sender was authenticated: nothing
/// of what it sent is echoed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum HeadError {
    /// Too few bytes for the head.
    Short,
    /// Not this protocol's magic.
    Magic,
    /// Another version of the protocol.
    Version(u32),
    /// Not the communicator's secret.
    Secret,
}

impl Protocol {
    /// A frame of this protocol carrying `secret`, fields to follow.
    pub(crate) fn writer(&self, secret: &[u8; 16]) -> FrameWriter {
        let mut out = Vec::with_capacity(64);
        out.extend_from_slice(&self.magic);
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(secret);
        FrameWriter(out)
    }

    /// Checks that `bytes` open with this protocol's head carrying
    /// `secret`; a reader of the fields after it.
    ///
    /// # Errors
    /// What was wrong with the head.
    pub(crate) fn reader<'a>(
        &self,
        bytes: &'a [u8],
        secret: &[u8; 16],
    ) -> Result<FrameReader<'a>, HeadError> {
        if bytes.len() < HEAD_BYTES {
            return Err(HeadError::Short);
        }
        if bytes[0..4] != self.magic {
            return Err(HeadError::Magic);
        }
        let mut r = FrameReader { bytes, at: 4 };
        let version = r.u32().map_err(|_| HeadError::Short)?;
        if version != self.version {
            return Err(HeadError::Version(version));
        }
        let mut got = [0u8; 16];
        got.copy_from_slice(&bytes[8..HEAD_BYTES]);
        if !secrets_equal(&got, secret) {
            return Err(HeadError::Secret);
        }
        r.at = HEAD_BYTES;
        Ok(r)
    }

    /// `e` as a message naming this protocol.
    pub(crate) fn describe(&self, e: &HeadError) -> String {
        let name = self.name;
        match e {
            HeadError::Short => format!("{name}: too short"),
            HeadError::Magic => format!("{name}: not a streamcomm {name} (bad magic)"),
            HeadError::Version(v) => format!(
                "{name}: protocol version {v} (this build speaks {})",
                self.version
            ),
            HeadError::Secret => format!("{name}: wrong secret"),
        }
    }
}

/// Builds a frame's bytes, little-endian.
pub(crate) struct FrameWriter(Vec<u8>);

impl FrameWriter {
    /// Appends one byte.
    pub(crate) fn u8(mut self, v: u8) -> FrameWriter {
        self.0.push(v);
        self
    }

    /// Appends a 32-bit field.
    pub(crate) fn u32(mut self, v: u32) -> FrameWriter {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// Appends raw bytes.
    pub(crate) fn bytes(mut self, v: &[u8]) -> FrameWriter {
        self.0.extend_from_slice(v);
        self
    }

    /// The frame.
    pub(crate) fn finish(self) -> Vec<u8> {
        self.0
    }
}

/// Reads a frame's fields in order; reading past its end is an error, not
/// a panic.
pub(crate) struct FrameReader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> FrameReader<'a> {
    /// A reader of `bytes` from their start, for records with no head
    /// (the endpoints the bootstrap all-gathers).
    pub(crate) fn over(bytes: &'a [u8]) -> FrameReader<'a> {
        FrameReader { bytes, at: 0 }
    }

    /// Bytes not read yet.
    pub(crate) fn left(&self) -> usize {
        self.bytes.len() - self.at
    }

    /// The next `n` bytes.
    ///
    /// # Errors
    /// When fewer are left.
    pub(crate) fn bytes(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or_else(|| {
            format!(
                "{} bytes wanted at byte {} of {}",
                n,
                self.at,
                self.bytes.len()
            )
        })?;
        let b = &self.bytes[self.at..end];
        self.at = end;
        Ok(b)
    }

    /// The next byte.
    ///
    /// # Errors
    /// At the end of the frame.
    pub(crate) fn u8(&mut self) -> Result<u8, String> {
        Ok(self.bytes(1)?[0])
    }

    /// The next 32-bit field.
    ///
    /// # Errors
    /// When fewer than four bytes are left.
    pub(crate) fn u32(&mut self) -> Result<u32, String> {
        let b = self.bytes(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// The next 64-bit field.
    ///
    /// # Errors
    /// When fewer than eight bytes are left.
    pub(crate) fn u64(&mut self) -> Result<u64, String> {
        let b = self.bytes(8)?;
        let mut w = [0u8; 8];
        w.copy_from_slice(b);
        Ok(u64::from_le_bytes(w))
    }

    /// The next 32-bit field as a count of at most `max` (checked before
    /// anything is allocated for what it counts).
    ///
    /// # Errors
    /// Naming `what` when the count is larger.
    pub(crate) fn count(&mut self, max: usize, what: &str) -> Result<usize, String> {
        let n = self.u32()? as usize;
        if n > max {
            return Err(format!("{n} {what} (at most {max})"));
        }
        Ok(n)
    }
}

/// Compares two secrets in time independent of where they differ.
pub(crate) fn secrets_equal(a: &[u8; 16], b: &[u8; 16]) -> bool {
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: Protocol = Protocol {
        name: "test frame",
        magic: *b"TEST",
        version: 3,
    };

    #[test]
    fn heads_round_trip_and_every_fault_is_named() {
        let secret = [7u8; 16];
        let f = P.writer(&secret).u32(5).u8(1).bytes(b"xy").finish();
        let mut r = P.reader(&f, &secret).unwrap();
        assert_eq!(r.u32(), Ok(5));
        assert_eq!(r.u8(), Ok(1));
        assert_eq!(r.bytes(2), Ok(&b"xy"[..]));
        assert!(r.u8().is_err(), "past the end");
        assert_eq!(P.reader(&f, &[8; 16]).err(), Some(HeadError::Secret));
        assert_eq!(P.reader(&f[..10], &secret).err(), Some(HeadError::Short));
        let mut bad = f.clone();
        bad[0] = b'X';
        assert_eq!(P.reader(&bad, &secret).err(), Some(HeadError::Magic));
        let mut bad = f.clone();
        bad[4] = 9;
        assert_eq!(P.reader(&bad, &secret).err(), Some(HeadError::Version(9)));
        assert_eq!(
            P.describe(&HeadError::Version(9)),
            "test frame: protocol version 9 (this build speaks 3)"
        );
        let huge = P.writer(&secret).u32(u32::MAX).finish();
        let e = P.reader(&huge, &secret).unwrap().count(16, "ranks");
        assert_eq!(e, Err(format!("{} ranks (at most 16)", u32::MAX)));
    }

    #[test]
    fn secrets_compare() {
        assert!(secrets_equal(&[1; 16], &[1; 16]));
        let mut b = [1; 16];
        b[15] = 2;
        assert!(!secrets_equal(&[1; 16], &b));
    }
}
