use super::*;
use crate::engine::model::message::{CoreMessage, Role};

fn user(id: &str) -> CoreMessage {
    CoreMessage::text(id, Role::User, format!("text of {id}"))
}

fn no_protection(_: &CoreMessage) -> bool {
    false
}

/// What [`super::assign`] did over a whole history, and the refs it holds.
struct Whole {
    new: usize,
    unnumbered: usize,
    held: Held,
}

fn assign(
    refs: &mut MessageRefs,
    messages: &[CoreMessage],
    next: u32,
    is_protected: impl Fn(&CoreMessage) -> bool,
) -> Whole {
    let mut held = Held::default();
    let a = super::assign(refs, messages, next, is_protected, &mut held);
    Whole {
        new: a.new,
        unnumbered: a.unnumbered,
        held,
    }
}

#[test]
fn index_to_ref_in_and_out_of_range() {
    assert_eq!(index_to_ref(1).as_deref(), Some("m00001"));
    assert_eq!(index_to_ref(42).as_deref(), Some("m00042"));
    assert_eq!(index_to_ref(99_999).as_deref(), Some("m99999"));
    assert_eq!(index_to_ref(0), None);
    assert_eq!(index_to_ref(100_000), None);
    for n in MIN_REF..=MAX_REF {
        let r = index_to_ref(n).unwrap();
        assert_eq!(r, format!("m{n:05}"));
        assert_eq!(ref_to_index(&r), Some(n));
    }
}

#[test]
fn ref_to_index_is_lenient_about_form() {
    for (s, n) in [
        ("m00001", 1),
        ("m00042", 42),
        ("m99999", 99_999),
        ("m1", 1),
        ("m042", 42),
        ("  M00007  ", 7),
    ] {
        assert_eq!(ref_to_index(s), Some(n), "{s:?}");
    }
}

#[test]
fn ref_to_index_rejects_non_refs() {
    for s in [
        "", "m", "m0", "m00000", "b5", "00001", "m123456", "mm1", "m1x", "m100000",
    ] {
        assert_eq!(ref_to_index(s), None, "{s:?}");
    }
}

#[test]
fn block_ids_parse_to_canonical_form() {
    for (s, want) in [
        ("b1", "b1"),
        ("b005", "b5"),
        ("5", "b5"),
        (" B12 ", "b12"),
        ("b3(T2)", "b3"),
        ("b3(t3)", "b3"),
    ] {
        assert_eq!(parse_block_id(s).as_deref(), Some(want), "{s:?}");
    }
    for s in ["", "b", "b0", "0", "m00001", "bx", "-1"] {
        assert_eq!(parse_block_id(s), None, "{s:?}");
    }
    for s in ["b1", "b9", "b10", "b99", "b100", "b999999999"] {
        assert_eq!(parse_block_id(s).as_deref(), Some(s));
    }
}

#[test]
fn boundaries_tell_messages_from_blocks() {
    let m = |s: &str| Some(Boundary::Message(s.to_string()));
    let b = |s: &str| Some(Boundary::Block(s.to_string()));
    assert_eq!(parse_boundary("m00012"), m("m00012"));
    assert_eq!(parse_boundary("m12"), m("m00012"));
    assert_eq!(parse_boundary("b5"), b("b5"));
    assert_eq!(parse_boundary("b005"), b("b5"));
    assert_eq!(parse_boundary("b3(T2)"), b("b3"));
    assert_eq!(parse_boundary("5"), b("b5"));
    for s in ["", "xyz", "m0", "b0"] {
        assert_eq!(parse_boundary(s), None, "{s:?}");
    }
}

#[test]
fn assignment_is_idempotent() {
    let msgs = [user("a"), CoreMessage::text("b", Role::Assistant, "reply")];
    let mut refs = MessageRefs::default();
    assert_eq!(assign(&mut refs, &msgs, 1, no_protection).new, 2);
    let before = refs.clone();
    let next = refs.highest_used() + 1;
    assert_eq!(assign(&mut refs, &msgs, next, no_protection).new, 0);
    assert_eq!(refs, before);
}

#[test]
fn refs_survive_growth_around_them() {
    let mut refs = MessageRefs::default();
    assign(&mut refs, &[user("a")], 1, no_protection);
    let ra = refs.get("a").unwrap().to_string();
    let next = refs.highest_used() + 1;
    assign(
        &mut refs,
        &[user("x"), user("a"), user("y")],
        next,
        no_protection,
    );
    assert_eq!(refs.get("a"), Some(ra.as_str()));
    assert_ne!(refs.get("x"), Some(ra.as_str()));
    assert_ne!(refs.get("y"), Some(ra.as_str()));
}

