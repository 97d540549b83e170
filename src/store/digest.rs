//! Digests that tell bytes unchanged from bytes changed: of the logs beside
//! state.json, of the read cache and its words, and of a transcript, whose
//! prefix every warm turn proves unchanged by reading it again.
//!
//! None is meant to resist someone forging a collision; each must tell any
//! edit, cut or extension of the bytes it was taken of. The logs' digests
//! are noa's own ([`Digest`]): state.json records them. What only the read
//! cache holds is digested with xxh3 ([`CacheDigest`]).

use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// A 64-bit digest of `bytes`, at memory speed: four lanes of
/// multiply-rotate over eight-byte words.
pub fn digest(bytes: &[u8]) -> u64 {
    let mut d = Digest::default();
    d.update(bytes);
    d.finish()
}

const K: [u64; 4] = [
    0x9E37_79B9_7F4A_7C15,
    0xC2B2_AE3D_27D4_EB4F,
    0x1656_67B1_9E37_79F9,
    0x85EB_CA77_C2B2_AE63,
];

/// [`digest`] taken a piece at a time, so bytes can be checked while they
/// stream past and the digest of more go on from there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Digest {
    lanes: [u64; 4],
    len: u64,
    pending: Vec<u8>,
}

impl Default for Digest {
    fn default() -> Digest {
        Digest {
            lanes: K,
            len: 0,
            pending: Vec::with_capacity(32),
        }
    }
}

impl Digest {
    /// Takes in the next bytes.
    pub fn update(&mut self, mut bytes: &[u8]) {
        self.len += bytes.len() as u64;
        if !self.pending.is_empty() {
            let take = (32 - self.pending.len()).min(bytes.len());
            self.pending.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if self.pending.len() < 32 {
                return;
            }
            let chunk = std::mem::take(&mut self.pending);
            self.mix(&chunk);
            self.pending = chunk;
            self.pending.clear();
        }
        let mut chunks = bytes.chunks_exact(32);
        for chunk in &mut chunks {
            self.mix(chunk);
        }
        self.pending.extend_from_slice(chunks.remainder());
    }

    fn mix(&mut self, chunk: &[u8]) {
        for (lane, (k, word)) in self
            .lanes
            .iter_mut()
            .zip(K.iter().zip(chunk.chunks_exact(8)))
        {
            let w = u64::from_le_bytes(word.try_into().expect("eight bytes"));
            *lane = (*lane ^ w).wrapping_mul(*k).rotate_left(31);
        }
    }

    /// The digest of everything taken in so far.
    pub fn finish(&self) -> u64 {
        let mut h = self.len;
        for (lane, k) in self.lanes.iter().zip(K) {
            h = (h ^ lane).wrapping_mul(k).rotate_left(27);
        }
        for &b in &self.pending {
            h = (h ^ u64::from(b)).wrapping_mul(K[0]).rotate_left(23);
        }
        h ^ (h >> 29)
    }
}

/// The 64-bit xxh3 digest of `bytes`: of the read cache's words, and each
/// piece of a transcript's.
pub fn cache_digest(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}

/// [`cache_digest`] taken a piece at a time.
#[derive(Clone, Default)]
pub struct CacheDigest(xxhash_rust::xxh3::Xxh3Default);

impl CacheDigest {
    /// Takes in the next bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The digest of everything taken in so far.
    pub fn finish(&self) -> u64 {
        self.0.digest()
    }
}

impl std::fmt::Debug for CacheDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CacheDigest({:016x})", self.finish())
    }
}

impl PartialEq for CacheDigest {
    fn eq(&self, other: &CacheDigest) -> bool {
        self.finish() == other.finish()
    }
}

impl Eq for CacheDigest {}

/// How many bytes of a transcript each of its pieces' digests takes in: a
/// megabyte, so that a long prefix is shared out finely between threads,
/// and each piece is read in reads of [`READ`] bytes.
const PIECE: u64 = 1 << 20;

/// The bytes a piece is read in at a time: a buffer that stays in the
/// core's own cache while it is digested, where one of a megabyte would
/// spill out of it and be read back from memory.
const READ: usize = 128 << 10;

/// The digest of a transcript's bytes: the [`Digest`] of each megabyte
/// from its start (the last one as far as it goes), and the digest of
/// those in order. Taken a megabyte at a time, the prefix a warm turn
/// proves unchanged is shared out between the threads free to read it
/// ([`PrefixDigest`]), so a turn does not wait on one core while the other
/// sits idle. As it streams past, it is taken piece by
/// piece all the same, so a first turn digests what it reads as it reads
/// it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TranscriptDigest {
    /// The digests of the whole pieces so far, in order.
    pieces: CacheDigest,
    /// The piece being taken in.
    piece: CacheDigest,
    /// How many bytes of it.
    piece_len: u64,
}

