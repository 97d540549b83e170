//! Message identity by content hash.
//!
//! Host transcripts give blocks no stable id of their own, and positions shift
//! whenever something is pruned or inserted. A hash of what the block says
//! stays put, so the ref map keyed by it survives every rewrite of the view.

use std::collections::{HashMap, HashSet, hash_map};
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};

use hashbrown::HashTable;
use hashbrown::hash_table::Entry;
use sha2::{Digest, Sha256};

use super::message::{ContentType, CoreMessage, Role};
use super::name::Name;
use super::tag;

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Hashes ids for the engine's sets and maps. A turn looks every message's
/// id up in several sets; ids are content hashes (and call ids a host
/// made), so one multiply-rotate per eight bytes spreads them well, where
/// the standard SipHash costs several times as much. No defence against
/// keys chosen to collide: the worst a crafted transcript can do is slow
/// its own turn.
#[derive(Debug, Default, Clone, Copy)]
pub struct IdHasher(u64);

impl IdHasher {
    fn mix(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x517C_C1B7_2722_0A95);
    }
}

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            self.mix(u64::from_le_bytes(word.try_into().expect("eight bytes")));
        }
        // The last few bytes as the low bytes of a word, shifted in rather
        // than copied: a copy of a length not known here is a call to memcpy,
        // which cost more than the rest of hashing an id.
        let rest = words.remainder();
        if !rest.is_empty() {
            let word = rest
                .iter()
                .rev()
                .fold(0u64, |w, &b| (w << 8) | u64::from(b));
            self.mix(word);
        }
    }

    fn write_u8(&mut self, b: u8) {
        self.mix(u64::from(b));
    }

    fn finish(&self) -> u64 {
        // A product's low bits depend only on its factors' low bits, and a
        // hash table picks the bucket from the low bits: rotate the well
        // mixed high half down to them.
        self.0.rotate_left(26)
    }
}

/// The hasher the engine's id sets and maps are built with.
pub type IdHash = BuildHasherDefault<IdHasher>;

/// A set of ids (or call ids) borrowed from messages or the state.
pub type IdSet<'a> = HashSet<&'a str, IdHash>;

/// A map keyed by ids borrowed from messages or the state.
pub type IdMap<'a, V> = HashMap<&'a str, V, IdHash>;

/// Places in a list of ids, found by id: a table of eight-byte entries
/// (the place and the id's hash), where a table of the ids themselves
/// spread a long session's over more memory than the processor's caches
/// hold (the ref map's index, a turn's coverage of the blocks, the view's
/// held tool results). The list stays its owner's: each call is told the
/// id at a place.
#[derive(Debug, Default, Clone)]
pub(crate) struct Places(HashTable<(u32, u32)>);

impl Places {
    pub(crate) fn with_capacity(places: usize) -> Places {
        Places(HashTable::with_capacity(places))
    }

    pub(crate) fn reserve(&mut self, more: usize) {
        self.0.reserve(more, |&(_, h)| widen(h));
    }

    /// The place of `id`, `id_at` giving the id at each place.
    pub(crate) fn find<'s>(&self, id: &str, id_at: impl Fn(usize) -> &'s str) -> Option<usize> {
        let h = hash32(id);
        self.0
            .find(widen(h), |&(at, kept)| {
                kept == h && id_at(at as usize) == id
            })
            .map(|&(at, _)| at as usize)
    }

    /// [`Places::find`], trying `guess` first: a list looked up in its own
    /// order finds each id just after the one before, without hashing it.
    /// `id_at` gives the id at a place, `None` past the list's end.
    pub(crate) fn find_near<'s>(
        &self,
        id: &str,
        guess: usize,
        id_at: impl Fn(usize) -> Option<&'s str>,
    ) -> Option<usize> {
        if id_at(guess) == Some(id) {
            return Some(guess);
        }
        self.find(id, |at| id_at(at).expect("every place kept is in the list"))
    }

    /// The place of `id` when it has one; otherwise `next` becomes its
    /// place, and `None`.
    pub(crate) fn find_or_add<'s>(
        &mut self,
        id: &str,
        next: usize,
        id_at: impl Fn(usize) -> &'s str,
    ) -> Option<usize> {
        let h = hash32(id);
        let same = |&(at, kept): &(u32, u32)| kept == h && id_at(at as usize) == id;
        match self.0.entry(widen(h), same, |&(_, h)| widen(h)) {
            Entry::Occupied(e) => Some(e.get().0 as usize),
            Entry::Vacant(e) => {
                e.insert((next as u32, h));
                None
            }
        }
    }
}

