//! The JSON parser behind [`Doc::parse`](super::tree::Doc::parse): a recursive descent over
//! text already known to be UTF-8, writing the flat nodes of [`super::tree`] directly.
//!
//! Going through `serde_json`'s `Deserializer` and a visitor cost about 20 instructions per
//! byte of every message, reply and event (a fifth of an engine lifecycle); this parser does
//! the same work without the per-value dispatch. It accepts exactly RFC 8259 JSON, never more
//! than `serde_json` does: whenever it refuses a text, `Doc::parse` hands the text to
//! `serde_json`, whose error (with its line and column) is the one reported, so the two can
//! differ only in how fast a valid text is read. Differential tests below hold it to
//! `serde_json` on valid, invalid and random texts.

use std::borrow::Cow;

use serde_json::Number;

use super::tree::{key_bit, node_buffer, set, Json, Node};
use super::writer::next_to_escape;

/// Nesting allowed, as `serde_json`'s recursion limit (127 levels of arrays and objects).
const MAX_DEPTH: usize = 128;

/// Nodes reserved up front, at most: about one per 12 bytes of text covers a message, a reply
/// or an event, while a text that is mostly one long string does not reserve for its length.
const MAX_RESERVED: usize = 256;

/// The nodes of `text`, or `None` if it is not one JSON value (surrounded by whitespace only).
pub(super) fn parse(text: &str) -> Option<Vec<Node<'_>>> {
    let mut p = Parser {
        text,
        bytes: text.as_bytes(),
        pos: 0,
        depth_left: MAX_DEPTH,
        nodes: node_buffer((text.len() / 12 + 4).min(MAX_RESERVED)),
    };
    p.value()?;
    p.skip_ws();
    (p.pos == p.bytes.len()).then_some(p.nodes)
}

/// Members up to which an object is checked for a repeated key. A larger object is taken as
/// repeating (every lookup then reads all its members, as before this check existed): checking
/// each key against all earlier ones would make a hostile object of many similar keys cost
/// quadratic time.
const MAX_CHECKED_MEMBERS: usize = 32;

/// The keys of an object being read: a 64-bit filter of them all (kept in the object's header
/// for lookups), and whether one repeats (checked against the keys themselves only when the
/// filter says "maybe").
#[derive(Default)]
struct KeySet {
    filter: u64,
    count: usize,
    repeats: bool,
}