impl TranscriptDigest {
    /// Takes in the next bytes.
    pub fn update(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let room = PIECE - self.piece_len;
            let take = usize::try_from(room).map_or(bytes.len(), |r| r.min(bytes.len()));
            self.piece.update(&bytes[..take]);
            self.piece_len += take as u64;
            bytes = &bytes[take..];
            if self.piece_len == PIECE {
                let whole = std::mem::take(&mut self.piece);
                self.piece_len = 0;
                self.pieces.update(&whole.finish().to_le_bytes());
            }
        }
    }

    /// The digest of everything taken in so far.
    pub fn finish(&self) -> u64 {
        let mut all = self.pieces.clone();
        all.update(&self.piece.finish().to_le_bytes());
        all.finish()
    }
}

/// [`TranscriptDigest`] of `bytes` at once.
pub fn transcript_digest(bytes: &[u8]) -> u64 {
    let mut d = TranscriptDigest::default();
    d.update(bytes);
    d.finish()
}

/// The [`TranscriptDigest`] of a file's first bytes, its pieces taken by
/// every thread that calls [`PrefixDigest::help`], each reading its own at
/// their offset: a warm turn starts one thread on it, and the turn's own
/// thread helps once it has projected, so neither core waits on the other.
#[derive(Debug)]
pub struct PrefixDigest {
    file: File,
    /// How many bytes are digested.
    length: u64,
    /// The next piece to take.
    next: AtomicU64,
    /// Each piece's digest once taken.
    done: Mutex<Vec<Option<CacheDigest>>>,
    /// Set when a read failed or the file ended early, or when the digest
    /// is no longer wanted: the pieces left are not taken.
    failed: AtomicBool,
}

impl PrefixDigest {
    /// The digest of the first `length` bytes of `file`, none taken yet.
    pub fn new(file: File, length: u64) -> PrefixDigest {
        let pieces = usize::try_from(length / PIECE + 1).unwrap_or(usize::MAX);
        PrefixDigest {
            file,
            length,
            next: AtomicU64::new(0),
            done: Mutex::new(vec![None; pieces]),
            failed: AtomicBool::new(false),
        }
    }

    /// Takes pieces until none is left, or the digest failed or was
    /// stopped; the pieces other threads took may still be being read.
    pub fn help(&self) {
        let pieces = self.length / PIECE + 1;
        let mut buf = vec![0u8; READ];
        while !self.failed.load(Ordering::Relaxed) {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= pieces {
                return;
            }
            let start = i * PIECE;
            match self.piece(start, (start + PIECE).min(self.length), &mut buf) {
                Some(d) => {
                    let mut done = self.done.lock().unwrap_or_else(PoisonError::into_inner);
                    done[i as usize] = Some(d);
                }
                None => self.stop(),
            }
        }
    }

    /// The [`CacheDigest`] of the bytes from `start` to `end`.
    fn piece(&self, start: u64, end: u64, buf: &mut [u8]) -> Option<CacheDigest> {
        let mut d = CacheDigest::default();
        let mut at = start;
        while at < end {
            let want = usize::try_from(end - at).map_or(buf.len(), |n| n.min(buf.len()));
            match read_at(&self.file, &mut buf[..want], at) {
                Ok(0) | Err(_) => return None,
                Ok(n) => {
                    d.update(&buf[..n]);
                    at += n as u64;
                }
            }
        }
        Some(d)
    }

    /// Stops the digest: the pieces left are not taken.
    pub fn stop(&self) {
        self.failed.store(true, Ordering::Relaxed);
    }

    /// The digest, to go on from, once every thread that helped is done;
    /// `None` when a piece could not be read or the digest was stopped.
    pub fn finish(&self) -> Option<TranscriptDigest> {
        if self.failed.load(Ordering::Relaxed) {
            return None;
        }
        let done = std::mem::take(&mut *self.done.lock().unwrap_or_else(PoisonError::into_inner));
        let (last, whole) = done.split_last()?;
        let mut pieces = CacheDigest::default();
        for d in whole {
            pieces.update(&d.as_ref()?.finish().to_le_bytes());
        }
        Some(TranscriptDigest {
            pieces,
            piece: last.clone()?,
            piece_len: self.length - whole.len() as u64 * PIECE,
        })
    }
}

/// Reads from `file` at `at` without moving its offset, once more when a
/// signal cut the read short: a transcript's handle is shared between the
/// threads that digest it and read words from it.
pub(crate) fn read_at(file: &File, buf: &mut [u8], at: u64) -> io::Result<usize> {
    loop {
        match read_once_at(file, buf, at) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            read => return read,
        }
    }
}

#[cfg(unix)]
fn read_once_at(file: &File, buf: &mut [u8], at: u64) -> io::Result<usize> {
    std::os::unix::fs::FileExt::read_at(file, buf, at)
}

/// Every read names its offset, so the one each read moves on Windows is
/// never relied on.
#[cfg(windows)]
fn read_once_at(file: &File, buf: &mut [u8], at: u64) -> io::Result<usize> {
    std::os::windows::fs::FileExt::seek_read(file, buf, at)
}

