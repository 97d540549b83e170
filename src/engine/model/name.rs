//! Short texts that are copied far more often than they are written: message
//! ids, call ids, tool names and refs.
//!
//! A turn holds every message of a long session at least twice (the
//! transcript's blocks and the flat history), so a `String` per id and per
//! tool name was an allocation, and a page of memory touched, for every copy.
//! A [`Name`] of up to 22 bytes (every id noa derives, every ref, every tool
//! name) is held inline in the 24 bytes a `String` takes; a longer one (a
//! provider's call id) is shared, so its copies cost a count, not a copy.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::sync::Arc;

use serde::de::{Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// The longest text held inline.
const INLINE: usize = 22;

/// A short text, inline or shared (see the module docs). Compares and
/// hashes as its text.
#[derive(Clone)]
pub struct Name(Repr);

#[derive(Clone)]
enum Repr {
    /// `len` bytes of UTF-8, padded with zeros.
    Inline {
        len: u8,
        text: [u8; INLINE],
    },
    Shared(Arc<str>),
}

impl Name {
    /// `s`, inline when it fits.
    pub fn new(s: &str) -> Name {
        if s.len() > INLINE {
            return Name(Repr::Shared(s.into()));
        }
        let mut text = [0; INLINE];
        text[..s.len()].copy_from_slice(s.as_bytes());
        Name(Repr::Inline {
            len: s.len() as u8,
            text,
        })
    }

    /// `text` inline, when it is ASCII short enough: a ref written digit by
    /// digit, say.
    pub fn from_ascii(text: &[u8]) -> Option<Name> {
        if text.len() > INLINE || !text.is_ascii() {
            return None;
        }
        let mut inline = [0; INLINE];
        inline[..text.len()].copy_from_slice(text);
        Some(Name(Repr::Inline {
            len: text.len() as u8,
            text: inline,
        }))
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            // Checked again on every use, this cost more than the lookups
            // names are made for.
            // SAFETY: `Inline` is private to this type and made only by
            // `new`, from a whole `&str`, and by `from_ascii`, from ASCII:
            // its first `len` bytes are UTF-8.
            Repr::Inline { len, text } => unsafe {
                std::str::from_utf8_unchecked(&text[..*len as usize])
            },
            Repr::Shared(s) => s,
        }
    }
}

impl Default for Name {
    fn default() -> Name {
        Name::new("")
    }
}

