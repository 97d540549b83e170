//! Reading a JSONL log a piece at a time, so the file's text and the
//! messages built from it are never all held at once.

use std::fs;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use super::{HowRead, Loaded, Reader};
use crate::formats::{self, Format, HostMessage, PieceReader, ReadAgain, ReadError, TextFrom};
use crate::store::StoreError;
use crate::store::TranscriptDigest;
use crate::store::set_aside::{
    SetApart, Setter, let_go_in_transcript, set_aside_from, set_aside_read,
};

/// How many bytes of a transcript of `size` bytes read in pieces are read
/// at a time: a sixteenth of it, from half a megabyte to 4 MB. A piece is
/// read while the one before is parsed, and held until it is, so a few
/// large pieces would keep much of a short log in flight; a long log read
/// in small pieces pays for many more reads and hand-overs between threads.
fn piece_size(size: usize) -> usize {
    (size / 16).clamp(1 << 19, 4 << 20)
}

enum PieceError {
    Read(ReadError),
    Io(io::Error),
}

/// A file read in pieces.
struct Pieces {
    reader: PieceReader,
    /// As [`HowRead::mark`].
    mark: Option<(u64, u64, u64)>,
    /// The warning for an unfinished last line left for the next read.
    held: Option<String>,
}

/// One piece of a log: whole lines, or the rest of the file.
struct Piece {
    bytes: Vec<u8>,
    /// The file's last piece.
    whole: bool,
}

/// Reads the next piece of `file` into `buf`, with room for `left` more
/// bytes at most: up to `piece_size` bytes, ending where a line does. A line
/// longer than what is held is read on until it ends; what follows the
/// piece's last line stays in `buf` for the next. The piece is read into
/// `spare` when given (a piece let go, emptied).
fn next_piece(
    file: &mut fs::File,
    buf: &mut Vec<u8>,
    (piece_size, left): (usize, usize),
    spare: Option<String>,
) -> io::Result<Piece> {
    if let Some(spare) = spare {
        let mut spare = spare.into_bytes();
        spare.extend_from_slice(buf);
        *buf = spare;
    }
    loop {
        // Room for the next piece and no more: a short Claude Code log's
        // pieces are held as read.
        make_room(buf, piece_size.min(left) + 1);
        let read = (&mut *file).take(piece_size as u64).read_to_end(buf)?;
        let whole = read < piece_size;
        let end = match memchr::memrchr(b'\n', buf) {
            _ if whole => buf.len(),
            Some(at) => at + 1,
            None => continue,
        };
        let rest = buf.split_off(end);
        let bytes = std::mem::replace(buf, rest);
        return Ok(Piece { bytes, whole });
    }
}

/// What a read in pieces has seen of the file so far.
#[derive(Default)]
struct Seen {
    /// The bytes' digest, when the read leaves a mark.
    digest: TranscriptDigest,
    /// Bytes read.
    length: u64,
    /// The last byte read.
    last: Option<u8>,
    /// Lines read.
    lines: usize,
    /// As [`Pieces::held`].
    held: Option<String>,
}

impl Seen {
    /// The text of `piece`, its bytes counted (and digested when the read
    /// leaves a `mark`); the last piece's unfinished line is held back.
    /// `None` when the log must be read whole: a NUL byte, bytes that are
    /// not UTF-8, or a lone surrogate, which a whole read warns of and
    /// leaves no read cache of text that is not the file's (a byte-order
    /// mark is only blanked).
    fn text_of(&mut self, name: &str, piece: Piece, mark: bool) -> Option<String> {
        let mut bytes = piece.bytes;
        if piece.whole {
            let from = match self.length {
                0 => TextFrom::LogStart,
                _ => TextFrom::MidLog,
            };
            self.held = formats::hold_back_unfinished(name, &mut bytes, from, self.lines + 1);
        }
        self.lines += formats::newlines(&bytes);
        if mark {
            self.digest.update(&bytes);
        }
        self.length += bytes.len() as u64;
        self.last = bytes.last().copied().or(self.last);
        text_from(name, bytes)
    }
}

