//! `UniqueId`'s `FromStr` on arbitrary text: it returns `Ok` or `Err`, and a
//! parsed id survives both of its encodings (text and bytes).
#![no_main]

use libfuzzer_sys::fuzz_target;
use streamcomm::bootstrap::UniqueId;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(id) = text.parse::<UniqueId>() {
        assert_eq!(id.to_string().parse::<UniqueId>().expect("re-parse"), id);
        assert_eq!(UniqueId::from_bytes(&id.to_bytes()).expect("re-decode"), id);
    }
});
