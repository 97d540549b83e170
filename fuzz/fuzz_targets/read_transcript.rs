//! Any text read as a transcript, auto-detected and as each format, with
//! both bad-line policies: errors are fine, panics are not.
#![no_main]

use libfuzzer_sys::fuzz_target;
use noa::formats::{BadLines, Format, read};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for bad in [BadLines::Fail, BadLines::Skip] {
        let _ = read("fuzz", text, None, bad);
        for format in Format::ALL {
            if let Ok(t) = read("fuzz", text, Some(format), bad) {
                // The accessors the CLI calls on every transcript.
                let _ = t.cores();
                let _ = t.recorded();
            }
        }
    }
});
