//! Maps of the state that grow with the history (token figures frozen per
//! ref, truncated outputs) kept as append-only logs beside state.json, so a
//! turn writes what changed instead of every entry again.
//!
//! A log is lines of `+ key value` (set, the value a whole number: a
//! token figure, the history's length when an output was cut) and `- key`
//! (removed); the map is what its lines leave, in order. state.json names
//! how many bytes and lines of the log are its own: what a crashed save
//! appended after them is not read, and the next save cuts it; an older
//! state.json put back names a shorter prefix, which holds the map as it
//! was then. A log that has grown to more than twice its entries (and past
//! a few hundred lines) is written afresh.
//!
//! A log written afresh goes to a new file, a generation of its own
//! (`tokens.1.log` beside `tokens.log`), and state.json names the
//! generation it stands on: the old file stays as it was until the new
//! state.json is in place, so a save killed at any point leaves the state
//! before it whole, whatever it had rewritten.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read, Seek, Write};
use std::iter::Peekable;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::digest::Digest;
use super::files;
use crate::engine::Name;

/// How much of a log a state.json stands on. The digest tells a log
/// rewritten since (a crash between the log and state.json) from the one
/// the state was saved with, whatever its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Extent {
    /// Bytes of the log that belong to the state.
    pub bytes: u64,
    /// Lines in those bytes.
    pub lines: usize,
    /// [`Digest`] of those bytes.
    pub digest: u64,
    /// Which file of the log: see [`file_name`].
    #[serde(default, skip_serializing_if = "is_zero")]
    pub generation: u32,
}

/// Whether a generation is the first, which a state.json leaves unnamed.
pub(super) fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The file of log `base` (`tokens.log`) at `generation`: the base name
/// for 0, the number before its extension for any other (`tokens.1.log`).
pub fn file_name(base: &str, generation: u32) -> String {
    match (generation, base.rsplit_once('.')) {
        (0, _) => base.to_string(),
        (g, Some((stem, ext))) => format!("{stem}.{g}.{ext}"),
        (g, None) => format!("{base}.{g}"),
    }
}

/// Writes `bytes` as a new file of log `base` in `dir`, at the lowest
/// generation with no file yet (the log state.json names is never touched),
/// synced with the directory entry that names it, so state.json can name
/// it next. With `orphans`, no state.json names any of the log's files:
/// they are removed and the log starts again at generation 0. A link where
/// a generation would go is refused.
pub fn write_generation(dir: &Path, base: &str, bytes: &[u8], orphans: bool) -> io::Result<u32> {
    let mut generation = 0;
    let path = loop {
        let path = dir.join(file_name(base, generation));
        match fs::symlink_metadata(&path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => break path,
            Err(e) => return Err(e),
            Ok(m) if m.file_type().is_symlink() => return Err(files::link_refused()),
            Ok(_) if orphans => {
                fs::remove_file(&path)?;
                break path;
            }
            Ok(_) => generation += 1,
        }
    };
    let written = (|| {
        let mut f = files::make_new(&path)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        super::atomic::sync_dir(dir)
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&path);
        return Err(e);
    }
    Ok(generation)
}