/// An id's hash in 32 bits, as [`Places`] keeps it.
fn hash32(id: &str) -> u32 {
    let h = IdHash::default().hash_one(id);
    (h ^ (h >> 32)) as u32
}

/// The table hash of a kept [`hash32`]: its bits at both ends, since a
/// table picks a bucket from the low bits and tells entries apart by the
/// top ones.
fn widen(h: u32) -> u64 {
    (u64::from(h) << 32) | u64::from(h)
}

/// `h_` + the first 16 hex digits of sha256 over the block's role, content
/// type, call id, tool name and text. `text` must already be tag-stripped:
/// a tag in the hash would change the id every time the tag is re-rendered.
pub fn derive_id(role: Role, ct: ContentType, text: &str, call_id: &str, tool: &str) -> Name {
    let mut h = Sha256::new();
    for part in [role.as_str(), ct.as_str(), call_id, tool, text] {
        h.update(part.as_bytes());
        h.update(b"|");
    }
    let digest = h.finalize();
    let mut id = *b"h_0000000000000000";
    for (pair, b) in id[2..].chunks_exact_mut(2).zip(&digest[..8]) {
        pair[0] = HEX[usize::from(b >> 4)];
        pair[1] = HEX[usize::from(b & 15)];
    }
    Name::from_ascii(&id).expect("an id is ASCII")
}

/// Tells apart blocks that hash alike (the same command run twice gives the
/// same output). The first keeps the bare hash and later ones get `_1`, `_2`,
/// …, so an unchanged history projects to unchanged ids. Use a fresh counter
/// for every pass over a transcript.
#[derive(Debug, Default)]
pub struct ClusterCounter<'a> {
    /// How often each base came before this pass: borrowed, since a long
    /// prefix has a base for almost every block and few recur.
    earlier: HashMap<&'a str, usize, IdHash>,
    /// How often each base came so far, counting `earlier`, for the bases
    /// this pass met.
    seen: HashMap<Name, usize, IdHash>,
}

