//! Task results written as JSON by hand, byte for byte as serde_json writes their
//! `Serialize` forms (`encode.rs`), which stay the authority: every reply a partner sends is
//! a task result, and through serde each key went through the string escaper and each field
//! through the map machinery (a fifth of a partner's task lifecycle, `BENCHMARKS.md`). Here a
//! key is one constant copy and a string value is checked eight bytes at a time and copied;
//! a string that needs escaping, and every value of open shape (`metadata`, `data`,
//! `mentions`, histories of commands, numeric ids), is written by serde_json itself.
//!
//! `tests/roundtrip.rs` (`hand_written_results_are_what_serde_writes`) compares the two on
//! arbitrary results in both dialects, escapes and non-ASCII text included.

use serde::Serialize;

use crate::time::Timestamp;
use crate::wire::command::TaskCommand;
use crate::wire::data::{DataItem, Mentions, Product, SenderRole, TaskStatus};
use crate::wire::encode::InDialect;
use crate::wire::jsonrpc::RpcId;
use crate::wire::task::{Header, TaskResult};
use crate::wire::Dialect;

/// A task result's fields, borrowed: from a [`TaskResult`], or straight from an engine's task
/// (a partner's reply is written without building a result).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ResultParts<'a> {
    pub(crate) id: Option<&'a str>,
    pub(crate) sent_at: Option<&'a Timestamp>,
    pub(crate) sender_role: Option<SenderRole>,
    pub(crate) sender_id: Option<&'a str>,
    pub(crate) mentions: Option<&'a Mentions>,
    pub(crate) data_items: Option<&'a [DataItem]>,
    pub(crate) group_id: Option<&'a str>,
    pub(crate) session_id: Option<&'a str>,
    pub(crate) task_id: &'a str,
    pub(crate) status: &'a TaskStatus,
    pub(crate) products: Option<&'a [Product]>,
    pub(crate) command_history: Option<&'a [TaskCommand]>,
    pub(crate) status_history: Option<&'a [TaskStatus]>,
}

impl<'a> ResultParts<'a> {
    /// The parts of `t`.
    pub(crate) fn of(t: &'a TaskResult) -> Self {
        let h = &t.header;
        ResultParts {
            id: h.id.as_deref(),
            sent_at: h.sent_at.as_ref(),
            sender_role: h.sender_role,
            sender_id: h.sender_id.as_deref(),
            mentions: h.mentions.as_ref(),
            data_items: h.data_items.as_deref(),
            group_id: h.group_id.as_deref(),
            session_id: h.session_id.as_deref(),
            task_id: &t.task_id,
            status: &t.status,
            products: t.products.as_deref(),
            command_history: t.command_history.as_deref(),
            status_history: t.status_history.as_deref(),
        }
    }

    /// An owned result with these parts.
    pub(crate) fn to_result(self) -> TaskResult {
        TaskResult {
            header: Header {
                id: self.id.map(str::to_owned),
                sent_at: self.sent_at.copied(),
                sender_role: self.sender_role,
                sender_id: self.sender_id.map(str::to_owned),
                mentions: self.mentions.cloned(),
                data_items: self.data_items.map(<[DataItem]>::to_vec),
                group_id: self.group_id.map(str::to_owned),
                session_id: self.session_id.map(str::to_owned),
            },
            task_id: self.task_id.to_owned(),
            status: self.status.clone(),
            products: self.products.map(<[Product]>::to_vec),
            command_history: self.command_history.map(<[TaskCommand]>::to_vec),
            status_history: self.status_history.map(<[TaskStatus]>::to_vec),
        }
    }
}

