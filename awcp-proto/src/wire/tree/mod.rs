//! A parsed JSON text the decoders read fields out of: its values laid out flat, in document
//! order, borrowing strings from the bytes they were parsed from.
//!
//! [`serde_json::Value`] owns every key and string (one allocation each) and keeps objects in
//! `BTreeMap`s; a tree of nested vectors still allocates per object and moves every value as it
//! is built. Here a whole text is one vector of [`Node`]s (an array or object is a header saying
//! how many nodes it spans, followed by its items, or its keys and values), strings without
//! escapes borrow the input, and a [`Json`] is a view of one value's nodes. Object lookup is a
//! scan (a message has a dozen keys), and the last of duplicate keys wins, as in `Value`.
//! Nesting is bounded by `serde_json`'s recursion limit (128), so hostile input cannot overflow
//! the stack here.

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt;

use serde_json::{Map, Number, Value};

/// One node of a parsed text: a scalar, or the header of an array or object whose contents
/// follow it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node<'a> {
    Null,
    Bool(bool),
    Number(Number),
    Str(Cow<'a, str>),
    /// An array of `len` items, which follow; `nodes` counts this header and all of them.
    Array {
        len: usize,
        nodes: usize,
    },
    /// An object of `len` members, which follow as a key (a [`Node::Str`]) then its value;
    /// `nodes` counts this header and all of them. `repeats` if a key appears more than once
    /// (then the last one counts, and a lookup reads every member). `keys` has the
    /// [`key_bit`] of every key set: a key whose bit is clear is absent, without a scan.
    Object {
        len: usize,
        nodes: usize,
        repeats: bool,
        keys: u64,
    },
}

impl Node<'_> {
    /// How many nodes the value starting with this node spans.
    pub(super) fn span(&self) -> usize {
        match self {
            Node::Array { nodes, .. } | Node::Object { nodes, .. } => *nodes,
            Node::Null | Node::Bool(_) | Node::Number(_) | Node::Str(_) => 1,
        }
    }

    /// The same node owning its string.
    fn into_owned(self) -> Node<'static> {
        match self {
            Node::Null => Node::Null,
            Node::Bool(b) => Node::Bool(b),
            Node::Number(n) => Node::Number(n),
            Node::Str(s) => Node::Str(Cow::Owned(s.into_owned())),
            Node::Array { len, nodes } => Node::Array { len, nodes },
            Node::Object {
                len,
                nodes,
                repeats,
                keys,
            } => Node::Object {
                len,
                nodes,
                repeats,
                keys,
            },
        }
    }
}

thread_local! {
    /// The node buffer of the last document dropped on this thread, empty, for the next parse:
    /// a message, reply or event is parsed and dropped again and again, and a buffer of a few
    /// dozen nodes is just too large for the allocator's fast path.
    static SPARE: Cell<Vec<Node<'static>>> = const { Cell::new(Vec::new()) };
}

/// The largest buffer kept for reuse, in nodes (one grown for a large text is freed instead).
const MAX_KEPT: usize = 1024;

/// An empty node buffer with room for `reserve` nodes, reusing this thread's spare one.
pub(super) fn node_buffer<'a>(reserve: usize) -> Vec<Node<'a>> {
    // `Vec<Node<'static>>` is a `Vec<Node<'a>>` for any `'a`.
    let mut nodes: Vec<Node<'a>> = SPARE.try_with(Cell::take).unwrap_or_default();
    nodes.reserve(reserve);
    nodes
}

impl Drop for Doc<'_> {
    fn drop(&mut self) {
        let mut nodes = std::mem::take(&mut self.nodes);
        if nodes.capacity() > MAX_KEPT {
            return;
        }
        nodes.clear();
        // Empty, it borrows nothing; collected in place (the same type but for its lifetime),
        // its allocation is kept.
        let spare: Vec<Node<'static>> = nodes.into_iter().map(Node::into_owned).collect();
        // During thread teardown there is nowhere to keep it: it is freed.
        let _ = SPARE.try_with(|s| s.set(spare));
    }
}

