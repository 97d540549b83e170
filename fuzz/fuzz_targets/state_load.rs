//! state.json loading. The loader only takes a session directory
//! (`SessionDir::load` reads `<dir>/state.json`), so each input is written to
//! a scratch directory of this process and loaded from there. Errors
//! (corrupt, wrong version, not UTF-8) are fine; panics are not.
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use noa::store::SessionDir;

/// The scratch session directory, made once. A fresh `SessionDir` handle
/// each input: a handle remembers the refs log it loaded.
fn session() -> SessionDir {
    static BASE: OnceLock<PathBuf> = OnceLock::new();
    let base = BASE.get_or_init(|| {
        // tmpfs when there is one: a write and a read per input.
        let shm = Path::new("/dev/shm");
        let base: PathBuf = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let base = base.join(format!("noa-fuzz-state-{}", std::process::id()));
        SessionDir::new(&base, "session")
            .create()
            .expect("scratch session dir");
        base
    });
    SessionDir::new(base, "session")
}

fuzz_target!(|data: &[u8]| {
    let dir = session();
    std::fs::write(dir.state_path(), data).expect("write scratch state.json");
    if let Ok(Some(state)) = dir.load() {
        // A state that loads must also serialize back.
        let _ = serde_json::to_string(&state);
    }
});
