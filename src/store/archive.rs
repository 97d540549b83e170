//! Archive files: the originals a block replaced, written before the state
//! that names them and read back for `noa inspect --archive`.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use super::atomic;

use super::StoreError;
use super::read_cache::LeftWords;
use super::state_file::{Begun, SessionDir, begin_under};
use crate::engine::{ArchiveFile, Block, CompressionState, CoreMessage, IdMap};

impl SessionDir {
    /// Writes the archives, each rendered from `originals` as it is
    /// written, then the state that names them. If anything fails, the
    /// archives this call wrote are removed again and the old state stays:
    /// a state never points at an archive that is not there. Returns the
    /// bytes written.
    pub fn commit<'a>(
        &self,
        archives: impl IntoIterator<Item = &'a ArchiveFile>,
        (originals, left): (&IdMap<'_, &CoreMessage>, &LeftWords),
        state: &CompressionState,
    ) -> Result<usize, StoreError> {
        let (written, bytes) = self.write_archives(archives, originals, left)?;
        if let Err(unsaved) = self.save_placing(state) {
            // A state.json put in place names them, synced or not.
            if !unsaved.placed {
                remove(&written);
            }
            return Err(unsaved.error);
        }
        Ok(bytes)
    }

    /// Like [`SessionDir::commit`] for a rebuilt state: archives already on
    /// disk are adopted as they are (and not rendered), missing ones
    /// written. Returns how many were adopted and how many written.
    pub fn commit_rebuilt(
        &self,
        archives: &[ArchiveFile],
        (originals, left): (&IdMap<'_, &CoreMessage>, &LeftWords),
        state: &CompressionState,
    ) -> Result<(usize, usize), StoreError> {
        let (present, missing): (Vec<&ArchiveFile>, Vec<&ArchiveFile>) = archives
            .iter()
            .partition(|a| self.dir.join(&a.rel).exists());
        let written = missing.len();
        self.commit(missing, (originals, left), state)?;
        Ok((present.len(), written))
    }

    /// A block's archive: at the path the state records, or beside the state
    /// when the state dir has moved since.
    pub fn read_archive(&self, b: &Block) -> Result<Vec<u8>, StoreError> {
        let primary = if b.archive_path.is_empty() {
            self.dir.join(&b.archive_rel)
        } else {
            PathBuf::from(&b.archive_path)
        };
        let fallback = (!b.archive_rel.is_empty()).then(|| self.dir.join(&b.archive_rel));
        match fs::read(&primary) {
            Ok(t) => Ok(t),
            Err(source) => match fallback.as_ref().map(fs::read) {
                Some(Ok(t)) => Ok(t),
                _ => Err(StoreError::io(&primary, source)),
            },
        }
    }

    /// Renders and writes the archives, on as many threads as the machine
    /// offers (up to four), each taking every so-many-th one and syncing
    /// them a batch at a time: rendering a long session's originals and
    /// syncing each file was most of a large `apply`. On the first failure
    /// (the earliest archive's, whichever thread met it) every archive
    /// written is removed again. The words of originals a warm read left in
    /// the read cache (`left`) are read for the archive that names them,
    /// one archive's at a time.
    fn write_archives<'a>(
        &self,
        archives: impl IntoIterator<Item = &'a ArchiveFile>,
        originals: &IdMap<'_, &CoreMessage>,
        left: &LeftWords,
    ) -> Result<(Vec<PathBuf>, usize), StoreError> {
        let archives: Vec<&ArchiveFile> = archives.into_iter().collect();
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get().min(4))
            .min(archives.len())
            .max(1);
        let dir = self.dir.as_path();
        // Each share: what it wrote, its bytes, and the first archive it
        // failed at with why.
        let share = |k: usize| {
            let (mut written, mut bytes) = (Vec::new(), 0);
            // Each archive is rendered into the room the one before took.
            let mut contents = String::new();
            // Archives written and on their way to disk, synced and put in
            // place a batch at a time.
            let mut begun = Vec::new();
            for (i, a) in archives.iter().enumerate().skip(k).step_by(threads) {
                let wrote = render(a, (originals, left), &mut contents)
                    .and_then(|()| begin_under(dir, &a.rel, contents.as_bytes()));
                match wrote {
                    Ok(file) => begun.push((i, file)),
                    Err(e) => return (written, bytes, Some((i, e))),
                }
                bytes += contents.len();
                if begun.len() == SYNCED_AT_ONCE
                    && let Err(failed) = finish(&mut begun, &mut written)
                {
                    return (written, bytes, Some(failed));
                }
            }
            let failed = finish(&mut begun, &mut written).err();
            (written, bytes, failed)
        };
        // This thread takes the first share itself: its allocator has the
        // pages the read freed, where a new thread's would bring in its own.
        let shares: Vec<_> = std::thread::scope(|s| {
            let writing: Vec<_> = (1..threads).map(|k| s.spawn(move || share(k))).collect();
            let own = share(0);
            let others = writing
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)));
            std::iter::once(own).chain(others).collect()
        });
        let (mut written, mut bytes, mut failed) = (Vec::new(), 0, None);
        for (w, b, f) in shares {
            written.extend(w);
            bytes += b;
            if let Some((i, e)) = f
                && failed.as_ref().is_none_or(|(j, _)| i < *j)
            {
                failed = Some((i, e));
            }
        }
        if let Some((_, e)) = failed {
            remove(&written);
            return Err(e);
        }
        if let Err(e) = sync_dirs(&written) {
            remove(&written);
            return Err(e);
        }
        Ok((written, bytes))
    }
}

