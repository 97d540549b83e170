//! Maps of the state that grow with the history (token figures frozen per
//! ref, truncated outputs) kept as append-only logs beside state.json, so a
//! turn writes what changed instead of every entry again.
//!
//! A log is lines of `+ key value` (set) and `- key` (removed); the map is
//! what its lines leave, in order. state.json names how many bytes and lines
//! of the log are its own: what a crashed save appended after them is not
//! read, and the next save cuts it; an older state.json put back names a
//! shorter prefix, which holds the map as it was then. A log that has grown
//! to more than twice its entries (and past a few hundred lines) is
//! written afresh.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt::{Display, Write as _};
use std::fs;
use std::io::{self, Read, Seek, Write};
use std::path::Path;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::digest::Digest;
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
}

/// A log as this process last read or wrote it: its extent, the entries
/// its lines leave, and the digest of its bytes so far, to go on from.
#[derive(Debug, Clone)]
pub struct Logged<V> {
    pub extent: Extent,
    /// The map's entries in key order: what the next save tells the
    /// changes from. Keys are `Name`s, inline for every ref and id, so
    /// keeping them beside the map the state is given costs one list, where
    /// a copy of the map cost an allocation an entry.
    pub entries: Vec<(Name, V)>,
    pub sum: Digest,
}

/// Below this many lines a log is never rewritten for its length.
const COMPACT_FLOOR: usize = 256;

/// The first `len` bytes of the append-only log at `path`, the part a
/// state.json stands on (every log beside it is read this way), into
/// `buf`. The logs of one state are read one after the other into the same
/// buffer: each page of it is touched once, where a buffer a log touched
/// 6 MB of fresh memory at 99K messages.
pub fn read_prefix(path: &Path, len: u64, buf: &mut Vec<u8>) -> Result<(), LogError> {
    let file = match fs::File::open(path) {
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
    let mut f = fs::OpenOptions::new().write(true).open(path)?;
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

/// The map the first `extent.bytes` of the log at `path` make, and the log
/// as read; `Err` says what is wrong with the log.
pub fn read<V: FromStr + Copy>(
    path: &Path,
    extent: Extent,
    buf: &mut Vec<u8>,
) -> Result<(BTreeMap<Name, V>, Logged<V>), LogError> {
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
    let mut changes: Vec<(&str, Option<V>)> = Vec::with_capacity(extent.lines.min(text.len() / 4));
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
    // Stable: a key's changes stay in the order they were made, and the
    // last one stands.
    changes.sort_by_key(|(key, _)| *key);
    // In place: the last change of each key is kept.
    let mut kept = 0;
    for i in 0..changes.len() {
        if kept > 0 && changes[kept - 1].0 == changes[i].0 {
            kept -= 1;
        }
        changes[kept] = changes[i];
        kept += 1;
    }
    changes.truncate(kept);
    let entries: Vec<(Name, V)> = changes
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

/// Brings the log at `path` to `current` (its entries in key order): the
/// changes since `logged` are appended; without a known log, or once the
/// log is more than twice its entries, `rewrite` writes it afresh (given
/// the whole text). Returns the log as it now stands.
pub fn write<'a, V>(
    path: &Path,
    logged: Option<Logged<V>>,
    current: impl Iterator<Item = (&'a str, V)>,
    rewrite: impl FnOnce(&[u8]) -> io::Result<()>,
) -> io::Result<Logged<V>>
where
    V: Display + PartialEq,
{
    let on_disk = |l: &Logged<V>| fs::metadata(path).is_ok_and(|m| m.len() >= l.extent.bytes);
    let Some(logged) = logged.filter(on_disk) else {
        let entries = current.map(|(k, v)| (Name::new(k), v)).collect();
        return written_afresh(entries, rewrite);
    };
    // The entries `current` begins with unchanged stay where they are: most
    // turns change none, or a few near the end, and a long session's logs
    // hold tens of thousands (moving each into a new list was 8 ms of a
    // compressed 99K-message turn).
    let mut entries = logged.entries;
    let mut current = current.peekable();
    let mut same = 0;
    while let Some((k, v)) = current.peek()
        && entries
            .get(same)
            .is_some_and(|(ok, ov)| ok.as_str() == *k && ov == v)
    {
        current.next();
        same += 1;
    }
    // Both sides are in key order: one merge walk of the rest finds the
    // changes, and what `current` holds is the log's entries after them.
    let mut changes = String::new();
    let mut lines = 0;
    let rest = entries.split_off(same);
    let mut old = rest.into_iter().peekable();
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
                let _ = writeln!(changes, "- {k}");
                lines += 1;
            }
            Ordering::Greater => {
                let (k, v) = current.next().expect("peeked");
                let _ = writeln!(changes, "+ {k} {v}");
                lines += 1;
                entries.push((Name::new(k), v));
            }
            Ordering::Equal => {
                let (name, was) = old.next().expect("peeked");
                let (k, v) = current.next().expect("peeked");
                if was != v {
                    let _ = writeln!(changes, "+ {k} {v}");
                    lines += 1;
                }
                entries.push((name, v));
            }
        }
    }
    let total = logged.extent.lines + lines;
    if total > COMPACT_FLOOR && total > 2 * entries.len() {
        return written_afresh(entries, rewrite);
    }
    let mut sum = logged.sum;
    sum.update(changes.as_bytes());
    if lines > 0 {
        append_after(path, logged.extent.bytes, changes.as_bytes())?;
    }
    Ok(Logged {
        extent: Extent {
            bytes: logged.extent.bytes + changes.len() as u64,
            lines: total,
            digest: sum.finish(),
        },
        entries,
        sum,
    })
}