impl Deref for Name {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for Name {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl From<&str> for Name {
    fn from(s: &str) -> Name {
        Name::new(s)
    }
}

impl From<&String> for Name {
    fn from(s: &String) -> Name {
        Name::new(s)
    }
}

impl From<String> for Name {
    fn from(s: String) -> Name {
        if s.len() > INLINE {
            return Name(Repr::Shared(s.into()));
        }
        Name::new(&s)
    }
}

impl PartialEq for Name {
    fn eq(&self, other: &Name) -> bool {
        match (&self.0, &other.0) {
            // Padded with zeros, so the same text is the same bytes: a
            // fixed compare, where the texts' would call out to memcmp.
            (Repr::Inline { len, text }, Repr::Inline { len: l, text: t }) => len == l && text == t,
            _ => self.as_str() == other.as_str(),
        }
    }
}

impl Eq for Name {}

/// In the order of the text, as [`Borrow<str>`] requires: maps keyed by
/// names are looked up by `&str`.
impl Ord for Name {
    fn cmp(&self, other: &Name) -> std::cmp::Ordering {
        match (&self.0, &other.0) {
            // Padded with zeros, two texts order as their padded bytes
            // (read as big-endian words), then as their lengths: a text
            // that ends where the other goes on pads with the least byte.
            // A few instructions, where the texts' would call out to
            // memcmp: maps keyed by names compare them at every level.
            (Repr::Inline { len, text }, Repr::Inline { len: l, text: t }) => {
                (inline_words(text).cmp(&inline_words(t))).then(len.cmp(l))
            }
            _ => self.as_str().cmp(other.as_str()),
        }
    }
}

/// The bytes of an inline name as two big-endian words, which order as
/// the bytes do.
fn inline_words(text: &[u8; INLINE]) -> (u128, u64) {
    let (head, tail) = text.split_at(16);
    let mut last = [0u8; 8];
    last[..INLINE - 16].copy_from_slice(tail);
    (
        u128::from_be_bytes(head.try_into().expect("16 bytes")),
        u64::from_be_bytes(last),
    )
}

impl PartialOrd for Name {
    fn partial_cmp(&self, other: &Name) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Hash for Name {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl PartialEq<str> for Name {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Name {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for Name {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<Name> for String {
    fn eq(&self, other: &Name) -> bool {
        self == other.as_str()
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl Serialize for Name {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Name {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Name, D::Error> {
        struct Text;
        impl Visitor<'_> for Text {
            type Value = Name;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            // Taken as `&str`, so a name short enough is never a `String` first.
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Name, E> {
                Ok(Name::new(s))
            }
            fn visit_string<E: serde::de::Error>(self, s: String) -> Result<Name, E> {
                Ok(Name::from(s))
            }
        }
        d.deserialize_str(Text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    proptest::proptest! {
        #[test]
        fn names_order_and_compare_as_their_texts(
            a in "[a\\x00-\\x02m0-9_é]{0,26}",
            b in "[a\\x00-\\x02m0-9_é]{0,26}",
        ) {
            let (x, y) = (Name::new(&a), Name::new(&b));
            proptest::prop_assert_eq!(x.cmp(&y), a.cmp(&b));
            proptest::prop_assert_eq!(x == y, a == b);
            let prefix = &a[..a.floor_char_boundary(a.len() / 2)];
            proptest::prop_assert_eq!(x.cmp(&Name::new(prefix)), a.as_str().cmp(prefix));
        }
    }

    #[test]
    fn short_names_are_inline_and_long_ones_shared() {
        let short = Name::new("h_0123456789abcdef");
        assert!(matches!(short.0, Repr::Inline { len: 18, .. }));
        let long = Name::from("toolu_0116Hyi5v8ut7Ffb7d8qV1Sc".to_string());
        let copy = long.clone();
        match (&long.0, &copy.0) {
            (Repr::Shared(a), Repr::Shared(b)) => assert!(Arc::ptr_eq(a, b)),
            _ => panic!("a long name is shared"),
        }
        assert_eq!(Name::new(&"x".repeat(22)).len(), 22);
        assert!(matches!(Name::new(&"x".repeat(23)).0, Repr::Shared(_)));
        assert_eq!(std::mem::size_of::<Name>(), std::mem::size_of::<String>());
        assert_eq!(Name::from_ascii(b"m00042").unwrap(), "m00042");
        assert_eq!(Name::from_ascii("é".as_bytes()), None);
        assert_eq!(Name::from_ascii(&[b'x'; 23]), None);
    }

    #[test]
    fn a_name_is_its_text() {
        let texts = ["", "m00001", "Read", "é∑ unicode ✓", &"long ".repeat(10)];
        for t in texts {
            let n = Name::new(t);
            assert_eq!(n.as_str(), t);
            assert_eq!(n, t);
            assert_eq!(n.to_string(), t);
            assert_eq!(format!("{n:?}"), format!("{t:?}"));
        }
        let mut by_name = HashMap::new();
        by_name.insert(Name::new("call_1"), 1);
        assert_eq!(by_name.get("call_1"), Some(&1));
    }

    #[test]
    fn names_travel_as_strings() {
        let n: Name = serde_json::from_str("\"h_1\"").unwrap();
        assert_eq!(n, "h_1");
        let escaped: Name = serde_json::from_str("\"a\\nb\"").unwrap();
        assert_eq!(escaped, "a\nb");
        assert_eq!(serde_json::to_string(&n).unwrap(), "\"h_1\"");
    }
}
