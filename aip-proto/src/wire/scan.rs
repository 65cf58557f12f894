//! The fastest way in for the commonest body, a command request (`rpc`, `stream`,
//! `notification/start`): a small scanner reads the envelope and the command's plain string
//! fields itself and hands every other value (`dataItems`, `commandParams`, `mentions`, a
//! numeric `id`, unknown fields) to serde_json, one value at a time.
//!
//! It is only a shortcut: whenever the body is anything but the plain case (a string with an
//! escape, a duplicated field, a value serde_json refuses, bad JSON, another method), it
//! answers `None` and the body goes the general serde way, which decides what the body means
//! and which error it earns. So it never accepts what the general way refuses, and gives the
//! same value for what both accept (a property test compares them on arbitrary bodies).
//!
//! Implementation note: with serde_json decoding the whole request (typed structs, one pass)
//! took about 11,000 instructions for a 349-byte start, a third of a partner lifecycle
//! (BENCHMARKS.md).

use std::borrow::Cow;

use serde::Deserialize;

use crate::time::Timestamp;
use crate::wire::command::CommandKind;
use crate::wire::data::{DataItem, SenderRole};
use crate::wire::decode::{RawCommand, RawCommandParams};
use crate::wire::jsonrpc::RpcId;
use crate::wire::write::string_end;

/// What the shortcut reads of a command request.
pub(crate) struct Scanned<'a> {
    pub(crate) jsonrpc: Option<&'a str>,
    pub(crate) method: Option<&'a str>,
    pub(crate) id: Option<RpcId>,
    pub(crate) params: Option<RawCommandParams>,
}

struct Scanner<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Scanner<'a> {
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.peek() {
            self.at += 1;
        }
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        self.skip_ws();
        (self.peek()? == c).then(|| self.at += 1)
    }

    /// A string without escapes or control characters (else `None`: the general way).
    fn plain_string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let rest = self.text.as_bytes().get(self.at..)?;
        let len = string_end(rest)?;
        if rest[len] != b'"' {
            return None;
        }
        let s = self.text.get(self.at..self.at + len)?;
        self.at += len + 1;
        Some(s)
    }

    /// `null` (consumed) or not (nothing consumed).
    fn null(&mut self) -> bool {
        self.skip_ws();
        let yes = self.text.as_bytes().get(self.at..self.at + 4) == Some(b"null");
        if yes {
            self.at += 4;
        }
        yes
    }

    /// One value of any kind, read by serde_json.
    fn value<T: Deserialize<'a>>(&mut self) -> Option<T> {
        self.skip_ws();
        let rest = self.text.get(self.at..)?;
        let mut values = serde_json::Deserializer::from_str(rest).into_iter::<T>();
        let v = values.next()?.ok()?;
        self.at += values.byte_offset();
        Some(v)
    }

    /// A field of `Option` type: null is absent; a plain string goes through `from_str`,
    /// anything else through serde_json (as the type's `Deserialize` reads it).
    fn opt<T: Deserialize<'a>>(
        &mut self,
        from_str: impl FnOnce(&'a str) -> Option<T>,
    ) -> Option<Option<T>> {
        if self.null() {
            return Some(None);
        }
        if self.peek() == Some(b'"') {
            let s = self.plain_string()?;
            return from_str(s).map(Some);
        }
        self.value::<T>().map(Some)
    }

    /// Walks an object: `field(self, key)` reads each value (and answers `None` to give up).
    fn object(&mut self, mut field: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.list(b'{', b'}', |sc| {
            let key = sc.plain_string()?;
            sc.eat(b':')?;
            field(sc, key)
        })
    }

    /// Walks an array: `each(self)` reads each element (and answers `None` to give up).
    fn array(&mut self, each: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.list(b'[', b']', each)
    }

    /// `open`, elements separated by commas (each read by `each`), `close`.
    fn list(
        &mut self,
        open: u8,
        close: u8,
        mut each: impl FnMut(&mut Self) -> Option<()>,
    ) -> Option<()> {
        self.eat(open)?;
        self.skip_ws();
        if self.peek() == Some(close) {
            self.at += 1;
            return Some(());
        }
        loop {
            each(self)?;
            self.skip_ws();
            match self.peek()? {
                b',' => self.at += 1,
                c if c == close => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// A field whose value serde_json reads whole (`null` is absent).
    fn any<T: Deserialize<'a>>(&mut self) -> Option<Option<T>> {
        self.value::<Option<T>>()
    }

    /// `dataItems`: a list of plain text items (`{"type":"text","text":…}`, the common
    /// case) read in place; any other value from the start again by serde_json.
    fn data_items(&mut self) -> Option<Option<Vec<DataItem>>> {
        let start = self.at;
        if let Some(items) = self.text_items() {
            return Some(Some(items));
        }
        self.at = start;
        self.any()
    }

    fn text_items(&mut self) -> Option<Vec<DataItem>> {
        let mut items = Vec::new();
        self.array(|sc| {
            let (mut ty, mut text) = (None, None);
            let mut seen = 0u32;
            sc.object(|sc, key| match key {
                "type" => once(&mut ty, &mut seen, 1, Some(sc.plain_string()?)),
                "text" => once(&mut text, &mut seen, 2, Some(sc.plain_string()?)),
                _ => None,
            })?;
            if ty != Some("text") {
                return None;
            }
            if items.is_empty() {
                // Most lists hold one item: room for one, not the default four.
                items.reserve_exact(1);
            }
            items.push(DataItem::text(text?));
            Some(())
        })?;
        Some(items)
    }

    /// A value this scanner does not want, checked as serde_json checks what it ignores.
    fn ignore(&mut self) -> Option<()> {
        self.value::<serde::de::IgnoredAny>().map(|_| ())
    }
}

/// Sets `slot` once (a second time means a duplicated field: give up).
fn once<T>(slot: &mut Option<T>, seen: &mut u32, bit: u32, v: Option<T>) -> Option<()> {
    if *seen & bit != 0 {
        return None;
    }
    *seen |= bit;
    *slot = v;
    Some(())
}

fn owned(s: &str) -> Option<String> {
    Some(s.to_owned())
}

/// A command's `type` when it is one of the two a command may have (else the general way).
fn command_type(s: &str) -> Option<Cow<'static, str>> {
    match s {
        "task-command" => Some(Cow::Borrowed("task-command")),
        "message" => Some(Cow::Borrowed("message")),
        _ => None,
    }
}