#[test]
fn blocked_messages_use_no_number() {
    let call = CoreMessage::tool_call("p", "t1", "Compress", "{}");
    let mut refs = MessageRefs::default();
    assign(&mut refs, &[call, user("a")], 1, |m| {
        m.tool_name == "Compress"
    });
    assert_eq!(refs.get("p"), Some(BLOCKED));
    assert_eq!(refs.get("a"), Some("m00001"));
    assert_eq!(refs.id_of(BLOCKED), None);
    assert!(!refs.by_ref().any(|(_, v)| v == "p"));
}

#[test]
fn synthetic_and_empty_ids_are_skipped() {
    let summary = CoreMessage::text(
        "noa_summary_b1",
        Role::User,
        "[Compressed conversation section]",
    );
    let nudge = CoreMessage::text(NUDGE_ID, Role::User, "compress");
    let empty = CoreMessage::text("", Role::User, "x");
    let mut refs = MessageRefs::default();
    assign(
        &mut refs,
        &[summary, nudge, empty, user("a")],
        1,
        no_protection,
    );
    assert_eq!(refs.by_id().count(), 1);
    assert_eq!(refs.get("a"), Some("m00001"));
}

#[test]
fn occupied_numbers_are_skipped() {
    let mut refs = MessageRefs::default();
    refs.insert("old", "m00002");
    assign(&mut refs, &[user("new"), user("newer")], 1, no_protection);
    assert_eq!(refs.get("new"), Some("m00001"));
    assert_eq!(refs.get("newer"), Some("m00003"));
    assert_eq!(refs.id_of("m00002"), Some("old"));
}

#[test]
fn highest_used_ignores_blocked() {
    let mut refs = MessageRefs::default();
    for (raw, r) in [
        ("a", "m00003"),
        ("b", BLOCKED),
        ("c", "m00007"),
        ("d", BLOCKED),
    ] {
        refs.insert(raw, r);
    }
    assert_eq!(refs.highest_used(), 7);
    assert_eq!(MessageRefs::default().highest_used(), 0);
}

#[test]
fn exhaustion_stops_quietly() {
    let mut refs = MessageRefs::default();
    for i in 1..=MAX_REF {
        let r = index_to_ref(i).unwrap();
        refs.insert(&format!("filler{i}"), &r);
    }
    let done = assign(
        &mut refs,
        &[user("late"), user("later")],
        MAX_REF,
        no_protection,
    );
    assert_eq!((done.new, done.unnumbered), (0, 2));
    assert!(!refs.knows("late"));
}

#[test]
fn near_exhaustion_hands_out_the_last_ref() {
    let mut refs = MessageRefs::default();
    for i in 1..MAX_REF {
        let r = index_to_ref(i).unwrap();
        let raw = if i == 1 {
            "old".to_string()
        } else {
            format!("filler{i}")
        };
        refs.insert(&raw, &r);
    }
    let n = assign(
        &mut refs,
        &[user("old"), user("new1"), user("new2")],
        MAX_REF,
        no_protection,
    );
    assert_eq!((n.new, n.unnumbered), (1, 1));
    assert!(n.held.holds("m00001") && n.held.holds("m99999"));
    assert_eq!(refs.get("old"), Some("m00001"));
    assert_eq!(refs.get("new1"), Some("m99999"));
}

#[test]
fn only_the_five_digit_form_is_canonical() {
    for n in [1, 42, 99_999] {
        let r = index_to_ref(n).unwrap();
        assert_eq!(canonical_index(&r), Some(n));
    }
    for r in [
        "m00000", "m1", "M00001", "m000001", " m00001", "m0000a", "b00001", "m",
    ] {
        assert_eq!(canonical_index(r), None, "{r}");
    }
}

#[test]
fn assign_holds_the_refs_a_lookup_of_each_message_gives() {
    let mut refs = MessageRefs::default();
    refs.insert("old", "m00007");
    refs.insert_id_only("edited", "m7x");
    refs.block("kept out");
    let history = [
        user("a"),
        user("old"),
        user("edited"),
        user("kept out"),
        user("p"),
        user("a"),
        user("b"),
    ];
    let assigned = assign(&mut refs, &history, 8, |m| m.id == "p");
    assert_eq!(assigned.new, 2);
    assert_eq!(assigned.held, Held::of(&refs, &history));
    for (r, held) in [
        ("m00007", true),
        ("m00008", true),
        ("m00009", true),
        ("m7x", true),
        ("m00010", false),
        (BLOCKED, false),
    ] {
        assert_eq!(assigned.held.holds(r), held, "{r}");
    }
}
