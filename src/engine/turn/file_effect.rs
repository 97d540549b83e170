//! What a tool call does to a file, when that is known for certain: the
//! tools of Claude Code and Codex noa knows, and those a host names in its
//! `[reclaim]` table ([`FileTools`]). A call whose effect is in any doubt
//! (a shell line with a pipe, a glob, a variable) has none: a read wrongly
//! taken as stale hides what the model still needs.

use serde::de;
use serde_json::Value;

use crate::engine::model::config::FileTools;
use crate::engine::model::message::CoreMessage;

/// What a call does to files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Shows the content of one file.
    Reads(String),
    /// Changes these files.
    Changes(Vec<String>),
}

/// What the call `m` does to a file, if its tool is one whose effect is
/// known.
pub fn effect(m: &CoreMessage, tools: &FileTools) -> Option<Effect> {
    let name = m.tool_name.as_str();
    if let Some(key) = tools.reads.get(name) {
        return argument(&m.text, key).map(Effect::Reads);
    }
    if let Some(key) = tools.changes.get(name) {
        return argument(&m.text, key).map(|p| Effect::Changes(vec![p]));
    }
    match name {
        "Read" => argument(&m.text, "file_path").map(Effect::Reads),
        "Edit" | "MultiEdit" | "Write" => {
            argument(&m.text, "file_path").map(|p| Effect::Changes(vec![p]))
        }
        "NotebookEdit" => argument(&m.text, "notebook_path").map(|p| Effect::Changes(vec![p])),
        "apply_patch" => patched_files(patch_text(&m.text)?),
        "exec_command" | "shell" | "shell_command" | "local_shell" => shell_effect(&m.text),
        _ => None,
    }
}

/// The string argument `key` of a call's JSON arguments. The other
/// arguments are only checked, not kept: an edit's old and new text can be
/// long, and every call of a long history is asked.
fn argument(args: &str, key: &str) -> Option<String> {
    let mut de = serde_json::Deserializer::from_str(args);
    let found = de::DeserializeSeed::deserialize(OneArgument(key), &mut de).ok()?;
    de.end().ok()?;
    found.filter(|p| !p.is_empty())
}

/// Reads a JSON object for the value of its key `.0`: its last value, when
/// that is a string. Not an object: an error.
struct OneArgument<'k>(&'k str);

impl<'de> de::DeserializeSeed<'de> for OneArgument<'_> {
    type Value = Option<String>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> de::Visitor<'de> for OneArgument<'_> {
    type Value = Option<String>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(wanted) = map.next_key_seed(KeyIs(self.0))? {
            match wanted {
                true => {
                    found = match map.next_value::<Value>()? {
                        Value::String(s) => Some(s),
                        _ => None,
                    }
                }
                false => {
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
        }
        Ok(found)
    }
}

/// Reads a key for whether it is `.0`, without copying it.
struct KeyIs<'k>(&'k str);

impl<'de> de::DeserializeSeed<'de> for KeyIs<'_> {
    type Value = bool;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> de::Visitor<'de> for KeyIs<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<bool, E> {
        Ok(key == self.0)
    }
}

/// The patch of an `apply_patch` call: its raw input (a custom tool call),
/// or the `input` argument of a function call.
fn patch_text(text: &str) -> Option<String> {
    match text.trim_start().starts_with('{') {
        true => argument(text, "input"),
        false => Some(text.to_string()),
    }
}

/// The files a patch in Codex's format adds, updates, deletes or moves to.
fn patched_files(patch: String) -> Option<Effect> {
    if !patch.contains("*** Begin Patch") {
        return None;
    }
    const HEADS: [&str; 4] = [
        "*** Add File: ",
        "*** Update File: ",
        "*** Delete File: ",
        "*** Move to: ",
    ];
    let files: Vec<String> = (patch.lines())
        .filter_map(|line| HEADS.iter().find_map(|h| line.strip_prefix(h)))
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect();
    (!files.is_empty()).then_some(Effect::Changes(files))
}

/// What a Codex shell call does: a read of one file by a command that only
/// prints it, or a patch applied through the shell. The path is taken
/// from the call's `workdir` when it is relative.
fn shell_effect(args: &str) -> Option<Effect> {
    let args: Value = serde_json::from_str(args).ok()?;
    let line = command_line(&args)?;
    if line.trim_start().starts_with("apply_patch") {
        return patched_files(line);
    }
    let words = words(&line)?;
    let path = printed_file(&words)?;
    let workdir = args.get("workdir").and_then(Value::as_str);
    Some(Effect::Reads(under(workdir, path)))
}

