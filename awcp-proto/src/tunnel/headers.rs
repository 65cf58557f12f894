//! HTTP header lists on the tunnel: how frames carry them, and which ones a relay does not
//! forward.
//!
//! Headers are a list of `(name, value)` pairs ([`Headers`]). A reference frame carries them as
//! a JSON object (`Record<string, string>` in the reference), so a name that appears twice is
//! written once with its values joined by `", "`; an extension frame carries them as a list of
//! `[name, value]` pairs, which keeps repeated names and order. Both forms are read from
//! either shape, leniently as a JavaScript peer would: a number or boolean value is taken as
//! its text, an array value as its elements joined by `", "` (Node's form of a repeated
//! header), a `null` value is skipped.

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde::Deserialize;

/// An HTTP header list: `(name, value)` pairs in order, names as they came.
pub type Headers = Vec<(String, String)>;

/// At most this many headers are read from one frame; a frame with more is malformed.
pub const MAX_HEADERS: usize = 256;

/// The hop-by-hop headers (RFC 9110 §7.6.1) plus `host`: they describe one connection, not
/// the message, so a relay never forwards them (its own HTTP server and the executor's local
/// request set their own).
pub const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
];

/// Whether `name` is one of [`HOP_BY_HOP`] (case-insensitive).
pub fn is_hop_by_hop(name: &str) -> bool {
    HOP_BY_HOP.iter().any(|h| h.eq_ignore_ascii_case(name))
}

/// `headers` without the hop-by-hop ones, names lowercased (HTTP names are case-insensitive;
/// one case makes the reference's object form unambiguous).
pub fn forwardable(headers: &[(String, String)]) -> Headers {
    headers
        .iter()
        .filter(|(n, _)| !is_hop_by_hop(n))
        .map(|(n, v)| (n.to_ascii_lowercase(), v.clone()))
        .collect()
}

/// The first value of `name` (case-insensitive).
pub fn get<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// Serde `with` module: a JSON object, repeated names joined (reference frames).
pub mod as_object {
    use super::*;

    /// Writes `headers` as an object; a repeated name (case-insensitive) is written once, at
    /// its first place, with its values joined by `", "`.
    pub fn serialize<S: Serializer>(headers: &Headers, s: S) -> Result<S::Ok, S::Error> {
        let mut merged: Vec<(&str, String)> = Vec::with_capacity(headers.len());
        for (name, value) in headers {
            match merged
                .iter_mut()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
            {
                Some((_, v)) => {
                    v.push_str(", ");
                    v.push_str(value);
                }
                None => merged.push((name, value.clone())),
            }
        }
        let mut map = s.serialize_map(Some(merged.len()))?;
        for (name, value) in &merged {
            map.serialize_entry(name, value)?;
        }
        map.end()
    }

    /// Reads an object or a list of pairs ([module rules](super)).
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Headers, D::Error> {
        d.deserialize_any(HeadersVisitor)
    }
}

/// Serde `with` module: a list of `[name, value]` pairs (extension frames).
pub mod as_pairs {
    use super::*;

    /// Writes `headers` as `[[name, value], …]`.
    pub fn serialize<S: Serializer>(headers: &Headers, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(headers.len()))?;
        for (name, value) in headers {
            seq.serialize_element(&[name, value])?;
        }
        seq.end()
    }

    /// Reads a list of pairs or an object ([module rules](super)).
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Headers, D::Error> {
        d.deserialize_any(HeadersVisitor)
    }
}

/// A header value as a JavaScript peer might write it.
#[derive(Deserialize)]
#[serde(untagged)]
enum LenientValue {
    Text(String),
    Number(serde_json::Number),
    Bool(bool),
    List(Vec<LenientValue>),
    Null(()),
}

impl LenientValue {
    fn into_text(self) -> Option<String> {
        match self {
            LenientValue::Text(s) => Some(s),
            LenientValue::Number(n) => Some(n.to_string()),
            LenientValue::Bool(b) => Some(b.to_string()),
            LenientValue::List(items) => {
                let parts: Vec<String> = items.into_iter().filter_map(Self::into_text).collect();
                Some(parts.join(", "))
            }
            LenientValue::Null(()) => None,
        }
    }
}

