//! Lenient parsing of the argument string of a model's `Compress` call.
//!
//! A model gets few chances to compress, and the JSON it writes is often
//! slightly off: a trailing comma, a markdown fence around it, a literal
//! newline inside a summary, the array sent as a string (providers without
//! strict tool schemas do that), or the output cut off half-way through an
//! entry. Rejecting such a call throws away good summaries, so this parser
//! repairs what it can repair without guessing and salvages the complete
//! entries of a truncated call. It never invents text: an entry that was cut
//! off is reported, not closed. Each repair it needed is named in
//! [`ParsedArgs::repairs`], so the panel can tell the model what it sent.

use serde_json::{Map, Value};
use std::fmt;

/// How much of the raw input [`ParsedArgs::raw_prefix`] keeps, in chars.
pub const RAW_PREFIX_CHARS: usize = 800;
/// How many string/fence layers are peeled before giving up: two string
/// layers and a fence is the worst seen; more is not a model being sloppy.
const MAX_PEEL_ROUNDS: usize = 4;
/// How far back a cut-off string literal is trimmed to drop a half-written
/// escape (`\u00`, a lone surrogate) before it can be decoded.
const MAX_ESCAPE_BACKOFF: usize = 12;

/// Repair: the whole input (or the content value) was a JSON string literal.
pub const REPAIR_UNWRAPPED: &str = "unwrapped string";
/// Repair: a markdown code fence around the JSON was removed.
pub const REPAIR_FENCE: &str = "stripped fence";
/// Repair: prose before the first `{` was skipped.
pub const REPAIR_LEADING_TEXT: &str = "skipped leading text";
/// Repair: text after the complete JSON value was ignored.
pub const REPAIR_TRAILING_TEXT: &str = "ignored trailing text";
/// Repair: commas before `}` or `]` were removed.
pub const REPAIR_TRAILING_COMMAS: &str = "trailing commas";
/// Repair: raw control characters inside string literals were escaped.
pub const REPAIR_NEWLINES: &str = "escaped newlines";
/// Repair: `content` was a string holding the array.
pub const REPAIR_STRINGIFIED: &str = "stringified content";
/// Repair: a missing `}` before a closing `]` was inserted.
pub const REPAIR_TAIL: &str = "tail repaired";
/// Repair: the input did not parse; complete entries were recovered one by one.
pub const REPAIR_SALVAGED: &str = "salvaged";

/// The order repairs are listed in, so the same input always reports the same list.
const REPAIR_ORDER: [&str; 9] = [
    REPAIR_UNWRAPPED,
    REPAIR_FENCE,
    REPAIR_LEADING_TEXT,
    REPAIR_TRAILING_TEXT,
    REPAIR_TRAILING_COMMAS,
    REPAIR_NEWLINES,
    REPAIR_STRINGIFIED,
    REPAIR_TAIL,
    REPAIR_SALVAGED,
];

/// One range the model asked to compress, as written; resolving the refs is
/// the caller's job, so they are kept as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompressRange {
    /// Ref of the first message (or a block id), trimmed.
    pub start: String,
    /// Ref of the last message (or a block id), trimmed.
    pub end: String,
    /// The model's summary, trimmed.
    pub summary: String,
    /// The entry's topic, else the call's top-level topic, else empty.
    pub topic: String,
    /// A raised summary length ceiling for this entry, if the model asked for one.
    pub summary_max_chars: Option<usize>,
}

/// Why parsing ended the way it did. Reported back to the model so it learns
/// what shape its call had, not just that it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseKind {
    /// Parsed (possibly after repairs) and at least one entry is valid.
    Ok,
    /// Nothing was sent: empty, blank or `null`.
    EmptyInput,
    /// Valid JSON, but not an object.
    NotObject,
    /// An object without a `content` field.
    MissingContent,
    /// `content` is neither an array nor a string holding one.
    ContentNotArray,
    /// The arguments parsed, but no entry has a start, an end and a summary.
    NoValidRanges,
    /// The JSON did not parse as a whole; complete entries were salvaged from
    /// the `content` array (usually because the output was cut off).
    Truncated,
    /// Not recognisable as a `Compress` call at all.
    MalformedJson,
}

