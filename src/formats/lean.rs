//! Reading a few fields of a JSON line without building its tree.
//!
//! Choosing which records of a log the model saw needs a handful of short
//! fields per record (ids, links, kinds), while the records themselves are
//! mostly long texts. A [`Lean`] type reads only what it wants from a value
//! and passes over the rest unbuilt, so a planner can read every line of a
//! large log while holding little more than the log's text; the records it
//! chooses are then parsed whole, one at a time.
//!
//! A lean read takes a value as `serde_json::Value` would see it: a field of
//! the wrong kind reads as absent (as `Value::as_str` gives `None`), and of
//! a key written twice the last one counts.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// A value read for a few of its parts: each kind of JSON value it is not
/// written for reads as `Default` and is passed over.
pub(crate) trait Lean<'de>: Default {
    /// A string the text holds as it is (no escapes in it).
    fn borrowed(s: &'de str) -> Self {
        Self::string(s)
    }

    /// A string unescaped into a passing buffer: a type that keeps it
    /// copies it.
    fn string(_: &str) -> Self {
        Self::default()
    }

    fn boolean(_: bool) -> Self {
        Self::default()
    }

    fn map<A: MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Self::default())
    }

    fn list<A: SeqAccess<'de>>(mut list: A) -> Result<Self, A::Error> {
        while list.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Self::default())
    }
}

/// Reads one JSON text as `T`; syntax errors are serde_json's own, at the
/// same places a full parse finds them.
pub(crate) fn from_str<'de, T: Lean<'de>>(text: &'de str) -> serde_json::Result<T> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value = Seed::<T>::new().deserialize(&mut de)?;
    de.end()?;
    Ok(value)
}

/// The value of a map entry, read as `T`.
pub(crate) fn next_value<'de, T: Lean<'de>, A: MapAccess<'de>>(map: &mut A) -> Result<T, A::Error> {
    map.next_value_seed(Seed::new())
}

/// The next item of a list, read as `T`.
pub(crate) fn next_item<'de, T: Lean<'de>, A: SeqAccess<'de>>(
    list: &mut A,
) -> Result<Option<T>, A::Error> {
    list.next_element_seed(Seed::new())
}

/// A key of a map; `None` once the map is done.
pub(crate) fn next_key<'de, A: MapAccess<'de>>(
    map: &mut A,
) -> Result<Option<Cow<'de, str>>, A::Error> {
    map.next_key_seed(KeySeed)
}

/// A string or a boolean kept; any other value read past.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) enum Scalar<'a> {
    Str(Cow<'a, str>),
    Bool(bool),
    #[default]
    Other,
}

impl<'a> Scalar<'a> {
    /// The string, as `Value::as_str` gives it.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Scalar::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The string, taken.
    pub fn into_str(self) -> Option<Cow<'a, str>> {
        match self {
            Scalar::Str(s) => Some(s),
            _ => None,
        }
    }

    /// Whether it is `true`, as `Value::as_bool() == Some(true)`.
    pub fn is_true(&self) -> bool {
        matches!(self, Scalar::Bool(true))
    }
}

impl<'de> Lean<'de> for Scalar<'de> {
    fn borrowed(s: &'de str) -> Self {
        Scalar::Str(Cow::Borrowed(s))
    }

    fn string(s: &str) -> Self {
        Scalar::Str(Cow::Owned(s.to_owned()))
    }

    fn boolean(b: bool) -> Self {
        Scalar::Bool(b)
    }
}

struct Seed<T>(PhantomData<T>);

impl<T> Seed<T> {
    fn new() -> Self {
        Seed(PhantomData)
    }
}

