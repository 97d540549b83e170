//! state.json: reading it strictly, writing it atomically.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use miette::Diagnostic;
use thiserror::Error;

use super::atomic::write_atomic;
use crate::engine::{CompressionState, STATE_VERSION};

/// Why the store could not do what was asked.
#[derive(Debug, Error, Diagnostic)]
pub enum StoreError {
    /// state.json is not valid JSON or not a state.
    #[error("{path}: state file is corrupt at line {line}, column {column}: {what}")]
    #[diagnostic(
        code(noa::corrupt_state),
        help(
            "noa left the file as it is. Move it aside and run `noa rebuild TRANSCRIPT` to recover the state from the transcript"
        )
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What serde found.
        what: String,
    },
    /// state.json was written by a newer noa.
    #[error("{path}: state file version {found}, this noa reads version {supported}")]
    #[diagnostic(
        code(noa::state_version),
        help("use the noa that wrote it, or move it aside and run `noa rebuild TRANSCRIPT`")
    )]
    Version {
        /// The file.
        path: PathBuf,
        /// Version in the file.
        found: u64,
        /// Version this build reads.
        supported: u32,
    },
    /// Another process holds the session.
    #[error("{path}: another noa process is working on this session")]
    #[diagnostic(
        code(noa::locked),
        help("wait for it to finish; the lock is released when that process exits")
    )]
    Locked {
        /// The lock file.
        path: PathBuf,
    },
    /// A symbolic link where noa would write, inside the session directory.
    #[error("{path} is a symbolic link inside the state directory; noa does not write through it")]
    #[diagnostic(
        code(noa::link_in_state_dir),
        help("remove the link, or point --state-dir at a directory of noa's own")
    )]
    Link {
        /// The link.
        path: PathBuf,
    },
    /// A file name that would leave the session directory.
    #[error("{path}: not a path inside the session directory")]
    #[diagnostic(code(noa::bad_state_path))]
    Outside {
        /// The path asked for.
        path: PathBuf,
    },
    /// Reading or writing failed.
    #[error("{path}: {source}")]
    #[diagnostic(code(noa::io))]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
}