impl ParseKind {
    /// The stable kebab-case name, used in panels and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            ParseKind::Ok => "ok",
            ParseKind::EmptyInput => "empty-input",
            ParseKind::NotObject => "not-object",
            ParseKind::MissingContent => "missing-content",
            ParseKind::ContentNotArray => "content-not-array",
            ParseKind::NoValidRanges => "no-valid-ranges",
            ParseKind::Truncated => "truncated",
            ParseKind::MalformedJson => "malformed-json",
        }
    }
}

impl fmt::Display for ParseKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The outcome of [`parse_compress_args`]. `ok` says whether there is anything
/// to apply; `kind` and `repairs` say how it arrived, which stays worth
/// reporting even when recovery succeeded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedArgs {
    /// At least one valid range was recovered; the only field to branch on.
    pub ok: bool,
    /// How the input parsed.
    pub kind: ParseKind,
    /// The valid entries, in the order written. Empty whenever `ok` is false.
    pub ranges: Vec<CompressRange>,
    /// The call's top-level topic, trimmed; empty if none.
    pub topic: String,
    /// How many entries were rejected.
    pub invalid_items: usize,
    /// One line per rejected entry, numbered from 1, e.g.
    /// `entry 2: missing endId, missing summary`.
    pub invalid_reasons: Vec<String>,
    /// The repairs the input needed, in a fixed order (see the `REPAIR_*` names).
    pub repairs: Vec<&'static str>,
    /// The first [`RAW_PREFIX_CHARS`] chars of the raw input, for logs.
    pub raw_prefix: String,
    /// Length of the raw input in chars.
    pub raw_len: usize,
}

impl ParsedArgs {
    /// Whether the input needed any repair, so the panel can mention it.
    pub fn repaired(&self) -> bool {
        !self.repairs.is_empty()
    }
}

/// Parses the raw arguments of a `Compress` call as leniently as is safe.
///
/// Peels string and fence layers, then parses the object trying the raw text,
/// trailing commas removed, raw newlines escaped, both, and a repaired tail.
/// If none parses, the complete entries of the `content` array are salvaged.
pub fn parse_compress_args(raw: &str) -> ParsedArgs {
    let mut out = ParsedArgs {
        ok: false,
        kind: ParseKind::MalformedJson,
        ranges: Vec::new(),
        topic: String::new(),
        invalid_items: 0,
        invalid_reasons: Vec::new(),
        repairs: Vec::new(),
        raw_prefix: raw.chars().take(RAW_PREFIX_CHARS).collect(),
        raw_len: raw.chars().count(),
    };
    let mut repairs = Vec::new();
    out.kind = parse_into(raw, &mut out, &mut repairs);
    out.ok = !out.ranges.is_empty();
    repairs.sort_by_key(|r| REPAIR_ORDER.iter().position(|o| o == r));
    repairs.dedup();
    out.repairs = repairs;
    out
}

type Repairs = Vec<&'static str>;
/// One element of a content array: the value, or why it could not be read.
type Slot = Result<Value, &'static str>;

/// Top-level defaults an entry inherits when it has no value of its own.
#[derive(Default)]
struct Defaults {
    topic: Option<String>,
    max_chars: Option<usize>,
}

impl Defaults {
    fn of(obj: &Map<String, Value>) -> Self {
        Defaults {
            topic: text_field(obj, &["topic"]),
            max_chars: max_chars(obj),
        }
    }
}