/// A parsed JSON text: never empty, its first node is the text's value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Doc<'a> {
    nodes: Vec<Node<'a>>,
}

static NULL_NODE: [Node<'static>; 1] = [Node::Null];

/// `null`, for "absent" lookups that need a value.
pub(crate) static NULL: Json<'static> = Json { nodes: &NULL_NODE };

impl<'a> Doc<'a> {
    /// Parses JSON text.
    pub(crate) fn parse(bytes: &'a [u8]) -> Result<Doc<'a>, serde_json::Error> {
        // UTF-8 checked once for the whole text, then the parser of `super::parse`; invalid
        // UTF-8 gets `serde_json`'s error, with its position.
        match std::str::from_utf8(bytes) {
            Ok(text) => match super::parse::parse(text) {
                Some(nodes) => Ok(Doc { nodes }),
                // Refused: `serde_json` says why (with line and column), or, were it ever to
                // accept what the fast parser refused, its value stands.
                None => {
                    serde_json::from_str::<Value>(text).map(|v| Doc::from_value(&v).into_owned())
                }
            },
            Err(_) => {
                serde_json::from_slice::<Value>(bytes).map(|v| Doc::from_value(&v).into_owned())
            }
        }
    }

    /// A borrowed view of an owned [`Value`] (for the public decoders that take one).
    pub(crate) fn from_value(v: &'a Value) -> Doc<'a> {
        fn push<'v>(nodes: &mut Vec<Node<'v>>, v: &'v Value) {
            match v {
                Value::Null => nodes.push(Node::Null),
                Value::Bool(b) => nodes.push(Node::Bool(*b)),
                Value::Number(n) => nodes.push(Node::Number(n.clone())),
                Value::String(s) => nodes.push(Node::Str(Cow::Borrowed(s))),
                Value::Array(items) => {
                    let at = nodes.len();
                    nodes.push(Node::Null);
                    for item in items {
                        push(nodes, item);
                    }
                    let header = Node::Array {
                        len: items.len(),
                        nodes: nodes.len() - at,
                    };
                    set(nodes, at, header);
                }
                Value::Object(members) => {
                    let at = nodes.len();
                    nodes.push(Node::Null);
                    for (k, v) in members {
                        nodes.push(Node::Str(Cow::Borrowed(k)));
                        push(nodes, v);
                    }
                    // A `Map` has no repeated keys.
                    let header = Node::Object {
                        len: members.len(),
                        nodes: nodes.len() - at,
                        repeats: false,
                        keys: members.keys().fold(0, |bits, k| bits | key_bit(k)),
                    };
                    set(nodes, at, header);
                }
            }
        }
        let mut nodes = Vec::new();
        push(&mut nodes, v);
        Doc { nodes }
    }

    /// The same document owning all its strings.
    fn into_owned(mut self) -> Doc<'static> {
        let nodes = std::mem::take(&mut self.nodes);
        Doc {
            nodes: nodes.into_iter().map(Node::into_owned).collect(),
        }
    }

    /// The text's value.
    pub(crate) fn root(&self) -> Json<'_> {
        Json { nodes: &self.nodes }
    }

    /// Where the value under `key` of the object starting at node `at` is (the last one if the
    /// key repeats, `null` included).
    pub(crate) fn member_at(&self, at: usize, key: &str) -> Option<usize> {
        // The object's own nodes only: what follows it belongs to its parent.
        let span = self.nodes.get(at)?.span();
        let object = Json {
            nodes: self.nodes.get(at..at + span)?,
        };
        let (offset, _) = object.member(key)?;
        Some(at + offset)
    }

    /// The node at `at`, to change a value in place.
    pub(crate) fn node_mut(&mut self, at: usize) -> Option<&mut Node<'a>> {
        self.nodes.get_mut(at)
    }
}