struct HeadersVisitor;

impl<'de> Visitor<'de> for HeadersVisitor {
    type Value = Headers;

    fn expecting(&self, f: &mut core::fmt::Formatter) -> core::fmt::Result {
        f.write_str("an object of header values or a list of [name, value] pairs")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Headers, A::Error> {
        let mut out = Headers::new();
        while let Some((name, value)) = map.next_entry::<String, LenientValue>()? {
            if out.len() == MAX_HEADERS {
                return Err(de::Error::custom(format!(
                    "more than {MAX_HEADERS} headers"
                )));
            }
            if let Some(value) = value.into_text() {
                out.push((name, value));
            }
        }
        Ok(out)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Headers, A::Error> {
        let mut out = Headers::new();
        while let Some((name, value)) = seq.next_element::<(String, LenientValue)>()? {
            if out.len() == MAX_HEADERS {
                return Err(de::Error::custom(format!(
                    "more than {MAX_HEADERS} headers"
                )));
            }
            if let Some(value) = value.into_text() {
                out.push((name, value));
            }
        }
        Ok(out)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Headers, E> {
        Ok(Headers::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize, Deserialize, Debug, PartialEq)]
    struct Obj {
        #[serde(with = "as_object", default)]
        h: Headers,
    }

    #[derive(serde::Serialize, Deserialize, Debug, PartialEq)]
    struct Pairs {
        #[serde(with = "as_pairs", default)]
        h: Headers,
    }

    fn h(pairs: &[(&str, &str)]) -> Headers {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn object_form_joins_repeated_names_and_reads_javascript_values() {
        let o = Obj {
            h: h(&[("Accept", "a"), ("x", "1"), ("accept", "b")]),
        };
        assert_eq!(
            serde_json::to_string(&o).unwrap(),
            r#"{"h":{"Accept":"a, b","x":"1"}}"#
        );
        let back: Obj =
            serde_json::from_str(r#"{"h":{"a":"x","n":5,"b":true,"l":["p","q"],"z":null}}"#)
                .unwrap();
        assert_eq!(
            back.h,
            h(&[("a", "x"), ("n", "5"), ("b", "true"), ("l", "p, q")])
        );
    }

    #[test]
    fn pair_form_keeps_order_and_repeats_and_reads_objects_too() {
        let p = Pairs {
            h: h(&[("a", "1"), ("a", "2")]),
        };
        let text = serde_json::to_string(&p).unwrap();
        assert_eq!(text, r#"{"h":[["a","1"],["a","2"]]}"#);
        assert_eq!(serde_json::from_str::<Pairs>(&text).unwrap(), p);
        let from_obj: Pairs = serde_json::from_str(r#"{"h":{"a":"1"}}"#).unwrap();
        assert_eq!(from_obj.h, h(&[("a", "1")]));
        let null: Pairs = serde_json::from_str(r#"{"h":null}"#).unwrap();
        assert!(null.h.is_empty());
    }

    #[test]
    fn too_many_headers_are_an_error() {
        let many: Vec<String> = (0..=MAX_HEADERS)
            .map(|i| format!("[\"h{i}\",\"v\"]"))
            .collect();
        let text = format!("{{\"h\":[{}]}}", many.join(","));
        assert!(serde_json::from_str::<Pairs>(&text).is_err());
    }

    #[test]
    fn hop_by_hop_headers_are_not_forwarded() {
        let f = forwardable(&h(&[
            ("Connection", "close"),
            ("Host", "relay"),
            ("Authorization", "Bearer x"),
            ("Last-Event-ID", "7"),
            ("Transfer-Encoding", "chunked"),
        ]));
        assert_eq!(
            f,
            h(&[("authorization", "Bearer x"), ("last-event-id", "7")])
        );
        assert_eq!(get(&f, "LAST-EVENT-ID"), Some("7"));
    }
}