/// Elsewhere a transcript is never read at an offset: its digest fails,
/// and a warm turn reads it whole.
#[cfg(not(any(unix, windows)))]
fn read_once_at(_: &File, _: &mut [u8], _: u64) -> io::Result<usize> {
    Err(io::ErrorKind::Unsupported.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_sees_every_byte_and_the_length() {
        let base: Vec<u8> = (0..1000u32).map(|i| (i * 7 % 251) as u8).collect();
        let d = digest(&base);
        for at in [0, 1, 31, 32, 500, 998, 999] {
            let mut changed = base.clone();
            changed[at] ^= 1;
            assert_ne!(digest(&changed), d, "byte {at}");
        }
        assert_ne!(digest(&base[..999]), d);
        assert_eq!(digest(&base), d);
    }

    /// How a streamed digest takes bytes in and says what it stands for.
    type Stream<D> = (fn(&mut D, &[u8]), fn(&D) -> u64);

    /// Streams `bytes` into a new `D` in pieces ending at each of `ends`,
    /// checking after each that it stands for all it was given.
    fn assert_streams<D: Default>(
        bytes: &[u8],
        ends: &[usize],
        (update, finish): Stream<D>,
        whole: fn(&[u8]) -> u64,
    ) {
        let mut d = D::default();
        let mut at = 0;
        for &end in ends {
            update(&mut d, &bytes[at..end]);
            assert_eq!(finish(&d), whole(&bytes[..end]), "up to {end}");
            at = end;
        }
    }

    #[test]
    fn the_digest_taken_in_pieces_is_the_digest_of_the_whole() {
        let bytes: Vec<u8> = (0..500u32).map(|i| (i * 13 % 256) as u8).collect();
        for ends in [
            vec![0, 500],
            vec![7, 31, 32, 33, 200, 500],
            vec![1, 2, 3, 64, 499, 500],
        ] {
            assert_streams(&bytes, &ends, (Digest::update, Digest::finish), digest);
        }
    }

    /// `len` bytes that do not repeat from one piece to the next.
    fn bytes(len: usize) -> Vec<u8> {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[test]
    fn a_transcript_digest_is_the_same_however_its_bytes_stream_in() {
        let mb = PIECE as usize;
        let all = bytes(3 * mb + 12_345);
        let stream: Stream<TranscriptDigest> = (TranscriptDigest::update, TranscriptDigest::finish);
        for ends in [
            vec![all.len()],
            vec![1, mb - 1, mb, mb + 1, 2 * mb, all.len()],
            vec![3 * mb, all.len()],
            vec![7, 2 * mb + 100, all.len()],
        ] {
            assert_streams(&all, &ends, stream, transcript_digest);
        }
    }

    #[test]
    fn a_transcript_digest_sees_every_piece_and_the_length() {
        let mb = PIECE as usize;
        let all = bytes(2 * mb + 100);
        let d = transcript_digest(&all);
        for at in [0, mb - 1, mb, 2 * mb, 2 * mb + 99] {
            let mut changed = all.clone();
            changed[at] ^= 1;
            assert_ne!(transcript_digest(&changed), d, "byte {at}");
        }
        // Whole pieces swapped, a piece's length cut off or added.
        let swapped = [&all[mb..2 * mb], &all[..mb], &all[2 * mb..]].concat();
        assert_ne!(transcript_digest(&swapped), d);
        assert_ne!(
            transcript_digest(&all[..2 * mb]),
            transcript_digest(&all[..2 * mb + 1])
        );
        assert_ne!(transcript_digest(&all[..mb]), transcript_digest(&all[..0]));
    }

    #[cfg(unix)]
    fn file_of(bytes: &[u8]) -> File {
        let mut f = tempfile();
        io::Write::write_all(&mut f, bytes).unwrap();
        f
    }

    /// A file of its own in the temp dir, gone once closed (unlinked at once).
    #[cfg(unix)]
    fn tempfile() -> File {
        let path = std::env::temp_dir().join(format!(
            "noa-digest-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let f = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        f
    }

    #[cfg(unix)]
    #[test]
    fn a_prefix_digested_by_several_threads_is_the_prefix_streamed() {
        let mb = PIECE as usize;
        let all = bytes(5 * mb + 4321);
        let file = file_of(&all);
        for length in [0, 1, mb, 3 * mb + 17, all.len()] {
            for helpers in [1, 2, 4] {
                let prefix = PrefixDigest::new(file.try_clone().unwrap(), length as u64);
                std::thread::scope(|s| {
                    for _ in 0..helpers {
                        s.spawn(|| prefix.help());
                    }
                });
                let mut d = prefix.finish().expect("every piece read");
                let mut streamed = TranscriptDigest::default();
                streamed.update(&all[..length]);
                assert_eq!(d, streamed, "{length} bytes, {helpers} threads");
                // It goes on from there as the stream would.
                d.update(b"more");
                streamed.update(b"more");
                assert_eq!(d.finish(), streamed.finish());
            }
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_prefix_longer_than_its_file_or_stopped_has_no_digest() {
        let file = file_of(&bytes(2 * PIECE as usize));
        let longer = PrefixDigest::new(file.try_clone().unwrap(), 2 * PIECE + 1);
        longer.help();
        assert_eq!(longer.finish(), None);
        let stopped = PrefixDigest::new(file, PIECE + 5);
        stopped.stop();
        stopped.help();
        assert_eq!(stopped.finish(), None);
    }
}