impl<'de, T: Lean<'de>> DeserializeSeed<'de> for Seed<T> {
    type Value = T;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<T, D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de, T: Lean<'de>> Visitor<'de> for Seed<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, b: bool) -> Result<T, E> {
        Ok(T::boolean(b))
    }

    fn visit_i64<E>(self, _: i64) -> Result<T, E> {
        Ok(T::default())
    }

    fn visit_u64<E>(self, _: u64) -> Result<T, E> {
        Ok(T::default())
    }

    fn visit_f64<E>(self, _: f64) -> Result<T, E> {
        Ok(T::default())
    }

    fn visit_unit<E>(self) -> Result<T, E> {
        Ok(T::default())
    }

    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<T, E> {
        Ok(T::borrowed(s))
    }

    fn visit_str<E>(self, s: &str) -> Result<T, E> {
        Ok(T::string(s))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, list: A) -> Result<T, A::Error> {
        T::list(list)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        T::map(map)
    }
}

/// A map key, borrowed from the text unless it holds an escape.
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Cow<'de, str>, D::Error> {
        de.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Borrowed(s))
    }

    fn visit_str<E>(self, s: &str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Owned(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record read for two fields, as the planners read theirs.
    #[derive(Default, Debug, PartialEq)]
    struct Pick<'a> {
        object: bool,
        id: Scalar<'a>,
        flag: Scalar<'a>,
        items: Vec<Scalar<'a>>,
    }

    impl<'de> Lean<'de> for Pick<'de> {
        fn map<A: MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
            let mut out = Pick {
                object: true,
                ..Pick::default()
            };
            while let Some(key) = next_key(&mut map)? {
                match key.as_ref() {
                    "id" => out.id = next_value(&mut map)?,
                    "flag" => out.flag = next_value(&mut map)?,
                    "items" => out.items = next_value::<Items, _>(&mut map)?.0,
                    _ => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(out)
        }
    }

    #[derive(Default)]
    struct Items<'a>(Vec<Scalar<'a>>);

    impl<'de> Lean<'de> for Items<'de> {
        fn list<A: SeqAccess<'de>>(mut list: A) -> Result<Self, A::Error> {
            let mut out = Vec::new();
            while let Some(s) = next_item(&mut list)? {
                out.push(s);
            }
            Ok(Items(out))
        }
    }

    #[test]
    fn reads_what_a_value_would_give() {
        let cases = [
            r#"{"id":"a","flag":true,"items":["x",1,{"k":[]}]}"#,
            r#"{"id":5,"flag":"true","items":"no list"}"#,
            r#"{"id":"first","id":"last","big":{"deep":[1,2,{"a":"b"}]}}"#,
            r#"{"id":"esc\u00e9\"q","fl\u0061g":false}"#,
            r#"["not", "an", "object"]"#,
            r#""just a string""#,
            "null",
            "3.5",
        ];
        for text in cases {
            let value: serde_json::Value = serde_json::from_str(text).unwrap();
            let lean: Pick = from_str(text).unwrap();
            assert_eq!(lean.object, value.is_object(), "{text}");
            assert_eq!(lean.id.as_str(), value.get("id").and_then(|v| v.as_str()));
            assert_eq!(
                lean.flag.is_true(),
                value.get("flag").and_then(|v| v.as_bool()) == Some(true)
            );
            let items: Vec<Option<&str>> = lean.items.iter().map(Scalar::as_str).collect();
            let want: Vec<Option<&str>> = value
                .get("items")
                .and_then(|v| v.as_array())
                .into_iter()
                .flatten()
                .map(|v| v.as_str())
                .collect();
            assert_eq!(items, want, "{text}");
        }
    }

    #[test]
    fn syntax_errors_are_placed_as_a_full_parse_places_them() {
        for text in [
            r#"{"id":"a","flag":tru}"#,
            r#"{"id":"a" "flag":true}"#,
            r#"{"id":"a","x":[1,2}"#,
            r#"{"id":"a"} trailing"#,
            r#"{"id":"a","x":"#,
        ] {
            let full = serde_json::from_str::<serde_json::Value>(text).unwrap_err();
            let lean = from_str::<Pick>(text).unwrap_err();
            assert_eq!(
                (lean.line(), lean.column(), lean.classify()),
                (full.line(), full.column(), full.classify()),
                "{text}"
            );
            assert_eq!(lean.to_string(), full.to_string(), "{text}");
        }
    }
}
