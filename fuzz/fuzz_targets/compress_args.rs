//! The Compress tool's argument parser (with its repairs) on any text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use noa::engine::{RAW_PREFIX_CHARS, parse_compress_args};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = parse_compress_args(text);
    let _ = parsed.repaired();
    let _ = parsed.kind.as_str();
    // What the struct documents about itself.
    assert_eq!(parsed.raw_len, text.chars().count());
    assert!(parsed.raw_prefix.chars().count() <= RAW_PREFIX_CHARS);
    assert_eq!(parsed.ok, !parsed.ranges.is_empty());
});