/// `bytes` of a log read in pieces as text; `None` for a NUL byte, bytes
/// that are not UTF-8, or a lone surrogate (see [`Seen::text_of`]).
fn text_from(name: &str, bytes: Vec<u8>) -> Option<String> {
    if memchr::memchr(0, &bytes).is_some() {
        return None;
    }
    simdutf8::basic::from_utf8(&bytes).ok()?;
    // SAFETY: the bytes were just checked to be UTF-8.
    let mut text = unsafe { String::from_utf8_unchecked(bytes) };
    if formats::repaired(name, &mut text).is_some() {
        return None;
    }
    Some(text)
}

/// The transcript, for a Claude Code log's pieces read again to be built
/// (see [`PieceReader::read_again`]): each read as the first read took it.
struct ReadBack(Mutex<fs::File>);

impl ReadAgain for ReadBack {
    fn read_again(&self, at: u64, len: usize, into: &mut String) -> bool {
        let mut bytes = std::mem::take(into).into_bytes();
        bytes.clear();
        make_room(&mut bytes, len);
        let mut file = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let read = file.seek(SeekFrom::Start(at)).is_ok()
            && (&mut *file).take(len as u64).read_to_end(&mut bytes).ok() == Some(len);
        drop(file);
        match read.then(|| text_from("", bytes)).flatten() {
            Some(text) => {
                *into = text;
                true
            }
            None => false,
        }
    }
}

/// A transcript opened for a read in pieces.
struct Opened {
    file: fs::File,
    /// Its size in bytes.
    size: usize,
    /// Whether the read leaves a mark for a read cache (its digest).
    mark: bool,
}

/// Where a read in pieces sets long outputs aside, and what it set aside.
struct Aside<'a> {
    /// The directory the words file is made in; none when nothing is set
    /// aside.
    dir: Option<&'a Path>,
    /// What was set aside, filled in as the words are written.
    apart: Arc<Mutex<SetApart>>,
}