fn command(sc: &mut Scanner<'_>) -> Option<Option<Box<RawCommand>>> {
    if sc.null() {
        return Some(None);
    }
    let mut c = Box::<RawCommand>::default();
    let mut seen = 0u32;
    sc.object(|sc, key| {
        let s = &mut seen;
        match key {
            "type" => once(&mut c.ty, s, 1, sc.opt(command_type)?),
            "id" => once(&mut c.id, s, 1 << 1, sc.opt(owned)?),
            "sentAt" => once(
                &mut c.sent_at,
                s,
                1 << 2,
                sc.opt(|t| Timestamp::parse_rfc3339(t).ok())?,
            ),
            "senderRole" => once(&mut c.sender_role, s, 1 << 3, sc.opt(SenderRole::parse)?),
            "senderId" => once(&mut c.sender_id, s, 1 << 4, sc.opt(owned)?),
            "mentions" => once(&mut c.mentions, s, 1 << 5, sc.any()?),
            "command" => once(
                &mut c.command,
                s,
                1 << 6,
                sc.opt(|k| Some(CommandKind::parse(k)))?,
            ),
            "commandParams" => once(&mut c.command_params, s, 1 << 7, sc.any()?),
            "dataItems" => once(&mut c.data_items, s, 1 << 8, sc.data_items()?),
            "taskId" => once(&mut c.task_id, s, 1 << 9, sc.opt(owned)?),
            "groupId" => once(&mut c.group_id, s, 1 << 10, sc.opt(owned)?),
            "sessionId" => once(&mut c.session_id, s, 1 << 11, sc.opt(owned)?),
            _ => sc.ignore(),
        }
    })?;
    Some(Some(c))
}

