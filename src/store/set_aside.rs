//! Long tool outputs a first turn of a long transcript sets aside on disk
//! as it reads, so their words are never all held at once.
//!
//! Held whole, a long transcript's words are most of what a first turn
//! holds while it projects. The outputs a projection can decide on by
//! their length, tally and ends alone (see
//! [`may_withhold`]) need not be held. Those
//! the transcript holds as one JSON string
//! ([`ContentBlock::words_at`](crate::formats::ContentBlock::words_at)), nearly
//! all, are only let go: they are read back from the transcript, and the
//! read cache points to them there. A chat or Anthropic log hands each one,
//! as its block is built, to a thread that takes its base id and writes
//! the words of the others to a file of the process's own ([`Setter`]); a
//! Claude Code log or a rollout, whose messages are built once every piece
//! is in, hands them over once its ids are given, and the turn projects
//! while they are written ([`set_aside_read`]). The turn then goes on as a
//! warm turn does with the outputs its read cache kept back: the view's few
//! are read back before it goes out, and the read cache the turn leaves
//! copies those in the file from it in order, a megabyte at a time.

use std::num::{NonZeroU32, NonZeroU64};
use std::path::Path;
use std::sync::mpsc::{self, SyncSender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use super::{AsideFile, IN_TRANSCRIPT, WITHHELD_MIN, WordsFile};
use crate::engine::tokens::{Ends, Tally};
use crate::engine::{
    ClusterCounter, ContentType, CoreMessage, Facts, Tokenizer, may_withhold, may_withhold_knowing,
    may_withhold_once_read,
};
use crate::formats::{HostMessage, SetAside, Taken};

/// The size from which a transcript's long outputs are set aside: below
/// it, a thread and a file of their own cost more than the few megabytes
/// held; from it on, setting aside takes no longer than holding (the words
/// are counted on the writing thread, and those the transcript holds as
/// one string are not written) and halves the peak. `NOA_SET_ASIDE_FROM`
/// (bytes) moves it: 0 sets every transcript's aside.
pub fn set_aside_from() -> usize {
    std::env::var("NOA_SET_ASIDE_FROM")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(4 << 20)
}

/// Sets aside the long outputs of `messages`, a log read whole with its ids
/// given: a Claude Code log's or a rollout's, whose messages are built
/// once every piece is in (and a Claude Code message may take blocks from
/// records far after its first). The words go to a file in `dir` on a
/// thread of their own while the turn goes on to project; whatever reads
/// them back waits for it (see [`WordsFile`]). Those let go as they were
/// built ([`let_go_in_transcript`]) are set aside where they lie. `None`
/// when there is nothing to set aside or no file to set it in: every word
/// where it was, but for those let go as they were built, which are then
/// nowhere the turn can read them from.
pub fn set_aside_read(messages: &mut [HostMessage], dir: &Path) -> Option<SetApart> {
    let taken = |c: &CoreMessage| c.withheld.is_some() || sets_aside(c, || c.counted.facts());
    let cores = || messages.iter().flat_map(|m| &m.cores);
    if !cores().any(taken) {
        return None;
    }
    let file = AsideFile::create(dir).ok()?;
    // Words that lie in the transcript as one string are not written: the
    // transcript is where they are read back from.
    let (mut at, mut words, mut end) = (Vec::new(), Vec::new(), 0);
    let mut spanned = Vec::new();
    for (i, (core, words_at)) in with_places(messages).filter(|(_, (c, _))| taken(c)) {
        let len = core.text.len();
        if let Some(words_at) = words_at {
            at.push((i, IN_TRANSCRIPT | words_at.get()));
            spanned.push(i);
            continue;
        }
        // Where the words will start: after those before and its digest.
        at.push((i, end + 8));
        end += 8 + len as u64;
        words.push(core.let_go());
    }
    match file.write_later(words) {
        Ok(words) => {
            let mut spanned = spanned.into_iter().peekable();
            for (i, (core, _)) in with_places(messages) {
                if spanned.next_if_eq(&i).is_some() && core.withheld.is_none() {
                    core.let_go();
                }
            }
            Some(SetApart {
                at,
                words: Some(words),
            })
        }
        Err((_, words)) => {
            let written = at.iter().filter(|(_, o)| o & IN_TRANSCRIPT == 0);
            let mut words = written.map(|&(i, _)| i).zip(words).peekable();
            for (i, (core, _)) in with_places(messages) {
                if let Some((_, text)) = words.next_if(|(j, _)| *j == i) {
                    core.hold(text);
                }
            }
            None
        }
    }
}

/// Every block's core of `messages`, with where its words lie in the
/// transcript when that is known.
fn with_places(
    messages: &mut [HostMessage],
) -> impl Iterator<Item = (usize, (&mut CoreMessage, Option<NonZeroU64>))> {
    (messages.iter_mut())
        .flat_map(|m| {
            let HostMessage { cores, blocks, .. } = m;
            cores.iter_mut().zip(blocks.iter().map(|b| b.words_at))
        })
        .enumerate()
}

/// Lets go of the words of `m`'s outputs that [`set_aside_read`] will set
/// aside and that lie in the transcript as one string (read back from it),
/// once its blocks are hashed: a Claude Code log's message as it is built,
/// so that its words are not all held at once.
pub fn let_go_in_transcript(m: &mut HostMessage) {
    for (core, b) in m.cores.iter_mut().zip(&m.blocks) {
        if b.words_at.is_some()
            && core.withheld.is_none()
            && sets_aside(core, || core.counted.facts())
        {
            core.let_go();
        }
    }
}

/// Whether `c`'s words are set aside: an output a warm turn's read cache
/// would keep back, decided on by its length, tally and ends alone.
/// `facts` are asked only of a long enough tool output, since learning
/// them reads the words.
fn sets_aside(c: &CoreMessage, facts: impl FnOnce() -> Facts) -> bool {
    may_set_aside(c) && may_withhold_knowing(c, facts(), c.text.len(), Tokenizer::Estimate)
}

/// What [`sets_aside`] asks that can be told without reading the words.
fn may_set_aside(c: &CoreMessage) -> bool {
    let len = c.text.len();
    // An opaque block's text is a stand-in: its id is hashed from its JSON.
    !c.opaque
        && c.content_type == ContentType::ToolResult
        && len >= WITHHELD_MIN
        && may_withhold_once_read(c, len, Tokenizer::Estimate)
}

/// What was set aside, once the log is read: where each block's words lie
/// in the file, by the block's place, and the file.
#[derive(Debug, Default)]
pub struct SetApart {
    /// Each block set aside, by its place among the log's blocks, with
    /// where its words start in the words file.
    pub at: Vec<(usize, u64)>,
    /// The words file, once written.
    pub words: Option<WordsFile>,
}

/// A block taken, on its way to the writing thread: its place, and where
/// its words lie in the transcript when they need not be written.
type Offered = (usize, CoreMessage, Option<NonZeroU64>);

/// What the writing thread did with each block, and where its words lie
/// when they were set aside.
type Written = Vec<(Taken, Option<u64>)>;

/// The [`SetAside`] a reader hands its blocks to.
pub struct Setter {
    to: Option<SyncSender<Vec<Offered>>>,
    /// Blocks taken and not sent yet: they go `batch_bytes` of words at a
    /// time, where one at a time the two threads spent more on waking each
    /// other.
    batch: Vec<Offered>,
    bytes: usize,
    batch_bytes: usize,
    writing: Option<JoinHandle<(Written, Option<WordsFile>)>>,
    /// Where the caller finds what was set aside once the log is read.
    apart: Arc<Mutex<SetApart>>,
}

impl Setter {
    /// A setter writing to a new file in `dir`, handing the words over
    /// `batch_bytes` at a time; `None` when the file cannot be made.
    /// `apart` receives what was set aside.
    pub fn new(dir: &Path, apart: Arc<Mutex<SetApart>>, batch_bytes: usize) -> Option<Setter> {
        let file = AsideFile::create(dir).ok()?;
        Some(Setter::writing_to(file, apart, batch_bytes))
    }

    fn writing_to(file: AsideFile, apart: Arc<Mutex<SetApart>>, batch_bytes: usize) -> Setter {
        // A few megabytes in flight at most: a slow disk holds the reader
        // back rather than the words piling up.
        let (to, taken) = mpsc::sync_channel::<Vec<Offered>>(2);
        let writing = std::thread::spawn(move || write(file, taken));
        Setter {
            to: Some(to),
            batch: Vec::new(),
            bytes: 0,
            batch_bytes,
            writing: Some(writing),
            apart,
        }
    }

    /// Sends the blocks taken since the last batch to the writer. A writer
    /// gone (it cannot have ended before it is told to: it panicked) is
    /// the process's end: its panic is passed on at `finish`.
    fn send(&mut self) {
        let batch = std::mem::take(&mut self.batch);
        self.bytes = 0;
        if let Some(to) = &self.to
            && !batch.is_empty()
            && to.send(batch).is_err()
        {
            self.to = None;
        }
    }
}

/// Takes in the blocks `taken` brings, a batch at a time: what a read of
/// each one's words learns (its count, facts, ends and base), and its words
/// written to `file`. The words of a block that may not be withheld after
/// all (they hold a marker), of a batch that cannot be written and of every
/// block after it are given back.
fn write(mut file: AsideFile, taken: mpsc::Receiver<Vec<Offered>>) -> (Written, Option<WordsFile>) {
    let mut written: Written = Vec::new();
    let mut failed = false;
    for batch in taken {
        let learned: Vec<(Taken, bool)> = (batch.iter()).map(|(at, m, _)| learn(*at, m)).collect();
        let words: Vec<&str> = (batch.iter().zip(&learned))
            .filter(|((_, _, words_at), (_, kept))| *kept && words_at.is_none())
            .map(|((_, m, _), _)| m.text.as_str())
            .collect();
        let placed = match failed {
            false => file.put(&words).ok(),
            true => None,
        };
        failed = placed.is_none();
        let mut placed = placed.into_iter().flatten();
        for ((_, m, words_at), (mut taken, kept)) in batch.into_iter().zip(learned) {
            let place = match (kept, words_at) {
                (false, _) => None,
                (true, Some(at)) => Some(IN_TRANSCRIPT | at.get()),
                (true, None) => placed.next(),
            };
            if place.is_none() {
                (taken.ends, taken.words) = (None, Some(m.text));
            }
            written.push((taken, place));
        }
    }
    let words = (written.iter().any(|(_, place)| place.is_some())).then(|| file.into_words());
    (written, words)
}

/// What a read of the words of `m`, the `at`th block, learns, and whether
/// they may be withheld.
fn learn(at: usize, m: &CoreMessage) -> (Taken, bool) {
    // The ends of words with a CJK character are read with their tally.
    let (ends, tally) = match m.text.is_ascii() {
        true => (None, Tally::ascii(m.text.len())),
        false => {
            let (ends, tally) = Ends::with_tally(&m.text);
            ((tally.cjk() > 0).then(|| Box::new(ends)), tally)
        }
    };
    m.counted.learn_tallied(&m.text, tally);
    let kept = may_withhold(m, m.text.len(), Tokenizer::Estimate);
    let ends = ends.filter(|_| kept);
    let taken = Taken {
        at,
        base: ClusterCounter::base(m, String::new),
        counted: m.counted.clone(),
        ends,
        words: None,
    };
    (taken, kept)
}

impl SetAside for Setter {
    fn offer(&mut self, at: usize, core: &mut CoreMessage, words_at: Option<NonZeroU64>) {
        // Decided on without reading the words: the writing thread reads
        // them, once, for their count, facts, ends and base, while this one
        // goes on building.
        if self.to.is_none() || !may_set_aside(core) {
            return;
        }
        let text = std::mem::take(&mut core.text);
        let len = text.len();
        core.withheld = u32::try_from(len).ok().and_then(NonZeroU32::new);
        let taken = CoreMessage {
            text,
            ..core.without_text()
        };
        self.batch.push((at, taken, words_at));
        self.bytes += len;
        if self.bytes >= self.batch_bytes {
            self.send();
        }
    }

    fn finish(&mut self) -> Vec<Taken> {
        self.send();
        self.to = None;
        let Some(writing) = self.writing.take() else {
            return Vec::new();
        };
        let (written, words) = writing
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e));
        let mut apart = self.apart.lock().unwrap_or_else(PoisonError::into_inner);
        apart.words = words;
        (written.into_iter())
            .map(|(taken, place)| {
                if let Some(at) = place {
                    apart.at.push((taken.at, at));
                }
                taken
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::{self, BadLines, Transcript};

    /// A chat log whose tool outputs are long enough to be set aside, some
    /// of them twice over (their ids then count repeats), one in five with
    /// CJK characters; every third one in parts, which the transcript does
    /// not hold as one string.
    fn log() -> String {
        let mut log = String::new();
        for i in 0..400 {
            let call = format!("call_{i}");
            let file = if i % 5 == 0 { "文件" } else { "file" };
            let output = format!("line {} of the {file} \"é\"\n", i % 7).repeat(20);
            let content = match i % 3 {
                0 => serde_json::json!([{"type": "text", "text": output}]),
                _ => output.into(),
            };
            log.push_str(&format!(
                "{}\n{}\n",
                serde_json::json!({"role": "assistant", "content": null, "tool_calls": [{"id": call, "type": "function", "function": {"name": "Read", "arguments": "{}"}}]}),
                serde_json::json!({"role": "tool", "tool_call_id": call, "content": content}),
            ));
        }
        log
    }

    /// `log` read in two pieces, its blocks offered to `setter` if any.
    fn read(log: &str, setter: Option<Setter>) -> Transcript {
        let cut = log[..log.len() / 2].rfind('\n').unwrap() + 1;
        let mut r = formats::read_in_pieces(None, "t.jsonl", &log[..cut], false, BadLines::Fail)
            .expect("a chat log reads in pieces");
        if let Some(s) = setter {
            r.set_aside(Box::new(s));
        }
        r.read(log[..cut].to_string()).unwrap();
        r.read(log[cut..].to_string()).unwrap();
        r.finish(&|| {}, &|_| {}).unwrap()
    }

    /// Each block's id, text, length of words let go and their ends.
    type Core = (
        String,
        String,
        Option<std::num::NonZeroU32>,
        Option<Box<Ends>>,
    );

    fn cores(t: &Transcript) -> Vec<Core> {
        (t.messages.iter().flat_map(|m| &m.cores))
            .map(|c| (c.id.to_string(), c.text.clone(), c.withheld, c.ends.clone()))
            .collect()
    }

    #[test]
    fn words_set_aside_read_back_as_they_were_with_the_same_ids() {
        let dir = std::env::temp_dir().join(format!("noa-aside-{}", std::process::id()));
        let apart = Arc::new(Mutex::new(SetApart::default()));
        let setter = Setter::new(&dir, Arc::clone(&apart), 1 << 20).unwrap();
        let (whole, aside) = (read(&log(), None), read(&log(), Some(setter)));
        let apart = std::mem::take(&mut *apart.lock().unwrap());
        let transcript = dir.join("t.jsonl");
        std::fs::write(&transcript, log()).unwrap();
        let mut words = apart.words.unwrap();
        words.reading_transcript("t.jsonl".into(), std::fs::File::open(&transcript).unwrap());
        assert_eq!(apart.at.len(), 400);
        let mut in_transcript = 0;
        for ((whole, aside), (at, offset)) in cores(&whole)
            .into_iter()
            .zip(cores(&aside))
            .skip(1)
            .step_by(2)
            .zip(apart.at.iter().map(|&(i, o)| (i, o)))
        {
            assert_eq!(whole.0, aside.0, "block {at}");
            assert_eq!(aside.1, "");
            let ends = whole.1.contains('文').then(|| Ends::of(&whole.1));
            assert_eq!(aside.3.as_deref(), ends.as_ref(), "block {at}");
            // One output in three is in parts: only those are written.
            let parts = at / 2 % 3 == 0;
            assert_eq!(offset & IN_TRANSCRIPT == 0, parts, "block {at}");
            in_transcript += usize::from(!parts);
            let len = aside.2.unwrap().get() as usize;
            assert_eq!(words.read(&[(offset, len)]).unwrap(), [whole.1]);
        }
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(in_transcript, 266);
    }

    #[test]
    fn words_that_hold_a_marker_are_given_back_counted() {
        let dir = std::env::temp_dir().join(format!("noa-aside-marked-{}", std::process::id()));
        let apart = Arc::new(Mutex::new(SetApart::default()));
        let setter = Setter::new(&dir, Arc::clone(&apart), 1 << 20).unwrap();
        let marked = format!("{} {}", "x".repeat(5_000), "[truncated for context space");
        let log = log().replacen("line 0 of the 文件", &marked, 1);
        let (whole, aside) = (read(&log, None), read(&log, Some(setter)));
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(cores(&aside)[1], cores(&whole)[1]);
        let output = |t: &Transcript| t.messages[1].cores[0].counted.facts();
        assert!(!output(&aside).unmarked);
        assert_eq!(output(&aside), output(&whole));
        assert_eq!(apart.lock().unwrap().at.len(), 399);
    }

    #[test]
    fn words_that_cannot_be_written_stay_where_they_were() {
        let full = std::fs::OpenOptions::new().write(true).open("/dev/full");
        let Ok(full) = full else {
            return;
        };
        let apart = Arc::new(Mutex::new(SetApart::default()));
        let setter = Setter::writing_to(AsideFile::over(full), Arc::clone(&apart), 1 << 20);
        let (whole, aside) = (read(&log(), None), read(&log(), Some(setter)));
        // Words the transcript holds as one string need no writing: the
        // rest come back.
        let apart = apart.lock().unwrap();
        let mut noted = apart.at.iter().peekable();
        for (i, (whole, aside)) in cores(&whole).into_iter().zip(cores(&aside)).enumerate() {
            match noted.next_if(|(j, _)| *j == i) {
                Some((_, offset)) => {
                    assert_ne!(offset & IN_TRANSCRIPT, 0, "block {i}");
                    assert_eq!((aside.0, aside.1.as_str()), (whole.0, ""));
                }
                None => assert_eq!(aside, whole, "block {i}"),
            }
        }
        assert_eq!(apart.at.len(), 266);
        assert!(apart.words.is_some());
    }

    /// A Claude Code log of the same outputs as [`log`]'s: each a file read
    /// answering a call, one in three in parts.
    fn claude_log() -> String {
        let mut log = String::new();
        for i in 0..300 {
            let file = if i % 5 == 0 { "文件" } else { "file" };
            let output = format!("line {} of the {file} \"é\"\n", i % 7).repeat(20);
            let content = match i % 3 {
                0 => serde_json::json!([{"type": "text", "text": output}]),
                _ => output.into(),
            };
            let (call, asked, answered) = (format!("toolu_{i}"), format!("a{i}"), format!("u{i}"));
            let parent = (i > 0).then(|| format!("u{}", i - 1));
            log.push_str(&format!(
                "{}\n{}\n",
                serde_json::json!({"type": "assistant", "uuid": asked, "parentUuid": parent, "sessionId": "s",
                    "message": {"role": "assistant", "id": format!("msg_{i}"),
                        "content": [{"type": "tool_use", "id": call, "name": "Read", "input": {}}]}}),
                serde_json::json!({"type": "user", "uuid": answered, "parentUuid": asked, "sessionId": "s",
                    "message": {"role": "user",
                        "content": [{"type": "tool_result", "tool_use_id": call, "content": content}]}}),
            ));
        }
        log
    }

    /// `log`, a Claude Code log, read in two pieces on two threads, each
    /// message handed to `built` as it is built.
    fn read_claude(log: &str, built: &dyn Fn(&mut HostMessage)) -> Transcript {
        let cut = log[..log.len() / 2].rfind('\n').unwrap() + 1;
        let mut r = formats::read_in_pieces(None, "t.jsonl", &log[..cut], false, BadLines::Fail)
            .expect("a Claude Code log reads in pieces");
        r.on_two_threads();
        r.read(log[..cut].to_string()).unwrap();
        r.read(log[cut..].to_string()).unwrap();
        r.finish(&|| {}, built).unwrap()
    }

    #[test]
    fn outputs_let_go_as_built_are_set_aside_as_those_let_go_after() {
        let dir = std::env::temp_dir().join(format!("noa-aside-built-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let let_go = std::cell::Cell::new(0);
        let built = |m: &mut HostMessage| {
            let_go_in_transcript(m);
            let_go.set(let_go.get() + m.cores.iter().filter(|c| c.withheld.is_some()).count());
        };
        let log = claude_log();
        let (mut after, mut as_built) = (read_claude(&log, &|_| {}), read_claude(&log, &built));
        let read = cores(&after);
        // Every output the transcript holds as one string: the rest wait
        // for the file.
        assert_eq!(let_go.get(), 200);
        let apart = set_aside_read(&mut after.messages, &dir).unwrap();
        let as_built_apart = set_aside_read(&mut as_built.messages, &dir).unwrap();
        assert_eq!(as_built_apart.at, apart.at);
        assert_eq!(apart.at.len(), 300);
        assert_eq!(cores(&as_built), cores(&after));
        // Let go as built, they are read back as they were.
        let transcript = dir.join("t.jsonl");
        std::fs::write(&transcript, &log).unwrap();
        let mut words = as_built_apart.words.unwrap();
        words.reading_transcript("t.jsonl".into(), std::fs::File::open(&transcript).unwrap());
        let kept = cores(&as_built);
        for &(i, offset) in &as_built_apart.at {
            let len = kept[i].2.unwrap().get() as usize;
            let words = words.read(&[(offset, len)]).unwrap();
            assert_eq!(words, [read[i].1.clone()], "block {i}");
        }
        // With no file to set the others aside in (its folder a file), the
        // read is told: the words let go as built are not all where they
        // can be read back.
        let mut unserved = read_claude(&log, &built);
        assert!(set_aside_read(&mut unserved.messages, &transcript.join("x")).is_none());
        let mut unserved = unserved.messages.iter().flat_map(|m| &m.cores);
        assert!(unserved.any(|c| c.withheld.is_some()));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
