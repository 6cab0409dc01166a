//! `Endpoint::decode` on arbitrary bytes: it returns `Ok` or `Err`, and a
//! decoded endpoint re-encodes to bytes that decode to the same endpoint.
#![no_main]

use libfuzzer_sys::fuzz_target;
use streamcomm::comm::Endpoint;

fuzz_target!(|data: &[u8]| {
    if let Ok(e) = Endpoint::decode(data) {
        let again = Endpoint::decode(&e.encode()).expect("a decoded endpoint re-decodes");
        assert_eq!(again, e);
    }
});