/// Reads a command request the plain way, or `None` (then the general way decides).
pub(crate) fn command_request(body: &str) -> Option<Scanned<'_>> {
    let mut sc = Scanner { text: body, at: 0 };
    let mut out = Scanned {
        jsonrpc: None,
        method: None,
        id: None,
        params: None,
    };
    let mut seen = 0u32;
    sc.object(|sc, key| match key {
        "jsonrpc" => once(&mut out.jsonrpc, &mut seen, 1, sc.opt(Some)?),
        "method" => once(&mut out.method, &mut seen, 1 << 1, sc.opt(Some)?),
        "id" => {
            let id = sc.opt(|s| Some(RpcId::Str(s.to_owned())))?;
            once(&mut out.id, &mut seen, 1 << 2, Some(id.unwrap_or_default()))
        }
        "params" => {
            if sc.null() {
                return once(&mut out.params, &mut seen, 1 << 3, None);
            }
            let mut p = RawCommandParams::default();
            let mut seen_p = 0u32;
            sc.object(|sc, key| match key {
                "command" => once(&mut p.command, &mut seen_p, 1, command(sc)?),
                "message" => once(&mut p.message, &mut seen_p, 2, command(sc)?),
                _ => sc.ignore(),
            })?;
            once(&mut out.params, &mut seen, 1 << 3, Some(p))
        }
        _ => sc.ignore(),
    })?;
    sc.skip_ws();
    if sc.at != body.len() {
        return None;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::decode::{decode_fast, decode_fast_serde};
    use proptest::prelude::*;

    const PLAIN: &str = r#"{"jsonrpc":"2.0","method":"rpc","id":"7","params":{"command":{"type":"task-command","id":"cmd-1","sentAt":"2025-09-01T03:58:00.123456+00:00","senderRole":"leader","senderId":"leader-aic","dataItems":[{"type":"text","text":"Plan a trip."}],"sessionId":"session-1","command":"start","taskId":"task-1"}}}"#;

    #[test]
    fn a_plain_command_request_is_read_by_the_scanner_as_serde_reads_it() {
        let s = command_request(PLAIN).expect("the scanner reads a plain request");
        assert_eq!(s.method, Some("rpc"));
        let fast = decode_fast(PLAIN.as_bytes()).expect("a command request");
        assert_eq!(Some(&fast), decode_fast_serde(PLAIN).as_ref());
        assert_eq!(fast.id, RpcId::Str("7".into()));
    }

    #[test]
    fn what_is_not_plain_is_left_to_serde() {
        for body in [
            r#"{"jsonrpc":"2.0","method":"r\u0070c","id":1,"params":{}}"#,
            r#"{"id":1,"id":2}"#,
            r#"{"a":1} x"#,
            r#"["2.0","rpc"]"#,
            "{\"method\":\"rpc\n\"}",
        ] {
            assert!(command_request(body).is_none(), "{body}");
        }
    }

    #[test]
    fn a_hostile_body_is_refused_as_serde_refuses_it_without_exhausting_the_stack() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let cut = &PLAIN[..PLAIN.len() - 3];
        for body in [
            format!(r#"{cut},"x":{deep}}}}}}}"#),
            PLAIN.replace(r#""dataItems":["#, &format!(r#""dataItems":[{deep},"#)),
            format!("{}{PLAIN}", " ".repeat(1 << 20)),
            PLAIN.replace("task-1", &"t".repeat(1 << 20)),
        ] {
            let fast = decode_fast(body.as_bytes());
            assert_eq!(
                format!("{fast:?}"),
                format!("{:?}", decode_fast_serde(&body))
            );
            let _ = crate::wire::decode_request(body.as_bytes());
        }
        // The long id and the leading blanks are plain: the scanner reads them.
        let long = PLAIN.replace("task-1", &"t".repeat(1 << 20));
        assert!(command_request(&long).is_some());
    }

    /// JSON values of the kinds a peer may send in each place.
    fn value() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("null".to_owned()),
            Just("true".to_owned()),
            Just("12".to_owned()),
            Just("-1.5e3".to_owned()),
            Just("01".to_owned()),
            Just("\"\"".to_owned()),
            Just("\"a\\\"b\\u0041\\n\"".to_owned()),
            Just("\"\\ud800\"".to_owned()),
            Just("\"2.0\"".to_owned()),
            Just("\"rpc\"".to_owned()),
            Just("\"stream\"".to_owned()),
            Just("\"notification/start\"".to_owned()),
            Just("\"task-command\"".to_owned()),
            Just("\"message\"".to_owned()),
            Just("\"task-result\"".to_owned()),
            Just("\"LEADER\"".to_owned()),
            Just("\"partner\"".to_owned()),
            Just("\"Start\"".to_owned()),
            Just("\"re_stream\"".to_owned()),
            Just("\"all\"".to_owned()),
            Just("[\"a\",\"b\"]".to_owned()),
            Just("[1]".to_owned()),
            Just("\"2025-09-01T11:58:00+08:00\"".to_owned()),
            Just("\"2025-09-01 11:58\"".to_owned()),
            Just("[{\"type\":\"text\",\"text\":\"hi\",\"metadata\":{\"n\":1.5}}]".to_owned()),
            Just("[{\"type\":\"file\"}]".to_owned()),
            text_item_lists(),
            Just("{\"k\":[1,{\"x\":null}]}".to_owned()),
            Just("{}".to_owned()),
            Just("[]".to_owned()),
            "[a-z]{0,12}".prop_map(|s| format!("\"{s}\"")),
            "[^\"\\\\]{0,12}".prop_map(|s| format!("\"{s}\"")),
        ]
    }

    /// `dataItems` lists near the plain text items the scanner reads itself.
    fn text_item_lists() -> BoxedStrategy<String> {
        prop_oneof![
            Just(
                "[{\"type\":\"text\",\"text\":\"a\"}, { \"text\" : \"b\" , \"type\":\"text\"}]"
                    .to_owned()
            ),
            Just("[{\"type\":\"text\",\"type\":\"text\",\"text\":\"a\"}]".to_owned()),
            Just("[{\"type\":\"text\"}]".to_owned()),
            Just("[{\"type\":\"text\",\"text\":null}]".to_owned()),
            Just("[{\"type\":null,\"text\":\"a\"}]".to_owned()),
            Just("[{\"type\":\"TEXT\",\"text\":\"a\"}]".to_owned()),
            Just("[{\"type\":\"text\",\"text\":\"a\\nb\"}]".to_owned()),
            Just("[{\"type\":\"text\",\"text\":\"a\"},]".to_owned()),
            Just("[{\"type\":\"text\",\"text\":\"a\"}".to_owned()),
            Just("[{\"type\":\"text\",\"text\":\"a\"} {}]".to_owned()),
            Just("[{},{\"type\":\"text\",\"text\":\"a\"}]".to_owned()),
            Just("[null]".to_owned()),
        ]
        .boxed()
    }

    const COMMAND_KEYS: [&str; 14] = [
        "type",
        "id",
        "sentAt",
        "senderRole",
        "senderId",
        "mentions",
        "command",
        "commandParams",
        "dataItems",
        "taskId",
        "groupId",
        "sessionId",
        "extra",
        "Id",
    ];

    fn ws() -> impl Strategy<Value = &'static str> {
        prop_oneof![4 => Just(""), 1 => Just(" "), 1 => Just("\n\t ")]
    }

    /// An object with fields drawn from `keys`, in any order, sometimes repeated.
    fn object(
        keys: &'static [&'static str],
        field: impl Strategy<Value = String>,
    ) -> impl Strategy<Value = String> {
        prop::collection::vec(
            (prop::sample::select(keys), field, ws(), ws()),
            0..keys.len() + 2,
        )
        .prop_map(|fields| {
            let body: Vec<String> = fields
                .into_iter()
                .map(|(k, v, a, b)| format!("{a}\"{k}\"{b}:{a}{v}{b}"))
                .collect();
            format!("{{{}}}", body.join(","))
        })
    }

    fn command() -> impl Strategy<Value = String> {
        prop_oneof![
            3 => object(&COMMAND_KEYS, value()),
            1 => value(),
        ]
    }

    fn params() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => object(&["command", "message", "other"], command()),
            1 => value(),
        ]
    }

    fn request() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => object(&["jsonrpc", "method", "id", "params", "x"], prop_oneof![
                2 => params(),
                3 => value(),
            ]),
            1 => value(),
        ]
    }

    /// A field that is mostly its valid value, sometimes anything.
    fn mostly(valid: &'static str) -> impl Strategy<Value = String> {
        prop_oneof![5 => Just(valid.to_owned()), 1 => value()]
    }

    /// An unknown field, or a known one again (a duplicate).
    fn extra_key() -> impl Strategy<Value = String> {
        prop_oneof![
            3 => "[a-zA-Z]{1,8}".boxed(),
            1 => prop::sample::select(vec!["id", "taskId", "sentAt", "command", "method"])
                .prop_map(String::from)
                .boxed(),
        ]
    }

    /// An object of the given fields, shuffled, some left out, some unknown ones added.
    fn fields(list: Vec<(&'static str, BoxedStrategy<String>)>) -> BoxedStrategy<String> {
        let n = list.len();
        let (keys, values): (Vec<_>, Vec<_>) = list.into_iter().unzip();
        (
            values,
            prop::collection::vec(prop::bool::weighted(0.05), n),
            prop::collection::vec((extra_key(), value()), 0..3),
            ws(),
        )
            .prop_map(move |(vals, drop, extra, w)| {
                let mut fields: Vec<String> = keys
                    .iter()
                    .zip(vals)
                    .zip(drop)
                    .filter(|(_, d)| !*d || keys.len() < 4)
                    .map(|((k, v), _)| format!("\"{k}\":{w}{v}"))
                    .collect();
                fields.extend(extra.into_iter().map(|(k, v)| format!("\"{k}\"{w}:{v}")));
                fields
            })
            .prop_shuffle()
            .prop_map(|f| format!("{{{}}}", f.join(",")))
            .boxed()
    }

    fn near_valid_request() -> impl Strategy<Value = String> {
        let command = fields(vec![
            ("type", mostly("\"task-command\"").boxed()),
            ("id", mostly("\"cmd-1\"").boxed()),
            (
                "sentAt",
                mostly("\"2025-09-01T03:58:00.123+00:00\"").boxed(),
            ),
            ("senderRole", mostly("\"leader\"").boxed()),
            ("senderId", mostly("\"leader-aic\"").boxed()),
            ("command", mostly("\"start\"").boxed()),
            ("taskId", mostly("\"task-1\"").boxed()),
            ("sessionId", mostly("\"s-1\"").boxed()),
            (
                "dataItems",
                prop_oneof![
                    8 => mostly("[{\"type\":\"text\",\"text\":\"hi\"}]"),
                    1 => text_item_lists(),
                ]
                .boxed(),
            ),
        ]);
        let params = prop_oneof![Just("command"), Just("message")].prop_flat_map(move |k| {
            command
                .clone()
                .prop_map(move |c| format!("{{\"{k}\":{c}}}"))
        });
        fields(vec![
            ("jsonrpc", mostly("\"2.0\"").boxed()),
            ("method", mostly("\"rpc\"").boxed()),
            ("id", mostly("\"1\"").boxed()),
            ("params", params.boxed()),
        ])
    }

    #[test]
    fn most_near_valid_requests_are_read_by_the_scanner_and_agree() {
        use proptest::strategy::ValueTree;
        use proptest::test_runner::TestRunner;
        let mut runner = TestRunner::deterministic();
        let strategy = near_valid_request();
        let (mut scanned, mut decoded) = (0, 0);
        for _ in 0..3000 {
            let body = strategy.new_tree(&mut runner).unwrap().current();
            let fast = decode_fast(body.as_bytes());
            assert_eq!(
                format!("{fast:?}"),
                format!("{:?}", decode_fast_serde(&body)),
                "{body}"
            );
            scanned += usize::from(command_request(&body).is_some());
            decoded += usize::from(fast.is_some());
        }
        // The strategy must reach the scanner's paths, not only its refusals.
        assert!(scanned > 600 && decoded > 300, "{scanned} {decoded}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]
        #[test]
        fn the_scanner_never_reads_a_body_otherwise_than_serde(body in request()) {
            let fast = decode_fast(body.as_bytes());
            let serde = decode_fast_serde(&body);
            prop_assert_eq!(format!("{fast:?}"), format!("{serde:?}"), "{}", body);
        }
    }
}
