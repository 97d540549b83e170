//! One process at a time per session.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::thread::sleep;
use std::time::{Duration, Instant};

use super::StoreError;

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
        let path = dir.join(".lock");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| StoreError::io(&path, e))?;
        let start = Instant::now();
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(SessionLock { _file: file }),
                Err(TryLockError::WouldBlock) if start.elapsed() < WAIT => {
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
