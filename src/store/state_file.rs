//! state.json: reading it strictly, writing it atomically.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::digest::{Digest, digest};
use super::error::StoreError;
use super::map_log::{self, Extent, LogError, Logged};
use super::{atomic, with_room};
use crate::engine::{
    Block, CompressionState, HostState, MAX_REF, MessageRefs, Name, NudgeState, RefName,
    STATE_VERSION, Stats,
};

/// One session's directory: `<state-dir>/<session>/`.
#[derive(Debug, Clone)]
pub struct SessionDir {
    /// The session directory itself.
    pub dir: PathBuf,
    /// The session id (the directory's name).
    pub session: String,
    /// The state dir the session is in, with every other session: a fork
    /// or a subagent names the archives it inherited there.
    base: PathBuf,
    /// The refs log as this process last read or wrote it (its digest
    /// always known), with the digest of its bytes to go on from, so a save
    /// appends what is new instead of writing every ref again. Both are
    /// taken on once state.json names the log.
    logged: RefCell<Option<(RefsLog, Digest)>>,
    /// The blocks log as this process last read or wrote it, with a
    /// digest of each block's latest line, so a save appends only the
    /// blocks made or changed since.
    blocks_logged: RefCell<Option<BlocksLogged>>,
    /// The token-figure and truncation logs as this process last read or
    /// wrote them.
    tokens_logged: RefCell<Option<Logged>>,
    truncated_logged: RefCell<Option<Logged>>,
    /// state.json's bytes as this process last read or wrote them: a save
    /// that would write the same bytes leaves the file alone, so a turn
    /// that changes nothing (a host's retry) syncs and renames nothing.
    state_json: RefCell<Option<Vec<u8>>>,
}

/// A save that failed, and whether its state.json had been put in place.
#[derive(Debug)]
pub(super) struct Unsaved {
    pub error: StoreError,
    pub placed: bool,
}

/// Token figures frozen per ref: `+ m00042 1234`.
const TOKENS_LOG: &str = "tokens.log";
/// Outputs cut by emergency truncation, each with the history length when
/// it was cut (0 where that is not known): `+ h_… 512`.
const TRUNCATED_LOG: &str = "truncated.log";

/// blocks.jsonl as read or written: how much of it the state stands on,
/// and per block in order, its id and the digest of its latest line.
///
/// The log is append-only, one block a line; a later line for a block id
/// replaces the earlier one (a block deactivated when a higher tier absorbs
/// it), and blocks keep the order their first lines give. A turn that makes
/// or changes no block writes nothing of them; an older state.json put back
/// names a shorter prefix, which holds the blocks as they were then.
#[derive(Debug, Clone)]
struct BlocksLogged {
    log: Extent,
    latest: Latest,
    /// The digest of the log's bytes so far, to go on from.
    sum: Digest,
}

/// Block ids in order, each with the [`block_digest`] of its latest line.
type Latest = Vec<(String, u64)>;

/// A digest of everything a block's line holds, taken from its fields: a
/// turn finds the few blocks it changed (made, or turned inactive) without
/// writing every block of the session out to compare.
fn block_digest(b: &Block) -> u64 {
    // Naming every field makes a new one a compile error here until the
    // digest takes it in.
    let Block {
        block_id,
        tier,
        topic,
        summary,
        direct_message_ids,
        effective_message_ids,
        direct_block_ids,
        archive_path,
        archive_rel,
        compressed_tokens,
        start_ref,
        end_ref,
        created_at,
        active,
        compress_call_id,
    } = b;
    // Laid end to end and digested whole, each text and list with its
    // length first, so no two blocks lay out alike: the digest goes fastest
    // over long runs of bytes.
    fn text(out: &mut Vec<u8>, s: &str) {
        out.extend_from_slice(&(s.len() as u64).to_le_bytes());
        out.extend_from_slice(s.as_bytes());
    }
    // An id is laid out behind a byte of its length: ids are short, and a
    // long session's blocks name every message it folded, twice over.
    fn list(out: &mut Vec<u8>, ids: &[Name]) {
        out.extend_from_slice(&(ids.len() as u64).to_le_bytes());
        for id in ids {
            match u8::try_from(id.len()) {
                Ok(short) if short < u8::MAX => out.push(short),
                _ => {
                    out.push(u8::MAX);
                    out.extend_from_slice(&(id.len() as u64).to_le_bytes());
                }
            }
            out.extend_from_slice(id.as_bytes());
        }
    }
    // A block that folded none stands for its own messages: the list is
    // laid out once, and a byte says the other is the same.
    let same = effective_message_ids == direct_message_ids;
    let ids = direct_message_ids.len()
        + if same { 0 } else { effective_message_ids.len() }
        + direct_block_ids.len();
    // Sized for the lists too: an id is its length and some twenty bytes.
    let mut out = Vec::with_capacity(256 + topic.len() + summary.len() + 24 * ids);
    for s in [
        block_id,
        topic,
        summary,
        archive_path,
        archive_rel,
        start_ref,
        end_ref,
        compress_call_id,
    ] {
        text(&mut out, s);
    }
    list(&mut out, direct_message_ids);
    out.push(u8::from(same));
    if !same {
        list(&mut out, effective_message_ids);
    }
    list(&mut out, direct_block_ids);
    out.extend_from_slice(&[*tier, u8::from(*active)]);
    out.extend_from_slice(&(*compressed_tokens as u64).to_le_bytes());
    out.extend_from_slice(&created_at.to_le_bytes());
    digest(&out)
}

const BLOCKS_LOG: &str = "blocks.jsonl";

/// A block's field for every message it stands for. Since version 4 a
/// line leaves it out when it is the block's own messages (as it is for
/// every block that absorbed none), which it would only repeat; an empty
/// list it stands for is written out.
const EFFECTIVE_IDS: &str = "effectiveMessageIds";

/// Whether a block's line names [`EFFECTIVE_IDS`] (a string inside it
/// holds the name only with its quotes escaped, so never as `"name":`).
fn names_effective_ids(line: &[u8]) -> bool {
    memchr::memmem::find(line, b"\"effectiveMessageIds\":").is_some()
}

/// state.json as written: every field of the state but those that grow
/// with the history, which live in logs beside it and are named by how much
/// of each is the state's: the ref map (refs.log, but for what only
/// state.json can say), the blocks, the token figures and the truncations.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OnDisk<'a> {
    version: u32,
    session_id: &'a str,
    next_block_id: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    blocks_log: Option<Extent>,
    message_refs: InlineRefs<'a>,
    nudge: &'a NudgeState,
    stats: &'a Stats,
    #[serde(skip_serializing_if = "str::is_empty")]
    derived_from: &'a str,
    host: &'a HostState,
    refs_log: RefsLog,
    tokens_log: Extent,
    truncated_log: Extent,
}

/// The part of the ref map refs.log cannot hold: hard-protected messages,
/// known but unnumbered.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct InlineRefs<'a> {
    by_raw: BTreeMap<&'a str, &'a str>,
    by_ref: BTreeMap<&'a str, &'a str>,
}

/// A log beside state.json that could not be read, as the store reports
/// it: damage in the error of the log's kind (`damaged`), I/O as it is.
fn log_failure(
    path: &Path,
    e: LogError,
    damaged: impl FnOnce(&'static str) -> StoreError,
) -> StoreError {
    match e {
        LogError::Damaged(what) => damaged(what),
        LogError::Io(e) => StoreError::io(path, e),
    }
}

/// The ids refs.log cannot give back: those whose ref does not name them
/// in return (hard-protected ones, marked `BLOCKED`, in a state noa wrote).
fn unlogged(refs: &MessageRefs) -> BTreeMap<&str, &str> {
    refs.unpaired().collect()
}

/// How much of refs.log a state.json stands on: the log is append-only,
/// one `ref id` line per numbered ref in ref order, and a state counts only
/// the bytes it names (what a crashed save appended after them is not its).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct RefsLog {
    /// Bytes of the log that belong to the state.
    bytes: u64,
    /// Refs in those bytes.
    count: usize,
    /// The number of the last of them (0 for none).
    last: u32,
    /// The digest of those bytes (a version-2 state has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    digest: Option<u64>,
    /// Which file of the log: see [`map_log::file_name`].
    #[serde(default, skip_serializing_if = "map_log::is_zero")]
    generation: u32,
}