/// The command line of a shell call: `cmd` (exec_command), a `command`
/// string, or a `command` list, run through `bash -lc` or alike or given
/// word by word.
fn command_line(args: &Value) -> Option<String> {
    if let Some(cmd) = args.get("cmd").and_then(Value::as_str) {
        return Some(cmd.to_string());
    }
    match args.get("command")? {
        Value::String(s) => Some(s.clone()),
        Value::Array(items) => {
            let words: Option<Vec<&str>> = items.iter().map(Value::as_str).collect();
            match words?.as_slice() {
                [shell, flag, line] if is_shell(shell) && matches!(*flag, "-c" | "-lc") => {
                    Some(line.to_string())
                }
                words if words.iter().all(|w| plain(w)) => Some(words.join(" ")),
                _ => None,
            }
        }
        _ => None,
    }
}

fn is_shell(word: &str) -> bool {
    matches!(
        word.rsplit('/').next(),
        Some("bash" | "sh" | "zsh" | "dash")
    )
}

/// A command line's words, quotes taken off; `None` for anything but plain
/// words: a pipe, a list, a redirection, a substitution, a glob or an
/// escape make the effect uncertain.
fn words(line: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let mut chars = line.trim().chars().peekable();
    while chars.peek().is_some() {
        let mut word = String::new();
        while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
            match c {
                '\'' => word.extend(chars.by_ref().take_while(|&c| c != '\'')),
                '"' => {
                    let quoted: String = chars.by_ref().take_while(|&c| c != '"').collect();
                    if quoted.contains(['$', '`', '\\']) {
                        return None;
                    }
                    word.push_str(&quoted);
                }
                c if "|&;<>()$`\\*?[]{}~!#".contains(c) => return None,
                c => word.push(c),
            }
        }
        out.push(word);
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
    }
    Some(out)
}

/// Whether a word of a command list is plain text (see [`words`]).
fn plain(word: &str) -> bool {
    !word.is_empty()
        && !word.contains(|c: char| c.is_whitespace() || "|&;<>()$`\\*?[]{}~!#'\"".contains(c))
}

/// The one file a command prints and does nothing else with: `cat`,
/// `nl -ba`, `sed -n 'A,Bp'`, `head`/`tail -n N`, each of one file.
fn printed_file(words: &[String]) -> Option<&str> {
    let w: Vec<&str> = words.iter().map(String::as_str).collect();
    let path = match w.as_slice() {
        ["cat" | "nl", path] | ["cat", "-n", path] | ["nl", "-ba", path] => *path,
        ["sed", "-n", range, path] if is_line_range(range) => *path,
        ["head" | "tail", "-n", n, path] if is_number(n) => *path,
        _ => return None,
    };
    (!path.starts_with('-')).then_some(path)
}

/// `A,Bp` or `Ap`: the lines `sed -n` prints.
fn is_line_range(range: &str) -> bool {
    let Some(lines) = range.strip_suffix('p') else {
        return false;
    };
    let mut ends = lines.split(',');
    let first = ends.next().is_some_and(is_number);
    let second = ends.next().is_none_or(|e| is_number(e) || e == "$");
    first && second && ends.next().is_none()
}

