//! One process at a time per session.

use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};
use std::thread::sleep;
use std::time::{Duration, Instant};

use super::{StoreError, files};

/// How long a command waits for another `noa` on the same session.
const WAIT: Duration = Duration::from_secs(10);

/// An exclusive lock on a session directory, held until dropped.
#[derive(Debug)]
pub struct SessionLock {
    _file: File,
}

impl SessionLock {
    /// Takes `dir/.lock`, waiting a bounded time for another holder.
    pub fn acquire(dir: &Path) -> Result<SessionLock, StoreError> {
        Self::acquire_within(dir, WAIT)
    }

    /// Takes `dir/.lock`, waiting at most `wait` for another holder. The
    /// holder then removes the temp files dead runs left in the directory
    /// (no other process writes there while it holds the lock), and refuses
    /// a directory with a link planted in it before anything is written.
    pub fn acquire_within(dir: &Path, wait: Duration) -> Result<SessionLock, StoreError> {
        let path = dir.join(".lock");
        let file = files::open_or_make(&path).map_err(|e| StoreError::io(&path, e))?;
        let start = Instant::now();
        loop {
            match file.try_lock() {
                Ok(()) => {
                    if let Some(path) = files::sweep_temps(dir, None) {
                        return Err(StoreError::Link { path });
                    }
                    return Ok(SessionLock { _file: file });
                }
                Err(TryLockError::WouldBlock) if start.elapsed() < wait => {
                    sleep(Duration::from_millis(20))
                }
                Err(TryLockError::WouldBlock) => {
                    return Err(StoreError::Locked {
                        path: PathBuf::from(&path),
                    });
                }
                Err(TryLockError::Error(e)) => return Err(StoreError::io(&path, e)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_waits_then_gives_up() {
        let dir = std::env::temp_dir().join(format!("noa-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let first = SessionLock::acquire(&dir).unwrap();
        let second = SessionLock::acquire_within(&dir, Duration::from_millis(60));
        assert!(
            matches!(second, Err(StoreError::Locked { .. })),
            "{second:?}"
        );
        drop(first);
        assert!(SessionLock::acquire_within(&dir, Duration::from_millis(60)).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