/// The refs after the first `log.count`, when those are the logged ones
/// (their lines digest to the log's digest), with the digest of those lines
/// to go on from: refs are only ever added, each numbered after every
/// earlier one, so what was logged stays the map's first entries.
fn newer_than(
    refs: &MessageRefs,
    log: RefsLog,
) -> Option<(impl Iterator<Item = (RefName, &str)>, Digest)> {
    let mut all = refs.by_ref();
    let mut d = Digest::default();
    // The lines are laid out a chunk at a time: the digest goes fastest
    // over long runs of bytes.
    let mut chunk = Vec::with_capacity(1 << 16);
    for (r, id) in all.by_ref().take(log.count) {
        for part in [r.as_bytes(), b" ", id.as_bytes(), b"\n"] {
            chunk.extend_from_slice(part);
        }
        if chunk.len() >= 1 << 16 {
            d.update(&chunk);
            chunk.clear();
        }
    }
    d.update(&chunk);
    (Some(d.finish()) == log.digest).then_some((all, d))
}

/// `m00042` → 42; 0 for anything else.
fn ref_number(r: &str) -> u32 {
    r.strip_prefix('m')
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The logs as this save wrote them, for state.json to name.
struct LogsNamedNow {
    refs: RefsLog,
    blocks: Option<Extent>,
    tokens: Extent,
    truncated: Extent,
}

/// state.json's bytes for `state` (to be written at `path`), naming the
/// logs as written.
fn state_json_bytes(
    state: &CompressionState,
    logs: LogsNamedNow,
    path: &Path,
) -> Result<Vec<u8>, StoreError> {
    // Naming every field makes a new one a compile error here until
    // state.json carries it.
    let CompressionState {
        version: _,
        session_id,
        next_block_id,
        blocks: _,
        message_refs: refs,
        token_snapshot: _,
        nudge,
        stats,
        derived_from,
        host,
    } = state;
    let disk = OnDisk {
        version: STATE_VERSION,
        session_id,
        next_block_id: *next_block_id,
        blocks_log: logs.blocks,
        message_refs: InlineRefs {
            by_raw: unlogged(refs),
            by_ref: BTreeMap::new(),
        },
        nudge,
        stats,
        derived_from,
        host,
        refs_log: logs.refs,
        tokens_log: logs.tokens,
        truncated_log: logs.truncated,
    };
    let mut bytes = serde_json::to_vec_pretty(&disk).map_err(|e| StoreError::io(path, e.into()))?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// The logs a state.json names, each with the extent it vouches for.
struct LogsNamed {
    /// The state's version as written.
    version: u64,
    refs: Option<RefsLog>,
    blocks: Option<Extent>,
    tokens: Option<Extent>,
    truncated: Option<Extent>,
}

/// The state.json at `path` read from its `text`, and the logs it names.
fn parse_state(path: &Path, text: &str) -> Result<(CompressionState, LogsNamed), StoreError> {
    let corrupt = |e: serde_json::Error| StoreError::Corrupt {
        path: path.to_path_buf(),
        line: e.line(),
        column: e.column(),
        what: e.to_string(),
    };
    let value: serde_json::Value = serde_json::from_str(text).map_err(corrupt)?;
    let found = value
        .get("version")
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(0);
    // Version 1 kept the ref map inline, and versions 1 and 2 the
    // blocks; they read as they were, and the next save moves them out.
    if !(1..=u64::from(STATE_VERSION)).contains(&found) {
        return Err(StoreError::Version {
            path: path.to_path_buf(),
            found,
            supported: STATE_VERSION,
        });
    }
    let refs = value
        .get("refsLog")
        .map(|v| serde_json::from_value::<RefsLog>(v.clone()))
        .transpose()
        .map_err(corrupt)?;
    let extent = |name: &str| {
        value
            .get(name)
            .map(|v| serde_json::from_value::<Extent>(v.clone()))
            .transpose()
            .map_err(corrupt)
    };
    let logs = LogsNamed {
        version: found,
        refs,
        blocks: extent("blocksLog")?,
        tokens: extent("tokensLog")?,
        truncated: extent("truncatedLog")?,
    };
    match serde_json::from_value(value) {
        Ok(state) => Ok((state, logs)),
        // A value carries no positions: parse the text again, only on
        // this path, so the error names its line and column.
        Err(e) => Err(corrupt(
            serde_json::from_str::<CompressionState>(text)
                .err()
                .unwrap_or(e),
        )),
    }
}

/// Block `b`'s line in blocks.jsonl (at `path`, which errors name): its
/// effective ids only when they differ from its direct ones.
fn block_line(path: &Path, b: &Block) -> Result<Vec<u8>, StoreError> {
    let failed = |e: serde_json::Error| StoreError::io(path, e.into());
    let mut line = match serde_json::to_value(b).map_err(failed)? {
        serde_json::Value::Object(mut fields) => {
            if b.effective_message_ids == b.direct_message_ids {
                fields.remove(EFFECTIVE_IDS);
            } else {
                let ids = serde_json::to_value(&b.effective_message_ids).map_err(failed)?;
                fields.insert(EFFECTIVE_IDS.into(), ids);
            }
            serde_json::to_vec(&fields).map_err(failed)?
        }
        other => serde_json::to_vec(&other).map_err(failed)?,
    };
    line.push(b'\n');
    Ok(line)
}

/// The blocks of blocks.jsonl as its lines are read: a block's later line
/// stands for it where its first stood.
#[derive(Default)]
struct LatestBlocks {
    blocks: Vec<Block>,
    /// Each block's id and its latest line's digest, in the blocks' order.
    latest: Latest,
    /// Each block's place, by id.
    at: HashMap<String, usize>,
}

impl LatestBlocks {
    fn take(&mut self, block: Block) {
        let d = block_digest(&block);
        match self.at.get(&block.block_id) {
            Some(&k) => {
                self.latest[k].1 = d;
                self.blocks[k] = block;
            }
            None => {
                self.at.insert(block.block_id.clone(), self.blocks.len());
                self.latest.push((block.block_id.clone(), d));
                self.blocks.push(block);
            }
        }
    }
}

const REFS_LOG: &str = "refs.log";

/// The logs beside state.json, in the order [`SessionDir::generations`]
/// gives theirs.
const LOGS: [&str; 4] = [REFS_LOG, BLOCKS_LOG, TOKENS_LOG, TRUNCATED_LOG];

impl SessionDir {
    /// The directory for `session` under `base`.
    pub fn new(base: &Path, session: &str) -> SessionDir {
        SessionDir::at(base.join(session), session, base)
    }

    /// The directory of a subagent spawned by `parent`: under the parent's,
    /// so its archives sit beside the ones it inherited.
    pub fn subagent(base: &Path, parent: &str, agent: &str) -> SessionDir {
        SessionDir::at(base.join(parent).join("subagents").join(agent), agent, base)
    }

    /// `session`'s directory at `dir`, nothing of it read yet.
    fn at(dir: PathBuf, session: &str, base: &Path) -> SessionDir {
        SessionDir {
            dir,
            session: session.to_string(),
            base: base.to_path_buf(),
            logged: RefCell::new(None),
            blocks_logged: RefCell::new(None),
            tokens_logged: RefCell::new(None),
            truncated_logged: RefCell::new(None),
            state_json: RefCell::new(None),
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
        let text = match super::files::open_read(&path).and_then(io::read_to_string) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(StoreError::io(&path, e)),
        };
        let (mut state, logs) = parse_state(&path, &text)?;
        state.version = STATE_VERSION;
        self.read_logs(&mut state, logs)?;
        self.state_json.replace(Some(text.into_bytes()));
        Ok(Some(state))
    }

    /// Reads into `state` the logs state.json names, and keeps what each
    /// holds for the next save.
    fn read_logs(&self, state: &mut CompressionState, logs: LogsNamed) -> Result<(), StoreError> {
        // One buffer for every log, refs.log first: it is the longest.
        let mut buf = Vec::new();
        let logged = match logs.refs {
            Some(log) => {
                let sum = self.read_refs_log(&mut state.message_refs, log, &mut buf)?;
                let log = RefsLog {
                    digest: Some(sum.finish()),
                    ..log
                };
                Some((log, sum))
            }
            None => None,
        };
        let blocks_logged = match logs.blocks {
            Some(log) => {
                let (blocks, logged) = self.read_blocks(log, logs.version, &mut buf)?;
                state.blocks = blocks;
                Some(logged)
            }
            None => None,
        };
        self.keep_archives_inside(&mut state.blocks);
        self.blocks_logged.replace(blocks_logged);
        if let Some(extent) = logs.tokens {
            let (map, logged) = self.read_map_log(TOKENS_LOG, extent, &mut buf)?;
            state.token_snapshot = map;
            self.tokens_logged.replace(Some(logged));
        }
        if let Some(extent) = logs.truncated {
            let (map, logged) = self.read_map_log(TRUNCATED_LOG, extent, &mut buf)?;
            let host = &mut state.host;
            host.truncated = map.keys().cloned().collect();
            host.truncated_at = map.into_iter().filter(|(_, n)| *n != 0).collect();
            self.truncated_logged.replace(Some(logged));
        }
        self.logged.replace(logged);
        Ok(())
    }

    /// Keeps every block's archive path to a file of noa's. The view
    /// tells the model to read the file a summary's archive pointer names,
    /// so a path the state holds is taken only when it lies in the state
    /// dir (this session's archives, and those a fork or a subagent
    /// inherited), or names this session's archive of the block where its
    /// folder was before it was moved or copied (a folder of this name and
    /// the block's `archive_rel` in it); never with a `..` on the way. Any
    /// other (a hand-edited state) is replaced by the file in this folder,
    /// and a block whose `archive_rel` would leave the folder has none.
    fn keep_archives_inside(&self, blocks: &mut [Block]) {
        let Ok(root) = fs::canonicalize(&self.dir) else {
            return;
        };
        let base = fs::canonicalize(&self.base).unwrap_or_else(|_| root.clone());
        let folder = root.file_name().map(Path::new).unwrap_or(Path::new(""));
        let of_this_session = |path: &Path, rel: &Path| {
            path.strip_prefix("/").is_ok_and(plain)
                && (path.starts_with(&base) || path.ends_with(folder.join(rel)))
        };
        let root_text = root.to_string_lossy();
        for b in blocks {
            if b.archive_rel.is_empty() && b.archive_path.is_empty() {
                continue;
            }
            // Nearly every block: its archive where this folder puts it.
            let here = (b.archive_path.strip_prefix(&*root_text))
                .and_then(|r| r.strip_prefix('/'))
                .is_some_and(|r| r == b.archive_rel);
            if here && plain(Path::new(&b.archive_rel)) {
                continue;
            }
            // A state written before blocks knew their place in the folder
            // has the path alone.
            if b.archive_rel.is_empty()
                && let Ok(rel) = Path::new(&b.archive_path).strip_prefix(&root)
            {
                b.archive_rel = rel.to_string_lossy().into_owned();
            }
            let rel = Path::new(&b.archive_rel);
            let path = match !b.archive_rel.is_empty() && plain(rel) {
                true if of_this_session(Path::new(&b.archive_path), rel) => continue,
                true => root.join(rel).to_string_lossy().into_owned(),
                false => String::new(),
            };
            if path.is_empty() {
                b.archive_rel.clear();
            }
            b.archive_path = path;
        }
    }

    /// The blocks in the first bytes of blocks.jsonl the state names, with
    /// each one's latest line digested.
    fn read_blocks(
        &self,
        log: Extent,
        version: u64,
        buf: &mut Vec<u8>,
    ) -> Result<(Vec<Block>, BlocksLogged), StoreError> {
        let path = self
            .dir
            .join(map_log::file_name(BLOCKS_LOG, log.generation));
        let damaged = |what: String| StoreError::Blocks {
            path: path.clone(),
            what,
        };
        map_log::read_prefix(&path, log.bytes, buf)
            .map_err(|e| log_failure(&path, e, |what| damaged(what.into())))?;
        let mine = &buf[..];
        let mut read = LatestBlocks::default();
        let mut lines = 0;
        // A long session's blocks name every message it folded: the lines
        // are found at memory speed, not a byte at a time.
        let ends = memchr::memchr_iter(b'\n', mine).chain([mine.len()]);
        // Checked as UTF-8 once, not an id at a time as each is parsed;
        // a log that is not says where, line by line.
        let text = std::str::from_utf8(mine).ok();
        let mut start = 0;
        for (i, end) in ends.enumerate() {
            let (start_at, line) = (start, &mine[start..end]);
            start = end + 1;
            if line.is_empty() {
                continue;
            }
            lines += 1;
            let parsed = match text {
                Some(text) => serde_json::from_str(&text[start_at..end]),
                None => serde_json::from_slice(line),
            };
            let mut block: Block = parsed.map_err(|e| {
                damaged(format!(
                    "not a block at line {}, column {}: {e}",
                    i + 1,
                    e.column()
                ))
            })?;
            if version >= 4 && !names_effective_ids(line) {
                block.effective_message_ids = block.direct_message_ids.clone();
            }
            read.take(block);
        }
        if lines != log.lines {
            return Err(damaged(format!(
                "{lines} lines where state.json says {}",
                log.lines
            )));
        }
        let mut sum = Digest::default();
        sum.update(mine);
        if sum.finish() != log.digest {
            return Err(damaged("not the log state.json was saved with".into()));
        }
        let LatestBlocks { blocks, latest, .. } = read;
        Ok((blocks, BlocksLogged { log, latest, sum }))
    }

    /// The map the first bytes of the log `name` make, and the log as read.
    fn read_map_log(
        &self,
        name: &str,
        extent: Extent,
        buf: &mut Vec<u8>,
    ) -> Result<(BTreeMap<Name, usize>, Logged), StoreError> {
        let path = self.dir.join(map_log::file_name(name, extent.generation));
        map_log::read(&path, extent, buf).map_err(|e| {
            log_failure(&path, e, |what| StoreError::Log {
                path: path.clone(),
                what: what.to_string(),
            })
        })
    }

    /// Brings the log `name` to `current`, appending what changed since
    /// `logged`.
    fn write_map_log<'a>(
        &self,
        name: &str,
        logged: &RefCell<Option<Logged>>,
        current: impl Iterator<Item = (&'a str, usize)>,
    ) -> Result<Logged, StoreError> {
        let known = logged.borrow_mut().take();
        let generation = known.as_ref().map_or(0, |k| k.extent.generation);
        let path = self.dir.join(map_log::file_name(name, generation));
        let orphans = self.no_state_on_disk();
        map_log::write((&self.dir, name), known, current, |bytes| {
            map_log::write_generation(&self.dir, name, bytes, orphans)
        })
        .map_err(|e| StoreError::io(&path, e))
    }

    /// A log written afresh as a new generation, with its path for errors.
    fn write_generation(&self, name: &str, bytes: &[u8]) -> Result<u32, StoreError> {
        map_log::write_generation(&self.dir, name, bytes, self.no_state_on_disk())
            .map_err(|e| StoreError::io(&self.dir.join(name), e))
    }

    /// Whether there is no state.json, so no log file beside it is one a
    /// state stands on (a state.json lost, or never written).
    fn no_state_on_disk(&self) -> bool {
        fs::symlink_metadata(self.state_path()).is_err_and(|e| e.kind() == io::ErrorKind::NotFound)
    }

    /// Fills the ref map from the first bytes of refs.log the state names,
    /// settling it on them when it lays out as they do; returns their
    /// digest, to go on from.
    fn read_refs_log(
        &self,
        refs: &mut MessageRefs,
        log: RefsLog,
        buf: &mut Vec<u8>,
    ) -> Result<Digest, StoreError> {
        let path = self.dir.join(map_log::file_name(REFS_LOG, log.generation));
        let damaged = |what: &str| StoreError::RefsLog {
            path: path.clone(),
            what: what.to_string(),
        };
        map_log::read_prefix(&path, log.bytes, buf).map_err(|e| log_failure(&path, e, damaged))?;
        let mine = &buf[..];
        let text = std::str::from_utf8(mine).map_err(|_| damaged("not UTF-8"))?;
        let mut last_ref = None;
        let mut count = 0;
        // Whether the map's refs lay out as these bytes: every line a
        // numbered ref after the one before, nothing between the lines.
        let (mut in_order, mut previous, mut laid) = (true, 0, 0);
        // As many as state.json names, within what the bytes can hold (a
        // line is `m` and a digit, a space, an id and a newline), with room
        // for the refs the turn hands out.
        let highest = with_room(log.last.min(MAX_REF) as usize).min(MAX_REF as usize) as u32;
        refs.reserve(with_room(log.count.min(text.len() / 5)), highest);
        for line in crate::formats::lines(text) {
            let Some((r, id)) = map_log::split_at_space(line) else {
                return Err(damaged("a line is not `ref id`"));
            };
            match refs.add_logged(r, id) {
                Some(n) if n > previous => previous = n,
                _ => in_order = false,
            }
            laid += r.len() + id.len() + 2;
            count += 1;
            last_ref = Some(r);
        }
        let last = last_ref.map_or(0, ref_number);
        let mut sum = Digest::default();
        sum.update(mine);
        let finished = sum.finish();
        if count != log.count || last != log.last || log.digest.is_some_and(|d| d != finished) {
            return Err(damaged("not the log state.json was saved with"));
        }
        if in_order && laid == mine.len() && refs.refs() == count {
            refs.settle(finished);
        }
        Ok(sum)
    }

    /// Writes the state: what changed in the ref map, the blocks, the token
    /// figures and the truncations appended to their logs, then state.json
    /// atomically with everything else, naming how much of each log it
    /// stands on. A turn writes what it changed, not the whole history's
    /// state again.
    ///
    /// A log written afresh goes to a new generation, and the file the
    /// state before named is removed only once the new state.json is in
    /// place: a save killed anywhere leaves one state or the other whole.
    pub fn save(&self, state: &CompressionState) -> Result<(), StoreError> {
        self.save_placing(state).map_err(|unsaved| unsaved.error)
    }

    /// [`SessionDir::save`], saying on failure whether the new state.json
    /// had been put in place (its directory not synced after): what it
    /// names, archives and all, must then stay.
    pub(super) fn save_placing(&self, state: &CompressionState) -> Result<(), Unsaved> {
        let not_placed = |error| Unsaved {
            error,
            placed: false,
        };
        let before = self.generations();
        self.write_state(state)
            .map_err(not_placed)?
            .map_or(Ok(()), |dir| {
                atomic::sync_dir(&dir).map_err(|e| Unsaved {
                    error: StoreError::io(&dir, e),
                    placed: true,
                })
            })?;
        self.remove_old_generations(before);
        Ok(())
    }

    /// Writes the logs and puts state.json in place; the directory to sync
    /// when state.json was replaced (`None` when its bytes were already
    /// those).
    fn write_state(&self, state: &CompressionState) -> Result<Option<PathBuf>, StoreError> {
        let path = self.state_path();
        self.create()?;
        let (log, sum) = self.write_refs_log(&state.message_refs)?;
        let blocks_logged = self.write_blocks(&state.blocks)?;
        let tokens_logged = self.write_map_log(
            TOKENS_LOG,
            &self.tokens_logged,
            state.token_snapshot.iter().map(|(k, v)| (k.as_str(), *v)),
        )?;
        let truncated_logged = self.write_map_log(
            TRUNCATED_LOG,
            &self.truncated_logged,
            (state.host.cuts()).map(|(k, at)| (k.as_str(), at.unwrap_or(0))),
        )?;
        let named = LogsNamedNow {
            refs: log,
            blocks: blocks_logged.as_ref().map(|b| b.log),
            tokens: tokens_logged.extent,
            truncated: truncated_logged.extent,
        };
        let bytes = state_json_bytes(state, named, &path)?;
        let placed = self.state_json.borrow().as_ref() != Some(&bytes);
        if placed {
            self.write_unsynced("state.json", &bytes)?;
            self.state_json.replace(Some(bytes));
        }
        // From here the state on disk is this one.
        self.logged.replace(Some((log, sum)));
        self.blocks_logged.replace(blocks_logged);
        self.tokens_logged.replace(Some(tokens_logged));
        self.truncated_logged.replace(Some(truncated_logged));
        Ok(placed.then(|| self.dir.clone()))
    }

    /// Removes the log files the state before the last save named (their
    /// generations `before` it), when that save wrote any log afresh: the
    /// new state.json is in place and synced.
    fn remove_old_generations(&self, before: [Option<u32>; 4]) {
        for ((name, was), now) in LOGS.iter().zip(before).zip(self.generations()) {
            if was != now
                && let Some(now) = now
            {
                map_log::remove_other_generations(&self.dir, name, now);
            }
        }
    }

    /// The generation of each of [`LOGS`] this process last read or wrote,
    /// in that order; `None` where it knows none.
    fn generations(&self) -> [Option<u32>; 4] {
        [
            self.logged.borrow().as_ref().map(|(l, _)| l.generation),
            (self.blocks_logged.borrow().as_ref()).map(|b| b.log.generation),
            (self.tokens_logged.borrow().as_ref()).map(|l| l.extent.generation),
            (self.truncated_logged.borrow().as_ref()).map(|l| l.extent.generation),
        ]
    }

    /// Brings blocks.jsonl up to `blocks`: lines for the blocks made or
    /// changed since the state on disk are appended (cutting what a crashed
    /// save appended after that state's bytes); when this process knows
    /// nothing of the log, or `blocks` do not begin with the logged ones in
    /// their order, the log is written afresh. None when there are no
    /// blocks and no log.
    fn write_blocks(&self, blocks: &[Block]) -> Result<Option<BlocksLogged>, StoreError> {
        let path = self.dir.join(BLOCKS_LOG);
        let known = self.blocks_logged.borrow().clone();
        if blocks.is_empty() && known.is_none() {
            return Ok(None);
        }
        let line = |b: &Block| block_line(&path, b);
        let latest: Latest = blocks
            .iter()
            .map(|b| (b.block_id.clone(), block_digest(b)))
            .collect();
        if let Some(known) = known
            && known.latest.len() <= latest.len()
            && known.latest.iter().zip(&latest).all(|(k, l)| k.0 == l.0)
            && let path = self
                .dir
                .join(map_log::file_name(BLOCKS_LOG, known.log.generation))
            && fs::symlink_metadata(&path).is_ok_and(|m| m.len() >= known.log.bytes)
        {
            let mut new = Vec::new();
            let mut appended = 0;
            for (i, b) in blocks.iter().enumerate() {
                if known.latest.get(i) != latest.get(i) {
                    new.extend(line(b)?);
                    appended += 1;
                }
            }
            let mut sum = known.sum;
            sum.update(&new);
            let log = Extent {
                bytes: known.log.bytes + new.len() as u64,
                lines: known.log.lines + appended,
                digest: sum.finish(),
                generation: known.log.generation,
            };
            if new.is_empty() {
                return Ok(Some(BlocksLogged { log, latest, sum }));
            }
            map_log::append_after(&path, known.log.bytes, &new)
                .map_err(|e| StoreError::io(&path, e))?;
            return Ok(Some(BlocksLogged { log, latest, sum }));
        }
        let mut all = Vec::new();
        for b in blocks {
            all.extend(line(b)?);
        }
        let generation = self.write_generation(BLOCKS_LOG, &all)?;
        let mut sum = Digest::default();
        sum.update(&all);
        let log = Extent {
            bytes: all.len() as u64,
            lines: blocks.len(),
            digest: sum.finish(),
            generation,
        };
        Ok(Some(BlocksLogged { log, latest, sum }))
    }

    /// Brings refs.log up to `refs`: the refs newer than what the state on
    /// disk stands on are appended (the session is locked, and this process
    /// read that log when it loaded the state); when this process knows
    /// nothing of the log, or the map is not that log plus newer refs, the
    /// whole log is written afresh.
    fn write_refs_log(&self, refs: &MessageRefs) -> Result<(RefsLog, Digest), StoreError> {
        // Lines appended to one text: a long session has a line for each of
        // tens of thousands of messages, and a text of its own for each was
        // most of what writing them cost.
        let lines = |refs: &mut dyn Iterator<Item = (RefName, &str)>| {
            let mut text = String::new();
            for (r, id) in refs {
                text.reserve(r.len() + id.len() + 2);
                text.push_str(&r);
                text.push(' ');
                text.push_str(id);
                text.push('\n');
            }
            text
        };
        let last = refs.last_ref().map_or(0, |r| ref_number(&r));
        if let Some((log, sum)) = self.logged.borrow().clone()
            && let path = self.dir.join(map_log::file_name(REFS_LOG, log.generation))
            && fs::symlink_metadata(&path).is_ok_and(|m| m.len() >= log.bytes)
        {
            // A map settled on the log this process read or wrote hands
            // over what is new at once; any other is laid out again to see.
            let settled = log.digest.and_then(|at| {
                let mut new = refs.settled_after(at, log.last)?;
                Some((lines(&mut new), sum))
            });
            let newer = || newer_than(refs, log).map(|(mut new, d)| (lines(&mut new), d));
            if let Some((new, mut d)) = settled.or_else(newer) {
                map_log::append_after(&path, log.bytes, new.as_bytes())
                    .map_err(|e| StoreError::io(&path, e))?;
                d.update(new.as_bytes());
                let written = RefsLog {
                    bytes: log.bytes + new.len() as u64,
                    count: refs.refs(),
                    last,
                    digest: Some(d.finish()),
                    generation: log.generation,
                };
                return Ok((written, d));
            }
        }
        let all = lines(&mut refs.by_ref());
        let generation = self.write_generation(REFS_LOG, all.as_bytes())?;
        let mut d = Digest::default();
        d.update(all.as_bytes());
        let written = RefsLog {
            bytes: all.len() as u64,
            count: refs.refs(),
            last,
            digest: Some(d.finish()),
            generation,
        };
        Ok((written, d))
    }

    /// Writes `rel` (e.g. `tier1/b1_m00002-m00005.md`) under the session
    /// directory atomically, creating its folders; returns its path. `rel`
    /// may only name a place inside the directory, and nothing on the way,
    /// the directory itself included, may be a symbolic link: a link
    /// planted there would send the originals, or the state, elsewhere.
    pub fn write(&self, rel: &str, bytes: &[u8]) -> Result<PathBuf, StoreError> {
        let at = self.write_unsynced(rel, bytes)?;
        let dir = atomic::parent(&at);
        atomic::sync_dir(dir).map_err(|e| StoreError::io(dir, e))?;
        Ok(at)
    }

    /// [`SessionDir::write`] but for syncing the directory the file lands
    /// in, which the caller does once for a batch of files in it: the file
    /// itself is synced and renamed into place.
    pub fn write_unsynced(&self, rel: &str, bytes: &[u8]) -> Result<PathBuf, StoreError> {
        write_under(&self.dir, rel, bytes)
    }
}

/// Whether `p` names a place under a folder: names only, no root, `.` or
/// `..`.
fn plain(p: &Path) -> bool {
    p.components()
        .all(|c| matches!(c, std::path::Component::Normal(_)))
}

/// [`SessionDir::write_unsynced`] under the session directory `dir`: a
/// function of the path alone, so archives can be written from several
/// threads.
pub(super) fn write_under(dir: &Path, rel: &str, bytes: &[u8]) -> Result<PathBuf, StoreError> {
    begin_under(dir, rel, bytes)?.finish()
}

/// [`write_under`] up to the sync ([`atomic::write_beside`]), so that a
/// batch begun together is synced together.
pub(super) fn begin_under(dir: &Path, rel: &str, bytes: &[u8]) -> Result<Begun, StoreError> {
    let rel_path = Path::new(rel);
    if rel.is_empty() || !plain(rel_path) {
        return Err(StoreError::Outside {
            path: rel_path.to_path_buf(),
        });
    }
    let mut at = dir.to_path_buf();
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
    let (file, replacing) = atomic::write_beside(&at, bytes).map_err(|e| StoreError::io(&at, e))?;
    Ok(Begun { file, replacing })
}

/// A file [`begin_under`] wrote beside where it goes; dropped unfinished,
/// it is removed.
pub(super) struct Begun {
    file: fs::File,
    replacing: atomic::Replacing,
}

impl Begun {
    /// Syncs the file and renames it into place; returns where it went.
    pub(super) fn finish(self) -> Result<PathBuf, StoreError> {
        let Begun { file, replacing } = self;
        let at = replacing.path().to_path_buf();
        (file.sync_all())
            .and_then(|()| replacing.finish())
            .map_err(|e| StoreError::io(&at, e))?;
        Ok(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

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
        st.message_refs.insert("h_a", "m00001");
        st.token_snapshot.insert("m00001".into(), 12);
        st.host.truncated.insert("h_a".into());
        st.host.truncated.insert("h_b".into());
        st.host.truncated_at.insert("h_a".into(), 7);
        s.save(&st).unwrap();
        assert_eq!(s.load().unwrap(), Some(st.clone()));
        let text = fs::read_to_string(s.state_path()).unwrap();
        assert!(!text.contains("h_a") && !text.contains("m00001"), "{text}");
        // A turn that changes neither map appends nothing to their logs.
        let logs = [TOKENS_LOG, TRUNCATED_LOG].map(|f| fs::read(s.dir.join(f)).unwrap());
        st.nudge.last_turn_tokens = 10;
        let fresh = SessionDir::new(&base, "sess");
        fresh.load().unwrap();
        fresh.save(&st).unwrap();
        assert_eq!(
            logs,
            [TOKENS_LOG, TRUNCATED_LOG].map(|f| fs::read(s.dir.join(f)).unwrap())
        );
        assert_eq!(SessionDir::new(&base, "sess").load().unwrap(), Some(st));
        fs::remove_dir_all(&base).unwrap();
    }

    /// The refs log a save leaves is the map laid out, whether the map
    /// was settled on the log it loaded (appended to without laying out
    /// the rest again) or not (a log whose lines are not in ref order).
    #[test]
    fn the_refs_log_is_the_map_after_every_save() {
        let base = temp("refs-log");
        let laid = |refs: &MessageRefs| -> String {
            refs.by_ref().map(|(r, id)| format!("{r} {id}\n")).collect()
        };
        let mut st = CompressionState::new("sess");
        for n in 1..=5 {
            st.message_refs.insert_numbered(&format!("h_{n}"), n);
        }
        SessionDir::new(&base, "sess").save(&st).unwrap();
        let s = SessionDir::new(&base, "sess");
        let mut loaded = s.load().unwrap().unwrap();
        loaded.message_refs.insert_numbered("h_6", 6);
        loaded.message_refs.block("h_p");
        s.save(&loaded).unwrap();
        assert_eq!(current_log(&s, REFS_LOG), laid(&loaded.message_refs));
        // A second save by the same process goes on from there.
        loaded.message_refs.insert_numbered("h_7", 7);
        s.save(&loaded).unwrap();
        assert_eq!(current_log(&s, REFS_LOG), laid(&loaded.message_refs));
        let again = SessionDir::new(&base, "sess").load().unwrap().unwrap();
        assert_eq!(again.message_refs, loaded.message_refs);
        // A ref given again below the log's end: the log is laid out anew.
        let s = SessionDir::new(&base, "sess");
        let mut loaded = s.load().unwrap().unwrap();
        loaded.message_refs.insert_numbered("h_new", 3);
        s.save(&loaded).unwrap();
        assert_eq!(current_log(&s, REFS_LOG), laid(&loaded.message_refs));
        assert_eq!(
            SessionDir::new(&base, "sess")
                .load()
                .unwrap()
                .unwrap()
                .message_refs,
            loaded.message_refs
        );
        fs::remove_dir_all(&base).unwrap();
    }

    /// A base dir named for `name` holding session `sess` saved with one
    /// ref, and a handle on it that has read nothing yet.
    /// The text of the one file of log `base` a save left in `s`'s
    /// directory, whatever its generation.
    fn current_log(s: &SessionDir, base: &str) -> String {
        let files: Vec<_> = (0..4)
            .map(|g| s.dir.join(map_log::file_name(base, g)))
            .filter(|p| p.exists())
            .collect();
        assert_eq!(files.len(), 1, "{files:?}");
        fs::read_to_string(&files[0]).unwrap()
    }

    fn saved_with_one_ref(name: &str) -> (PathBuf, SessionDir) {
        let base = temp(name);
        let mut st = CompressionState::new("sess");
        st.message_refs.insert_numbered("h_1", 1);
        SessionDir::new(&base, "sess").save(&st).unwrap();
        (base.clone(), SessionDir::new(&base, "sess"))
    }

    /// A save of the state as it was loaded (a retried turn) leaves
    /// state.json as it is, the same file, not a copy renamed over it; a
    /// save that changes it writes it, and one of the state loaded by
    /// another handle writes it too, as nothing says what that one holds.
    #[test]
    fn a_save_that_changes_nothing_leaves_state_json_alone() {
        use std::os::unix::fs::MetadataExt;
        let (base, s) = saved_with_one_ref("unchanged");
        let inode = || fs::metadata(s.state_path()).unwrap().ino();
        let first = inode();
        let mut loaded = s.load().unwrap().unwrap();
        s.save(&loaded).unwrap();
        assert_eq!(inode(), first, "unchanged: not written again");
        loaded.message_refs.insert_numbered("h_2", 2);
        s.save(&loaded).unwrap();
        let second = inode();
        assert_ne!(second, first, "changed: written");
        s.save(&loaded).unwrap();
        assert_eq!(inode(), second, "as this handle last wrote it");
        SessionDir::new(&base, "sess").save(&loaded).unwrap();
        assert_ne!(inode(), second, "another handle knows nothing of it");
        let again = SessionDir::new(&base, "sess").load().unwrap().unwrap();
        assert_eq!(again.message_refs, loaded.message_refs);
        fs::remove_dir_all(&base).unwrap();
    }

    /// A save whose state.json could not be written (the disk full)
    /// leaves the refs it appended behind the state's end: the next save
    /// by the same process goes on from the log state.json names, not from
    /// what the failed one appended.
    #[test]
    fn a_save_after_a_failed_one_goes_on_from_the_state_on_disk() {
        let (base, s) = saved_with_one_ref("refs-retry");
        let mut loaded = s.load().unwrap().unwrap();
        loaded.message_refs.insert_numbered("h_2", 2);
        let tmp = s
            .dir
            .join(format!(".state.json.{}.tmp", std::process::id()));
        let full = super::super::files::faults::fail_temps_for("state.json", 28);
        assert!(s.save(&loaded).is_err());
        drop(full);
        assert!(!tmp.exists(), "the failed write cleans up after itself");
        loaded.message_refs.insert_numbered("h_3", 3);
        s.save(&loaded).unwrap();
        let again = SessionDir::new(&base, "sess").load().unwrap().unwrap();
        assert_eq!(again.message_refs, loaded.message_refs);
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
    /// fails with ENOSPC.
    #[test]
    fn a_full_disk_leaves_the_old_state_and_its_archives() {
        let base = temp("full");
        let s = SessionDir::new(&base, "sess");
        let mut state = CompressionState::new("sess");
        s.write("tier1/b1_m00001-m00002.md", b"originals").unwrap();
        s.save(&state).unwrap();
        let before = fs::read(s.state_path()).unwrap();
        let full = super::super::files::faults::fail_temps_for("state.json", 28);
        state.next_block_id = 2;
        let err = s.save(&state).unwrap_err();
        drop(full);
        assert!(
            matches!(&err, StoreError::Io { error: source, .. } if source.raw_os_error() == Some(28)),
            "{err}"
        );
        assert_eq!(fs::read(s.state_path()).unwrap(), before);
        assert_eq!(s.load().unwrap().unwrap().next_block_id, 1);
        assert!(s.dir.join("tier1/b1_m00001-m00002.md").exists());
        let tmp = s
            .dir
            .join(format!(".state.json.{}.tmp", std::process::id()));
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

    fn with_refs(n: u32) -> CompressionState {
        let mut st = CompressionState::new("sess");
        for i in 1..=n {
            let (r, id) = (format!("m{i:05}"), format!("h_{i:016x}"));
            st.message_refs.insert(&id, &r);
        }
        st.message_refs.block("h_compress");
        st
    }

    #[test]
    fn refs_are_appended_not_rewritten() {
        let base = temp("refslog");
        let s = SessionDir::new(&base, "sess");
        s.create().unwrap();
        s.save(&with_refs(3)).unwrap();
        let log = s.dir.join(REFS_LOG);
        let first = fs::read(&log).unwrap();
        // A later turn, in another process: it loads, hands out two refs, saves.
        let s = SessionDir::new(&base, "sess");
        let mut st = s.load().unwrap().unwrap();
        assert_eq!(st, with_refs(3));
        st = with_refs(5);
        s.save(&st).unwrap();
        let second = fs::read(&log).unwrap();
        assert!(second.starts_with(&first));
        assert_eq!(
            second.len() - first.len(),
            "m00004 h_0000000000000004\n".len() * 2
        );
        // state.json holds only what the log cannot say.
        let json = fs::read_to_string(s.state_path()).unwrap();
        assert!(json.contains("h_compress") && !json.contains("h_0000000000000004"));
        assert_eq!(SessionDir::new(&base, "sess").load().unwrap().unwrap(), st);
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_map_that_is_not_the_log_plus_newer_refs_rewrites_the_log() {
        let base = temp("refsnew");
        let s = SessionDir::new(&base, "sess");
        s.create().unwrap();
        s.save(&with_refs(3)).unwrap();
        // The same process saves a map whose refs name other messages (a
        // rebuild over a changed transcript): the log is written afresh.
        let mut other = with_refs(4);
        other.message_refs.insert("h_other", "m00002");
        s.save(&other).unwrap();
        assert_eq!(
            SessionDir::new(&base, "sess").load().unwrap().unwrap(),
            other
        );
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_refs_log_rewritten_since_is_not_the_state() {
        let base = temp("refs-rewritten");
        let s = SessionDir::new(&base, "sess");
        s.save(&with_refs(3)).unwrap();
        let path = s.dir.join(REFS_LOG);
        // The same refs, lengths and last ref; another message behind one.
        let text = fs::read_to_string(&path)
            .unwrap()
            .replace("h_0000000000000002", "h_0000000000000009");
        fs::write(&path, text).unwrap();
        let err = SessionDir::new(&base, "sess").load().unwrap_err();
        assert!(
            matches!(&err, StoreError::RefsLog { what, .. } if what == "not the log state.json was saved with"),
            "{err}"
        );
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_refs_count_no_log_could_hold_is_damage() {
        let base = temp("refs-count");
        let s = SessionDir::new(&base, "sess");
        s.save(&with_refs(3)).unwrap();
        let state = s.state_path();
        let mut json: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(&state).unwrap()).unwrap();
        json["refsLog"]["count"] = usize::MAX.into();
        fs::write(&state, json.to_string()).unwrap();
        // Read as damage, where sizing the map by it would ask for more
        // memory than there is.
        let err = SessionDir::new(&base, "sess").load().unwrap_err();
        assert!(matches!(err, StoreError::RefsLog { .. }), "{err}");
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn what_a_crashed_save_appended_is_not_the_state() {
        let base = temp("refscrash");
        let s = SessionDir::new(&base, "sess");
        s.create().unwrap();
        s.save(&with_refs(2)).unwrap();
        let log = s.dir.join(REFS_LOG);
        // A save that appended its refs and died before state.json.
        let mut f = fs::OpenOptions::new().append(true).open(&log).unwrap();
        f.write_all(b"m00003 h_lost\n").unwrap();
        let s = SessionDir::new(&base, "sess");
        assert_eq!(s.load().unwrap().unwrap(), with_refs(2));
        s.save(&with_refs(4)).unwrap();
        assert!(!fs::read_to_string(&log).unwrap().contains("h_lost"));
        assert_eq!(
            SessionDir::new(&base, "sess").load().unwrap().unwrap(),
            with_refs(4)
        );
        // A log cut short is corrupt, never silently fewer refs.
        fs::write(&log, b"m00001 h_0000000000000001\n").unwrap();
        let err = SessionDir::new(&base, "sess").load().unwrap_err();
        assert!(matches!(err, StoreError::RefsLog { .. }), "{err}");
        fs::remove_file(&log).unwrap();
        let err = SessionDir::new(&base, "sess").load().unwrap_err();
        assert!(err.to_string().contains("the ref log is missing"), "{err}");
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_version_1_state_keeps_its_refs_and_moves_them_to_the_log() {
        let base = temp("v1");
        let s = SessionDir::new(&base, "sess");
        s.create().unwrap();
        let mut v1 = serde_json::to_value(with_refs(3)).unwrap();
        v1["version"] = 1.into();
        fs::write(s.state_path(), serde_json::to_vec(&v1).unwrap()).unwrap();
        let st = s.load().unwrap().unwrap();
        assert_eq!(st, with_refs(3));
        s.save(&st).unwrap();
        assert_eq!(
            fs::read_to_string(s.dir.join(REFS_LOG))
                .unwrap()
                .lines()
                .count(),
            3
        );
        assert_eq!(SessionDir::new(&base, "sess").load().unwrap().unwrap(), st);
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn ids_the_refs_log_cannot_give_back_are_kept_in_state_json() {
        let base = temp("strays");
        let s = SessionDir::new(&base, "sess");
        let mut st = with_refs(3);
        // Hard-protected: known, unnumbered.
        st.message_refs.block("h_protected");
        let plain = SessionDir::new(&base, "plain");
        plain.save(&st).unwrap();
        assert_eq!(plain.load().unwrap().unwrap(), st);
        // A hand-made map whose ref names another id in return.
        st.message_refs.insert_id_only("h_stray", "m00001");
        s.save(&st).unwrap();
        let text = fs::read_to_string(s.state_path()).unwrap();
        assert!(
            text.contains("h_stray") && text.contains("h_protected"),
            "{text}"
        );
        assert_eq!(SessionDir::new(&base, "sess").load().unwrap().unwrap(), st);
        fs::remove_dir_all(&base).unwrap();
    }

    fn block(n: u32) -> Block {
        Block {
            block_id: format!("b{n}"),
            tier: 1,
            summary: format!("summary {n}"),
            direct_message_ids: vec![format!("h_{n}").into()],
            effective_message_ids: vec![format!("h_{n}").into()],
            active: true,
            ..Block::default()
        }
    }

    #[test]
    fn a_block_names_the_messages_it_stands_for_only_beyond_its_own() {
        let (base, s, mut st) = saved_with_blocks("effective", 2);
        // b3 absorbed b1; b4 stands for none of its own messages (as no
        // block noa makes does, but a list it has is kept as it is).
        st.blocks[0].active = false;
        let mut absorbing = block(3);
        absorbing.effective_message_ids.push("h_1".into());
        absorbing.direct_block_ids = vec!["b1".into()];
        let mut bare = block(4);
        bare.effective_message_ids.clear();
        st.blocks.extend([absorbing, bare]);
        s.save(&st).unwrap();
        let log = blocks_log(&s);
        let named: Vec<bool> = log.lines().map(|l| l.contains(EFFECTIVE_IDS)).collect();
        assert_eq!(named, [false, false, false, true, true], "{log}");
        assert_eq!(
            SessionDir::new(&base, "sess").load().unwrap(),
            Some(st.clone())
        );
        // A version-3 log writes the list on every line, its own messages
        // or not, and a line without it stands for none.
        let v3: String = st
            .blocks
            .iter()
            .map(|b| format!("{}\n", serde_json::to_string(b).unwrap()))
            .collect();
        let mut on_disk: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(s.state_path()).unwrap()).unwrap();
        on_disk["version"] = 3.into();
        on_disk["blocksLog"] = serde_json::json!({
            "bytes": v3.len(), "lines": v3.lines().count(), "digest": digest(v3.as_bytes()),
        });
        fs::write(s.dir.join(BLOCKS_LOG), &v3).unwrap();
        fs::write(s.state_path(), on_disk.to_string()).unwrap();
        assert_eq!(SessionDir::new(&base, "sess").load().unwrap(), Some(st));
        fs::remove_dir_all(&base).unwrap();
    }

    fn blocks_log(s: &SessionDir) -> String {
        fs::read_to_string(s.dir.join(BLOCKS_LOG)).unwrap_or_default()
    }

    /// A session saved with `n` blocks: its base dir, handle and state.
    fn saved_with_blocks(name: &str, n: u32) -> (PathBuf, SessionDir, CompressionState) {
        let base = temp(name);
        let s = SessionDir::new(&base, "sess");
        let mut st = with_refs(2);
        st.blocks = (1..=n).map(block).collect();
        s.save(&st).unwrap();
        (base, s, st)
    }

    /// A save that writes every log afresh (a rebuild over the session)
    /// and dies before state.json is replaced leaves the state before it
    /// whole; the next save goes through and leaves one file of each log.
    #[test]
    fn a_save_killed_after_rewriting_its_logs_leaves_the_state_before() {
        let (base, s, mut st) = saved_with_blocks("killed-rewrite", 3);
        st.token_snapshot.insert("m00001".into(), 12);
        st.host.truncated_at.insert("h_1".into(), 3);
        st.host.truncated.insert("h_1".into());
        s.save(&st).unwrap();
        let before = SessionDir::new(&base, "sess").load().unwrap().unwrap();
        let logs_before: Vec<String> = LOGS.iter().map(|l| current_log(&s, l)).collect();
        let mut rebuilt = with_refs(3);
        rebuilt.blocks = vec![block(2), block(1)];
        rebuilt.token_snapshot.insert("m00002".into(), 7);
        // A process that read nothing of the session writes every log afresh.
        let fresh = SessionDir::new(&base, "sess");
        let dies = super::super::files::faults::fail_temps_for("state.json", 5);
        assert!(fresh.save(&rebuilt).is_err());
        drop(dies);
        assert_eq!(
            SessionDir::new(&base, "sess").load().unwrap().unwrap(),
            before
        );
        for (log, text) in LOGS.iter().zip(&logs_before) {
            assert_eq!(&fs::read_to_string(s.dir.join(log)).unwrap(), text, "{log}");
        }
        SessionDir::new(&base, "sess").save(&rebuilt).unwrap();
        let after = SessionDir::new(&base, "sess").load().unwrap().unwrap();
        assert_eq!(after.blocks, rebuilt.blocks);
        assert_eq!(after.token_snapshot, rebuilt.token_snapshot);
        assert_eq!(after.message_refs, rebuilt.message_refs);
        for log in LOGS {
            current_log(&s, log);
        }
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn blocks_are_appended_only_when_they_change() {
        let base = temp("blocks");
        let s = SessionDir::new(&base, "sess");
        let mut st = with_refs(3);
        s.save(&st).unwrap();
        assert!(!s.dir.join(BLOCKS_LOG).exists(), "no blocks, no log");
        st.blocks = vec![block(1), block(2)];
        s.save(&st).unwrap();
        let first = blocks_log(&s);
        assert_eq!(first.lines().count(), 2);
        let text = fs::read_to_string(s.state_path()).unwrap();
        assert!(
            !text.contains("summary 1") && text.contains("blocksLog"),
            "{text}"
        );

        // A turn that changes no block writes nothing of them, from the
        // same handle and from a fresh process's.
        st.nudge.last_turn_tokens = 500;
        s.save(&st).unwrap();
        let again = SessionDir::new(&base, "sess");
        let mut loaded = again.load().unwrap().unwrap();
        assert_eq!(loaded, st);
        loaded.nudge.last_turn_tokens = 900;
        again.save(&loaded).unwrap();
        assert_eq!(blocks_log(&s), first);

        // A block deactivated, and a new one: two lines appended, and the
        // blocks keep their order.
        loaded.blocks[0].active = false;
        loaded.blocks.push(block(3));
        again.save(&loaded).unwrap();
        let second = blocks_log(&s);
        assert!(second.starts_with(&first));
        assert_eq!(second.lines().count(), 4);
        assert_eq!(SessionDir::new(&base, "sess").load().unwrap(), Some(loaded));
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_change_to_any_field_of_a_block_changes_its_digest() {
        let b = block(1);
        let changes: [fn(&mut Block); 15] = [
            |b| b.block_id.push('x'),
            |b| b.tier += 1,
            |b| b.topic.push('x'),
            |b| b.summary.push('x'),
            |b| b.direct_message_ids.push("h_x".into()),
            |b| b.effective_message_ids.push("h_x".into()),
            |b| b.direct_block_ids.push("b9".into()),
            |b| b.archive_path.push('x'),
            |b| b.archive_rel.push('x'),
            |b| b.compressed_tokens += 1,
            |b| b.start_ref.push('x'),
            |b| b.end_ref.push('x'),
            |b| b.created_at += 1,
            |b| b.active = !b.active,
            |b| b.compress_call_id.push('x'),
        ];
        for (i, change) in changes.iter().enumerate() {
            let mut c = b.clone();
            change(&mut c);
            assert_ne!(block_digest(&c), block_digest(&b), "field {i}");
        }
        // An id moved from one list to the next is a change too.
        let mut moved = b.clone();
        moved.direct_block_ids = vec!["b1".into()];
        let mut other = b.clone();
        other.effective_message_ids.push("b1".into());
        assert_ne!(block_digest(&moved), block_digest(&other));
    }

    #[test]
    fn an_older_state_put_back_has_its_blocks_as_they_were() {
        let (base, s, st) = saved_with_blocks("blocks-older", 1);
        let older = fs::read(s.state_path()).unwrap();
        let mut newer = st.clone();
        newer.blocks[0].active = false;
        newer.blocks.push(block(2));
        s.save(&newer).unwrap();
        fs::write(s.state_path(), &older).unwrap();
        let back = SessionDir::new(&base, "sess");
        let mut loaded = back.load().unwrap().unwrap();
        assert_eq!(loaded, st);
        // Saving from it cuts the lines the newer state had appended.
        loaded.blocks.push(block(3));
        back.save(&loaded).unwrap();
        assert_eq!(blocks_log(&s).lines().count(), 2);
        assert_eq!(SessionDir::new(&base, "sess").load().unwrap(), Some(loaded));
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_missing_short_or_rewritten_blocks_log_is_an_error_and_stays() {
        let (base, s, _) = saved_with_blocks("blocks-lost", 2);
        let path = s.dir.join(BLOCKS_LOG);
        let text = blocks_log(&s);
        // The same length and lines, other words: a log written since.
        fs::write(&path, text.replace("summary 1", "summary 9")).unwrap();
        let err = SessionDir::new(&base, "sess").load().unwrap_err();
        assert!(
            matches!(&err, StoreError::Blocks { what, .. } if what == "not the log state.json was saved with"),
            "{err}"
        );
        fs::write(&path, &text[..text.len() - 3]).unwrap();
        let err = SessionDir::new(&base, "sess").load().unwrap_err();
        assert!(
            matches!(&err, StoreError::Blocks { what, .. } if what == "shorter than state.json says"),
            "{err}"
        );
        fs::remove_file(&path).unwrap();
        let err = SessionDir::new(&base, "sess").load().unwrap_err();
        assert!(
            matches!(&err, StoreError::Blocks { what, .. } if what == "missing"),
            "{err}"
        );
        assert!(s.state_path().exists(), "state.json stays");
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_version_2_state_keeps_its_blocks_and_moves_them_to_the_log() {
        let (base, s, st) = saved_with_blocks("blocks-v2", 2);
        let log = blocks_log(&s);
        let mut v2: serde_json::Value =
            serde_json::from_slice(&fs::read(s.state_path()).unwrap()).unwrap();
        v2["version"] = 2.into();
        v2["blocks"] = serde_json::to_value(&st.blocks).unwrap();
        v2.as_object_mut().unwrap().remove("blocksLog");
        fs::remove_file(s.dir.join(BLOCKS_LOG)).unwrap();
        fs::write(s.state_path(), serde_json::to_vec_pretty(&v2).unwrap()).unwrap();
        let old = SessionDir::new(&base, "sess");
        let loaded = old.load().unwrap().unwrap();
        assert_eq!(loaded, st);
        old.save(&loaded).unwrap();
        assert_eq!(blocks_log(&s), log);
        assert_eq!(SessionDir::new(&base, "sess").load().unwrap(), Some(st));
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn future_version_is_refused() {
        let base = temp("version");
        let s = SessionDir::new(&base, "sess");
        s.create().unwrap();
        let next = STATE_VERSION + 1;
        fs::write(s.state_path(), format!("{{\"version\": {next}}}")).unwrap();
        let err = s.load().unwrap_err();
        assert!(
            matches!(err, StoreError::Version { found, .. } if found == u64::from(next)),
            "{err}"
        );
        fs::remove_dir_all(&base).unwrap();
    }
}
