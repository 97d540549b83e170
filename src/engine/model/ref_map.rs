//! The ref map: message id → ref, and ref → message id.
//!
//! Every turn looks every message of the history up in it, and a warm turn
//! loads it from refs.log, so it is laid out for a long session: ids and
//! refs are [`Name`]s, inline rather than strings of their own (a long id is
//! shared by both directions); and the refs noa hands out (`m00001`–`m99999`) are
//! found by number in a list, where a tree of strings was searched. Refs in
//! another form, which only a hand-edited map holds, keep a tree of their
//! own, and the two directions stay independent, as a map read from an old
//! or edited state.json may not pair them.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::ops::Deref;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, SerializeStruct, Serializer};
use serde::{Deserialize, Serialize};

use super::identity::Places;
use super::name::Name;
use super::refs::{BLOCKED, canonical_index, ref_to_index};

/// A ref as the map holds it: a [`Name`], inline for every ref noa hands
/// out and for [`BLOCKED`].
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RefName(Name);

impl RefName {
    /// The ref `r` as the map holds it.
    pub fn new(r: &str) -> RefName {
        RefName(Name::new(r))
    }

    /// `m00042` for 42, written digit by digit.
    pub fn numbered(n: u32) -> RefName {
        RefName::digits(&numbered_text(n))
    }

