//! Read-ahead for one tcp socket: a single `read` takes a small frame
//! whole (its header and its payload) and whatever follows it.
//!
//! Reading a frame's header and payload separately, then reading once more
//! to find the socket empty, took three system calls per small message,
//! where a busy-polling ping-pong makes one. Here one read into a small
//! buffer usually brings the whole frame, and a read that comes back short
//! says the socket held nothing more: this pass asks no further (the next
//! pump, or the engine's poll, will). A payload at least as large as the
//! buffer is read straight into its slot, as before.

use std::io::{self, ErrorKind, Read};

/// Bytes read ahead at most: several small frames, a page.
const READ_AHEAD: usize = 4096;

/// The bytes read from a socket and not yet taken, and whether the socket
/// was found empty in this pass.
pub(super) struct ReadAhead {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    drained: bool,
}

impl ReadAhead {
    pub(super) fn new() -> ReadAhead {
        ReadAhead {
            buf: vec![0; READ_AHEAD].into_boxed_slice(),
            start: 0,
            end: 0,
            drained: false,
        }
    }

    /// Bytes read from the socket and not yet taken.
    pub(super) fn buffered(&self) -> usize {
        self.end - self.start
    }

    /// Starts a pass over the socket: it may be read again.
    pub(super) fn new_pass(&mut self) {
        self.drained = false;
    }

    /// Fills the front of `dst` (not empty) with the stream's next bytes:
    /// those read ahead, else from `src`. As [`Read::read`]: `Ok(0)` at the
    /// end of the stream, `WouldBlock` when nothing is there now (or the
    /// socket was found empty earlier in this pass).
    pub(super) fn read(&mut self, src: &mut impl Read, dst: &mut [u8]) -> io::Result<usize> {
        debug_assert!(!dst.is_empty(), "a read into nothing");
        if self.start < self.end {
            let n = dst.len().min(self.end - self.start);
            dst[..n].copy_from_slice(&self.buf[self.start..self.start + n]);
            self.start += n;
            return Ok(n);
        }
        if self.drained {
            return Err(ErrorKind::WouldBlock.into());
        }
        if dst.len() >= self.buf.len() {
            let n = src.read(dst)?;
            self.drained = n < dst.len();
            return Ok(n);
        }
        let n = src.read(&mut self.buf)?;
        self.drained = n < self.buf.len();
        let m = n.min(dst.len());
        dst[..m].copy_from_slice(&self.buf[..m]);
        (self.start, self.end) = (m, n);
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A socket stand-in: hands out `data` in the chunk sizes given, then
    /// would block; counts the reads it served.
    struct Chunks {
        data: Vec<u8>,
        at: usize,
        chunks: Vec<usize>,
        reads: usize,
    }

    impl Read for Chunks {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.reads += 1;
            let Some(&c) = self.chunks.first() else {
                return Err(ErrorKind::WouldBlock.into());
            };
            let n = c.min(buf.len()).min(self.data.len() - self.at);
            buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
            self.at += n;
            if n == c {
                self.chunks.remove(0);
            } else {
                self.chunks[0] -= n;
            }
            Ok(n)
        }
    }

    #[test]
    fn bytes_come_out_in_order_whatever_the_reads_and_chunks() {
        let data: Vec<u8> = (0..20_000u32).map(|i| (i * 7 + i / 255) as u8).collect();
        for chunk in [1usize, 7, 40, 4096, 5000, 20_000] {
            for want in [1usize, 3, 48, 4096, 4097, 9000] {
                let chunks = vec![chunk; data.len().div_ceil(chunk)];
                let mut src = Chunks {
                    data: data.clone(),
                    at: 0,
                    chunks,
                    reads: 0,
                };
                let mut ra = ReadAhead::new();
                let mut got = Vec::new();
                let mut dst = vec![0u8; want];
                while got.len() < data.len() {
                    ra.new_pass();
                    loop {
                        match ra.read(&mut src, &mut dst) {
                            Ok(0) => panic!("end of stream"),
                            Ok(n) => got.extend_from_slice(&dst[..n]),
                            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
                assert_eq!(got, data, "chunks of {chunk}, reads of {want}");
            }
        }
    }

    #[test]
    fn a_small_frame_takes_one_read_and_a_short_read_ends_the_pass() {
        // A 24-byte header and 8-byte payload, arrived together.
        let mut src = Chunks {
            data: (0..32).collect(),
            at: 0,
            chunks: vec![32],
            reads: 0,
        };
        let mut ra = ReadAhead::new();
        ra.new_pass();
        let mut hdr = [0u8; 24];
        let mut payload = [0u8; 8];
        assert_eq!(ra.read(&mut src, &mut hdr).unwrap(), 24);
        assert_eq!(ra.read(&mut src, &mut payload).unwrap(), 8);
        assert_eq!(payload, [24, 25, 26, 27, 28, 29, 30, 31]);
        // The read came back short: no system call to find it empty.
        assert_eq!(
            ra.read(&mut src, &mut hdr).unwrap_err().kind(),
            ErrorKind::WouldBlock
        );
        assert_eq!(src.reads, 1);
        // A new pass asks the socket again.
        ra.new_pass();
        assert_eq!(
            ra.read(&mut src, &mut hdr).unwrap_err().kind(),
            ErrorKind::WouldBlock
        );
        assert_eq!(src.reads, 2);
    }

    #[test]
    fn the_end_of_the_stream_is_passed_on() {
        struct Eof;
        impl Read for Eof {
            fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
                Ok(0)
            }
        }
        let mut ra = ReadAhead::new();
        ra.new_pass();
        assert_eq!(ra.read(&mut Eof, &mut [0u8; 8]).unwrap(), 0);
    }
}