fn is_number(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// `path`, under `workdir` when it is relative and one is given.
fn under(workdir: Option<&str>, path: &str) -> String {
    let path = path.strip_prefix("./").unwrap_or(path);
    match workdir {
        Some(dir) if !path.starts_with('/') && !dir.is_empty() => {
            format!("{}/{path}", dir.trim_end_matches('/'))
        }
        _ => path.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(tool: &str, args: &str) -> Option<Effect> {
        of_with(tool, args, &FileTools::default())
    }

    fn of_with(tool: &str, args: &str, tools: &FileTools) -> Option<Effect> {
        effect(&CoreMessage::tool_call("c", "k", tool, args), tools)
    }

    fn reads(p: &str) -> Option<Effect> {
        Some(Effect::Reads(p.into()))
    }

    fn changes(ps: &[&str]) -> Option<Effect> {
        Some(Effect::Changes(ps.iter().map(|p| p.to_string()).collect()))
    }

    #[test]
    fn claude_code_file_tools() {
        assert_eq!(
            of("Read", r#"{"file_path":"/r/a.rs","offset":10}"#),
            reads("/r/a.rs")
        );
        assert_eq!(
            of("Write", r#"{"file_path":"/r/a.rs","content":"x"}"#),
            changes(&["/r/a.rs"])
        );
        assert_eq!(
            of("NotebookEdit", r#"{"notebook_path":"n.ipynb"}"#),
            changes(&["n.ipynb"])
        );
        assert_eq!(of("Read", r#"{"path":"/r/a.rs"}"#), None);
        assert_eq!(of("Grep", r#"{"pattern":"x"}"#), None);
    }

    #[test]
    fn a_path_is_read_as_a_whole_parse_would_read_it() {
        // Escapes in keys and values, the last of a repeated key, other
        // arguments of any shape.
        let args = r#"{"old_string":{"a":[1,"x\"y"]},"file\u005fpath":"/r/\u00e9.rs","n":null}"#;
        assert_eq!(of("Edit", args), changes(&["/r/é.rs"]));
        let twice = r#"{"file_path":"/r/a.rs","file_path":"/r/b.rs"}"#;
        assert_eq!(of("Read", twice), reads("/r/b.rs"));
        // Not a string, empty, not an object, or not JSON to its end: none.
        for args in [
            r#"{"file_path":7}"#,
            r#"{"file_path":""}"#,
            r#"{"file_path":"/r/a.rs","file_path":7}"#,
            r#"["file_path","/r/a.rs"]"#,
            r#"{"file_path":"/r/a.rs"} x"#,
            r#"{"file_path":"/r/a.rs","x":[1,}"#,
        ] {
            assert_eq!(of("Read", args), None, "{args}");
        }
    }

    #[test]
    fn codex_patches_name_every_file_they_touch() {
        let patch = "*** Begin Patch\n*** Update File: src/a.rs\n@@\n-x\n+y\n*** Add File: src/b.rs\n+z\n*** Delete File: src/c.rs\n*** End Patch\n";
        assert_eq!(
            of("apply_patch", patch),
            changes(&["src/a.rs", "src/b.rs", "src/c.rs"])
        );
        let wrapped = serde_json::json!({ "input": patch }).to_string();
        assert_eq!(
            of("apply_patch", &wrapped),
            changes(&["src/a.rs", "src/b.rs", "src/c.rs"])
        );
        let heredoc = serde_json::json!({ "cmd": format!("apply_patch <<'EOF'\n{patch}EOF\n") });
        assert_eq!(
            of("exec_command", &heredoc.to_string()),
            changes(&["src/a.rs", "src/b.rs", "src/c.rs"])
        );
        assert_eq!(of("apply_patch", "not a patch"), None);
    }

    #[test]
    fn codex_shell_reads_only_when_certain() {
        let read = |cmd: &str| {
            of(
                "exec_command",
                &serde_json::json!({ "cmd": cmd }).to_string(),
            )
        };
        assert_eq!(read("sed -n '1,200p' src/a.rs"), reads("src/a.rs"));
        assert_eq!(read("sed -n 40,\\$p src/a.rs"), None);
        assert_eq!(read("cat ./src/a.rs"), reads("src/a.rs"));
        assert_eq!(read("nl -ba \"src/a b.rs\""), reads("src/a b.rs"));
        assert_eq!(read("head -n 50 src/a.rs"), reads("src/a.rs"));
        for doubtful in [
            "cat src/a.rs | head",
            "cat src/*.rs",
            "cat a.rs b.rs",
            "sed -i 's/x/y/' a.rs",
            "cat $FILE",
            "cd src && cat a.rs",
            "rg foo src/a.rs",
        ] {
            assert_eq!(read(doubtful), None, "{doubtful}");
        }
        let shell = r#"{"command":["bash","-lc","sed -n '1,80p' lib.rs"],"workdir":"/repo/"}"#;
        assert_eq!(of("shell", shell), reads("/repo/lib.rs"));
        let argv = r#"{"command":["cat","/etc/hosts"]}"#;
        assert_eq!(of("shell", argv), reads("/etc/hosts"));
    }

    #[test]
    fn a_host_names_its_own_tools() {
        let mut tools = FileTools::default();
        tools.reads.insert("read_file".into(), "path".into());
        tools.changes.insert("write_file".into(), "path".into());
        assert_eq!(
            of_with("read_file", r#"{"path":"a.py"}"#, &tools),
            reads("a.py")
        );
        assert_eq!(
            of_with("write_file", r#"{"path":"a.py"}"#, &tools),
            changes(&["a.py"])
        );
        assert_eq!(of("read_file", r#"{"path":"a.py"}"#), None);
    }
}