/// Archives a share writes before it syncs them: a batch's writes to disk
/// are waited for together (see [`atomic::start_writeback`]), and a long
/// rebuild's thousands are not all held open at once.
const SYNCED_AT_ONCE: usize = 64;

/// Syncs the archives `begun` and puts them in place, adding their paths
/// to `written`; the first that fails, with its place and why.
fn finish(
    begun: &mut Vec<(usize, Begun)>,
    written: &mut Vec<PathBuf>,
) -> Result<(), (usize, StoreError)> {
    for (i, file) in begun.drain(..) {
        written.push(file.finish().map_err(|e| (i, e))?);
    }
    Ok(())
}

/// `a` rendered into `out` from `originals`, those a warm read left
/// without their words given them from the read cache (`left`).
fn render(
    a: &ArchiveFile,
    (originals, left): (&IdMap<'_, &CoreMessage>, &LeftWords),
    out: &mut String,
) -> Result<(), StoreError> {
    let unread: Vec<&CoreMessage> = (a.message_ids())
        .filter_map(|id| originals.get(id).copied())
        .filter(|m| m.withheld.is_some())
        .collect();
    if unread.is_empty() {
        a.render_into(originals, out);
        return Ok(());
    }
    let worded = left.worded(&unread)?;
    let mut own: IdMap<'_, &CoreMessage> = (a.message_ids())
        .filter_map(|id| Some((id, *originals.get(id)?)))
        .collect();
    own.extend(worded.iter().map(|m| (m.id.as_str(), m)));
    a.render_into(&own, out);
    Ok(())
}

/// Syncs the folders the `written` archives went into, once each: each
/// file was synced before it was put in place, and the folders are before
/// the state names them. What a killed run left half-written in them is
/// cleared (the session is locked).
fn sync_dirs(written: &[PathBuf]) -> Result<(), StoreError> {
    let dirs: BTreeSet<&Path> = written.iter().map(|p| atomic::parent(p)).collect();
    for dir in dirs {
        atomic::sync_dir(dir).map_err(|e| StoreError::io(dir, e))?;
        super::files::sweep_temps(dir, None);
    }
    Ok(())
}

fn remove(written: &[PathBuf]) {
    for p in written {
        let _ = fs::remove_file(p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Role;
    use crate::engine::{ArchiveEntry as Entry, ArchiveInput};

    fn temp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("noa-archive-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    /// An archive of one message, "m1", that [`originals`] holds.
    fn file(rel: &str) -> ArchiveFile {
        archive_of(rel, "m1")
    }

    /// An archive of the message `id`.
    fn archive_of(rel: &str, id: &str) -> ArchiveFile {
        let m = CoreMessage::text(id, Role::User, "the original");
        ArchiveFile::new(
            rel.into(),
            &ArchiveInput {
                block: &Block::default(),
                session: "sess",
                created: "",
                entries: vec![Entry::Message {
                    reference: Some("m00001"),
                    message: &m,
                }],
            },
        )
    }

    fn originals(m: &CoreMessage) -> IdMap<'_, &CoreMessage> {
        [(m.id.as_str(), m)].into_iter().collect()
    }

    #[test]
    fn a_state_that_cannot_be_saved_takes_its_archives_back() {
        let base = temp("commit");
        let s = SessionDir::new(&base, "sess");
        s.create().unwrap();
        // A directory where state.json goes: the save fails.
        fs::create_dir_all(s.state_path()).unwrap();
        let m = CoreMessage::text("m1", Role::User, "the original");
        let err = s
            .commit(
                &[file("tier1/b1_m00001-m00002.md")],
                (&originals(&m), &LeftWords::default()),
                &CompressionState::new("sess"),
            )
            .unwrap_err();
        assert!(matches!(err, StoreError::Io { .. }), "{err}");
        assert!(!s.dir.join("tier1/b1_m00001-m00002.md").exists());
        fs::remove_dir_all(&base).unwrap();
    }

    /// Archives are written on several threads where the machine has them:
    /// one that cannot be written takes every other back with it, whichever
    /// thread wrote them, and the error is the earliest archive's.
    #[test]
    fn a_failed_archive_among_many_takes_them_all_back() {
        let base = temp("many");
        let s = SessionDir::new(&base, "sess");
        s.create().unwrap();
        // Files where two archives' folders must go.
        fs::write(s.dir.join("t5"), "in the way").unwrap();
        fs::write(s.dir.join("t9"), "in the way").unwrap();
        let archives: Vec<ArchiveFile> = (0..12)
            .map(|i| match i {
                5 | 9 => file(&format!("t{i}/b{i}.md")),
                _ => file(&format!("tier1/b{i}.md")),
            })
            .collect();
        let m = CoreMessage::text("m1", Role::User, "the original");
        let err = s
            .commit(
                &archives,
                (&originals(&m), &LeftWords::default()),
                &CompressionState::new("sess"),
            )
            .unwrap_err();
        assert!(err.to_string().contains("t5"), "{err}");
        assert!(!s.state_path().exists());
        let left: Vec<_> = fs::read_dir(s.dir.join("tier1"))
            .map(|d| d.map(|e| e.unwrap().file_name()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "{left:?}");
        // With nothing in the way, all twelve are written, then the state.
        fs::remove_file(s.dir.join("t5")).unwrap();
        fs::remove_file(s.dir.join("t9")).unwrap();
        let bytes = s
            .commit(
                &archives,
                (&originals(&m), &LeftWords::default()),
                &CompressionState::new("sess"),
            )
            .unwrap();
        let one = archives[0].render(&originals(&m)).len();
        assert_eq!(bytes, 12 * one);
        assert!(s.dir.join("tier1/b11.md").exists() && s.dir.join("t9/b9.md").exists());
        assert!(s.state_path().exists());
        fs::remove_dir_all(&base).unwrap();
    }

    /// More archives than a batch is synced at: every one is put in place,
    /// whole, and no temp file is left beside them.
    #[test]
    fn archives_past_a_batch_are_all_put_in_place() {
        let base = temp("batches");
        let s = SessionDir::new(&base, "sess");
        s.create().unwrap();
        let n = 2 * SYNCED_AT_ONCE + 7;
        let archives: Vec<ArchiveFile> = (0..n).map(|i| file(&format!("tier1/b{i}.md"))).collect();
        let m = CoreMessage::text("m1", Role::User, "the original");
        let originals = originals(&m);
        let bytes = s
            .commit(
                &archives,
                (&originals, &LeftWords::default()),
                &CompressionState::new("sess"),
            )
            .unwrap();
        let one = archives[0].render(&originals);
        assert_eq!(bytes, n * one.len());
        let mut names: Vec<String> = fs::read_dir(s.dir.join("tier1"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        let mut expected: Vec<String> = (0..n).map(|i| format!("b{i}.md")).collect();
        expected.sort();
        assert_eq!(names, expected);
        let last = s.dir.join(format!("tier1/b{}.md", n - 1));
        assert_eq!(fs::read_to_string(last).unwrap(), one);
        fs::remove_dir_all(&base).unwrap();
    }

    /// An original a warm read left in the read cache is archived with the
    /// words read from there, as it would be with them in memory; one whose
    /// words cannot be found there, or do not match their digest, fails the
    /// archive and writes nothing.
    #[test]
    fn an_original_left_in_the_read_cache_is_archived_whole() {
        let base = temp("left");
        let s = SessionDir::new(&base, "sess");
        s.create().unwrap();
        let words = "the original output\n".repeat(20);
        // As the cache holds long words: their digest, then them.
        let mut bytes = crate::store::cache_digest(words.as_bytes())
            .to_le_bytes()
            .to_vec();
        bytes.extend_from_slice(format!("{words}tail").as_bytes());
        fs::write(s.dir.join("read-cache.bin"), &bytes).unwrap();
        let whole = CoreMessage::tool_result("m1", "c1", "Read", words.as_str());
        let unread = CoreMessage {
            text: String::new(),
            withheld: std::num::NonZeroU32::new(words.len() as u32),
            ..whole.clone()
        };
        let archive = file("tier1/b1.md");
        let cache = crate::store::WordsFile::open(s.dir.join("read-cache.bin")).unwrap();
        let left = cache.left([("m1", 8)].into_iter().collect());
        let state = CompressionState::new("sess");
        s.commit([&archive], (&originals(&unread), &left), &state)
            .unwrap();
        let written = fs::read_to_string(s.dir.join("tier1/b1.md")).unwrap();
        assert_eq!(written, archive.render(&originals(&whole)));
        assert!(written.contains(&words));
        fs::remove_file(s.dir.join("tier1/b1.md")).unwrap();
        let nowhere = cache.left(IdMap::default());
        let err = s
            .commit([&archive], (&originals(&unread), &nowhere), &state)
            .unwrap_err();
        assert!(err.to_string().contains("read cache"), "{err}");
        assert!(!s.dir.join("tier1/b1.md").exists());
        bytes[20] ^= 1;
        fs::write(s.dir.join("read-cache.bin"), &bytes).unwrap();
        let damaged = crate::store::WordsFile::open(s.dir.join("read-cache.bin")).unwrap();
        let left = damaged.left([("m1", 8)].into_iter().collect());
        let err = s
            .commit([&archive], (&originals(&unread), &left), &state)
            .unwrap_err();
        assert!(err.to_string().contains("digest"), "{err}");
        assert!(!s.dir.join("tier1/b1.md").exists());
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_rebuild_adopts_what_is_there_and_writes_what_is_not() {
        let base = temp("rebuilt");
        let s = SessionDir::new(&base, "sess");
        s.create().unwrap();
        s.write("tier1/b1_m00001-m00002.md", b"kept as it was")
            .unwrap();
        // The archive on disk names a message the originals do not hold:
        // adopted, it is never rendered.
        let archives = [
            archive_of("tier1/b1_m00001-m00002.md", "not in the history"),
            file("tier1/b2_m00003-m00004.md"),
        ];
        let m = CoreMessage::text("m1", Role::User, "the original");
        let (adopted, written) = s
            .commit_rebuilt(
                &archives,
                (&originals(&m), &LeftWords::default()),
                &CompressionState::new("sess"),
            )
            .unwrap();
        assert_eq!((adopted, written), (1, 1));
        assert_eq!(
            fs::read(s.dir.join("tier1/b1_m00001-m00002.md")).unwrap(),
            b"kept as it was"
        );
        assert!(s.state_path().exists());
        let b = Block {
            archive_rel: "tier1/b2_m00003-m00004.md".into(),
            archive_path: "/moved/away/tier1/b2_m00003-m00004.md".into(),
            ..Block::default()
        };
        let text = String::from_utf8(s.read_archive(&b).unwrap()).unwrap();
        assert!(
            text.contains("## m00001 · user\n\n```\nthe original\n```"),
            "rendered from the originals as it was written:\n{text}"
        );
        fs::remove_dir_all(&base).unwrap();
    }
}