/// Where the first `"`, `\\` or control character (below 0x20) of `b` is, eight bytes at a
/// time; `None` when there is none (the bytes are a JSON string's content as they are).
pub(crate) fn string_end(b: &[u8]) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let zero_byte = |x: u64| x.wrapping_sub(LO) & !x & HI;
    let mut i = 0;
    while let Some(word) = b.get(i..i + 8).and_then(|c| <[u8; 8]>::try_from(c).ok()) {
        let v = u64::from_le_bytes(word);
        let quote = zero_byte(v ^ (LO * u64::from(b'"')));
        let backslash = zero_byte(v ^ (LO * u64::from(b'\\')));
        // Bytes below 0x20 (a byte at or above 0x80 never sets its own high bit here).
        let control = v.wrapping_sub(LO * 0x20) & !v & HI;
        let found = quote | backslash | control;
        if found != 0 {
            // The lowest flagged byte is exact (a false flag can only follow a true one).
            return Some(i + (found.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    b.get(i..)?
        .iter()
        .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
        .map(|p| i + p)
}

/// Any value, by serde_json (the open shapes, and the fallbacks).
fn value<T: Serialize + ?Sized>(out: &mut Vec<u8>, v: &T) {
    // Writing into a `Vec` cannot fail for these types: every map key is a string, and a
    // float JSON cannot hold only occurs inside a caller's valid `serde_json::Value`.
    let _ = serde_json::to_writer(&mut *out, v);
}

/// A string value: copied between quotes when it needs no escape, else serde_json's escaping.
fn string(out: &mut Vec<u8>, s: &str) {
    if string_end(s.as_bytes()).is_some() {
        return value(out, s);
    }
    out.reserve(s.len() + 2);
    out.push(b'"');
    out.extend_from_slice(s.as_bytes());
    out.push(b'"');
}

/// A constant: `,"key":` or a whole literal fragment (never escaped, so it must need none).
fn raw(out: &mut Vec<u8>, s: &'static str) {
    out.extend_from_slice(s.as_bytes());
}

fn time(out: &mut Vec<u8>, t: &Timestamp) {
    let mut buf = [0u8; 40];
    let n = t.write_to(&mut buf);
    // RFC 3339 text: digits and `-:T.+Z`, nothing to escape.
    out.push(b'"');
    out.extend_from_slice(buf.get(..n).unwrap_or_default());
    out.push(b'"');
}

/// `,"key":"value"` when present.
fn opt_string(out: &mut Vec<u8>, key: &'static str, v: Option<&str>) {
    if let Some(v) = v {
        raw(out, key);
        string(out, v);
    }
}

fn metadata(out: &mut Vec<u8>, m: Option<&crate::wire::data::JsonObject>) {
    if let Some(m) = m {
        raw(out, ",\"metadata\":");
        value(out, m);
    }
}

fn data_item(out: &mut Vec<u8>, item: &DataItem) {
    match item {
        DataItem::Text { text, metadata: m } => {
            raw(out, "{\"type\":\"text\",\"text\":");
            string(out, text);
            metadata(out, m.as_ref());
        }
        DataItem::File {
            name,
            mime_type,
            uri,
            bytes,
            metadata: m,
        } => {
            raw(out, "{\"type\":\"file\"");
            opt_string(out, ",\"name\":", name.as_deref());
            opt_string(out, ",\"mimeType\":", mime_type.as_deref());
            opt_string(out, ",\"uri\":", uri.as_deref());
            opt_string(out, ",\"bytes\":", bytes.as_deref());
            metadata(out, m.as_ref());
        }
        DataItem::Data { data, metadata: m } => {
            raw(out, "{\"type\":\"data\",\"data\":");
            value(out, data);
            metadata(out, m.as_ref());
        }
    }
    out.push(b'}');
}

/// `[a,b,…]` of `each`.
fn list<T>(out: &mut Vec<u8>, items: &[T], mut each: impl FnMut(&mut Vec<u8>, &T)) {
    out.push(b'[');
    for (n, item) in items.iter().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        each(out, item);
    }
    out.push(b']');
}

fn opt_data_items(out: &mut Vec<u8>, key: &'static str, items: Option<&[DataItem]>) {
    if let Some(items) = items {
        raw(out, key);
        list(out, items, data_item);
    }
}

fn status(out: &mut Vec<u8>, s: &TaskStatus) {
    raw(out, "{\"state\":");
    string(out, s.state.as_str());
    raw(out, ",\"stateChangedAt\":");
    time(out, &s.state_changed_at);
    opt_data_items(out, ",\"dataItems\":", s.data_items.as_deref());
    out.push(b'}');
}

fn product(out: &mut Vec<u8>, p: &Product) {
    raw(out, "{\"id\":");
    string(out, &p.id);
    opt_string(out, ",\"name\":", p.name.as_deref());
    opt_string(out, ",\"description\":", p.description.as_deref());
    raw(out, ",\"dataItems\":");
    list(out, &p.data_items, data_item);
    out.push(b'}');
}

/// What follows `"status":…` in both dialects: products and histories.
fn products_and_histories(out: &mut Vec<u8>, t: &ResultParts<'_>, d: Dialect) {
    if let Some(products) = t.products {
        raw(out, ",\"products\":");
        list(out, products, product);
    }
    if let Some(h) = t.command_history {
        raw(
            out,
            match d {
                Dialect::V1 => ",\"messageHistory\":",
                Dialect::V2 => ",\"commandHistory\":",
            },
        );
        value(out, &InDialect(h, d));
    }
    if let Some(h) = t.status_history {
        raw(out, ",\"statusHistory\":");
        list(out, h, status);
    }
}

/// A task result in `d`, as `InDialect(result, d)` serialises.
pub(crate) fn task_result(out: &mut Vec<u8>, t: &ResultParts<'_>, d: Dialect) {
    match d {
        Dialect::V1 => {
            raw(out, "{\"type\":\"task\",\"id\":");
            string(out, t.task_id);
            opt_string(out, ",\"senderId\":", t.sender_id);
            raw(out, ",\"status\":");
            status(out, t.status);
            products_and_histories(out, t, d);
            opt_string(out, ",\"groupId\":", t.group_id);
            raw(out, ",\"sessionId\":");
            string(out, t.session_id.unwrap_or(""));
        }
        Dialect::V2 => {
            raw(out, "{\"type\":\"task-result\",\"id\":");
            match t.id {
                Some(id) => string(out, id),
                // Only for a result built without a message id (never by the engines).
                None => string(out, &format!("result-{}", t.task_id)),
            }
            raw(out, ",\"sentAt\":");
            time(out, t.sent_at.unwrap_or(&t.status.state_changed_at));
            raw(out, ",\"senderRole\":");
            string(out, t.sender_role.unwrap_or(SenderRole::Partner).as_str());
            raw(out, ",\"senderId\":");
            string(out, t.sender_id.unwrap_or(""));
            if let Some(m) = t.mentions {
                raw(out, ",\"mentions\":");
                value(out, m);
            }
            opt_data_items(out, ",\"dataItems\":", t.data_items);
            opt_string(out, ",\"groupId\":", t.group_id);
            opt_string(out, ",\"sessionId\":", t.session_id);
            raw(out, ",\"taskId\":");
            string(out, t.task_id);
            raw(out, ",\"status\":");
            status(out, t.status);
            products_and_histories(out, t, d);
        }
    }
    out.push(b'}');
}

/// A JSON-RPC id (`null`, a string, or a number as written).
pub(crate) fn rpc_id(out: &mut Vec<u8>, id: &RpcId) {
    match id {
        RpcId::Null => raw(out, "null"),
        RpcId::Str(s) => string(out, s),
        RpcId::Num(n) => value(out, n),
    }
}

#[cfg(test)]
mod tests {
    use super::string_end;

    /// Every special byte at every place of strings up to 40 bytes, before and after other
    /// specials and bytes that only look near them (0x20, 0x7f, 0x80, 0xa0, 0xff).
    #[test]
    fn string_end_finds_the_first_special_byte_as_a_byte_scan_does() {
        let naive = |b: &[u8]| b.iter().position(|&c| c == b'"' || c == b'\\' || c < 0x20);
        let specials = [b'"', b'\\', 0x00, 0x01, 0x1f];
        let fillers = [b'a', 0x20, 0x7f, 0x80, 0xa0, 0xff, b'!', b']', b'#', b'^'];
        for len in 0..40 {
            for &fill in &fillers {
                let mut b = vec![fill; len];
                assert_eq!(string_end(&b), naive(&b));
                for at in 0..len {
                    for &s in &specials {
                        b[at] = s;
                        assert_eq!(string_end(&b), naive(&b), "{b:?}");
                        for later in at + 1..len {
                            let keep = b[later];
                            b[later] = specials[later % specials.len()];
                            assert_eq!(string_end(&b), naive(&b), "{b:?}");
                            b[later] = keep;
                        }
                        b[at] = fill;
                    }
                }
            }
        }
    }
}