fn parse_into(raw: &str, out: &mut ParsedArgs, repairs: &mut Repairs) -> ParseKind {
    let (text, was_string) = peel(raw, repairs);
    if text.is_empty() || text == "null" {
        return ParseKind::EmptyInput;
    }
    if let Some((value, used)) = parse_lenient(&text) {
        repairs.extend(used);
        return match value {
            Value::Object(obj) => read_object(&obj, out, repairs),
            _ => ParseKind::NotObject,
        };
    }
    // "Here are the ranges: {...}": skip the prose, once, to the first `{`.
    let body = match text.find('{') {
        Some(at) if at > 0 && !text.starts_with('[') => &text[at..],
        _ => text.as_str(),
    };
    let skipped = body.len() < text.len();
    if skipped && let Some((Value::Object(obj), used)) = parse_lenient(body) {
        repairs.push(REPAIR_LEADING_TEXT);
        repairs.extend(used);
        return read_object(&obj, out, repairs);
    }
    if let Some(kind) = salvage_object(body, out, repairs) {
        if skipped {
            repairs.push(REPAIR_LEADING_TEXT);
        }
        return kind;
    }
    if was_string {
        ParseKind::NotObject
    } else {
        ParseKind::MalformedJson
    }
}

/// Removes enclosing string-literal and code-fence layers. The flag says the
/// last layer was a complete string literal, i.e. the top level is a string.
fn peel(raw: &str, repairs: &mut Repairs) -> (String, bool) {
    let mut text = raw.trim().to_owned();
    let mut was_string = false;
    for _ in 0..MAX_PEEL_ROUNDS {
        if let Some((inner, end)) = decode_string_prefix(&text)
            && end.is_none_or(|e| e == text.len())
        {
            was_string = end.is_some();
            text = inner.trim().to_owned();
            repairs.push(REPAIR_UNWRAPPED);
        } else if let Some(inner) = strip_fence(&text) {
            text = inner;
            repairs.push(REPAIR_FENCE);
        } else {
            break;
        }
    }
    (text, was_string)
}

/// The object parsed: read its defaults and entries.
fn read_object(obj: &Map<String, Value>, out: &mut ParsedArgs, repairs: &mut Repairs) -> ParseKind {
    let defaults = Defaults::of(obj);
    out.topic = defaults.topic.clone().unwrap_or_default();
    let (slots, salvaged) = match obj.get("content") {
        None | Some(Value::Null) => return ParseKind::MissingContent,
        Some(Value::Array(items)) => (items.iter().cloned().map(Ok).collect(), false),
        Some(Value::String(s)) => {
            repairs.push(REPAIR_STRINGIFIED);
            match content_from_string(s, repairs) {
                Some(found) => found,
                None => return ParseKind::ContentNotArray,
            }
        }
        Some(_) => return ParseKind::ContentNotArray,
    };
    add_entries(&slots, &defaults, out);
    if salvaged {
        ParseKind::Truncated
    } else if out.ranges.is_empty() {
        ParseKind::NoValidRanges
    } else {
        ParseKind::Ok
    }
}

/// Recovers the array from a stringified `content`; the flag says it had to
/// be salvaged. `None` when the string does not hold an array at all.
fn content_from_string(s: &str, repairs: &mut Repairs) -> Option<(Vec<Slot>, bool)> {
    let (text, _) = peel(s, repairs);
    if let Some((value, used)) = parse_lenient(&text) {
        let Value::Array(items) = value else {
            return None;
        };
        repairs.extend(used);
        return Some((items.into_iter().map(Ok).collect(), false));
    }
    if !text.starts_with('[') {
        return None;
    }
    repairs.push(REPAIR_SALVAGED);
    Some((salvage_array(&text), true))
}

