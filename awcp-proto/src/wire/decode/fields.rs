//! Field helpers: pulling typed fields out of a JSON object `serde_json` parsed and naming the
//! failing field with its dotted path (`environment.resources[0].name`).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::{DecodeError, DecodeErrorKind};
use crate::id::{DelegationId, SnapshotId};
use crate::time::Timestamp;
use crate::wire::types::*;

/// The items of a JSON array.
pub(super) type Items<'a> = std::slice::Iter<'a, Value>;
/// The members of a JSON object.
pub(super) type Members<'a> = serde_json::map::Iter<'a>;

/// Parses a message or event body with `serde_json` (its default nesting limit of 128 levels
/// holds; of repeated keys the last counts).
pub(super) fn parse(json: &[u8]) -> Result<Value, DecodeError> {
    serde_json::from_slice(json).map_err(|e| DecodeError {
        field: String::new(),
        kind: DecodeErrorKind::Json(e.to_string()),
    })
}

pub(super) fn invalid(field: &str, why: impl Into<String>) -> DecodeError {
    DecodeError {
        field: field.to_owned(),
        kind: DecodeErrorKind::Invalid(why.into()),
    }
}

pub(super) fn wrong_type(field: &str, expected: &'static str) -> DecodeError {
    DecodeError {
        field: field.to_owned(),
        kind: DecodeErrorKind::WrongType { expected },
    }
}

/// Shortens peer-supplied text quoted in error messages.
pub(super) fn truncate(s: &str) -> String {
    s.chars().take(64).collect()
}

/// A JSON object together with its dotted path, for error reporting.
pub(super) struct Obj<'a> {
    value: &'a Map<String, Value>,
    /// Where the object sits, written out only for an error.
    pub(super) path: FieldPath,
}

/// How deep a [`FieldPath`] names its segments; deeper ones are written as `…`. (The deepest
/// object a message has is `environment.resources[i]`: three. Four keep [`Obj`] small enough
/// to move without a `memcpy` call.)
const MAX_SEGMENTS: usize = 4;

/// The dotted path of an object inside a message (`environment.resources[0]`), kept as
/// segments and formatted only when a field under it is reported in an error.
#[derive(Clone, Debug, Default)]
pub(super) struct FieldPath {
    /// A prefix given by the caller (none for a message's top level).
    root: Option<Arc<str>>,
    /// Each segment's key, or `""` for an array item, whose index is in `indices`.
    keys: [&'static str; MAX_SEGMENTS],
    indices: [u32; MAX_SEGMENTS],
    /// How many segments there are (only the first [`MAX_SEGMENTS`] are kept).
    len: u8,
}

impl FieldPath {
    /// A path starting at `root` (`""` for a message's top level).
    pub(super) fn root(root: &str) -> FieldPath {
        FieldPath {
            root: (!root.is_empty()).then(|| root.into()),
            ..FieldPath::default()
        }
    }

    fn push(&self, key: &'static str, index: u32) -> FieldPath {
        let mut p = self.clone();
        let at = usize::from(p.len);
        if let (Some(k), Some(i)) = (p.keys.get_mut(at), p.indices.get_mut(at)) {
            *k = key;
            *i = index;
        }
        p.len = p.len.saturating_add(1);
        p
    }

    /// The object under `key` of this one.
    pub(super) fn key(&self, key: &'static str) -> FieldPath {
        self.push(key, 0)
    }

    /// Item `i` of the array this path names.
    pub(super) fn index(&self, i: usize) -> FieldPath {
        // (Items are counted in a body of bounded size: never near `u32::MAX`.)
        self.push("", u32::try_from(i).unwrap_or(u32::MAX))
    }

    /// The path written out, then `.key` when `key` is given.
    pub(super) fn with(&self, key: Option<&str>) -> String {
        let mut out = self.root.as_deref().unwrap_or_default().to_owned();
        let len = usize::from(self.len);
        let named = len.min(MAX_SEGMENTS);
        for (k, i) in self.keys.iter().zip(&self.indices).take(named) {
            if k.is_empty() {
                out.push_str(&format!("[{i}]"));
            } else {
                dotted(&mut out, k);
            }
        }
        if len > named {
            dotted(&mut out, "…");
        }
        if let Some(key) = key {
            dotted(&mut out, key);
        }
        out
    }
}

/// Appends `.name` (just `name` to an empty path).
fn dotted(out: &mut String, name: &str) {
    if !out.is_empty() {
        out.push('.');
    }
    out.push_str(name);
}

// A JSON value of any other type than the one a field needs is the wrong type: the wildcard
// arms below mean exactly that.
#[allow(clippy::wildcard_enum_match_arm)]
impl<'a> Obj<'a> {
    pub(super) fn root(value: &'a Value) -> Result<Self, DecodeError> {
        match value.as_object() {
            Some(value) => Ok(Obj {
                value,
                path: FieldPath::default(),
            }),
            None => Err(DecodeError {
                field: String::new(),
                kind: DecodeErrorKind::Json("expected a JSON object".to_owned()),
            }),
        }
    }

