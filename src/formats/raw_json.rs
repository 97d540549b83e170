//! A message's or block's own JSON, held as its compact text.
//!
//! Every message and block of a transcript keeps the JSON its view is
//! written from: once the words have moved into the block's core, a few
//! short fields (a role, a call id, a null where the words were). Held as
//! a `serde_json::Value`, each object is an ordered map whose keys and
//! values are allocations of their own, several for each of a long log's
//! tens of thousands of blocks. As text it is one allocation of the
//! bytes themselves, and none for a null. It is parsed again only for the
//! messages a view writes, and goes into the read cache as it stands.

use std::fmt;

use serde_json::Value;

/// JSON kept as the compact text `serde_json` writes for it (the same text
/// as `Value::to_string`); empty for `null`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RawJson(Box<str>);

impl RawJson {
    /// JSON text checked to parse: `None` when it does not (the read cache
    /// keeps JSON as text, and a cache noa did not write may hold anything).
    /// Checked by parsing it as [`RawJson::value`] will, nesting limit
    /// included, so that a text taken here always gives its value.
    pub fn from_text(text: &str) -> Option<RawJson> {
        serde_json::from_str::<Value>(text).ok()?;
        Some(match text {
            "null" => RawJson::default(),
            _ => RawJson(text.into()),
        })
    }

    /// The JSON as a value, built afresh.
    pub fn value(&self) -> Value {
        match self.0.is_empty() {
            true => Value::Null,
            false => serde_json::from_str(&self.0)
                .expect("held JSON is valid: it was written or checked"),
        }
    }

    /// The compact JSON text.
    pub fn text(&self) -> &str {
        match self.0.is_empty() {
            true => "null",
            false => &self.0,
        }
    }
}

impl From<Value> for RawJson {
    fn from(value: Value) -> RawJson {
        match value {
            Value::Null => RawJson::default(),
            // Written straight into bytes: `Value::to_string` goes through
            // the formatter a piece at a time, at twice the cost.
            value => {
                let text = serde_json::to_string(&value).expect("a JSON value always serializes");
                RawJson(text.into_boxed_str())
            }
        }
    }
}

impl RawJson {
    /// The object of `fields`, in their order, written as the compact text
    /// [`RawJson::from`] writes for the same object: a reader keeping some
    /// fields of a record writes them without building an object of them.
    pub fn object<'a>(fields: impl IntoIterator<Item = (&'a str, &'a Value)>) -> RawJson {
        let mut text = Vec::with_capacity(64);
        text.push(b'{');
        for (i, (key, value)) in fields.into_iter().enumerate() {
            if i > 0 {
                text.push(b',');
            }
            let written = serde_json::to_writer(&mut text, key).and_then(|()| {
                text.push(b':');
                serde_json::to_writer(&mut text, value)
            });
            written.expect("a JSON value always serializes");
        }
        text.push(b'}');
        let text = String::from_utf8(text).expect("serde_json writes UTF-8");
        RawJson(text.into_boxed_str())
    }
}

impl fmt::Display for RawJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text())
    }
}

impl fmt::Debug for RawJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_object_written_field_by_field_is_the_object_written_whole() {
        let objects = [
            json!({}),
            json!({"role": "tool", "content": null, "tool_call_id": "c\"1"}),
            json!({"z": 1, "a": [1.5, -2, "é\n\"", true], "m": {"k": null}, "é": u64::MAX}),
        ];
        for v in objects {
            let fields = v.as_object().unwrap().iter().map(|(k, v)| (k.as_str(), v));
            assert_eq!(RawJson::object(fields), RawJson::from(v.clone()), "{v}");
        }
    }

    #[test]
    fn a_value_comes_back_as_it_went_in() {
        let values = [
            Value::Null,
            json!({"role": "assistant", "content": null, "tool_calls": null}),
            json!({"z": 1, "a": [1.5, -2, "é\n\"", true], "m": {"k": null}}),
            json!("text"),
            json!([]),
            json!(u64::MAX),
        ];
        for v in values {
            let raw = RawJson::from(v.clone());
            assert_eq!(raw.value(), v);
            assert_eq!(raw.text(), v.to_string());
            assert_eq!(RawJson::from_text(raw.text()), Some(raw));
        }
    }

    #[test]
    fn a_null_holds_nothing() {
        assert_eq!(RawJson::from(Value::Null), RawJson::default());
        assert_eq!(RawJson::from_text("null"), Some(RawJson::default()));
        assert_eq!(RawJson::default().text(), "null");
    }

    #[test]
    fn text_that_is_not_json_is_refused() {
        let deep = "[".repeat(200) + &"]".repeat(200);
        for bad in ["", "{", "{\"a\":}", "nul", "[1,]", "{} {}", &deep] {
            assert_eq!(RawJson::from_text(bad), None, "{bad:?}");
        }
    }
}
