//! A reader's resume state as bytes the formats encode themselves: the read
//! cache keeps them as they are, without knowing a format's fields, so a
//! reader can change what it needs to read on without the cache's layout
//! changing with it.

use super::{BranchChoice, CodexResume, ResumeState};

/// The layout of these bytes; a state of another layout is not read.
const LAYOUT: u8 = 2;

impl ResumeState {
    /// The state as bytes, for [`ResumeState::from_bytes`].
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Out(vec![LAYOUT]);
        out.u64(self.subagent.map_or(0, |s| 1 + u64::from(s)));
        out.opt(self.leaf.as_deref());
        out.list(&self.after_leaf);
        out.list(&self.responses);
        out.list(&self.strays);
        match &self.codex {
            Some(c) => {
                out.u64(1);
                for n in [c.items, c.trailing_outputs, c.floor] {
                    out.u64(n as u64);
                }
                out.u64(u64::from(c.output_since_count));
                for n in [c.pending, c.last_message] {
                    out.u64(n.map_or(0, |n| n as u64 + 1));
                }
            }
            None => out.u64(0),
        }
        let b = &self.branch;
        for n in [b.line, b.passed_seen, b.passed_unseen] {
            out.u64(n as u64);
        }
        out.u64(u64::from(b.asked) | u64::from(b.last) << 1 | u64::from(b.seen) << 2);
        out.0
    }

    /// The state [`ResumeState::to_bytes`] wrote; `None` for bytes it did
    /// not write.
    pub fn from_bytes(bytes: &[u8]) -> Option<ResumeState> {
        let (&layout, rest) = bytes.split_first()?;
        if layout != LAYOUT {
            return None;
        }
        let mut r = In(rest);
        let state = ResumeState {
            subagent: match r.u64()? {
                0 => None,
                n => Some(n == 2),
            },
            leaf: r.opt()?,
            after_leaf: r.list()?,
            responses: r.list()?,
            strays: r.list()?,
            codex: match r.u64()? {
                0 => None,
                _ => Some(r.codex()?),
            },
            branch: r.branch()?,
        };
        r.0.is_empty().then_some(state)
    }
}

/// Bytes being written: numbers little-endian, texts after their length.
struct Out(Vec<u8>);

impl Out {
    fn u64(&mut self, n: u64) {
        self.0.extend_from_slice(&n.to_le_bytes());
    }
    fn str(&mut self, s: &str) {
        self.u64(s.len() as u64);
        self.0.extend_from_slice(s.as_bytes());
    }
    fn list(&mut self, items: &[String]) {
        self.u64(items.len() as u64);
        items.iter().for_each(|s| self.str(s));
    }
    fn opt(&mut self, s: Option<&str>) {
        match s {
            Some(s) => {
                self.0.push(1);
                self.str(s);
            }
            None => self.0.push(0),
        }
    }
}

/// Bytes being read as [`Out`] wrote them; `None` past their end.
struct In<'a>(&'a [u8]);

impl In<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let (head, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(head)
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn usize(&mut self) -> Option<usize> {
        usize::try_from(self.u64()?).ok()
    }
    fn str(&mut self) -> Option<String> {
        let n = self.usize()?;
        std::str::from_utf8(self.take(n)?).ok().map(str::to_string)
    }
    fn list(&mut self) -> Option<Vec<String>> {
        // A count cannot promise more texts than there are bytes left.
        let n = self.usize()?.min(self.0.len());
        (0..n).map(|_| self.str()).collect()
    }
    fn opt(&mut self) -> Option<Option<String>> {
        match self.take(1)?[0] {
            0 => Some(None),
            1 => Some(Some(self.str()?)),
            _ => None,
        }
    }
    fn branch(&mut self) -> Option<BranchChoice> {
        let (line, passed_seen, passed_unseen) = (self.usize()?, self.usize()?, self.usize()?);
        let flags = self.u64()?;
        Some(BranchChoice {
            line,
            asked: flags & 1 != 0,
            last: flags & 2 != 0,
            seen: flags & 4 != 0,
            passed_seen,
            passed_unseen,
        })
    }
    fn codex(&mut self) -> Option<CodexResume> {
        let (items, trailing_outputs, floor) = (self.usize()?, self.usize()?, self.usize()?);
        let output_since_count = self.u64()? != 0;
        let (pending, last_message) = (self.usize()?.checked_sub(1), self.usize()?.checked_sub(1));
        Some(CodexResume {
            items,
            trailing_outputs,
            floor,
            output_since_count,
            pending,
            last_message,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_comes_back_from_its_bytes() {
        let states = [
            ResumeState::default(),
            ResumeState {
                subagent: Some(true),
                leaf: Some("u-9".into()),
                after_leaf: vec!["p-1".into(), "p-2".into()],
                responses: vec!["msg_1".into()],
                strays: vec!["toolu_1".into()],
                codex: None,
                branch: BranchChoice {
                    line: 12,
                    asked: false,
                    last: true,
                    seen: true,
                    passed_seen: 2,
                    passed_unseen: 1,
                },
            },
            ResumeState {
                subagent: Some(false),
                codex: Some(CodexResume {
                    items: 40,
                    trailing_outputs: 2,
                    floor: 31,
                    output_since_count: true,
                    pending: Some(0),
                    last_message: None,
                }),
                ..ResumeState::default()
            },
        ];
        for s in states {
            assert_eq!(ResumeState::from_bytes(&s.to_bytes()), Some(s));
        }
    }

    #[test]
    fn bytes_it_did_not_write_are_not_read() {
        let bytes = ResumeState::default().to_bytes();
        assert_eq!(ResumeState::from_bytes(&bytes[..bytes.len() - 1]), None);
        assert_eq!(
            ResumeState::from_bytes(&[bytes.clone(), vec![0]].concat()),
            None
        );
        assert_eq!(ResumeState::from_bytes(&[9]), None);
        assert_eq!(ResumeState::from_bytes(&[]), None);
    }
}