/// The entries written as a new log.
fn written_afresh<V: Display>(
    entries: Vec<(Name, V)>,
    rewrite: impl FnOnce(&[u8]) -> io::Result<()>,
) -> io::Result<Logged<V>> {
    let mut text = String::new();
    for (k, v) in &entries {
        let _ = writeln!(text, "+ {k} {v}");
    }
    rewrite(text.as_bytes())?;
    let mut sum = Digest::default();
    sum.update(text.as_bytes());
    Ok(Logged {
        extent: Extent {
            bytes: text.len() as u64,
            lines: entries.len(),
            digest: sum.finish(),
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

    fn map_of(logged: &Logged<usize>) -> BTreeMap<Name, usize> {
        logged
            .entries
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }

    fn save(
        path: &Path,
        logged: Option<Logged<usize>>,
        map: &BTreeMap<Name, usize>,
    ) -> Logged<usize> {
        write(
            path,
            logged,
            map.iter().map(|(k, v)| (k.as_str(), *v)),
            |bytes| fs::write(path, bytes),
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
        assert_eq!(
            read::<usize>(&path, first.extent, &mut Vec::new())
                .unwrap()
                .0,
            map
        );
        map.remove("m2");
        map.insert("m3".into(), 30);
        map.insert("m9".into(), 9);
        let second = save(&path, Some(first.clone()), &map);
        let text = fs::read_to_string(&path).unwrap();
        assert_eq!(&text[len as usize..], "- m2\n+ m3 30\n+ m9 9\n");
        assert_eq!(
            read::<usize>(&path, second.extent, &mut Vec::new())
                .unwrap()
                .0,
            map
        );
        assert_eq!(map_of(&second), map);
        // The older extent still reads the older map.
        assert_eq!(
            read::<usize>(&path, first.extent, &mut Vec::new())
                .unwrap()
                .0,
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
        assert_eq!(
            read::<usize>(&path, first.extent, &mut Vec::new())
                .unwrap()
                .0,
            map
        );
        map.insert("d".into(), 4);
        let second = save(&path, Some(first), &map);
        assert_eq!(fs::read_to_string(&path).unwrap(), "+ a 1\n+ d 4\n");
        assert_eq!(
            read::<usize>(&path, second.extent, &mut Vec::new())
                .unwrap()
                .0,
            map
        );
        fs::write(&path, "+ a 1\n").unwrap();
        assert!(matches!(
            read::<usize>(&path, second.extent, &mut Vec::new()),
            Err(LogError::Damaged("shorter than state.json says"))
        ));
        // Rewritten to the same length and lines: still not the state's.
        fs::write(&path, "+ a 1\n+ e 5\n").unwrap();
        assert!(matches!(
            read::<usize>(&path, second.extent, &mut Vec::new()),
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
            read::<usize>(&path, huge, &mut Vec::new()),
            Err(LogError::Damaged("not the log state.json was saved with"))
        ));
        fs::write(&path, "+ a 1\n* d 4\n").unwrap();
        assert!(matches!(
            read::<usize>(&path, second.extent, &mut Vec::new()),
            Err(LogError::Damaged(_))
        ));
        fs::remove_file(&path).unwrap();
        assert!(matches!(
            read::<usize>(&path, second.extent, &mut Vec::new()),
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
        map.retain(|_, v| *v < 100);
        logged = save(&path, Some(logged), &map);
        assert_eq!(logged.extent.lines, 100, "rewritten with what is left");
        assert_eq!(
            read::<usize>(&path, logged.extent, &mut Vec::new())
                .unwrap()
                .0,
            map
        );
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
        };
        // Read into a buffer a longer log filled first: nothing of it stays.
        let mut buf = b"+ m9 9\n".repeat(100);
        let (map, logged) = read::<usize>(&path, extent, &mut buf).unwrap();
        let got: Vec<(&str, usize)> = map.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(got, [("m0", 5), ("m1", 4), ("m2", 9)]);
        assert_eq!(map_of(&logged), map);
        // A state that names more bytes than the log holds.
        let longer = Extent {
            bytes: text.len() as u64 + 1,
            ..extent
        };
        assert!(matches!(
            read::<usize>(&path, longer, &mut buf),
            Err(LogError::Damaged("shorter than state.json says"))
        ));
        let _ = fs::remove_dir_all(&dir);
    }
}