impl Reader<'_> {
    /// Reads a JSONL chat, Anthropic or Claude Code log a piece at a time
    /// (see [`formats::read_in_pieces`]), its bytes digested as they pass
    /// when `mark` asks for a read cache: the file's text and the messages
    /// built from it are never all held at once. `None` when the log must
    /// be read whole: stdin, a Codex rollout or a document, a file that
    /// cannot be opened, a NUL byte or bytes that are not UTF-8 (the whole
    /// read reports each of these with its place, or reads past them as the
    /// options ask).
    pub(super) fn load_in_pieces(
        &self,
        mark: bool,
        aside: Option<&Path>,
    ) -> Result<Option<Loaded>, StoreError> {
        let path = self.path;
        if path.as_os_str() == "-" || path.is_dir() {
            return Ok(None);
        }
        let Ok(file) = fs::File::open(path) else {
            return Ok(None);
        };
        let name = path.display().to_string();
        let size = file.metadata().map_or(0, |m| m.len() as usize);
        let apart = Arc::new(Mutex::new(SetApart::default()));
        let aside = aside.filter(|_| size >= set_aside_from());
        // The state dir the set-aside file is made in, when the read makes
        // it: a read that fails leaves it as it found it.
        let made = aside.filter(|dir| !dir.exists());
        // Words set aside that lie in the transcript are read back from it.
        let transcript = aside.and_then(|_| file.try_clone().ok());
        let opened = Opened { file, size, mark };
        let read = self.read_set_aside(name, opened, Aside { dir: aside, apart });
        let read = read.map(|loaded| {
            loaded.map(|mut loaded| {
                if let (Some(words), Some(file)) = (&mut loaded.read.words, transcript) {
                    words.reading_transcript(loaded.path.display().to_string(), file);
                }
                loaded
            })
        });
        if let Some(dir) = made
            && !matches!(read, Ok(Some(_)))
        {
            let _ = fs::remove_dir(dir);
        }
        read
    }

    /// [`Reader::load_in_pieces`] of the opened file, setting its long
    /// outputs aside as `aside` says.
    fn read_set_aside(
        &self,
        name: String,
        opened: Opened,
        aside: Aside,
    ) -> Result<Option<Loaded>, StoreError> {
        // A Claude Code log's messages are built by `finish`, once every
        // piece is in: the read is shown going on until then.
        let done = self.hooks.reading(&name, opened.size);
        let setting = aside.dir.map(|dir| (dir, Arc::clone(&aside.apart)));
        let let_go = || self.hooks.let_go();
        // A Claude Code log's outputs that will be set aside and lie in the
        // transcript are let go as their records are built, not once all
        // are: else they stay beside the pieces not yet built, and make the
        // read's peak.
        let built: &dyn Fn(&mut HostMessage) = match aside.dir {
            Some(_) => &let_go_in_transcript,
            None => &|_| {},
        };
        let read = self
            .read_pieces(opened, &name, setting)
            .map(|pieces| pieces.map(|p| (p.reader.finish(&let_go, built), p.mark, p.held)));
        done();
        let read = read.map_err(|e| match e {
            PieceError::Read(e) => StoreError::Transcript(e),
            PieceError::Io(source) => StoreError::TranscriptIo {
                path: self.path.to_path_buf(),
                error: source,
            },
        })?;
        let Some((transcript, mark, held)) = read else {
            return Ok(None);
        };
        // A log that changed between its two reads is read whole.
        let mut transcript = match transcript {
            Err(ReadError::Changed { .. }) => return Ok(None),
            read => read?,
        };
        let mut apart =
            std::mem::take(&mut *(aside.apart.lock()).unwrap_or_else(PoisonError::into_inner));
        // A log whose words could not be set aside as it was built has them
        // set aside now.
        if let Some(dir) = aside.dir
            && apart.words.is_none()
            && matches!(transcript.format, Format::ClaudeCode | Format::Codex)
        {
            apart = set_aside_read(&mut transcript.messages, dir).unwrap_or_default();
        }
        // Words let go as they were built that could not be set aside after
        // all (no file for the others): the transcript is read whole.
        let withheld = |m: &HostMessage| m.cores.iter().any(|c| c.withheld.is_some());
        if apart.words.is_none() && transcript.messages.iter().any(withheld) {
            return Ok(None);
        }
        // Once the outputs set aside now are let go too, or their pages
        // (most of a Claude Code log's words) stay with the process through
        // the turn.
        self.hooks.let_go();
        let read = HowRead {
            mark,
            withheld: apart.at,
            words: apart.words,
            ..HowRead::default()
        };
        let mut loaded = self.locate(&name, transcript, read)?;
        loaded.held = held;
        Ok(Some(loaded))
    }

    /// The pieces of the `opened` file read into a [`PieceReader`], its
    /// bytes digested if it asks for a read cache; `None` when it must be
    /// read whole.
    fn read_pieces(
        &self,
        opened: Opened,
        name: &str,
        mut aside: Option<(&Path, Arc<Mutex<SetApart>>)>,
    ) -> Result<Option<Pieces>, PieceError> {
        let Opened {
            mut file,
            size,
            mark,
        } = opened;
        // A conversation a leaf chose is not the one a turn without it
        // reads on from: it leaves no read cache.
        let mark = mark && self.options.leaf.is_none();
        let mut reader = None;
        let mut failed = None;
        let mut buf = Vec::new();
        let mut seen = Seen::default();
        let piece_size = piece_size(size);
        loop {
            let left = size.saturating_sub(seen.length as usize);
            let spare = reader.as_mut().and_then(PieceReader::spare);
            let piece = next_piece(&mut file, &mut buf, (piece_size, left), spare)
                .map_err(PieceError::Io)?;
            let whole = piece.whole;
            let Some(text) = seen.text_of(name, piece, mark) else {
                return Ok(None);
            };
            let r = match &mut reader {
                Some(r) => r,
                None => {
                    match self.piece_reader((name, &file), (&text, whole), aside.take(), piece_size)
                    {
                        Some(r) => reader.insert(r),
                        None => return Ok(None),
                    }
                }
            };
            // After a bad line the rest is only looked through for a NUL
            // byte or bytes that are not UTF-8: a whole read reports those
            // first.
            if failed.is_none()
                && let Err(e) = r.read(text)
            {
                failed = Some(e);
            }
            if whole {
                break;
            }
        }
        if let Some(e) = failed {
            return Err(PieceError::Read(e));
        }
        let Some(reader) = reader else {
            return Ok(None);
        };
        // A cache is left only of whole lines, as a whole read leaves one.
        let mark = (mark && seen.last == Some(b'\n'))
            .then(|| (seen.length, reader.lines() as u64, seen.digest.finish()));
        let held = seen.held;
        Ok(Some(Pieces { reader, mark, held }))
    }

    /// The reader of a log whose first piece is `head` (`whole` when it is
    /// the whole log), with the leaf the options name and setting long
    /// outputs aside in `aside` when it can, reading pieces of `file` again
    /// when it needs them (a long Claude Code log's); `None` when the log
    /// must be read whole. The words set aside go to the writing thread a quarter
    /// of a piece at a time: a short log's in smaller batches, since all
    /// it holds at its peak is a few pieces and batches, and a long log's
    /// in larger ones, since one more hand-over a quarter megabyte cost a
    /// long chat log's first turn a tenth more.
    fn piece_reader(
        &self,
        (name, file): (&str, &fs::File),
        (head, whole): (&str, bool),
        aside: Option<(&Path, Arc<Mutex<SetApart>>)>,
        piece_size: usize,
    ) -> Option<PieceReader> {
        let options = self.options;
        let mut r = formats::read_in_pieces(options.format, name, head, whole, options.bad_lines)?;
        if let Some(leaf) = &options.leaf {
            r.choose_leaf(leaf);
        }
        if let Ok(file) = file.try_clone() {
            r.read_again(Box::new(ReadBack(Mutex::new(file))));
        }
        let setter = aside
            .filter(|_| r.may_set_aside())
            .and_then(|(dir, a)| Setter::new(dir, a, piece_size / 4));
        if let Some(setter) = setter {
            r.set_aside(Box::new(setter));
        }
        Some(r)
    }
}