impl<'a> ClusterCounter<'a> {
    /// A counter that goes on where a pass over blocks with these ids
    /// stopped: a transcript read on from a prefix an earlier turn read
    /// numbers its repeats as a whole read would.
    pub fn resume(ids: impl IntoIterator<Item = &'a str>) -> ClusterCounter<'a> {
        let mut earlier: HashMap<&'a str, usize, IdHash> = HashMap::default();
        for id in ids {
            *earlier.entry(base_of(id)).or_insert(0) += 1;
        }
        ClusterCounter {
            earlier,
            seen: HashMap::default(),
        }
    }

    /// Makes room for `n` more bases, so numbering the blocks of a long
    /// transcript does not move its table again and again as it grows.
    pub fn reserve(&mut self, n: usize) {
        self.seen.reserve(n);
    }

    /// The id for the next occurrence of `base`.
    pub fn next(&mut self, base: Name) -> Name {
        match self.seen.entry(base) {
            hash_map::Entry::Occupied(mut seen) => {
                let n = *seen.get();
                *seen.get_mut() += 1;
                format!("{}_{n}", seen.key()).into()
            }
            hash_map::Entry::Vacant(first) => {
                let n = (self.earlier.get(first.key().as_str()).copied()).unwrap_or(0);
                let id = match n {
                    0 => first.key().clone(),
                    n => format!("{}_{n}", first.key()).into(),
                };
                first.insert(n + 1);
                id
            }
        }
    }

    /// A block's id before repeats are told apart, which
    /// [`ClusterCounter::next`] then numbers. A text block is hashed without
    /// a ref tag a host echoed back; an opaque one by `payload`, its raw
    /// form (its `text` is only a stand-in).
    pub fn base(core: &CoreMessage, payload: impl FnOnce() -> String) -> Name {
        let raw;
        let hashed = if core.opaque {
            raw = payload();
            raw.as_str()
        } else {
            tag::strip(&core.text)
        };
        derive_id(
            core.role,
            core.content_type,
            hashed,
            &core.tool_call_id,
            &core.tool_name,
        )
    }
}

/// The base of an id a counter gave: without its `_n` for a repeat.
pub fn base_of(id: &str) -> &str {
    match id.get(..18) {
        Some(base) if id.starts_with("h_") => base,
        _ => id,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_hash_as_little_endian_words_zero_padded() {
        // Each eight bytes are one word, the last ones padded with zeros.
        let words = |bytes: &[u8]| -> Vec<u64> {
            bytes
                .chunks(8)
                .map(|c| {
                    let mut w = [0u8; 8];
                    w[..c.len()].copy_from_slice(c);
                    u64::from_le_bytes(w)
                })
                .collect()
        };
        for id in [
            "",
            "h_",
            "h_0123456789abcdef",
            "h_0123456789abcdef_12",
            "call_Ab9",
        ] {
            let mut want = IdHasher::default();
            for w in words(id.as_bytes()) {
                want.mix(w);
            }
            let mut got = IdHasher::default();
            got.write(id.as_bytes());
            assert_eq!(got.finish(), want.finish(), "{id}");
        }
    }

    #[test]
    fn a_resumed_counter_numbers_repeats_as_one_pass_would() {
        let block = |text: &str| CoreMessage::text("", Role::User, text);
        let texts = ["a", "b", "a", "a", "c", "b", "a"];
        let mut whole = ClusterCounter::default();
        let ids: Vec<String> = texts
            .iter()
            .map(|t| {
                whole
                    .next(ClusterCounter::base(&block(t), String::new))
                    .to_string()
            })
            .collect();
        for cut in 0..texts.len() {
            let mut resumed = ClusterCounter::resume(ids[..cut].iter().map(String::as_str));
            for (t, id) in texts[cut..].iter().zip(&ids[cut..]) {
                let got = resumed.next(ClusterCounter::base(&block(t), String::new));
                assert_eq!(&got, id, "cut at {cut}");
            }
        }
    }

    #[test]
    fn ids_are_stable_and_short() {
        let a = derive_id(Role::User, ContentType::Text, "hello", "", "");
        assert_eq!(a, derive_id(Role::User, ContentType::Text, "hello", "", ""));
        assert!(a.starts_with("h_"));
        assert_eq!(a.len(), 18);
    }

    #[test]
    fn every_field_counts() {
        let base = derive_id(Role::User, ContentType::Text, "x", "", "");
        assert_ne!(
            base,
            derive_id(Role::Assistant, ContentType::Text, "x", "", "")
        );
        assert_ne!(
            base,
            derive_id(Role::User, ContentType::Reasoning, "x", "", "")
        );
        assert_ne!(base, derive_id(Role::User, ContentType::Text, "y", "", ""));
        assert_ne!(base, derive_id(Role::User, ContentType::Text, "x", "c", ""));
        assert_ne!(base, derive_id(Role::User, ContentType::Text, "x", "", "t"));
        // Field separation: moving a character between fields changes the id.
        assert_ne!(
            derive_id(Role::Tool, ContentType::ToolResult, "ab", "c", ""),
            derive_id(Role::Tool, ContentType::ToolResult, "b", "ca", "")
        );
    }

    #[test]
    fn repeats_get_counters() {
        let mut c = ClusterCounter::default();
        assert_eq!(c.next("h_a".into()), "h_a");
        assert_eq!(c.next("h_b".into()), "h_b");
        assert_eq!(c.next("h_a".into()), "h_a_1");
        assert_eq!(c.next("h_a".into()), "h_a_2");
    }
}
