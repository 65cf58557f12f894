//! Writes JSON objects straight into a byte buffer, fields in the order they are written.
//!
//! The encoders used to build a [`serde_json::Value`] per message (a `BTreeMap` with an owned
//! key and string per field) and then serialise it; writing the text directly produces the same
//! JSON without the intermediate tree. Strings are escaped by `serde_json` itself.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

/// One JSON object being written; fields are separated and keys escaped as they come.
pub(crate) struct ObjectWriter<'b> {
    out: &'b mut Vec<u8>,
    empty: bool,
}

/// One JSON array being written.
pub(crate) struct ArrayWriter<'b> {
    out: &'b mut Vec<u8>,
    empty: bool,
}

/// Writes `s` as a JSON string (quoted and escaped).
fn write_str(out: &mut Vec<u8>, s: &str) {
    // Writing a string into a `Vec` cannot fail (no I/O, no map keys to check).
    let _ = serde_json::to_writer(&mut *out, s);
}

impl<'b> ObjectWriter<'b> {
    fn begin(out: &'b mut Vec<u8>) -> Self {
        out.push(b'{');
        ObjectWriter { out, empty: true }
    }

    fn finish(self) {
        self.out.push(b'}');
    }

    /// The text of the object `fill` writes.
    pub(crate) fn text(fill: impl FnOnce(&mut ObjectWriter<'_>)) -> String {
        let mut out = Vec::with_capacity(256);
        let mut w = ObjectWriter::begin(&mut out);
        fill(&mut w);
        w.finish();
        // Only `&str` pieces and `serde_json` output went in: always UTF-8.
        String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into())
    }

    /// The object `fill` writes, as a [`Value`] (for callers that keep JSON trees).
    pub(crate) fn value(fill: impl FnOnce(&mut ObjectWriter<'_>)) -> Value {
        serde_json::from_str(&ObjectWriter::text(fill)).unwrap_or(Value::Null)
    }

    fn key(&mut self, key: &str) {
        if !self.empty {
            self.out.push(b',');
        }
        self.empty = false;
        write_str(self.out, key);
        self.out.push(b':');
    }

    /// `"key": "value"`.
    pub(crate) fn str(&mut self, key: &str, value: &str) {
        self.key(key);
        write_str(self.out, value);
    }

    /// `"key": "value"`, omitted when `None`.
    pub(crate) fn opt_str(&mut self, key: &str, value: Option<&str>) {
        if let Some(v) = value {
            self.str(key, v);
        }
    }

    /// `"key": n`.
    pub(crate) fn u64(&mut self, key: &str, n: u64) {
        self.serialize(key, &n);
    }

    /// `"key": n`, omitted when `None`.
    pub(crate) fn opt_u64(&mut self, key: &str, n: Option<u64>) {
        if let Some(n) = n {
            self.u64(key, n);
        }
    }

    /// `"key": true|false`, omitted when `None`.
    pub(crate) fn opt_bool(&mut self, key: &str, b: Option<bool>) {
        if let Some(b) = b {
            self.key(key);
            self.out
                .extend_from_slice(if b { b"true" } else { b"false" });
        }
    }

    /// `"key": x` for a finite `x`; omitted otherwise (JSON has no NaN or infinity).
    pub(crate) fn finite_f64(&mut self, key: &str, x: f64) {
        if x.is_finite() {
            self.serialize(key, &x);
        }
    }

    /// `"key": [...]` of strings, omitted when empty.
    pub(crate) fn strings(&mut self, key: &str, items: &[String]) {
        if !items.is_empty() {
            self.array(key, |a| {
                for s in items {
                    a.str(s);
                }
            });
        }
    }

    /// `"key": {...}` of string values, omitted when empty.
    pub(crate) fn str_map(&mut self, key: &str, map: &BTreeMap<String, String>) {
        if !map.is_empty() {
            self.object(key, |w| {
                for (k, v) in map {
                    w.str(k, v);
                }
            });
        }
    }

    /// `"key": <value>` of anything serde can write (numbers, free-form metadata).
    pub(crate) fn serialize<T: Serialize + ?Sized>(&mut self, key: &str, value: &T) {
        self.key(key);
        // The values given here are numbers, maps with string keys and `Value`s: none can fail
        // to serialise, and writing into a `Vec` does no I/O.
        let _ = serde_json::to_writer(&mut *self.out, value);
    }

    /// `"key": {...}`, the nested object written by `fill`.
    pub(crate) fn object(&mut self, key: &str, fill: impl FnOnce(&mut ObjectWriter<'_>)) {
        self.key(key);
        let mut w = ObjectWriter::begin(self.out);
        fill(&mut w);
        w.finish();
    }

    /// `"key": [...]`, the array written by `fill`.
    pub(crate) fn array(&mut self, key: &str, fill: impl FnOnce(&mut ArrayWriter<'_>)) {
        self.key(key);
        self.out.push(b'[');
        let mut a = ArrayWriter {
            out: self.out,
            empty: true,
        };
        fill(&mut a);
        a.out.push(b']');
    }
}

impl ArrayWriter<'_> {
    fn sep(&mut self) {
        if !self.empty {
            self.out.push(b',');
        }
        self.empty = false;
    }

    /// A string element.
    pub(crate) fn str(&mut self, s: &str) {
        self.sep();
        write_str(self.out, s);
    }

    /// An object element written by `fill`.
    pub(crate) fn object(&mut self, fill: impl FnOnce(&mut ObjectWriter<'_>)) {
        self.sep();
        let mut w = ObjectWriter::begin(self.out);
        fill(&mut w);
        w.finish();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn writes_what_serde_json_reads_back() {
        let mut md = BTreeMap::new();
        md.insert("k\"ey".to_owned(), "v\nal".to_owned());
        let text = ObjectWriter::text(|w| {
            w.str("a", "quote\" backslash\\ ctrl\u{1} ünï");
            w.opt_str("absent", None);
            w.u64("n", u64::MAX);
            w.opt_bool("t", Some(true));
            w.finite_f64("x", 0.25);
            w.finite_f64("nan", f64::NAN);
            w.strings("empty", &[]);
            w.strings("list", &["x".to_owned(), "y".to_owned()]);
            w.str_map("map", &md);
            w.object("o", |o| o.opt_bool("f", Some(false)));
            w.array("arr", |a| {
                a.object(|o| o.str("k", "v"));
                a.str("s");
            });
        });
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "a": "quote\" backslash\\ ctrl\u{1} ünï", "n": u64::MAX, "t": true, "x": 0.25,
                "list": ["x", "y"], "map": {"k\"ey": "v\nal"}, "o": {"f": false},
                "arr": [{"k": "v"}, "s"],
            })
        );
        assert!(
            text.starts_with(r#"{"a":"#),
            "fields in the order written: {text}"
        );
    }
}