    /// A ref written out as `m` and five digits.
    fn digits(text: &[u8; 6]) -> RefName {
        RefName(Name::from_ascii(text).expect("a ref is ASCII"))
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl Deref for RefName {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Display for RefName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for RefName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

/// `m00042` for 42, as bytes.
fn numbered_text(n: u32) -> [u8; 6] {
    let mut text = *b"m00000";
    for (i, place) in [10_000, 1_000, 100, 10, 1].into_iter().enumerate() {
        text[i + 1] = b'0' + (n / place % 10) as u8;
    }
    text
}

/// Both directions of the ref map.
#[derive(Clone, Default)]
pub struct MessageRefs {
    /// Every known message id with its ref (or [`BLOCKED`]), in the order
    /// learned: a turn looks the history up in about that order, so its
    /// lookups read this list front to back.
    known: Vec<(Name, RefName)>,
    /// Places in `known` by id, each with its id's hash: eight bytes a
    /// message, where a table of the ids and refs themselves spread a long
    /// session's map over more memory than the processor's caches hold.
    index: Places,
    /// Ref number → message id, for refs in their five-digit form. Never
    /// longer than the highest such ref plus one.
    by_number: Vec<Option<Name>>,
    /// Refs in any other form → message id.
    by_odd: BTreeMap<String, Name>,
    /// Refs held in `by_number`.
    numbered: usize,
    /// The log of refs this map was last found to lay out as, if any.
    settled: Option<Settled>,
    /// Places in `known` whose ref may not name them back: every id learned
    /// unpaired or learned again, and every id a ref was taken from. The
    /// rest are paired, so the few unpaired ones are found without walking
    /// the map.
    loose: Vec<u32>,
}

/// A map found to lay out as a log of refs (see [`MessageRefs::settle`]).
#[derive(Clone, Copy)]
struct Settled {
    /// The log's digest, as its keeper names it.
    log: u64,
    /// Every ref numbered up to this one is as it was then.
    through: u32,
}

impl MessageRefs {
    /// Where `id` is in `known`.
    fn place(&self, id: &str) -> Option<usize> {
        self.index.find(id, |i| self.known[i].0.as_str())
    }

    /// Gives `id` the ref `r`, adding it when new; returns the id as held.
    /// `paired` when the caller then has `r` name the id.
    fn set(&mut self, id: &str, r: RefName, paired: bool) -> Name {
        self.learn(id, r, true, paired)
    }

    /// Finds `id` with one probe, adding it with the ref `r` when new; one
    /// already known takes `r` only when `replace`. `paired` when the caller
    /// then has `r` name the id. Returns the id as held.
    fn learn(&mut self, id: &str, r: RefName, replace: bool, paired: bool) -> Name {
        let Self {
            known,
            index,
            loose,
            ..
        } = self;
        match index.find_or_add(id, known.len(), |i| known[i].0.as_str()) {
            Some(at) => {
                loose.push(at as u32);
                let slot = &mut known[at];
                if replace {
                    slot.1 = r;
                }
                slot.0.clone()
            }
            None => {
                let held = Name::new(id);
                if !paired {
                    loose.push(known.len() as u32);
                }
                known.push((held.clone(), r));
                held
            }
        }
    }

    /// The ref of a message, [`BLOCKED`] included, with its place among
    /// the ids known, looked for at `guess` first: a history looked up in
    /// the order its refs were handed out finds each one just after the
    /// one before, without hashing it.
    pub fn get_near(&self, id: &str, guess: usize) -> Option<(&str, usize)> {
        let id_at = |i: usize| self.known.get(i).map(|k| k.0.as_str());
        let i = self.index.find_near(id, guess, id_at)?;
        Some((self.known[i].1.as_str(), i))
    }

    /// [`MessageRefs::usable`], looked for at `near` first (see
    /// [`MessageRefs::get_near`]), which is left just after the message
    /// when it is known.
    pub fn usable_near(&self, id: &str, near: &mut usize) -> Option<&str> {
        let (r, at) = self.get_near(id, *near)?;
        *near = at + 1;
        (r != BLOCKED).then_some(r)
    }

    /// The ref of a message, [`BLOCKED`] included.
    pub fn get(&self, id: &str) -> Option<&str> {
        self.place(id).map(|i| self.known[i].1.as_str())
    }

    /// The ref a message can be addressed by: none for unknown messages and
    /// for hard-protected ones, which are known but have no number.
    pub fn usable(&self, id: &str) -> Option<&str> {
        self.get(id).filter(|r| *r != BLOCKED)
    }

    /// The message a ref names.
    pub fn id_of(&self, r: &str) -> Option<&str> {
        match canonical_index(r) {
            Some(n) => self.by_number.get(n as usize)?.as_deref(),
            None => self.by_odd.get(r).map(|id| &**id),
        }
    }

    /// Whether a message is known (numbered or blocked).
    pub fn knows(&self, id: &str) -> bool {
        self.place(id).is_some()
    }

    /// Whether the ref numbered `n` names a message.
    pub fn has_number(&self, n: u32) -> bool {
        self.by_number.get(n as usize).is_some_and(Option::is_some)
    }

    /// Refs that name a message.
    pub fn refs(&self) -> usize {
        self.numbered + self.by_odd.len()
    }

    /// Messages known, with a ref or blocked.
    pub fn len(&self) -> usize {
        self.known.len()
    }

    /// Whether no message is known.
    pub fn is_empty(&self) -> bool {
        self.known.is_empty()
    }

    /// Room for `more` ids, and for refs numbered up to `highest`: the
    /// list by number is as long as its highest number, and one grown past
    /// its room is copied whole.
    pub fn reserve(&mut self, more: usize, highest: u32) {
        self.known.reserve(more);
        let numbers = (highest as usize + 1).saturating_sub(self.by_number.len());
        self.by_number.reserve(numbers);
        self.index.reserve(more);
    }

    /// Gives message `id` the ref `r`, both ways; a hard-protected one
    /// ([`BLOCKED`]) is known by id only.
    pub fn insert(&mut self, id: &str, r: &str) {
        let id = self.set(id, RefName::new(r), r != BLOCKED);
        if r != BLOCKED {
            self.insert_ref(r, id);
        }
    }

    /// Gives message `id` the ref numbered `n`, both ways.
    pub fn insert_numbered(&mut self, id: &str, n: u32) {
        let id = self.set(id, RefName::numbered(n), true);
        self.set_number(n, id);
    }

    /// Marks message `id` hard-protected: known, with no number.
    pub fn block(&mut self, id: &str) {
        self.set(id, RefName::new(BLOCKED), false);
    }

    /// One `ref id` line of refs.log: the ref names the id, and the id
    /// takes the ref unless it already has one (the inline part of
    /// state.json, read first, wins). Returns the ref's number when it is
    /// in its five-digit form.
    #[inline]
    pub fn add_logged(&mut self, r: &str, id: &str) -> Option<u32> {
        let id = self.learn(id, RefName::new(r), false, true);
        let n = canonical_index(r);
        match n {
            Some(n) => self.set_number(n, id),
            None => self.insert_ref(r, id),
        }
        n
    }

    /// One direction only, as a hand-edited map may hold it: id → ref.
    pub fn insert_id_only(&mut self, id: &str, r: &str) {
        self.set(id, RefName::new(r), false);
    }

    /// One direction only, as a hand-edited map may hold it: ref → id.
    pub fn insert_ref_only(&mut self, r: &str, id: &str) {
        self.insert_ref(r, id.into());
    }

    fn insert_ref(&mut self, r: &str, id: Name) {
        match canonical_index(r) {
            Some(n) => self.set_number(n, id),
            None => {
                // Refs in another form sort among the numbered ones.
                self.settled = None;
                if let Some(old) = self.by_odd.insert(r.to_string(), id) {
                    self.loosen(&old);
                }
            }
        }
    }

    fn set_number(&mut self, n: u32, id: Name) {
        if let Some(s) = &mut self.settled {
            s.through = s.through.min(n.saturating_sub(1));
        }
        let n = n as usize;
        // Refs come in number order, one more each time: pushed, not
        // resized to, which costs a call per ref.
        while self.by_number.len() <= n {
            self.by_number.push(None);
        }
        match self.by_number[n].replace(id) {
            None => self.numbered += 1,
            Some(old) => self.loosen(&old),
        }
    }

    /// Notes that a ref was taken from `id`, which may be left unpaired.
    fn loosen(&mut self, id: &str) {
        if let Some(i) = self.place(id) {
            self.loose.push(i as u32);
        }
    }

    /// Marks the map as laid out, ref by ref in [`MessageRefs::by_ref`]'s
    /// order, as the log its keeper knows by the digest `log`: the caller
    /// has checked that it does. Refs numbered later keep the mark; one
    /// given or taken again at a number keeps it only below that number.
    pub fn settle(&mut self, log: u64) {
        self.settled = self.by_odd.is_empty().then_some(Settled {
            log,
            through: u32::MAX,
        });
    }

    /// The refs numbered above `last`, in number order, when the map was
    /// settled on the log `log` and every ref numbered up to `last` is as it
    /// was then: what a save appends to that log, found without laying out
    /// the refs before it again.
    pub fn settled_after(
        &self,
        log: u64,
        last: u32,
    ) -> Option<impl Iterator<Item = (RefName, &str)>> {
        let settled = self.settled?;
        (settled.log == log && settled.through >= last).then(|| Numbered {
            ids: self.by_number.iter().skip(last as usize + 1),
            text: numbered_text(last),
        })
    }

    /// Every id with its ref, in no particular order.
    pub fn by_id(&self) -> impl Iterator<Item = (&str, &str)> {
        self.known.iter().map(|(id, r)| (&**id, r.as_str()))
    }

    /// Every ref with the id it names, in the order of the refs' text
    /// (which for five-digit refs is their number's).
    pub fn by_ref(&self) -> impl Iterator<Item = (RefName, &str)> {
        let mut numbered = Numbered {
            ids: self.by_number.iter().skip(1),
            text: *b"m00000",
        }
        .peekable();
        let mut odd = self
            .by_odd
            .iter()
            .map(|(r, id)| (RefName::new(r), &**id))
            .peekable();
        std::iter::from_fn(move || match (numbered.peek(), odd.peek()) {
            (Some(a), Some(b)) if b.0.as_str() < a.0.as_str() => odd.next(),
            (Some(_), _) => numbered.next(),
            (None, _) => odd.next(),
        })
    }

    /// The ids whose ref does not name them in return: hard-protected ones,
    /// known but unnumbered, and the strays of a hand-edited map; in no
    /// particular order.
    pub fn unpaired(&self) -> impl Iterator<Item = (&str, &str)> {
        let mut loose = self.loose.clone();
        loose.sort_unstable();
        loose.dedup();
        loose
            .into_iter()
            .map(|i| &self.known[i as usize])
            .filter(|(id, r)| {
                let back = match canonical_index(r) {
                    Some(n) => self.by_number.get(n as usize).and_then(Option::as_ref),
                    None => self.by_odd.get(r.as_str()),
                };
                back.is_none_or(|b| b != id)
            })
            .map(|(id, r)| (&**id, r.as_str()))
    }

    /// The last ref in the order of [`MessageRefs::by_ref`].
    pub fn last_ref(&self) -> Option<RefName> {
        let numbered = self.highest_numbered().map(RefName::numbered);
        let odd = self.by_odd.keys().next_back().map(|r| RefName::new(r));
        match (numbered, odd) {
            (Some(a), Some(b)) => Some(if b.as_str() > a.as_str() { b } else { a }),
            (a, b) => a.or(b),
        }
    }

    /// The highest number among refs in their five-digit form.
    fn highest_numbered(&self) -> Option<u32> {
        self.by_number
            .iter()
            .rposition(Option::is_some)
            .map(|n| n as u32)
    }

    /// The highest ref number in use (0 when none): of the refs in the
    /// order of [`MessageRefs::by_ref`], the last that reads as a ref. (A
    /// ref in another form can only make it lower; numbering skips numbers
    /// taken anyway.)
    pub fn highest_used(&self) -> u32 {
        let numbered = self.highest_numbered();
        let above = numbered.map(RefName::numbered);
        self.by_odd
            .keys()
            .rev()
            .take_while(|r| above.as_ref().is_none_or(|a| r.as_str() > a.as_str()))
            .find_map(|r| ref_to_index(r))
            .or(numbered)
            .or_else(|| self.by_odd.keys().rev().find_map(|r| ref_to_index(r)))
            .unwrap_or(0)
    }
}

/// The five-digit refs in number order, each written by counting on from
/// the one before rather than digit by digit: saving a long session's state
/// walks them all.
struct Numbered<'a, I: Iterator<Item = &'a Option<Name>>> {
    /// The ids from number 1 on.
    ids: I,
    /// The ref of the last number walked.
    text: [u8; 6],
}

impl<'a, I: Iterator<Item = &'a Option<Name>>> Iterator for Numbered<'a, I> {
    type Item = (RefName, &'a str);

    fn next(&mut self) -> Option<(RefName, &'a str)> {
        loop {
            let id = self.ids.next()?;
            for d in self.text[1..].iter_mut().rev() {
                if *d == b'9' {
                    *d = b'0';
                } else {
                    *d += 1;
                    break;
                }
            }
            if let Some(id) = id {
                return Some((RefName::digits(&self.text), id));
            }
        }
    }
}

/// Equal when they hold the same pairs both ways, whatever the order they
/// were learned in (a map loaded from disk learns its blocked ids first).
impl PartialEq for MessageRefs {
    fn eq(&self, other: &MessageRefs) -> bool {
        self.known.len() == other.known.len()
            && self.by_id().all(|(id, r)| other.get(id) == Some(r))
            && self.by_number == other.by_number
            && self.by_odd == other.by_odd
    }
}

impl Eq for MessageRefs {}

impl fmt::Debug for MessageRefs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MessageRefs")
            .field("by_raw", &self.by_id().collect::<BTreeMap<_, _>>())
            .field("by_ref", &self.by_ref().collect::<Vec<_>>())
            .finish()
    }
}

/// state.json keeps the map as two objects, `byRaw` (id → ref) and `byRef`
/// (ref → id), each in key order.
impl Serialize for MessageRefs {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        struct Sorted<I>(Vec<I>);
        impl<A: Serialize, B: Serialize> Serialize for Sorted<(A, B)> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut map = s.serialize_map(Some(self.0.len()))?;
                for (k, v) in &self.0 {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
        let mut by_raw: Vec<(&str, &str)> = self.by_id().collect();
        by_raw.sort_unstable();
        let by_ref: Vec<(String, &str)> = self
            .by_ref()
            .map(|(r, id)| (r.as_str().to_string(), id))
            .collect();
        let mut st = s.serialize_struct("MessageRefs", 2)?;
        st.serialize_field("byRaw", &Sorted(by_raw))?;
        st.serialize_field("byRef", &Sorted(by_ref))?;
        st.end()
    }
}

impl<'de> Deserialize<'de> for MessageRefs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<MessageRefs, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = MessageRefs;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object with byRaw and byRef")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MessageRefs, A::Error> {
                let mut refs = MessageRefs::default();
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "byRaw" => {
                            for (id, r) in map.next_value::<HashMap<String, String>>()? {
                                refs.insert_id_only(&id, &r);
                            }
                        }
                        "byRef" => {
                            for (r, id) in map.next_value::<HashMap<String, String>>()? {
                                refs.insert_ref_only(&r, &id);
                            }
                        }
                        _ => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                }
                Ok(refs)
            }
        }
        d.deserialize_map(Fields)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_held_inline_or_on_the_heap_with_the_same_text() {
        for r in ["m00042", BLOCKED, "", "é-ref", &"x".repeat(40)] {
            assert_eq!(RefName::new(r).as_str(), r);
        }
        assert_eq!(RefName::numbered(42).as_str(), "m00042");
        assert_eq!(RefName::numbered(99_999).as_str(), "m99999");
    }

    #[test]
    fn both_directions_share_one_id_and_count_what_they_hold() {
        let mut refs = MessageRefs::default();
        refs.insert("a", "m00002");
        refs.insert_numbered("b", 7);
        refs.block("p");
        refs.insert("odd", "M3");
        assert_eq!(refs.get("a"), Some("m00002"));
        assert_eq!(refs.usable("p"), None);
        assert_eq!(refs.get("p"), Some(BLOCKED));
        assert_eq!(refs.id_of("m00007"), Some("b"));
        assert_eq!(refs.id_of("M3"), Some("odd"));
        assert_eq!(refs.id_of("m00003"), None);
        assert!(refs.has_number(2) && !refs.has_number(3) && !refs.has_number(500));
        assert_eq!((refs.by_id().count(), refs.refs()), (4, 3));
        refs.insert("c", "m00007");
        assert_eq!(refs.refs(), 3, "a ref given again names its new message");
        assert_eq!(refs.id_of("m00007"), Some("c"));
    }

    #[test]
    fn refs_come_in_the_order_of_their_text() {
        let mut refs = MessageRefs::default();
        for (id, r) in [
            ("c", "m00010"),
            ("a", "m00002"),
            ("x", "m7"),
            ("y", "M1"),
            ("z", "zz"),
        ] {
            refs.insert(id, r);
        }
        let order: Vec<String> = refs.by_ref().map(|(r, _)| r.to_string()).collect();
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(order, sorted);
        assert_eq!(order.len(), 5);
        assert_eq!(refs.last_ref().map(|r| r.to_string()), Some("zz".into()));
        // "m7" sorts after "m00010" and reads as a ref: the last that does.
        assert_eq!(refs.highest_used(), 7);
    }

    #[test]
    fn the_highest_ref_in_use_ignores_what_does_not_read_as_one() {
        let mut refs = MessageRefs::default();
        assert_eq!(refs.highest_used(), 0);
        refs.insert("odd", "note");
        assert_eq!(refs.highest_used(), 0);
        refs.insert("b", "M00004");
        assert_eq!(refs.highest_used(), 4);
        refs.insert("a", "m00002");
        assert_eq!(refs.highest_used(), 2, "M00004 sorts before m00002");
    }

    #[test]
    fn a_logged_line_does_not_override_an_id_already_known() {
        let mut refs = MessageRefs::default();
        refs.block("p");
        refs.add_logged("m00001", "p");
        refs.add_logged("m00002", "a");
        assert_eq!(refs.get("p"), Some(BLOCKED));
        assert_eq!(refs.id_of("m00001"), Some("p"));
        assert_eq!(refs.get("a"), Some("m00002"));
    }

    /// What the map stands for: the two maps it is laid out over.
    #[derive(Default)]
    struct Model {
        by_raw: HashMap<String, String>,
        by_ref: BTreeMap<String, String>,
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(String, String),
        Numbered(String, u32),
        Block(String),
        Logged(String, String),
        IdOnly(String, String),
        RefOnly(String, String),
        /// Settles the map on a log numbered up to this.
        Settle(u32),
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        let id = "[a-d]{1,2}|h_[0-9a-f]{16}|[a-z]{30}";
        let r = prop_oneof![
            (1u32..40).prop_map(|n| format!("m{n:05}")),
            "m[0-9]{1,3}|M0*[0-9]{1,2}|zz|note|[a-z]{25}",
            Just(BLOCKED.to_string()),
        ];
        prop_oneof![
            (id, r.clone()).prop_map(|(i, r)| Op::Insert(i, r)),
            (id, 1u32..40).prop_map(|(i, n)| Op::Numbered(i, n)),
            id.prop_map(Op::Block),
            (id, r.clone()).prop_map(|(i, r)| Op::Logged(i, r)),
            (id, r.clone()).prop_map(|(i, r)| Op::IdOnly(i, r)),
            (id, r).prop_map(|(i, r)| Op::RefOnly(i, r)),
            (0u32..45).prop_map(Op::Settle),
        ]
    }

    proptest::proptest! {
        #[test]
        fn behaves_as_the_two_maps_it_stands_for(ops in proptest::collection::vec(op(), 0..60)) {
            use proptest::{prop_assert, prop_assert_eq};
            let mut refs = MessageRefs::default();
            let mut model = Model::default();
            // The refs as the map was last settled, and the log's last number.
            let mut settled: Option<(BTreeMap<String, String>, u32)> = None;
            for op in &ops {
                match op.clone() {
                    Op::Settle(last) => {
                        refs.settle(7);
                        settled = Some((model.by_ref.clone(), last));
                    }
                    Op::Insert(id, r) => {
                        refs.insert(&id, &r);
                        if r != BLOCKED {
                            model.by_ref.insert(r.clone(), id.clone());
                        }
                        model.by_raw.insert(id, r);
                    }
                    Op::Numbered(id, n) => {
                        refs.insert_numbered(&id, n);
                        let r = format!("m{n:05}");
                        model.by_ref.insert(r.clone(), id.clone());
                        model.by_raw.insert(id, r);
                    }
                    Op::Block(id) => {
                        refs.block(&id);
                        model.by_raw.insert(id, BLOCKED.into());
                    }
                    Op::Logged(id, r) => {
                        refs.add_logged(&r, &id);
                        model.by_raw.entry(id.clone()).or_insert(r.clone());
                        model.by_ref.insert(r, id);
                    }
                    Op::IdOnly(id, r) => {
                        refs.insert_id_only(&id, &r);
                        model.by_raw.insert(id, r);
                    }
                    Op::RefOnly(id, r) => {
                        refs.insert_ref_only(&r, &id);
                        model.by_ref.insert(r, id);
                    }
                }
            }
            prop_assert_eq!((refs.by_id().count(), refs.refs()), (model.by_raw.len(), model.by_ref.len()));
            for (id, r) in &model.by_raw {
                prop_assert_eq!(refs.get(id), Some(r.as_str()));
            }
            for (r, id) in &model.by_ref {
                prop_assert_eq!(refs.id_of(r), Some(id.as_str()));
            }
            let order: Vec<(String, String)> =
                refs.by_ref().map(|(r, id)| (r.to_string(), id.to_string())).collect();
            let expected: Vec<(String, String)> =
                model.by_ref.iter().map(|(r, id)| (r.clone(), id.clone())).collect();
            prop_assert_eq!(order, expected);
            prop_assert_eq!(
                refs.last_ref().map(|r| r.to_string()),
                model.by_ref.keys().next_back().cloned()
            );
            prop_assert_eq!(
                refs.highest_used(),
                model.by_ref.keys().rev().find_map(|r| ref_to_index(r)).unwrap_or(0)
            );
            // Handed over only when every ref up to the log's last is as
            // it was, and then exactly the refs after it.
            if let Some((then, last)) = settled {
                prop_assert!(refs.settled_after(8, last).is_none());
                let upto = |m: &BTreeMap<String, String>| -> Vec<(String, String)> {
                    m.iter()
                        .filter(|(r, _)| canonical_index(r).is_some_and(|n| n <= last))
                        .map(|(r, id)| (r.clone(), id.clone()))
                        .collect()
                };
                if let Some(after) = refs.settled_after(7, last) {
                    prop_assert_eq!(upto(&then), upto(&model.by_ref));
                    let after: Vec<(String, String)> =
                        after.map(|(r, id)| (r.to_string(), id.to_string())).collect();
                    let expected: Vec<(String, String)> = model
                        .by_ref
                        .iter()
                        .filter(|(r, _)| canonical_index(r).is_some_and(|n| n > last))
                        .map(|(r, id)| (r.clone(), id.clone()))
                        .collect();
                    prop_assert_eq!(after, expected);
                }
            }
            let mut unpaired: Vec<(&str, &str)> = refs.unpaired().collect();
            unpaired.sort_unstable();
            let mut strays: Vec<(&str, &str)> = model
                .by_raw
                .iter()
                .filter(|(id, r)| model.by_ref.get(*r) != Some(*id))
                .map(|(id, r)| (id.as_str(), r.as_str()))
                .collect();
            strays.sort_unstable();
            prop_assert_eq!(unpaired, strays);
            let back: MessageRefs = serde_json::from_str(&serde_json::to_string(&refs).unwrap()).unwrap();
            prop_assert_eq!(back, refs);
        }
    }

    #[test]
    fn a_settled_map_hands_over_what_came_after_its_log() {
        let mut refs = MessageRefs::default();
        refs.insert_numbered("a", 1);
        refs.insert_numbered("b", 2);
        refs.settle(9);
        refs.insert_numbered("c", 3);
        refs.block("p");
        let after = |refs: &MessageRefs, log, last| {
            refs.settled_after(log, last)
                .map(|new| new.map(|(r, id)| format!("{r} {id}")).collect::<Vec<_>>())
        };
        assert_eq!(after(&refs, 9, 2), Some(vec!["m00003 c".to_string()]));
        assert_eq!(after(&refs, 8, 2), None, "another log");
        // m00003 came after the log: one that ends there is not this one.
        assert_eq!(after(&refs, 9, 3), None);
        // A ref given again at or below the log's last: laid out again.
        refs.insert_numbered("d", 2);
        assert_eq!(after(&refs, 9, 2), None);
        assert_eq!(
            after(&refs, 9, 1),
            Some(vec!["m00002 d".into(), "m00003 c".into()])
        );
        refs.insert("e", "x7");
        assert_eq!(after(&refs, 9, 1), None, "a ref in another form");
        assert_eq!(MessageRefs::default().settled_after(9, 0).map(|_| ()), None);
    }

    #[test]
    fn state_json_form_round_trips_unpaired_directions() {
        let mut refs = MessageRefs::default();
        refs.insert("a", "m00001");
        refs.block("p");
        refs.insert_id_only("stray", "m00009");
        refs.insert_ref_only("x5", "gone");
        let json = serde_json::to_string(&refs).unwrap();
        assert_eq!(
            json,
            r#"{"byRaw":{"a":"m00001","p":"BLOCKED","stray":"m00009"},"byRef":{"m00001":"a","x5":"gone"}}"#
        );
        let back: MessageRefs = serde_json::from_str(&json).unwrap();
        assert_eq!(back, refs);
        let empty: MessageRefs = serde_json::from_str("{}").unwrap();
        assert!(empty.is_empty());
    }
}