/// Removes the files of log `base` in `dir` but generation `keep`: those a
/// state.json named before, once the one naming `keep` is in place, and
/// those of saves killed before they were named.
pub fn remove_other_generations(dir: &Path, base: &str, keep: u32) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let keep = file_name(base, keep);
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name != keep && generation_of(base, name).is_some() {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// The generation `name` is a file of log `base` at, if it is one.
fn generation_of(base: &str, name: &str) -> Option<u32> {
    if name == base {
        return Some(0);
    }
    let (stem, ext) = base.rsplit_once('.')?;
    let middle = name.strip_prefix(stem)?.strip_prefix('.')?;
    let number = middle.strip_suffix(ext)?.strip_suffix('.')?;
    let generation: u32 = number.parse().ok()?;
    (generation > 0 && number == generation.to_string()).then_some(generation)
}

/// A log as this process last read or wrote it: its extent, the entries
/// its lines leave, and the digest of its bytes so far, to go on from.
#[derive(Debug, Clone)]
pub struct Logged {
    pub extent: Extent,
    /// The map's entries in key order: what the next save tells the
    /// changes from. Keys are `Name`s, inline for every ref and id, so
    /// keeping them beside the map the state is given costs one list, where
    /// a copy of the map cost an allocation an entry.
    pub entries: Vec<(Name, usize)>,
    pub sum: Digest,
}

/// Below this many lines a log is never rewritten for its length.
const COMPACT_FLOOR: usize = 256;

/// The first `len` bytes of the append-only log at `path`, the part a
/// state.json stands on (every log beside it is read this way), into
/// `buf`. The logs of one state are read one after the other into the same
/// buffer: each page of it is touched once, where a buffer for each log
/// would bring in fresh memory for every one.
pub fn read_prefix(path: &Path, len: u64, buf: &mut Vec<u8>) -> Result<(), LogError> {
    let file = match files::open_read(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(LogError::Damaged("missing")),
        Err(e) => return Err(LogError::Io(e)),
    };
    let short = || LogError::Damaged("shorter than state.json says");
    // Room for what the file holds, never more: a damaged length asks for
    // no memory.
    let have = file.metadata().map_err(LogError::Io)?.len();
    let len = usize::try_from(len)
        .ok()
        .filter(|_| len <= have)
        .ok_or_else(short)?;
    buf.clear();
    if buf.capacity() < len {
        // Let go first: growing the buffer would copy what it held.
        *buf = Vec::with_capacity(len);
    }
    let read = (&file)
        .take(len as u64)
        .read_to_end(buf)
        .map_err(LogError::Io)?;
    if read < len {
        return Err(short());
    }
    Ok(())
}

/// Appends `bytes` to the log at `path` after its first `keep` bytes, the
/// state's: what a crashed save appended after them is cut first. Synced
/// before state.json names the new length.
pub fn append_after(path: &Path, keep: u64, bytes: &[u8]) -> io::Result<()> {
    let mut f = files::open_write(path)?;
    // Nothing to add to a log that ends where the state says: nothing to
    // cut or sync either.
    if bytes.is_empty() && f.metadata()?.len() == keep {
        return Ok(());
    }
    f.set_len(keep)?;
    f.seek(io::SeekFrom::End(0))?;
    f.write_all(bytes)?;
    f.sync_data()
}

/// Sorts `changes` by key and keeps each key's last. The sort is stable: a
/// key's changes stay in the order they were made, so the last one stands;
/// the rest are dropped in place.
fn keep_last_of_each(changes: &mut Vec<(&str, Option<usize>)>) {
    changes.sort_by_key(|(key, _)| *key);
    let mut kept = 0;
    for i in 0..changes.len() {
        if kept > 0 && changes[kept - 1].0 == changes[i].0 {
            kept -= 1;
        }
        changes[kept] = changes[i];
        kept += 1;
    }
    changes.truncate(kept);
}

/// The map the first `extent.bytes` of the log at `path` make, and the log
/// as read; `Err` says what is wrong with the log.
pub fn read(
    path: &Path,
    extent: Extent,
    buf: &mut Vec<u8>,
) -> Result<(BTreeMap<Name, usize>, Logged), LogError> {
    read_prefix(path, extent.bytes, buf)?;
    let mine = &buf[..];
    let text = std::str::from_utf8(mine).map_err(|_| LogError::Damaged("not UTF-8"))?;
    // The lines are gathered first and the map built in one pass at the
    // end: a log rewritten in key order, with a few lines appended since,
    // sorts in about one pass, where inserting line by line searches the
    // tree each time.
    // Sized by the lines state.json names, within what the bytes can hold
    // (a line is four bytes at least), so a damaged count cannot ask for
    // more memory than the log takes.
    let mut changes: Vec<(&str, Option<usize>)> =
        Vec::with_capacity(extent.lines.min(text.len() / 4));
    for line in crate::formats::lines(text) {
        let bad = || LogError::Damaged("a line is not `+ key value` or `- key`");
        match split_at_space(line) {
            Some(("+", rest)) => {
                let (key, value) = split_at_space(rest).ok_or_else(bad)?;
                let value = value.parse().map_err(|_| bad())?;
                changes.push((key, Some(value)));
            }
            Some(("-", key)) => changes.push((key, None)),
            _ => return Err(bad()),
        }
    }
    let lines = changes.len();
    keep_last_of_each(&mut changes);
    let entries: Vec<(Name, usize)> = changes
        .into_iter()
        .filter_map(|(key, value)| Some((Name::new(key), value?)))
        .collect();
    let mut sum = Digest::default();
    sum.update(mine);
    if lines != extent.lines || sum.finish() != extent.digest {
        return Err(LogError::Damaged("not the log state.json was saved with"));
    }
    let map = entries.iter().cloned().collect();
    Ok((
        map,
        Logged {
            extent,
            entries,
            sum,
        },
    ))
}

/// `split_once(' ')` for the short lines of the logs: a plain byte scan,
/// where the general pattern search costs more than the line.
pub fn split_at_space(line: &str) -> Option<(&str, &str)> {
    let at = line.bytes().position(|b| b == b' ')?;
    Some((&line[..at], &line[at + 1..]))
}

/// Why a log could not be read.
#[derive(Debug)]
pub enum LogError {
    /// The log is missing or is not the one state.json names.
    Damaged(&'static str),
    /// Reading failed.
    Io(io::Error),
}

/// Lines to append to a log: what changed since it was written.
struct Changes {
    text: String,
    lines: usize,
}

/// How many of `entries` `current` begins with unchanged, taken from
/// `current`.
fn skip_unchanged<'a>(
    entries: &[(Name, usize)],
    current: &mut Peekable<impl Iterator<Item = (&'a str, usize)>>,
) -> usize {
    let mut same = 0;
    while let Some((k, v)) = current.peek()
        && entries
            .get(same)
            .is_some_and(|(ok, ov)| ok.as_str() == *k && ov == v)
    {
        current.next();
        same += 1;
    }
    same
}

/// `+ key value` and a newline, onto `text`: the value in decimal digits,
/// without the formatter, since a long session's first save writes tens of
/// thousands of lines, and formatting each took several hundred
/// instructions.
fn push_entry(text: &mut String, key: &str, value: usize) {
    text.push_str("+ ");
    text.push_str(key);
    text.push(' ');
    crate::engine::tokens::push_decimal(text, value);
    text.push('\n');
}

/// `- key` and a newline, onto `text`.
fn push_removed(text: &mut String, key: &str) {
    text.push_str("- ");
    text.push_str(key);
    text.push('\n');
}

/// The changes from `old` to `current`, and what `current` holds pushed
/// onto `entries`. Both sides are in key order: one merge walk finds them.
fn merge_changes<'a>(
    entries: &mut Vec<(Name, usize)>,
    old: Vec<(Name, usize)>,
    mut current: Peekable<impl Iterator<Item = (&'a str, usize)>>,
) -> Changes {
    let mut changes = String::new();
    let mut lines = 0;
    let mut old = old.into_iter().peekable();
    loop {
        let order = match (old.peek(), current.peek()) {
            (None, None) => break,
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (Some((ok, _)), Some((ck, _))) => ok.as_str().cmp(ck),
        };
        match order {
            Ordering::Less => {
                let (k, _) = old.next().expect("peeked");
                push_removed(&mut changes, &k);
                lines += 1;
            }
            Ordering::Greater => {
                let (k, v) = current.next().expect("peeked");
                push_entry(&mut changes, k, v);
                lines += 1;
                entries.push((Name::new(k), v));
            }
            Ordering::Equal => {
                let (name, was) = old.next().expect("peeked");
                let (k, v) = current.next().expect("peeked");
                if was != v {
                    push_entry(&mut changes, k, v);
                    lines += 1;
                }
                entries.push((name, v));
            }
        }
    }
    Changes {
        text: changes,
        lines,
    }
}

/// Brings the log `base` in `dir` to `current` (its entries in key order):
/// the changes since `logged` are appended to the file it names; without a
/// known log, or once the log is more than twice its entries, `rewrite`
/// writes it afresh (given the whole text), returning the generation it
/// went to (see [`write_generation`]). Returns the log as it now stands.
pub fn write<'a>(
    (dir, base): (&Path, &str),
    logged: Option<Logged>,
    current: impl Iterator<Item = (&'a str, usize)>,
    rewrite: impl FnOnce(&[u8]) -> io::Result<u32>,
) -> io::Result<Logged> {
    let on_disk = |l: &Logged| {
        let path = dir.join(file_name(base, l.extent.generation));
        fs::symlink_metadata(path).is_ok_and(|m| m.len() >= l.extent.bytes)
    };
    let Some(logged) = logged.filter(on_disk) else {
        let entries = current.map(|(k, v)| (Name::new(k), v)).collect();
        return written_afresh(entries, rewrite);
    };
    // The entries `current` begins with unchanged stay where they are: most
    // turns change none, or a few near the end, and a long session's logs
    // hold tens of thousands, too many to move into a new list each turn.
    let mut entries = logged.entries;
    let mut current = current.peekable();
    let same = skip_unchanged(&entries, &mut current);
    let rest = entries.split_off(same);
    let Changes {
        text: changes,
        lines,
    } = merge_changes(&mut entries, rest, current);
    let total = logged.extent.lines + lines;
    if total > COMPACT_FLOOR && total > 2 * entries.len() {
        return written_afresh(entries, rewrite);
    }
    let mut sum = logged.sum;
    sum.update(changes.as_bytes());
    let generation = logged.extent.generation;
    if lines > 0 {
        let path = dir.join(file_name(base, generation));
        append_after(&path, logged.extent.bytes, changes.as_bytes())?;
    }
    Ok(Logged {
        extent: Extent {
            bytes: logged.extent.bytes + changes.len() as u64,
            lines: total,
            digest: sum.finish(),
            generation,
        },
        entries,
        sum,
    })
}

/// The entries written as a new generation of the log.
fn written_afresh(
    entries: Vec<(Name, usize)>,
    rewrite: impl FnOnce(&[u8]) -> io::Result<u32>,
) -> io::Result<Logged> {
    let mut text = String::new();
    for (k, v) in &entries {
        push_entry(&mut text, k, *v);
    }
    let generation = rewrite(text.as_bytes())?;
    let mut sum = Digest::default();
    sum.update(text.as_bytes());
    Ok(Logged {
        extent: Extent {
            bytes: text.len() as u64,
            lines: entries.len(),
            digest: sum.finish(),
            generation,
        },
        entries,
        sum,
    })
}

#[cfg(test)]
mod tests {

    use super::*;

    fn temp(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("noa-maplog-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn map_of(logged: &Logged) -> BTreeMap<Name, usize> {
        logged
            .entries
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }

    /// Saves `map` to the log `m.log` in `path`'s directory.
    fn save(path: &Path, logged: Option<Logged>, map: &BTreeMap<Name, usize>) -> Logged {
        let dir = path.parent().unwrap();
        write(
            (dir, "m.log"),
            logged,
            map.iter().map(|(k, v)| (k.as_str(), *v)),
            |bytes| write_generation(dir, "m.log", bytes, false),
        )
        .unwrap()
    }

    #[test]
    fn changes_are_appended_and_read_back() {
        let dir = temp("append");
        let path = dir.join("m.log");
        let mut map: BTreeMap<Name, usize> =
            (1..=5).map(|i| (Name::from(format!("m{i}")), i)).collect();
        let first = save(&path, None, &map);
        let len = fs::metadata(&path).unwrap().len();
        assert_eq!(read(&path, first.extent, &mut Vec::new()).unwrap().0, map);
        map.remove("m2");
        map.insert("m3".into(), 30);
        map.insert("m9".into(), 9);
        let second = save(&path, Some(first.clone()), &map);
        let text = fs::read_to_string(&path).unwrap();
        assert_eq!(&text[len as usize..], "- m2\n+ m3 30\n+ m9 9\n");
        assert_eq!(read(&path, second.extent, &mut Vec::new()).unwrap().0, map);
        assert_eq!(map_of(&second), map);
        // The older extent still reads the older map.
        assert_eq!(
            read(&path, first.extent, &mut Vec::new()).unwrap().0,
            map_of(&first)
        );
        // Nothing changed: nothing written.
        let third = save(&path, Some(second.clone()), &map);
        assert_eq!(third.extent, second.extent);
        assert_eq!(fs::read_to_string(&path).unwrap(), text);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_crashed_tail_is_cut_and_a_damaged_log_is_named() {
        let dir = temp("tail");
        let path = dir.join("m.log");
        let mut map: BTreeMap<Name, usize> = [(Name::from("a"), 1)].into();
        let first = save(&path, None, &map);
        fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"+ b 2\n+ c")
            .unwrap();
        assert_eq!(read(&path, first.extent, &mut Vec::new()).unwrap().0, map);
        map.insert("d".into(), 4);
        let second = save(&path, Some(first), &map);
        assert_eq!(fs::read_to_string(&path).unwrap(), "+ a 1\n+ d 4\n");
        assert_eq!(read(&path, second.extent, &mut Vec::new()).unwrap().0, map);
        fs::write(&path, "+ a 1\n").unwrap();
        assert!(matches!(
            read(&path, second.extent, &mut Vec::new()),
            Err(LogError::Damaged("shorter than state.json says"))
        ));
        // Rewritten to the same length and lines: still not the state's.
        fs::write(&path, "+ a 1\n+ e 5\n").unwrap();
        assert!(matches!(
            read(&path, second.extent, &mut Vec::new()),
            Err(LogError::Damaged("not the log state.json was saved with"))
        ));
        // A count no log of these bytes could hold is damage, not a
        // request for that much memory.
        fs::write(&path, "+ a 1\n+ d 4\n").unwrap();
        let huge = Extent {
            lines: usize::MAX,
            ..second.extent
        };
        assert!(matches!(
            read(&path, huge, &mut Vec::new()),
            Err(LogError::Damaged("not the log state.json was saved with"))
        ));
        fs::write(&path, "+ a 1\n* d 4\n").unwrap();
        assert!(matches!(
            read(&path, second.extent, &mut Vec::new()),
            Err(LogError::Damaged(_))
        ));
        fs::remove_file(&path).unwrap();
        assert!(matches!(
            read(&path, second.extent, &mut Vec::new()),
            Err(LogError::Damaged("missing"))
        ));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn appending_nothing_cuts_a_crashed_tail_and_leaves_a_whole_log() {
        let dir = temp("nothing");
        let path = dir.join("m.log");
        let text = || fs::read_to_string(&path).unwrap();
        fs::write(&path, "+ a 1\n").unwrap();
        append_after(&path, 6, b"").unwrap();
        assert_eq!(text(), "+ a 1\n");
        fs::write(&path, "+ a 1\n+ b").unwrap();
        append_after(&path, 6, b"").unwrap();
        assert_eq!(text(), "+ a 1\n");
        append_after(&path, 6, b"+ c 3\n").unwrap();
        assert_eq!(text(), "+ a 1\n+ c 3\n");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_log_of_mostly_removals_is_written_afresh() {
        let dir = temp("compact");
        let path = dir.join("m.log");
        let mut map: BTreeMap<Name, usize> = (0..400)
            .map(|i| (Name::from(format!("k{i:03}")), i))
            .collect();
        let mut logged = save(&path, None, &map);
        let before = fs::read(&path).unwrap();
        map.retain(|_, v| *v < 100);
        let first = logged.clone();
        logged = save(&path, Some(logged), &map);
        assert_eq!(logged.extent.lines, 100, "rewritten with what is left");
        // Into a new file: the one the older state names is as it was.
        assert_eq!(logged.extent.generation, 1);
        let new = dir.join("m.1.log");
        assert_eq!(fs::read(&path).unwrap(), before);
        assert_eq!(read(&new, logged.extent, &mut Vec::new()).unwrap().0, map);
        assert!(read(&path, first.extent, &mut Vec::new()).is_ok());
        // Once the new state stands, the old file goes; changes go on into
        // the new one, and the next rewrite takes the old name again.
        remove_other_generations(&dir, "m.log", 1);
        assert!(!path.exists() && new.exists());
        map.retain(|_, v| *v < 10);
        logged = save(&path, Some(logged), &map);
        assert_eq!(logged.extent.generation, 1);
        assert_eq!(read(&new, logged.extent, &mut Vec::new()).unwrap().0, map);
        assert_eq!(write_generation(&dir, "m.log", b"", false).unwrap(), 0);
        // With no state naming any file of the log, it starts over.
        assert_eq!(
            write_generation(&dir, "m.log", b"+ a 1\n", true).unwrap(),
            0
        );
        assert_eq!(fs::read(&path).unwrap(), b"+ a 1\n");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn generations_are_named_and_known_by_their_names() {
        assert_eq!(file_name("tokens.log", 0), "tokens.log");
        assert_eq!(file_name("blocks.jsonl", 3), "blocks.3.jsonl");
        for (name, g) in [
            ("refs.log", Some(0)),
            ("refs.2.log", Some(2)),
            ("refs.02.log", None),
            ("refs.0.log", None),
            ("refs..log", None),
            ("refs.x.log", None),
            ("refs.log.1", None),
            (".refs.log.77.tmp", None),
        ] {
            assert_eq!(generation_of("refs.log", name), g, "{name}");
        }
    }

    #[test]
    fn a_link_where_a_generation_would_go_is_refused() {
        let dir = temp("link");
        let target = dir.join("notes.txt");
        fs::write(&target, b"mine").unwrap();
        std::os::unix::fs::symlink(&target, dir.join("m.log")).unwrap();
        let e = write_generation(&dir, "m.log", b"+ a 1\n", true).unwrap_err();
        assert!(files::is_link(&e), "{e}");
        let e = append_after(&dir.join("m.log"), 0, b"+ a 1\n").unwrap_err();
        assert!(files::is_link(&e), "{e}");
        assert_eq!(fs::read(&target).unwrap(), b"mine");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_key_set_removed_and_set_again_ends_as_its_last_line_says() {
        let dir = temp("order");
        let path = dir.join("m.log");
        let text = "+ m2 7\n+ m1 1\n- m2\n+ m3 3\n+ m1 4\n+ m2 9\n- m3\n+ m0 5\n";
        fs::write(&path, text).unwrap();
        let extent = Extent {
            bytes: text.len() as u64,
            lines: 8,
            digest: crate::store::digest(text.as_bytes()),
            generation: 0,
        };
        // Read into a buffer a longer log filled first: nothing of it stays.
        let mut buf = b"+ m9 9\n".repeat(100);
        let (map, logged) = read(&path, extent, &mut buf).unwrap();
        let got: Vec<(&str, usize)> = map.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(got, [("m0", 5), ("m1", 4), ("m2", 9)]);
        assert_eq!(map_of(&logged), map);
        // A state that names more bytes than the log holds.
        let longer = Extent {
            bytes: text.len() as u64 + 1,
            ..extent
        };
        assert!(matches!(
            read(&path, longer, &mut buf),
            Err(LogError::Damaged("shorter than state.json says"))
        ));
        let _ = fs::remove_dir_all(&dir);
    }
}