/// The bit standing for `key` in an object header's key filter (from its length and last
/// byte: cheap, and the keys of one object mostly differ in one or the other).
pub(super) fn key_bit(key: &str) -> u64 {
    1u64 << ((key.len() * 31 + usize::from(key.bytes().last().unwrap_or(0))) % 64)
}

/// Replaces the placeholder at `at` by the header it stands for.
pub(super) fn set<'a>(nodes: &mut [Node<'a>], at: usize, header: Node<'a>) {
    if let Some(slot) = nodes.get_mut(at) {
        *slot = header;
    }
}

/// One value of a [`Doc`]: its nodes (the first is the value itself).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Json<'a> {
    nodes: &'a [Node<'a>],
}

impl<'a> Json<'a> {
    /// The value whose nodes these are (for the parser's tests).
    #[cfg(test)]
    pub(super) fn of(nodes: &'a [Node<'a>]) -> Json<'a> {
        Json { nodes }
    }

    /// The members read so far of an object being parsed: `nodes` starts with the object's
    /// (placeholder) header, followed by whole members.
    pub(super) fn object_members(nodes: &'a [Node<'a>]) -> Members<'a> {
        Members {
            items: Items {
                rest: nodes.get(1..).unwrap_or_default(),
                len: usize::MAX,
            },
        }
    }

    fn node(self) -> &'a Node<'a> {
        self.nodes.first().unwrap_or(&NULL_NODE[0])
    }

    /// Whether this is `null`.
    pub(crate) fn is_null(self) -> bool {
        matches!(self.node(), Node::Null)
    }

    /// The string, if this is one.
    pub(crate) fn as_str(self) -> Option<&'a str> {
        self.as_cow().map(|s| &**s)
    }

    /// The string as the node holds it (borrowed from the text unless it had escapes).
    pub(crate) fn as_cow(self) -> Option<&'a Cow<'a, str>> {
        match self.node() {
            Node::Str(s) => Some(s),
            Node::Null
            | Node::Bool(_)
            | Node::Number(_)
            | Node::Array { .. }
            | Node::Object { .. } => None,
        }
    }

    /// The boolean, if this is one.
    pub(crate) fn as_bool(self) -> Option<bool> {
        match self.node() {
            Node::Bool(b) => Some(*b),
            Node::Null
            | Node::Number(_)
            | Node::Str(_)
            | Node::Array { .. }
            | Node::Object { .. } => None,
        }
    }

    /// The number, if this is one.
    pub(crate) fn as_number(self) -> Option<&'a Number> {
        match self.node() {
            Node::Number(n) => Some(n),
            Node::Null
            | Node::Bool(_)
            | Node::Str(_)
            | Node::Array { .. }
            | Node::Object { .. } => None,
        }
    }

    /// The items, if this is an array.
    pub(crate) fn as_array(self) -> Option<Items<'a>> {
        match self.node() {
            Node::Array { len, .. } => Some(Items {
                rest: self.nodes.get(1..).unwrap_or_default(),
                len: *len,
            }),
            Node::Null | Node::Bool(_) | Node::Number(_) | Node::Str(_) | Node::Object { .. } => {
                None
            }
        }
    }

    /// How many nodes this value spans.
    #[cfg(test)]
    pub(crate) fn span(self) -> usize {
        self.nodes.len()
    }

    /// The members, if this is an object.
    pub(crate) fn as_object(self) -> Option<Members<'a>> {
        match self.node() {
            Node::Object { len, .. } => Some(Members {
                items: Items {
                    rest: self.nodes.get(1..).unwrap_or_default(),
                    len: len.saturating_mul(2),
                },
            }),
            Node::Null | Node::Bool(_) | Node::Number(_) | Node::Str(_) | Node::Array { .. } => {
                None
            }
        }
    }

    /// The value under `key` of an object (the last one if the key repeats); `None` for a
    /// missing key or a non-object.
    pub(crate) fn get(self, key: &str) -> Option<Json<'a>> {
        self.member(key).map(|(_, v)| v)
    }

    /// [`Json::get`], with where the value's nodes start among this object's.
    fn member(self, key: &str) -> Option<(usize, Json<'a>)> {
        self.member_from(key, 1)
    }

    /// [`Json::member`], looking first from node `hint` on: where the previous lookup in this
    /// object ended (decoders mostly read fields in the order peers write them, so the next
    /// key is usually the next member). `hint` must be where a member starts, or the end.
    pub(crate) fn member_from(self, key: &str, hint: usize) -> Option<(usize, Json<'a>)> {
        let repeats = match self.node() {
            // Absent for sure: no scan (optional fields are often absent).
            Node::Object { keys, .. } if keys & key_bit(key) == 0 => return None,
            Node::Object { repeats, .. } => *repeats,
            Node::Null | Node::Bool(_) | Node::Number(_) | Node::Str(_) | Node::Array { .. } => {
                return None
            }
        };
        let end = self.nodes.len();
        if repeats || hint <= 1 {
            // The last of repeated keys counts: every member is read.
            return self.scan(key, 1, end, repeats);
        }
        self.scan(key, hint, end, false)
            .or_else(|| self.scan(key, 1, hint, false))
    }

    /// The member `key` among those starting from node `from` up to node `to`: the first one,
    /// or the last one if `last`.
    fn scan(self, key: &str, from: usize, to: usize, last: bool) -> Option<(usize, Json<'a>)> {
        let nodes = self.nodes.get(..to)?;
        let mut found = None;
        // Members are a key node then the value's nodes; the object's nodes end after the last.
        let mut at = from;
        while let Some(Node::Str(k)) = nodes.get(at) {
            let value = at + 1;
            let end = value + nodes.get(value)?.span();
            if k == key {
                found = Some((
                    value,
                    Json {
                        nodes: nodes.get(value..end)?,
                    },
                ));
                if !last {
                    break;
                }
            }
            at = end;
        }
        found
    }

    /// An owned [`Value`] of the same JSON (for free-form fields such as snapshot metadata).
    pub(crate) fn to_value(self) -> Value {
        match self.node() {
            Node::Null => Value::Null,
            Node::Bool(b) => Value::Bool(*b),
            Node::Number(n) => Value::Number(n.clone()),
            Node::Str(s) => Value::String(s.clone().into_owned()),
            Node::Array { .. } => Value::Array(
                self.as_array()
                    .into_iter()
                    .flatten()
                    .map(Json::to_value)
                    .collect(),
            ),
            Node::Object { .. } => {
                let mut m = Map::new();
                for (k, v) in self.as_object().into_iter().flatten() {
                    m.insert(k.to_owned(), v.to_value());
                }
                Value::Object(m)
            }
        }
    }
}

impl fmt::Display for Json<'_> {
    /// Compact JSON text (for error messages quoting a peer's body).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.to_value(), f)
    }
}

/// The items of an array, in order.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Items<'a> {
    /// The nodes after the array's header (or after the items already read).
    rest: &'a [Node<'a>],
    /// Items not read yet.
    len: usize,
}

impl<'a> Iterator for Items<'a> {
    type Item = Json<'a>;

    fn next(&mut self) -> Option<Json<'a>> {
        if self.len == 0 {
            return None;
        }
        let span = self.rest.first()?.span();
        let (nodes, rest) = self.rest.split_at_checked(span)?;
        self.rest = rest;
        self.len -= 1;
        Some(Json { nodes })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.len, Some(self.len))
    }
}

impl ExactSizeIterator for Items<'_> {}

/// The members of an object, in order: key and value.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Members<'a> {
    /// Keys and values, alternating.
    items: Items<'a>,
}

impl<'a> Iterator for Members<'a> {
    type Item = (&'a str, Json<'a>);

    fn next(&mut self) -> Option<(&'a str, Json<'a>)> {
        let key = self.items.next()?.as_str().unwrap_or_default();
        Some((key, self.items.next()?))
    }
}

#[cfg(test)]
mod tests;