/// Last resort for an object that does not parse: find its `content` value and
/// keep the entries that are complete. `None` if there is no `content` to find.
fn salvage_object(body: &str, out: &mut ParsedArgs, repairs: &mut Repairs) -> Option<ParseKind> {
    let (key_at, value_at) = find_content_value(body)?;
    let value = &body[value_at..];
    let mut used = vec![REPAIR_SALVAGED];
    let slots = if value.starts_with('[') {
        salvage_array(value)
    } else {
        let (inner, _) = decode_string_prefix(value)?;
        used.push(REPAIR_STRINGIFIED);
        content_from_string(&inner, &mut used)?.0
    };
    // Fields written before `content` survived the cut; close the object after them.
    let head = format!("{}\"content\":null}}", &body[..key_at]);
    let defaults = match parse_lenient(&head) {
        Some((Value::Object(obj), _)) => Defaults::of(&obj),
        _ => Defaults::default(),
    };
    out.topic = defaults.topic.clone().unwrap_or_default();
    add_entries(&slots, &defaults, out);
    repairs.extend(used);
    Some(ParseKind::Truncated)
}

/// Byte offsets of the `"content"` key of the outermost object and of its value.
fn find_content_value(body: &str) -> Option<(usize, usize)> {
    let mut lex = Lexer::default();
    let mut depth = 0usize;
    let mut literal_at = 0;
    for (i, c) in body.char_indices() {
        let was_in = lex.in_str;
        if lex.feed(c) {
            if !was_in {
                literal_at = i;
            } else if !lex.in_str && depth == 1 && &body[literal_at..=i] == "\"content\"" {
                let rest = body[i + 1..].trim_start();
                if let Some(value) = rest.strip_prefix(':') {
                    return Some((literal_at, body.len() - value.trim_start().len()));
                }
            }
            continue;
        }
        match c {
            '{' | '[' => depth += 1,
            '}' | ']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

/// Splits a (possibly cut-off) array, starting at its `[`, into its object
/// entries, parsing each on its own. An entry still open at the end of the
/// text is reported as cut off rather than guessed at.
fn salvage_array(text: &str) -> Vec<Slot> {
    let mut slots = Vec::new();
    let mut lex = Lexer::default();
    let mut depth = 0usize;
    let mut entry_at = None;
    for (i, c) in text.char_indices().skip(1) {
        if lex.feed(c) {
            continue;
        }
        match c {
            '{' | '[' => {
                if depth == 0 && c == '{' {
                    entry_at = Some(i);
                }
                depth += 1;
            }
            '}' | ']' if depth == 0 => return slots,
            '}' | ']' => {
                depth -= 1;
                if depth == 0
                    && let Some(at) = entry_at.take()
                {
                    let parsed = parse_lenient(&text[at..=i]).map(|(v, _)| v);
                    slots.push(parsed.ok_or("could not be parsed"));
                }
            }
            _ => {}
        }
    }
    if entry_at.is_some() {
        slots.push(Err("cut off before its end"));
    }
    slots
}

fn add_entries(slots: &[Slot], defaults: &Defaults, out: &mut ParsedArgs) {
    for (i, slot) in slots.iter().enumerate() {
        let entry = match slot {
            Ok(Value::Object(obj)) => read_entry(obj, defaults),
            Ok(_) => Err("not an object".to_owned()),
            Err(why) => Err((*why).to_owned()),
        };
        match entry {
            Ok(range) => out.ranges.push(range),
            Err(why) => {
                out.invalid_items += 1;
                out.invalid_reasons.push(format!("entry {}: {why}", i + 1));
            }
        }
    }
}

fn read_entry(obj: &Map<String, Value>, defaults: &Defaults) -> Result<CompressRange, String> {
    let single = text_field(obj, &["messageId", "message_id"]);
    let start = text_field(obj, &["startId", "startRef", "start_id"]).or_else(|| single.clone());
    let end = text_field(obj, &["endId", "endRef", "end_id"]).or(single);
    let summary = text_field(obj, &["summary"]);
    let (Some(start), Some(end), Some(summary)) = (&start, &end, &summary) else {
        let missing = [
            (start.is_none(), "missing startId"),
            (end.is_none(), "missing endId"),
            (summary.is_none(), "missing summary"),
        ];
        let names: Vec<&str> = missing
            .iter()
            .filter(|(m, _)| *m)
            .map(|(_, n)| *n)
            .collect();
        return Err(names.join(", "));
    };
    Ok(CompressRange {
        start: start.clone(),
        end: end.clone(),
        summary: summary.clone(),
        topic: text_field(obj, &["topic"])
            .or_else(|| defaults.topic.clone())
            .unwrap_or_default(),
        summary_max_chars: max_chars(obj).or(defaults.max_chars),
    })
}

/// The first of `keys` holding non-blank text, trimmed. A number counts as
/// its text, so `"startId": 12` reaches ref resolution and fails there with
/// a clear message instead of reading as missing.
fn text_field(obj: &Map<String, Value>, keys: &[&str]) -> Option<String> {
    keys.iter().find_map(|k| match obj.get(*k)? {
        Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_owned()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    })
}

/// `summaryMaxChars` as a whole non-negative number or a numeric string.
fn max_chars(obj: &Map<String, Value>) -> Option<usize> {
    ["summaryMaxChars", "summary_max_chars"]
        .iter()
        .find_map(|k| match obj.get(*k)? {
            // Through f64 so `30000.0` counts too; 2^53 keeps the cast exact.
            Value::Number(n) => n
                .as_f64()
                .filter(|f| (0.0..9.0e15).contains(f) && f.fract() == 0.0)
                .map(|f| f as usize),
            Value::String(s) => s.trim().parse().ok(),
            _ => None,
        })
}

/// Parses the first JSON value of `text`, trying the repairs in order from
/// least to most invasive. Returns the value and the repairs it took.
fn parse_lenient(text: &str) -> Option<(Value, Repairs)> {
    if let Some(found) = parse_value(text, &[]) {
        return Some(found);
    }
    let commas = strip_trailing_commas(text);
    let newlines = escape_raw_newlines(text);
    let both = escape_raw_newlines(&commas);
    let (had_commas, had_newlines) = (commas != text, both != commas);
    let mut tries: Vec<(&str, Repairs)> = Vec::new();
    if had_commas {
        tries.push((&commas, vec![REPAIR_TRAILING_COMMAS]));
    }
    if newlines != text {
        tries.push((&newlines, vec![REPAIR_NEWLINES]));
    }
    if had_commas && had_newlines {
        tries.push((&both, vec![REPAIR_TRAILING_COMMAS, REPAIR_NEWLINES]));
    }
    let tail = repair_tail(&both);
    if let Some(tail) = &tail {
        let mut used = vec![REPAIR_TAIL];
        used.extend(had_commas.then_some(REPAIR_TRAILING_COMMAS));
        used.extend(had_newlines.then_some(REPAIR_NEWLINES));
        tries.push((tail, used));
    }
    tries
        .into_iter()
        .find_map(|(s, used)| parse_value(s, &used))
}

/// Parses one JSON value from the start of `s`, tolerating trailing text
/// (a closing fence, a sign-off) after a complete value.
fn parse_value(s: &str, used: &[&'static str]) -> Option<(Value, Repairs)> {
    let mut stream = serde_json::Deserializer::from_str(s).into_iter::<Value>();
    let value = stream.next()?.ok()?;
    let mut used = used.to_vec();
    if !s[stream.byte_offset()..].trim().is_empty() {
        used.push(REPAIR_TRAILING_TEXT);
    }
    Some((value, used))
}

/// Decodes the string literal `s` starts with. The offset is where the literal
/// ends, `None` if the text ends first: then the part present is decoded,
/// dropping a half-written escape at the cut.
fn decode_string_prefix(s: &str) -> Option<(String, Option<usize>)> {
    if !s.starts_with('"') {
        return None;
    }
    let mut lex = Lexer::default();
    let end = s.char_indices().find_map(|(i, c)| {
        lex.feed(c);
        (!lex.in_str).then_some(i + 1)
    });
    let decode = |literal: &str| {
        serde_json::from_str::<String>(literal)
            .or_else(|_| serde_json::from_str::<String>(&escape_raw_newlines(literal)))
            .ok()
    };
    let text = match end {
        Some(e) => decode(&s[..e])?,
        None => {
            let body = &s[1..];
            let cuts = body
                .char_indices()
                .rev()
                .map(|(i, _)| i)
                .take(MAX_ESCAPE_BACKOFF);
            std::iter::once(body.len())
                .chain(cuts)
                .find_map(|cut| decode(&format!("\"{}\"", &body[..cut])))?
        }
    };
    Some((text, end))
}

/// Removes a markdown fence (```` ``` ```` or ```` ```json ````) around the text.
fn strip_fence(text: &str) -> Option<String> {
    let rest = text.strip_prefix("```")?;
    let info_len = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
        .unwrap_or(rest.len());
    let body = rest[info_len..].trim();
    let body = body.strip_suffix("```").unwrap_or(body);
    Some(body.trim().to_owned())
}

/// Removes commas that directly precede a `}` or `]`. Text inside string
/// literals is left alone, so a summary reading `"a, }"` keeps its comma.
pub fn strip_trailing_commas(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut lex = Lexer::default();
    for (i, c) in s.char_indices() {
        if !lex.feed(c) && c == ',' && s[i + 1..].trim_start().starts_with(['}', ']']) {
            continue;
        }
        out.push(c);
    }
    out
}

/// Escapes raw newlines (and other control characters) inside string
/// literals, which models emit in multi-line summaries and JSON forbids.
/// Newlines between tokens are structural whitespace and stay as they are.
pub fn escape_raw_newlines(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut lex = Lexer::default();
    for c in s.chars() {
        let after_backslash = lex.esc;
        if lex.feed(c) && c < ' ' {
            let escaped = match c {
                '\n' => "\\n".to_owned(),
                '\r' => "\\r".to_owned(),
                '\t' => "\\t".to_owned(),
                _ => format!("\\u{:04x}", u32::from(c)),
            };
            // A backslash right before the raw character already opened the escape.
            out.push_str(&escaped[usize::from(after_backslash)..]);
        } else {
            out.push(c);
        }
    }
    out
}

/// Inserts the `}` a model dropped before a closing `]`, as in
/// `[{"startId":"m1","endId":"m2","summary":"s"]`. Only that shape is fixed:
/// `None` for valid JSON, for text that is cut off, or for any other imbalance.
pub fn repair_tail(s: &str) -> Option<String> {
    if serde_json::from_str::<Value>(s).is_ok() {
        return None;
    }
    let mut out = String::with_capacity(s.len() + 2);
    let mut stack = Vec::new();
    let mut lex = Lexer::default();
    let mut inserted = false;
    for c in s.chars() {
        if !lex.feed(c) {
            match c {
                '{' | '[' => stack.push(c),
                '}' | ']' => {
                    // A `]` while an object is still open: the `}` was dropped.
                    while c == ']' && stack.last() == Some(&'{') {
                        stack.pop();
                        out.push('}');
                        inserted = true;
                    }
                    let opener = if c == '}' { '{' } else { '[' };
                    if stack.pop() != Some(opener) {
                        return None;
                    }
                }
                _ => {}
            }
        }
        out.push(c);
    }
    (inserted && stack.is_empty() && !lex.in_str).then_some(out)
}

/// Tracks whether a char-by-char scan is inside a JSON string literal, so the
/// repairs above only ever touch structure.
#[derive(Default)]
struct Lexer {
    in_str: bool,
    esc: bool,
}

impl Lexer {
    /// Feeds the next char; true if it is part of a string literal, quotes included.
    fn feed(&mut self, c: char) -> bool {
        if !self.in_str {
            self.in_str = c == '"';
            return self.in_str;
        }
        if self.esc {
            self.esc = false;
        } else if c == '\\' {
            self.esc = true;
        } else if c == '"' {
            self.in_str = false;
        }
        true
    }
}

#[cfg(test)]
#[path = "parse_args_tests.rs"]
mod tests;
