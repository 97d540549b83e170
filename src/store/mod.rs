//! Where noa keeps a session's files: state.json and its logs, archives, the
//! read cache and the lock.
//!
//! Archives and state.json are replaced atomically (temp file in the same
//! directory, fsync, rename, then the directory synced), and the logs
//! state.json names are synced before it names them, so a crash or a full
//! disk leaves the previous state intact. The read cache is replaced the
//! same way, or appended to in place, but never synced: it only saves work,
//! and a cache that is missing, or cut short and so fails its checksum, is
//! ignored: the transcript is read whole and the cache written again.

mod archive;
mod atomic;
mod digest;
mod error;
mod files;
mod lock;
mod map_log;
pub mod output;
mod read;
mod read_cache;
mod session;
mod session_cache;
pub mod set_aside;
mod state_file;

pub use atomic::write_atomic;
pub use digest::{
    CacheDigest, Digest, PrefixDigest, TranscriptDigest, cache_digest, digest, transcript_digest,
};
pub use error::{ErrorKind, StoreError};
pub use lock::SessionLock;
pub use output::{StagedOutput, stage_output, write_output};
pub use read::{Access, ReadHooks, SessionOptions};
pub use read_cache::{
    AsideFile, CacheDraft, CacheEnd, CacheHead, CacheSource, IN_TRANSCRIPT, Left, LeftWords,
    ReadCache, Unparsed, WITHHELD_MIN, Warm, WarmMessages, WordsFile, fill_shown,
};
pub use session::{Purpose, Session};
pub use session_cache::{CacheWrite, Drafting, Projected};
pub use state_file::SessionDir;

/// Room for `n` items loaded from a session's files and those a turn adds
/// to them: a list full to its last place when they come is copied whole
/// into one twice its size, and room never written to takes no memory.
fn with_room(n: usize) -> usize {
    n + n / 16 + 256
}