impl StoreError {
    pub(crate) fn io(path: &Path, source: io::Error) -> StoreError {
        StoreError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// One session's directory: `<state-dir>/<session>/`.
#[derive(Debug, Clone)]
pub struct SessionDir {
    /// The session directory itself.
    pub dir: PathBuf,
    /// The session id (the directory's name).
    pub session: String,
}

impl SessionDir {
    /// The directory for `session` under `base`.
    pub fn new(base: &Path, session: &str) -> SessionDir {
        SessionDir {
            dir: base.join(session),
            session: session.to_string(),
        }
    }

    /// The directory of a subagent spawned by `parent`: under the parent's,
    /// so its archives sit beside the ones it inherited.
    pub fn subagent(base: &Path, parent: &str, agent: &str) -> SessionDir {
        SessionDir {
            dir: base.join(parent).join("subagents").join(agent),
            session: agent.to_string(),
        }
    }

    /// Path of state.json.
    pub fn state_path(&self) -> PathBuf {
        self.dir.join("state.json")
    }

    /// Creates the directory if needed. A session directory that is a
    /// symbolic link is refused: the lock and everything after it would be
    /// written elsewhere.
    pub fn create(&self) -> Result<(), StoreError> {
        if fs::symlink_metadata(&self.dir).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(StoreError::Link {
                path: self.dir.clone(),
            });
        }
        fs::create_dir_all(&self.dir).map_err(|e| StoreError::io(&self.dir, e))
    }

    /// Loads state.json; `None` when there is none yet. A file that cannot be
    /// read as a state of this version is an error, never silently replaced.
    pub fn load(&self) -> Result<Option<CompressionState>, StoreError> {
        let path = self.state_path();
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(StoreError::io(&path, e)),
        };
        let corrupt = |e: serde_json::Error| StoreError::Corrupt {
            path: path.clone(),
            line: e.line(),
            column: e.column(),
            what: e.to_string(),
        };
        let value: serde_json::Value = serde_json::from_str(&text).map_err(corrupt)?;
        let found = value
            .get("version")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0);
        if found != u64::from(STATE_VERSION) {
            return Err(StoreError::Version {
                path,
                found,
                supported: STATE_VERSION,
            });
        }
        match serde_json::from_value(value) {
            Ok(state) => Ok(Some(state)),
            // A value carries no positions: parse the text again, only on
            // this path, so the error names its line and column.
            Err(e) => Err(corrupt(
                serde_json::from_str::<CompressionState>(&text)
                    .err()
                    .unwrap_or(e),
            )),
        }
    }

    /// Writes state.json atomically.
    pub fn save(&self, state: &CompressionState) -> Result<(), StoreError> {
        let path = self.state_path();
        let mut bytes =
            serde_json::to_vec_pretty(state).map_err(|e| StoreError::io(&path, e.into()))?;
        bytes.push(b'\n');
        self.write("state.json", &bytes).map(|_| ())
    }

    /// Writes `rel` (e.g. `tier1/b1_m00002-m00005.md`) under the session
    /// directory atomically, creating its folders; returns its path. `rel`
    /// may only name a place inside the directory, and nothing on the way,
    /// the directory itself included, may be a symbolic link: a link
    /// planted there would send the originals, or the state, elsewhere.
    pub fn write(&self, rel: &str, bytes: &[u8]) -> Result<PathBuf, StoreError> {
        let rel_path = Path::new(rel);
        if rel.is_empty()
            || !rel_path
                .components()
                .all(|c| matches!(c, std::path::Component::Normal(_)))
        {
            return Err(StoreError::Outside {
                path: rel_path.to_path_buf(),
            });
        }
        let mut at = self.dir.clone();
        let check = |p: &Path| match fs::symlink_metadata(p) {
            Ok(m) if m.file_type().is_symlink() => Err(StoreError::Link {
                path: p.to_path_buf(),
            }),
            _ => Ok(()),
        };
        check(&at)?;
        for c in rel_path.components() {
            at.push(c);
            check(&at)?;
        }
        if let Some(parent) = at.parent() {
            fs::create_dir_all(parent).map_err(|e| StoreError::io(parent, e))?;
        }
        write_atomic(&at, bytes).map_err(|e| StoreError::io(&at, e))?;
        Ok(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("noa-state-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn round_trip() {
        let base = temp("rt");
        let s = SessionDir::new(&base, "sess");
        assert!(s.load().unwrap().is_none());
        let mut st = CompressionState::new("sess");
        st.message_refs.by_raw.insert("h_a".into(), "m00001".into());
        st.message_refs.by_ref.insert("m00001".into(), "h_a".into());
        st.token_snapshot.insert("m00001".into(), 12);
        s.save(&st).unwrap();
        assert_eq!(s.load().unwrap(), Some(st));
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn corrupt_file_is_an_error_and_stays() {
        let base = temp("corrupt");
        let s = SessionDir::new(&base, "sess");
        s.create().unwrap();
        fs::write(s.state_path(), "{\"version\": 1, \"blocks\": [").unwrap();
        let err = s.load().unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
        assert!(err.to_string().contains("corrupt"));
        assert_eq!(
            fs::read_to_string(s.state_path()).unwrap(),
            "{\"version\": 1, \"blocks\": ["
        );
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_wrong_field_is_reported_where_it_is() {
        let base = temp("wrong-field");
        let s = SessionDir::new(&base, "sess");
        s.create().unwrap();
        fs::write(s.state_path(), "{\"version\": 1,\n  \"blocks\": 7\n}").unwrap();
        let err = s.load().unwrap_err();
        let StoreError::Corrupt { line, column, .. } = err else {
            panic!("{err}");
        };
        assert_eq!((line, column), (2, 13));
        fs::remove_dir_all(&base).unwrap();
    }

    /// A full disk, injected: the temp file state.json is written through
    /// is `/dev/full`, which refuses every write with ENOSPC.
    #[test]
    fn a_full_disk_leaves_the_old_state_and_its_archives() {
        let base = temp("full");
        let s = SessionDir::new(&base, "sess");
        let mut state = CompressionState::new("sess");
        s.write("tier1/b1_m00001-m00002.md", b"originals").unwrap();
        s.save(&state).unwrap();
        let before = fs::read(s.state_path()).unwrap();
        let tmp = s
            .dir
            .join(format!(".state.json.{}.tmp", std::process::id()));
        std::os::unix::fs::symlink("/dev/full", &tmp).unwrap();
        state.next_block_id = 2;
        let err = s.save(&state).unwrap_err();
        assert!(
            matches!(&err, StoreError::Io { source, .. } if source.raw_os_error() == Some(28)),
            "{err}"
        );
        assert_eq!(fs::read(s.state_path()).unwrap(), before);
        assert_eq!(s.load().unwrap().unwrap().next_block_id, 1);
        assert!(s.dir.join("tier1/b1_m00001-m00002.md").exists());
        assert!(!tmp.exists(), "the temp file is cleaned up");
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_session_dir_that_is_a_link_is_refused() {
        let base = temp("linked");
        let elsewhere = temp("linked-target");
        fs::create_dir_all(&base).unwrap();
        std::os::unix::fs::symlink(&elsewhere, base.join("sess")).unwrap();
        let s = SessionDir::new(&base, "sess");
        assert!(matches!(s.create(), Err(StoreError::Link { .. })));
        assert!(matches!(
            s.save(&CompressionState::new("sess")),
            Err(StoreError::Link { .. })
        ));
        assert!(!elsewhere.exists());
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn writes_stay_inside_the_session_dir() {
        let base = temp("inside");
        let s = SessionDir::new(&base, "sess");
        for rel in ["../escape.md", "/etc/x", "", "tier1/../../x"] {
            assert!(
                matches!(s.write(rel, b"x"), Err(StoreError::Outside { .. })),
                "{rel}"
            );
        }
        let p = s.write("tier1/b1_m00001-m00002.md", b"x").unwrap();
        assert_eq!(p, base.join("sess/tier1/b1_m00001-m00002.md"));
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn future_version_is_refused() {
        let base = temp("version");
        let s = SessionDir::new(&base, "sess");
        s.create().unwrap();
        fs::write(s.state_path(), "{\"version\": 2}").unwrap();
        let err = s.load().unwrap_err();
        assert!(matches!(err, StoreError::Version { found: 2, .. }), "{err}");
        fs::remove_dir_all(&base).unwrap();
    }
}