/// Gives `buf` room for `more` bytes and no more than it needs, new room
/// backed with pages at once (see [`prefault`]); room it had is left as it
/// is, its pages already the process's.
fn make_room(buf: &mut Vec<u8>, more: usize) {
    let room = buf.capacity();
    buf.reserve_exact(more);
    if buf.capacity() != room {
        prefault(buf);
    }
}

/// Has the kernel back the spare room of `buf` with pages in one call,
/// where `read` filling it would take a page fault at each of its 4 KB
/// pages (a thousand a piece, and faults are dear on a virtual machine).
/// It costs no memory, since every page is filled anyway.
fn prefault(buf: &mut Vec<u8>) {
    #[cfg(target_os = "linux")]
    {
        const PAGE: usize = 4096;
        let spare = buf.spare_capacity_mut();
        let start = (spare.as_ptr() as usize).next_multiple_of(PAGE);
        let end = (spare.as_ptr() as usize + spare.len()) & !(PAGE - 1);
        if end > start {
            // SAFETY: the range lies within `buf`'s own allocation, and the
            // advice only brings its pages in (zeroed where none was
            // there): no byte anyone reads changes. A kernel without it
            // (before 5.14) refuses, which leaves the faults as they were.
            unsafe {
                libc::madvise(
                    start as *mut libc::c_void,
                    end - start,
                    libc::MADV_POPULATE_WRITE,
                );
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = buf;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A piece read again is made text as the first read made it (a
    /// byte-order mark blanked), into the room the piece before took; a
    /// stretch the file no longer holds whole is not read.
    #[test]
    fn a_piece_is_read_again_as_it_was_read_or_not_at_all() {
        let dir = std::env::temp_dir().join(format!("noa-read-back-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("log.jsonl");
        let log = "\u{FEFF}{\"a\":1}\n{\"b\":2}\n{\"c\":3}\n";
        fs::write(&path, log).unwrap();
        let back = ReadBack(Mutex::new(fs::File::open(&path).unwrap()));
        let mut text = String::from("what the buffer held before");
        assert!(back.read_again(0, 11, &mut text));
        assert_eq!(text, "   {\"a\":1}\n");
        assert!(back.read_again(19, 8, &mut text));
        assert_eq!(text, "{\"c\":3}\n");
        fs::write(&path, &log[..20]).unwrap();
        assert!(!back.read_again(19, 8, &mut text));
        fs::remove_dir_all(&dir).unwrap();
    }
}