    pub(super) fn new(value: &'a Value, path: FieldPath) -> Result<Self, DecodeError> {
        match value.as_object() {
            Some(value) => Ok(Obj { value, path }),
            None if value.is_null() => Err(DecodeError {
                field: path.with(None),
                kind: DecodeErrorKind::Missing,
            }),
            None => Err(wrong_type(&path.with(None), "object")),
        }
    }

    /// The path of a nested object under `key`.
    pub(super) fn child_path(&self, key: &'static str) -> FieldPath {
        self.path.key(key)
    }

    /// The dotted name of the field `key` of this object.
    pub(super) fn field(&self, key: &str) -> String {
        self.path.with(Some(key))
    }

    pub(super) fn missing(&self, key: &str) -> DecodeError {
        DecodeError {
            field: self.field(key),
            kind: DecodeErrorKind::Missing,
        }
    }

    pub(super) fn wrong_type(&self, key: &str, expected: &'static str) -> DecodeError {
        wrong_type(&self.field(key), expected)
    }

    pub(super) fn invalid(&self, key: &str, why: impl Into<String>) -> DecodeError {
        invalid(&self.field(key), why)
    }

    /// The value under `key`; `null` counts as absent.
    pub(super) fn get(&self, key: &str) -> Option<&'a Value> {
        self.value.get(key).filter(|v| !v.is_null())
    }

    /// Whether `key` is present at all (even as `null`).
    pub(super) fn has_key(&self, key: &str) -> bool {
        self.value.contains_key(key)
    }

