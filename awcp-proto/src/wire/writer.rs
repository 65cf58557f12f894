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

/// Writes `s` as a JSON string, quoted and escaped exactly as `serde_json` escapes it (`"`, `\\`
/// and the control characters; `\b \t \n \f \r` short, the others as lowercase `\u00xx`).
///
/// Written here rather than through `serde_json::to_writer`: most strings (ids, keys, base64)
/// need no escape and go in as one copy, where the serializer's per-call set-up cost more than
/// the copy (keys and values were 10 % of an engine lifecycle).
fn write_str(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut plain_from = 0;
    while let Some(i) = next_to_escape(bytes, plain_from) {
        out.extend_from_slice(&bytes[plain_from..i]);
        plain_from = i + 1;
        match bytes[i] {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            0x08 => out.extend_from_slice(b"\\b"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            0x0c => out.extend_from_slice(b"\\f"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xf)],
            ]),
        }
    }
    out.extend_from_slice(&bytes[plain_from..]);
    out.push(b'"');
}

/// The index of the first byte at or after `from` that JSON needs escaped (`"`, `\\`, below
/// 0x20), looking at eight bytes per step.
pub(super) fn next_to_escape(bytes: &[u8], from: usize) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let needs_escape = |b: &u8| *b < 0x20 || *b == b'"' || *b == b'\\';
    let mut i = from;
    while let Some(chunk) = bytes.get(i..i + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let x = u64::from_le_bytes(word);
        let quote = x ^ (ONES * u64::from(b'"'));
        let backslash = x ^ (ONES * u64::from(b'\\'));
        // A byte's high bit is set in `hit` if it is zero in `quote` or `backslash` or below
        // 0x20 in `x`. Borrows can also flag bytes after a real hit, never before one, so the
        // lowest flag is exact.
        let hit = ((quote.wrapping_sub(ONES) & !quote)
            | (backslash.wrapping_sub(ONES) & !backslash)
            | (x.wrapping_sub(ONES * 0x20) & !x))
            & HIGHS;
        if hit != 0 {
            return Some(i + (hit.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    bytes.get(i..)?.iter().position(needs_escape).map(|p| i + p)
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
        // Messages, replies and events are 200–700 bytes: one allocation, no regrowth.
        let mut out = Vec::with_capacity(1024);
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

    /// A key the encoder names: a literal that needs no escape, copied as it is. Inlined where
    /// each key is written, so the copy of a literal of known length is a few moves, not a
    /// `memcpy` call (170 keys per delegation).
    #[inline(always)]
    fn key(&mut self, key: &'static str) {
        debug_assert!(next_to_escape(key.as_bytes(), 0).is_none(), "{key}");
        self.out.reserve(key.len() + 4);
        if !self.empty {
            self.out.push(b',');
        }
        self.empty = false;
        self.out.push(b'"');
        self.out.extend_from_slice(key.as_bytes());
        self.out.extend_from_slice(b"\":");
    }

    /// A key that comes from data (metadata, headers): escaped.
    fn data_key(&mut self, key: &str) {
        if !self.empty {
            self.out.push(b',');
        }
        self.empty = false;
        write_str(self.out, key);
        self.out.push(b':');
    }

    /// `"key": "value"`.
    pub(crate) fn str(&mut self, key: &'static str, value: &str) {
        self.key(key);
        write_str(self.out, value);
    }

    /// `"key": "value"`, omitted when `None`.
    pub(crate) fn opt_str(&mut self, key: &'static str, value: Option<&str>) {
        if let Some(v) = value {
            self.str(key, v);
        }
    }

    /// `"key": "YYYY-MM-DDTHH:MM:SS.mmmZ"`, written in place.
    pub(crate) fn timestamp(&mut self, key: &'static str, t: crate::time::Timestamp) {
        self.key(key);
        self.out.push(b'"');
        match t.rfc3339_ascii() {
            Some(text) => self.out.extend_from_slice(&text),
            // Digits, `-`, `:`, `.`, `T`, `Z` and a sign: nothing to escape.
            None => self.out.extend_from_slice(t.to_string().as_bytes()),
        }
        self.out.push(b'"');
    }

    /// `"key": n`.
    pub(crate) fn u64(&mut self, key: &'static str, n: u64) {
        self.key(key);
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        let mut rest = n;
        loop {
            at -= 1;
            digits[at] = b'0' + (rest % 10) as u8;
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        self.out.extend_from_slice(&digits[at..]);
    }

    /// `"key": n`, omitted when `None`.
    pub(crate) fn opt_u64(&mut self, key: &'static str, n: Option<u64>) {
        if let Some(n) = n {
            self.u64(key, n);
        }
    }

    /// `"key": true|false`, omitted when `None`.
    pub(crate) fn opt_bool(&mut self, key: &'static str, b: Option<bool>) {
        if let Some(b) = b {
            self.key(key);
            self.out
                .extend_from_slice(if b { b"true" } else { b"false" });
        }
    }

    /// `"key": x` for a finite `x`; omitted otherwise (JSON has no NaN or infinity).
    pub(crate) fn finite_f64(&mut self, key: &'static str, x: f64) {
        if x.is_finite() {
            self.serialize(key, &x);
        }
    }

    /// `"key": [...]` of strings, omitted when empty.
    pub(crate) fn strings<S: AsRef<str>>(&mut self, key: &'static str, items: &[S]) {
        if !items.is_empty() {
            self.array(key, |a| {
                for s in items {
                    a.str(s.as_ref());
                }
            });
        }
    }

    /// `"key": {...}` of string values, omitted when empty.
    pub(crate) fn str_map(&mut self, key: &'static str, map: &BTreeMap<String, String>) {
        if !map.is_empty() {
            self.object(key, |w| {
                for (k, v) in map {
                    w.data_key(k);
                    write_str(w.out, v);
                }
            });
        }
    }

    /// `"key": <value>` of anything serde can write (numbers, free-form metadata).
    pub(crate) fn serialize<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) {
        self.key(key);
        // The values given here are numbers, maps with string keys and `Value`s: none can fail
        // to serialise, and writing into a `Vec` does no I/O.
        let _ = serde_json::to_writer(&mut *self.out, value);
    }

    /// `"key": {...}`, the nested object written by `fill`.
    pub(crate) fn object(&mut self, key: &'static str, fill: impl FnOnce(&mut ObjectWriter<'_>)) {
        self.key(key);
        let mut w = ObjectWriter::begin(self.out);
        fill(&mut w);
        w.finish();
    }

    /// `"key": [...]`, the array written by `fill`.
    pub(crate) fn array(&mut self, key: &'static str, fill: impl FnOnce(&mut ArrayWriter<'_>)) {
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
    fn timestamps_are_written_in_place_as_their_rfc3339_text() {
        use crate::time::Timestamp;
        let late = Timestamp::from_unix_millis(253_402_300_800_000); // 10000-01-01
        for t in [
            Timestamp::EPOCH,
            Timestamp::from_unix_millis(1_750_000_000_123),
            late,
        ] {
            let text = ObjectWriter::text(|w| w.timestamp("at", t));
            assert_eq!(
                text,
                serde_json::json!({ "at": t.to_rfc3339() }).to_string()
            );
        }
    }

    #[test]
    fn strings_are_escaped_byte_for_byte_as_serde_json_escapes_them() {
        let mut every: String = (0u8..0x80).map(char::from).collect();
        every.push_str("ünï \u{2028} \u{1F600} \u{7f}");
        for s in [every.as_str(), "", "plain", "\"", "\\", "a\u{0}b", "end\n"] {
            let mut ours = Vec::new();
            write_str(&mut ours, s);
            assert_eq!(ours, serde_json::to_vec(s).unwrap(), "{s:?}");
        }
    }

    #[test]
    fn numbers_and_data_keys_are_written_as_serde_json_writes_them() {
        let mut md = BTreeMap::new();
        md.insert("a\"b\n".to_owned(), "v".to_owned());
        for n in [0, 7, 10, 99, 604_800_000, u64::MAX] {
            let text = ObjectWriter::text(|w| {
                w.u64("n", n);
                w.str_map("m", &md);
            });
            let expect = format!(r#"{{"n":{n},"m":{{"a\"b\n":"v"}}}}"#);
            assert_eq!(text, expect);
            assert_eq!(
                serde_json::from_str::<Value>(&text).unwrap(),
                serde_json::json!({"n": n, "m": {"a\"b\n": "v"}})
            );
        }
    }

    #[test]
    fn the_eight_byte_scan_finds_every_escape_at_every_offset() {
        // Each byte value at each position of strings around the 8-byte step, after plain
        // ASCII or multi-byte text.
        for len in 1..20 {
            for pos in 0..len {
                for b in (0u8..0x80).chain([0xc3]) {
                    let mut bytes = vec![b'a'; len];
                    bytes[pos] = b;
                    if b == 0xc3 {
                        bytes.insert(pos + 1, 0xa9); // é
                    }
                    let expect = bytes
                        .iter()
                        .position(|c| *c < 0x20 || *c == b'"' || *c == b'\\');
                    assert_eq!(next_to_escape(&bytes, 0), expect, "{bytes:?}");
                }
            }
        }
    }

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
            w.strings::<String>("empty", &[]);
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
