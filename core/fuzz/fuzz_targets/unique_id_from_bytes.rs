//! `UniqueId::from_bytes` on arbitrary bytes: it returns `Ok` or `Err`, and a
//! decoded id survives both of its encodings (bytes and text).
#![no_main]

use libfuzzer_sys::fuzz_target;
use streamcomm::bootstrap::UniqueId;

fuzz_target!(|data: &[u8]| {
    if let Ok(id) = UniqueId::from_bytes(data) {
        assert_eq!(data.len(), UniqueId::BYTES);
        assert_eq!(UniqueId::from_bytes(&id.to_bytes()).expect("re-decode"), id);
        assert_eq!(id.to_string().parse::<UniqueId>().expect("re-parse"), id);
    }
});
