//! `FrameHeader::decode` on arbitrary bytes: the input is the header, then
//! the slot size (`max_len`) and the expected sequence number, both `u64`
//! little-endian (missing bytes read as 0). A header that decodes is a
//! control frame (`CLOSE_LEN`, `ABORT_LEN`) or one whose length fits the slot
//! and whose sequence number is the expected one, and it re-encodes to the
//! bytes read (a goodbye frame carries no sequence number).
#![no_main]

use libfuzzer_sys::fuzz_target;
use streamcomm::transport::tcp::frame::{FrameHeader, ABORT_LEN, CLOSE_LEN, HEADER_BYTES};

/// Reads a little-endian `u64` from up to 8 bytes.
fn le_u64(bytes: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = bytes.len().min(8);
    b[..n].copy_from_slice(&bytes[..n]);
    u64::from_le_bytes(b)
}

fuzz_target!(|data: &[u8]| {
    let mut header = [0u8; HEADER_BYTES];
    let n = data.len().min(HEADER_BYTES);
    header[..n].copy_from_slice(&data[..n]);
    let rest = &data[n..];
    let max_len = le_u64(rest) as usize;
    let expected_seq = le_u64(rest.get(8..).unwrap_or_default());
    match FrameHeader::decode(&header, max_len, expected_seq) {
        Ok(h) if h.len == CLOSE_LEN => assert_eq!(h.seq, expected_seq),
        Ok(h) => {
            assert_eq!(h.encode(), header);
            if h.len != ABORT_LEN {
                assert!(h.len as usize <= max_len);
                assert_eq!(h.seq, expected_seq);
            }
        }
        Err(_) => {}
    }
});