impl KeySet {
    /// Notes `key`, read after the members `object` holds so far (its header first).
    fn add(&mut self, key: &str, object: &[Node<'_>]) {
        let bit = key_bit(key);
        let maybe_seen = self.filter & bit != 0;
        self.filter |= bit;
        if self.repeats {
            return;
        }
        self.count += 1;
        if self.count > MAX_CHECKED_MEMBERS {
            self.repeats = true;
        } else if maybe_seen {
            self.repeats = Json::object_members(object).any(|(k, _)| k == key);
        }
    }
}

struct Parser<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
    depth_left: usize,
    /// What was read so far, in document order.
    nodes: Vec<Node<'a>>,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    /// Consumes `word` (`true`, `false`, `null`) if it is next.
    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.pos + word.len();
        (self.bytes.get(self.pos..end)? == word).then(|| self.pos = end)
    }

    /// Reads one value and appends its nodes.
    fn value(&mut self) -> Option<()> {
        self.skip_ws();
        let node = match self.peek()? {
            b'{' => return self.object(),
            b'[' => return self.array(),
            b'"' => Node::Str(self.string()?),
            b't' => self.literal(b"true").map(|()| Node::Bool(true))?,
            b'f' => self.literal(b"false").map(|()| Node::Bool(false))?,
            b'n' => self.literal(b"null").map(|()| Node::Null)?,
            b'-' | b'0'..=b'9' => Node::Number(self.number()?),
            _ => return None,
        };
        self.nodes.push(node);
        Some(())
    }

    /// The members of an array or object whose opening bracket is next: `member` reads one,
    /// this reads the separators up to `close`, and returns how many members there were.
    /// Nesting is counted here.
    fn members(
        &mut self,
        close: u8,
        mut member: impl FnMut(&mut Self) -> Option<()>,
    ) -> Option<usize> {
        self.depth_left -= 1;
        if self.depth_left == 0 {
            return None;
        }
        self.pos += 1; // '[' or '{'
        self.skip_ws();
        let mut len = 0;
        if self.peek() == Some(close) {
            self.pos += 1;
        } else {
            loop {
                member(self)?;
                len += 1;
                self.skip_ws();
                match self.peek()? {
                    b',' => self.pos += 1,
                    b if b == close => {
                        self.pos += 1;
                        break;
                    }
                    _ => return None,
                }
            }
        }
        self.depth_left += 1;
        Some(len)
    }

    fn object(&mut self) -> Option<()> {
        let at = self.nodes.len();
        self.nodes.push(Node::Null); // the header, once its size is known
        let mut keys = KeySet::default();
        let len = self.members(b'}', |p| {
            p.skip_ws();
            if p.peek() != Some(b'"') {
                return None;
            }
            let key = p.string()?;
            keys.add(&key, p.nodes.get(at..).unwrap_or_default());
            p.nodes.push(Node::Str(key));
            p.skip_ws();
            if p.peek() != Some(b':') {
                return None;
            }
            p.pos += 1;
            p.value()
        })?;
        let nodes = self.nodes.len() - at;
        let header = Node::Object {
            len,
            nodes,
            repeats: keys.repeats,
            keys: keys.filter,
        };
        set(&mut self.nodes, at, header);
        Some(())
    }

    fn array(&mut self) -> Option<()> {
        let at = self.nodes.len();
        self.nodes.push(Node::Null); // the header, once its size is known
        let len = self.members(b']', Self::value)?;
        let nodes = self.nodes.len() - at;
        set(&mut self.nodes, at, Node::Array { len, nodes });
        Some(())
    }

    /// A string starting at its opening quote: borrowed from the text unless it has escapes.
    /// Inlined where strings are read (keys and values): most have no escape, and the call
    /// cost more than the scan.
    #[inline(always)]
    fn string(&mut self) -> Option<Cow<'a, str>> {
        let start = self.pos + 1;
        let i = next_to_escape(self.bytes, start)?;
        if self.bytes.get(i) == Some(&b'"') {
            self.pos = i + 1;
            return self.text.get(start..i).map(Cow::Borrowed);
        }
        self.escaped_string(start, i)
    }

    /// The rest of [`Parser::string`] from `i`, the first byte at or after `start` that is an
    /// escape or a raw control character.
    #[cold]
    #[inline(never)]
    fn escaped_string(&mut self, start: usize, i: usize) -> Option<Cow<'a, str>> {
        let mut owned = String::with_capacity(i - start + 16);
        let mut from = start;
        let mut i = i;
        loop {
            owned.push_str(self.text.get(from..i)?);
            match self.bytes[i] {
                b'"' => {
                    self.pos = i + 1;
                    return Some(Cow::Owned(owned));
                }
                b'\\' => {
                    let (c, len) = self.escape(i + 1)?;
                    owned.push(c);
                    from = i + 1 + len;
                }
                // A raw control character.
                _ => return None,
            }
            i = next_to_escape(self.bytes, from)?;
        }
    }

    /// The escape after a backslash at `at`: its character and how many bytes it took.
    fn escape(&self, at: usize) -> Option<(char, usize)> {
        let c = match *self.bytes.get(at)? {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let unit = self.hex4(at + 1)?;
                return match unit {
                    0xD800..=0xDBFF => {
                        // A leading surrogate needs its trailing half right after.
                        if self.bytes.get(at + 5..at + 7)? != b"\\u" {
                            return None;
                        }
                        let low = self.hex4(at + 7)?;
                        if !(0xDC00..=0xDFFF).contains(&low) {
                            return None;
                        }
                        let c = 0x10000
                            + ((u32::from(unit) - 0xD800) << 10)
                            + (u32::from(low) - 0xDC00);
                        Some((char::from_u32(c)?, 11))
                    }
                    0xDC00..=0xDFFF => None,
                    _ => Some((char::from_u32(u32::from(unit))?, 5)),
                };
            }
            _ => return None,
        };
        Some((c, 1))
    }

    fn hex4(&self, at: usize) -> Option<u16> {
        let digits = self.text.get(at..at + 4)?;
        if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u16::from_str_radix(digits, 16).ok()
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
        self.pos - start
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`, as `serde_json` represents it: a
    /// `u64`, a negative `i64`, else (fractions, exponents, `-0`, integers out of range) an
    /// `f64`, which must be finite.
    fn number(&mut self) -> Option<Number> {
        let start = self.pos;
        let negative = self.peek() == Some(b'-');
        if negative {
            self.pos += 1;
        }
        match self.peek()? {
            b'0' => self.pos += 1,
            b'1'..=b'9' => {
                self.digits();
            }
            _ => return None,
        }
        let mut integer = true;
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if self.digits() == 0 {
                return None;
            }
            integer = false;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            if self.digits() == 0 {
                return None;
            }
            integer = false;
        }
        let text = self.text.get(start..self.pos)?;
        if integer {
            if negative {
                match text.parse::<i64>() {
                    Ok(n) if n != 0 => return Some(n.into()),
                    _ => {}
                }
            } else if let Ok(n) = text.parse::<u64>() {
                return Some(n.into());
            }
        }
        let x: f64 = text.parse().ok()?;
        Number::from_f64(x)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::Value;

    /// The value of parsed nodes.
    fn to_value(nodes: &[Node<'_>]) -> Value {
        super::super::tree::Json::of(nodes).to_value()
    }

    /// Both parsers agree: the same tree, or both refuse.
    fn agrees(text: &str) {
        let ours = parse(text).map(|n| to_value(&n));
        let theirs = serde_json::from_str::<Value>(text).ok();
        assert_eq!(ours, theirs, "{text:?}");
    }

    #[test]
    fn valid_texts_give_serde_jsons_tree() {
        for t in [
            r#"{"a":1,"b":[true,false,null],"c":{"d":"e"},"a":2}"#,
            " \t\n\r{ \"k\" : [ 1 , -2 , 3.5 , -0.25e-3 , 1E+2 , 0 ] } \n",
            r#""plain""#,
            r#""esc \" \\ \/ \b \f \n \r \t \u0041 \u00e9 \u20ac \ud83d\ude00 end""#,
            "\"raw ünï 😀 \u{7f}\"",
            "[]",
            "{}",
            "[[],{},[{}]]",
            "-0",
            "0",
            "18446744073709551615",
            "18446744073709551616",
            "-9223372036854775808",
            "-9223372036854775809",
            "1.7976931348623157e308",
            "123456789012345678901234567890",
            "true",
            "null",
        ] {
            agrees(t);
            assert!(parse(t).is_some(), "{t:?}");
        }
    }

    #[test]
    fn invalid_texts_are_refused_as_serde_json_refuses_them() {
        for t in [
            "",
            " ",
            "{",
            "}",
            "[1,]",
            "{\"a\":1,}",
            "{\"a\" 1}",
            "{a:1}",
            "{\"a\":1 \"b\":2}",
            "[1 2]",
            "01",
            "-",
            "-01",
            "1.",
            ".5",
            "1e",
            "1e+",
            "+1",
            "1.5e999",
            "-1e999",
            "NaN",
            "Infinity",
            "tru",
            "nulll",
            "\"unterminated",
            "\"raw \n newline\"",
            "\"tab\there\"",
            "\"bad \\x escape\"",
            "\"short \\u12\"",
            "\"\\uZZZZ\"",
            "\"lone \\ud800\"",
            "\"lone \\udc00\"",
            "\"pair \\ud800\\u0041\"",
            "\"pair \\ud800x\"",
            "{} {}",
            "[] x",
            "'single'",
            "[1,,2]",
        ] {
            agrees(t);
            assert!(parse(t).is_none(), "{t:?}");
        }
    }

    #[test]
    fn nesting_stops_where_serde_json_stops() {
        for depth in [1, 126, 127, 128, 129, 1000] {
            for (open, close) in [("[", "]"), ("{\"k\":", "}")] {
                let mut t = open.repeat(depth);
                t.push('1');
                t.push_str(&close.repeat(depth));
                agrees(&t);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Random texts over JSON's alphabet: most are invalid, and must be refused as
        /// `serde_json` refuses them.
        #[test]
        fn random_texts_agree(t in "[\\[\\]{}\":,0-9.eE+\\-a-z\\\\ \t\n]{0,24}") {
            let ours = parse(&t).map(|n| to_value(&n));
            let theirs = serde_json::from_str::<Value>(&t).ok();
            prop_assert_eq!(ours.is_some(), theirs.is_some(), "{:?}", t);
            // Floats aside (this parser rounds correctly; `serde_json`'s fast path may differ
            // in the last place), the trees are the same.
            if !t.contains(['.', 'e', 'E']) {
                prop_assert_eq!(ours, theirs, "{:?}", t);
            }
        }

        /// Any `Value` serde_json writes, read back to the same tree.
        #[test]
        fn written_values_agree(v in arb_value()) {
            let text = serde_json::to_string(&v).unwrap();
            prop_assert_eq!(parse(&text).map(|n| to_value(&n)), Some(v));
        }
    }

    fn arb_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<u64>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            (-1e6f64..1e6).prop_map(|x| Value::from((x * 64.0).round() / 64.0)),
            ".*".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map(".{0,8}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }
}