    /// The members (of a repeated key, the last).
    pub(super) fn members(&self) -> Members<'a> {
        self.value.iter()
    }

    pub(super) fn req(&self, key: &str) -> Result<&'a Value, DecodeError> {
        self.get(key).ok_or_else(|| self.missing(key))
    }

    pub(super) fn req_str(&self, key: &str) -> Result<&'a str, DecodeError> {
        self.req(key)?
            .as_str()
            .ok_or_else(|| self.wrong_type(key, "string"))
    }

    pub(super) fn opt_string(&self, key: &str) -> Result<Option<String>, DecodeError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => match v.as_str() {
                Some(s) => Ok(Some(s.to_owned())),
                None => Err(self.wrong_type(key, "string")),
            },
        }
    }

    pub(super) fn req_obj(&self, key: &'static str) -> Result<Obj<'a>, DecodeError> {
        Obj::new(self.req(key)?, self.child_path(key))
    }

    pub(super) fn opt_obj(&self, key: &'static str) -> Result<Option<Obj<'a>>, DecodeError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => Obj::new(v, self.child_path(key)).map(Some),
        }
    }

    pub(super) fn req_array(&self, key: &str) -> Result<Items<'a>, DecodeError> {
        self.req(key)?
            .as_array()
            .map(|a| a.iter())
            .ok_or_else(|| self.wrong_type(key, "array"))
    }

    pub(super) fn opt_array(&self, key: &str) -> Result<Option<Items<'a>>, DecodeError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_array()
                .map(|a| Some(a.iter()))
                .ok_or_else(|| self.wrong_type(key, "array")),
        }
    }

    pub(super) fn u64_of(&self, key: &str, v: &Value) -> Result<u64, DecodeError> {
        match v {
            Value::Number(n) => n.as_u64().ok_or_else(|| {
                self.invalid(key, format!("expected a non-negative integer, got {n}"))
            }),
            _ => Err(self.wrong_type(key, "non-negative integer")),
        }
    }

    pub(super) fn req_u64(&self, key: &str) -> Result<u64, DecodeError> {
        let v = self.req(key)?;
        self.u64_of(key, v)
    }

    pub(super) fn opt_u64(&self, key: &str) -> Result<Option<u64>, DecodeError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => self.u64_of(key, v).map(Some),
        }
    }

    pub(super) fn opt_f64(&self, key: &str) -> Result<Option<f64>, DecodeError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Number(n)) => n
                .as_f64()
                .filter(|f| f.is_finite())
                .map(Some)
                .ok_or_else(|| self.invalid(key, "expected a finite number")),
            Some(_) => Err(self.wrong_type(key, "number")),
        }
    }

    pub(super) fn opt_bool(&self, key: &str) -> Result<Option<bool>, DecodeError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => match v.as_bool() {
                Some(b) => Ok(Some(b)),
                None => Err(self.wrong_type(key, "boolean")),
            },
        }
    }

    /// An optional array of strings; absent means empty.
    pub(super) fn str_array(&self, key: &str) -> Result<Vec<String>, DecodeError> {
        self.str_array_of(key, str::to_owned)
    }

    /// An optional array of strings, each made into a `T` by `make`; absent means empty.
    pub(super) fn str_array_of<T>(
        &self,
        key: &str,
        make: impl Fn(&str) -> T,
    ) -> Result<Vec<T>, DecodeError> {
        match self.opt_array(key)? {
            None => Ok(Vec::new()),
            Some(items) => items
                .enumerate()
                .map(|(i, v)| {
                    v.as_str()
                        .map(&make)
                        .ok_or_else(|| wrong_type(&format!("{}[{i}]", self.field(key)), "string"))
                })
                .collect(),
        }
    }

    /// An optional map string → string; absent means empty.
    pub(super) fn str_map(
        &self,
        key: &'static str,
    ) -> Result<BTreeMap<String, String>, DecodeError> {
        match self.opt_obj(key)? {
            None => Ok(BTreeMap::new()),
            Some(m) => m
                .members()
                .map(|(k, v)| {
                    v.as_str()
                        .map(|s| (k.to_owned(), s.to_owned()))
                        .ok_or_else(|| m.wrong_type(k, "string"))
                })
                .collect(),
        }
    }

    pub(super) fn access_mode(&self, key: &str) -> Result<AccessMode, DecodeError> {
        let s = self.req_str(key)?;
        AccessMode::parse(s).ok_or_else(|| {
            self.invalid(
                key,
                format!(
                    "access mode must be \"ro\" or \"rw\", got {:?}",
                    truncate(s)
                ),
            )
        })
    }

    pub(super) fn req_timestamp(&self, key: &str) -> Result<Timestamp, DecodeError> {
        let s = self.req_str(key)?;
        Timestamp::parse_rfc3339(s).map_err(|e| self.invalid(key, e.to_string()))
    }

    pub(super) fn opt_timestamp(&self, key: &str) -> Result<Option<Timestamp>, DecodeError> {
        match self.get(key) {
            None => Ok(None),
            Some(_) => self.req_timestamp(key).map(Some),
        }
    }

    pub(super) fn delegation_id(&self) -> Result<DelegationId, DecodeError> {
        let s = self.req_str("delegationId")?;
        DelegationId::new(s).map_err(|e| self.invalid("delegationId", e.to_string()))
    }

    pub(super) fn snapshot_id(&self, key: &str) -> Result<SnapshotId, DecodeError> {
        let s = self.req_str(key)?;
        SnapshotId::new(s).map_err(|e| self.invalid(key, e.to_string()))
    }

    /// Inline base64 under `b64_key` and/or a URL under `url_key`; at least one is required
    /// (the error names `b64_key`).
    pub(super) fn archive_data(
        &self,
        b64_key: &str,
        url_key: &str,
    ) -> Result<ArchiveData, DecodeError> {
        let data = ArchiveData {
            base64: self.opt_string(b64_key)?,
            url: self.opt_string(url_key)?,
            local_file: None,
            local_file_sha256: None,
        };
        if data.base64.is_none() && data.url.is_none() {
            return Err(self.missing(b64_key));
        }
        Ok(data)
    }
}

#[cfg(test)]
mod tests {
    use super::FieldPath;

    #[test]
    fn a_field_path_is_written_as_the_dotted_name_of_the_field() {
        let top = FieldPath::default();
        assert_eq!(top.with(Some("delegationId")), "delegationId");
        let item = top.key("environment").key("resources").index(3);
        assert_eq!(item.with(Some("name")), "environment.resources[3].name");
        assert_eq!(item.with(None), "environment.resources[3]");
        let handle = FieldPath::root("start.transportHandle").key("auth");
        assert_eq!(handle.with(Some("type")), "start.transportHandle.auth.type");
    }

    #[test]
    fn an_object_being_read_moves_without_a_memcpy_call() {
        // Decoders pass `Obj`s around by value (in `Result`s): at most 128 bytes is moved
        // inline.
        assert!(std::mem::size_of::<super::Obj<'_>>() <= 128);
    }

    #[test]
    fn a_path_deeper_than_its_segments_says_so_instead_of_lying() {
        let mut p = FieldPath::default();
        for _ in 0..9 {
            p = p.key("a");
        }
        assert_eq!(p.with(Some("b")), "a.a.a.a.….b");
    }
}
