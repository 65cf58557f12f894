//! How much of a message without a credential header is read, once its first bytes named the
//! delegation it is for.
//!
//! A reference delegator sends its credential only in INVITE's `auth` field; its START, which
//! inlines the whole workspace with the archive transport, comes without a header and may be
//! far larger than the unauthenticated limit. [`super::check_headers`] cannot judge such a
//! body from its headers ([`super::HeaderVerdict::Peek`]): the driver feeds its first bytes
//! (at most [`PEEK_BYTES`]) to a [`DelegationIdScanner`], and [`Executor::message_body_limit`]
//! decides from the delegation they name:
//!
//! * a delegation whose INVITE bound its credential to the id ([`Binding::DelegationId`]), or
//!   a header credential that authorises the delegation: the authenticated limit
//!   ([`BodyLimits::max`]);
//! * anything else (an unknown delegation, one bound to a header credential, no delegation id
//!   in the first bytes): the unauthenticated limit, and a body announced larger is refused
//!   (401) before it is read.
//!
//! The engine checks the message again when it arrives (by the id it actually carries), so
//! the id found here only chooses how many bytes are read. Only the wire's field name is
//! looked for: `delegationId` at the top level of the JSON object (the one name the decoder
//! accepts in both dialects), the first occurrence (a body repeating it is decoded with the
//! last, and refused then if that one is not authorised).

use crate::error::ErrorInfo;
use crate::id::{DelegationId, MAX_ID_LEN};

use super::{
    authorize, needs_header, too_large, Binding, BodyLimits, BoundCredential, Credential,
    RequiredAuth,
};
use crate::engine::executor::Executor;

/// How many leading bytes of a message without a credential header are looked at for its
/// delegation id (a START names its delegation before its archive; a body whose first 64 KiB
/// name none is held to the unauthenticated limit).
pub const PEEK_BYTES: u64 = 64 * 1024;

/// The key [`DelegationIdScanner`] looks for (WIRE.md; the decoder's only spelling).
const KEY: &str = "delegationId";

/// What a [`DelegationIdScanner`] has made of the bytes fed so far.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scan {
    /// The top-level object's `delegationId` names this delegation.
    Found(DelegationId),
    /// The bytes cannot name one: not a JSON object, its top level ended without the key, the
    /// value is not a valid id string, or the key was not within the scanner's limit.
    Absent,
    /// Undecided: feed more bytes.
    More,
}

/// A bounded scan of a JSON body for its top-level `delegationId` (see the rules at
/// [`message_body_verdict`]), fed the body's bytes as they arrive. It keeps at most its limit
/// of them and reads them with `serde_json` (no JSON code of its own): the top-level object's
/// members are visited in order, every other value skipped unread
/// ([`serde::de::IgnoredAny`]), and the scan stops at the first `delegationId`, so it decides
/// as soon as the id's value is complete, whatever follows.
#[derive(Clone, Debug)]
pub struct DelegationIdScanner {
    /// The bytes fed so far (at most `limit`).
    buf: Vec<u8>,
    /// Bytes looked at, at most.
    limit: u64,
    /// The decision, once made.
    done: Option<Scan>,
}

impl Default for DelegationIdScanner {
    /// A scanner looking at the first [`PEEK_BYTES`].
    fn default() -> Self {
        Self::new(PEEK_BYTES)
    }
}

impl DelegationIdScanner {
    /// A scanner looking at no more than the first `limit` bytes.
    pub fn new(limit: u64) -> Self {
        DelegationIdScanner {
            buf: Vec::new(),
            limit,
            done: None,
        }
    }

    /// Feeds the next bytes of the body; the result stays the same once it is not
    /// [`Scan::More`].
    pub fn feed(&mut self, bytes: &[u8]) -> Scan {
        if let Some(d) = &self.done {
            return d.clone();
        }
        let room = usize::try_from(self.limit)
            .unwrap_or(usize::MAX)
            .saturating_sub(self.buf.len());
        self.buf.extend_from_slice(&bytes[..bytes.len().min(room)]);
        match look(&self.buf) {
            Scan::More if self.buf.len() as u64 >= self.limit => self.decide(Scan::Absent),
            Scan::More => Scan::More,
            d @ (Scan::Found(_) | Scan::Absent) => self.decide(d),
        }
    }

    /// The decision at the end of the body: what was found, else [`Scan::Absent`].
    pub fn finish(&mut self) -> Scan {
        match self.done.clone() {
            Some(d) => d,
            None => self.decide(Scan::Absent),
        }
    }

    fn decide(&mut self, d: Scan) -> Scan {
        self.done = Some(d.clone());
        d
    }
}

/// What the beginning of a body says: the scan of `buf` with `serde_json`.
fn look(buf: &[u8]) -> Scan {
    let mut found = None;
    let mut de = serde_json::Deserializer::from_slice(buf);
    let read = serde::de::DeserializeSeed::deserialize(TopLevel(&mut found), &mut de);
    match (found, read) {
        (Some(d), _) => d,
        // The object ended without the key.
        (None, Ok(())) => Scan::Absent,
        // Cut short, or a syntax error that may only be the cut (`-1.` of `-1.5`): undecided
        // until more bytes come, the limit is reached or the body ends.
        (None, Err(e)) if e.is_eof() || e.is_syntax() => Scan::More,
        // Not an object.
        (None, Err(_)) => Scan::Absent,
    }
}

/// Visits the top-level object's members until `delegationId`; what it found goes to `.0`
/// (the visit then stops with an error, which [`look`] ignores).
struct TopLevel<'a>(&'a mut Option<Scan>);

impl<'de> serde::de::DeserializeSeed<'de> for TopLevel<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for TopLevel<'_> {
    type Value = ();

    fn expecting(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("an AWCP message object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if key != KEY {
                map.next_value::<serde::de::IgnoredAny>()?;
                continue;
            }
            let value = map.next_value::<serde_json::Value>()?;
            let id = value
                .as_str()
                .filter(|s| s.len() <= MAX_ID_LEN)
                .and_then(|s| DelegationId::new(s).ok());
            *self.0 = Some(id.map_or(Scan::Absent, Scan::Found));
            return Err(serde::de::Error::custom("stop: the delegation id was read"));
        }
        Ok(())
    }
}

/// The delegation named by the top-level `delegationId` within the first [`PEEK_BYTES`] of
/// `body` (a whole body or its beginning), if any.
pub fn peek_delegation_id(body: &[u8]) -> Option<DelegationId> {
    let mut s = DelegationIdScanner::default();
    match s.feed(body) {
        Scan::Found(id) => Some(id),
        Scan::Absent | Scan::More => None,
    }
}

/// The body limit of a message without a credential header whose first bytes named a
/// delegation bound with `bound` (`None`: unknown, not bound, or no id found), presenting
/// `presented` in a header (if any) and announcing `announced` bytes: `Ok(limit)` to read at
/// most `limit` bytes, or `Err((status, error))` to refuse it unread.
///
/// * A delegation whose INVITE bound its credential to the id ([`Binding::DelegationId`]),
///   or a header credential that authorises the delegation: the authenticated limit
///   ([`BodyLimits::max`]).
/// * Anything else (an unknown delegation, one bound to a header credential, no id found):
///   the unauthenticated limit; a body announced larger is refused (401) unread.
/// * A wrong header credential is refused (401).
pub fn message_body_verdict(
    auth: Option<&RequiredAuth>,
    bound: Option<&BoundCredential>,
    presented: Option<&Credential>,
    announced: Option<u64>,
    limits: BodyLimits,
) -> Result<u64, (u16, ErrorInfo)> {
    let full = || match announced {
        Some(n) if n > limits.max => Err(too_large(limits.max)),
        _ => Ok(limits.max),
    };
    if auth.is_none() {
        return full();
    }
    let authorised = authorize(auth, bound, presented).is_ok();
    match (presented, bound) {
        (Some(_), _) if authorised => full(),
        (Some(_), _) => Err((401, super::auth_failed())),
        (None, Some(b)) if authorised && b.binding == Binding::DelegationId => full(),
        (None, _) => {
            let limit = limits.unauthenticated.min(limits.max);
            match announced {
                Some(n) if n > limit => Err(needs_header(n, limit)),
                _ => Ok(limit),
            }
        }
    }
}

impl Executor {
    /// The body limit of a message (`POST /awcp`) whose headers left it undecided
    /// ([`super::HeaderVerdict::Peek`]): `id` is the delegation its first bytes name
    /// ([`DelegationIdScanner`]), `presented` the header credential if any, `announced` its
    /// `Content-Length`. `Ok(limit)`: read at most `limit` bytes; `Err((status, error))`:
    /// refuse it without reading it. Rules: [`message_body_verdict`].
    pub fn message_body_limit(
        &self,
        id: Option<&DelegationId>,
        presented: Option<&Credential>,
        announced: Option<u64>,
        limits: BodyLimits,
    ) -> Result<u64, (u16, ErrorInfo)> {
        let bound = id
            .and_then(|id| self.assignments.get(id))
            .and_then(|a| a.auth.as_ref());
        message_body_verdict(
            self.config.auth.as_ref(),
            bound,
            presented,
            announced,
            limits,
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::wildcard_enum_match_arm)]
mod tests {
    use super::*;
    use crate::engine::executor::{ExecutorConfig, ExecutorInput, Request};
    use crate::engine::RequestId;
    use crate::error::ErrorCode;
    use crate::time::Timestamp;
    use crate::wire::{AuthType, Dialect, Message};

    const ID: &str = "dlg_0a1b2c3d4e5f60718293a4b5c6d7e8f9";

    fn id() -> DelegationId {
        DelegationId::new(ID).unwrap()
    }

    /// Scans the whole body `body` fed at once, and fed one byte at a time, then ends it: both
    /// must agree.
    fn scan(body: &str) -> Scan {
        let mut s = DelegationIdScanner::default();
        s.feed(body.as_bytes());
        let whole = s.finish();
        let mut s = DelegationIdScanner::default();
        for b in body.as_bytes() {
            if s.feed(std::slice::from_ref(b)) != Scan::More {
                break;
            }
        }
        let bytewise = s.finish();
        assert_eq!(whole, bytewise, "{body}");
        whole
    }

    #[test]
    fn the_top_level_delegation_id_is_found_after_other_fields() {
        let found = Scan::Found(id());
        assert_eq!(
            scan(&format!(r#"{{"type":"START","delegationId":"{ID}"}}"#)),
            found
        );
        // Fields before it of every JSON type, nested ones naming another id, escapes and
        // look-alike text in strings.
        let body = format!(
            r#" {{ "version" : "1", "n": -1.5e3, "ok": true, "nil": null,
               "lease": {{"delegationId": "dlg_other", "a": [1, {{"b": "}}]"}}]}},
               "note": "a \"delegationId\":\"dlg_fake\" \\",
               "delegationIdX": "dlg_longer_key",
               "delegationId" : "{ID}", "transportHandle": {{"workspaceBase64": "AAAA"#
        );
        assert_eq!(scan(&body), found);
        // Decided as soon as the value ends, whatever follows (an archive still arriving).
        let mut s = DelegationIdScanner::default();
        assert_eq!(
            s.feed(format!(r#"{{"delegationId":"{ID}"#).as_bytes()),
            Scan::More
        );
        assert_eq!(s.feed(b"\", \"transportHandle\": {"), found);
        assert_eq!(s.feed(b"garbage"), found);
        assert_eq!(peek_delegation_id(body.as_bytes()), Some(id()));
    }

    #[test]
    fn a_body_that_names_no_usable_id_is_absent() {
        for body in [
            "[1,2]".to_owned(),
            "not json".to_owned(),
            r#"{"type":"START"}"#.to_owned(),
            r#"{"lease":{"delegationId":"dlg_nested"}}"#.to_owned(),
            r#"{"delegationId":42}"#.to_owned(),
            r#"{"delegationId":"has space"}"#.to_owned(),
            format!(r#"{{"delegationId":"{}"}}"#, "a".repeat(MAX_ID_LEN + 1)),
            r#"{"a" "b"}"#.to_owned(),
        ] {
            assert_eq!(scan(&body), Scan::Absent, "{body}");
        }
        // Undecided until the body ends; then absent.
        let mut s = DelegationIdScanner::default();
        assert_eq!(s.feed(br#"{"type":"START","deleg"#), Scan::More);
        assert_eq!(s.finish(), Scan::Absent);
        assert_eq!(peek_delegation_id(br#"{"type":"#), None);
    }

    #[test]
    fn the_scanner_looks_at_no_more_than_its_limit() {
        let padded = format!(r#"{{"pad":"{}","delegationId":"{ID}"}}"#, "A".repeat(100));
        assert_eq!(
            DelegationIdScanner::new(1000).feed(padded.as_bytes()),
            Scan::Found(id())
        );
        assert_eq!(
            DelegationIdScanner::new(50).feed(padded.as_bytes()),
            Scan::Absent
        );
        // Fed in pieces, the limit counts every piece.
        let mut s = DelegationIdScanner::new(50);
        assert_eq!(s.feed(&padded.as_bytes()[..40]), Scan::More);
        assert_eq!(s.feed(&padded.as_bytes()[40..]), Scan::Absent);
        let big = format!(
            r#"{{"pad":"{}","delegationId":"{ID}"}}"#,
            "A".repeat(PEEK_BYTES as usize)
        );
        assert_eq!(peek_delegation_id(big.as_bytes()), None);
    }

    use super::super::tests::{req, LIMITS};

    #[test]
    fn the_binding_of_the_named_delegation_chooses_the_limit() {
        let r = req();
        let v = |bound: Option<&BoundCredential>, presented: Option<&Credential>, n| {
            message_body_verdict(Some(&r), bound, presented, n, LIMITS)
        };
        let by_id = BoundCredential {
            digest: super::super::SecretDigest::of("s3cret"),
            binding: Binding::DelegationId,
        };
        let by_header = BoundCredential {
            binding: Binding::Header,
            ..by_id
        };
        let good = Credential::bearer("s3cret");
        let bad = Credential::bearer("nope");
        // Bound without a header: read whole (up to the overall limit).
        assert_eq!(v(Some(&by_id), None, Some(900)), Ok(1000));
        assert_eq!(v(Some(&by_id), None, None), Ok(1000));
        assert_eq!(v(Some(&by_id), None, Some(1001)).unwrap_err().0, 413);
        // Bound to a header: without it, only the unauthenticated limit.
        assert_eq!(v(Some(&by_header), None, Some(900)).unwrap_err().0, 401);
        assert_eq!(v(Some(&by_header), None, None), Ok(100));
        assert_eq!(v(Some(&by_header), Some(&good), Some(900)), Ok(1000));
        // A wrong header is refused, bound or not.
        for bound in [Some(&by_id), Some(&by_header), None] {
            let (status, e) = v(bound, Some(&bad), Some(10)).unwrap_err();
            assert_eq!((status, e.code), (401, ErrorCode::AuthFailed));
        }
        // Unknown (or no id found): refused unread if announced larger, else bounded.
        let (status, e) = v(None, None, Some(101)).unwrap_err();
        assert_eq!((status, e.code), (401, ErrorCode::AuthFailed));
        assert_eq!(v(None, None, Some(100)), Ok(100));
        assert_eq!(v(None, None, None), Ok(100));
        // Auth off: only the overall limit.
        assert_eq!(
            message_body_verdict(None, None, None, None, LIMITS),
            Ok(1000)
        );
    }

    #[test]
    fn the_engine_reads_a_start_whole_only_for_a_delegation_its_invite_bound_by_id() {
        let mut ex = Executor::new(ExecutorConfig {
            auth: Some(req()),
            ..ExecutorConfig::default()
        });
        let invite = |id: &DelegationId, field: bool| {
            let mut inv = crate::engine::executor::tests::invite(id);
            if field {
                inv.auth = Some(crate::wire::Auth {
                    auth_type: AuthType::Bearer,
                    credential: "s3cret".into(),
                    metadata: Default::default(),
                });
            }
            Request::Message(Box::new(Message::Invite(inv)), Dialect::Reference)
        };
        let by_header = DelegationId::new("dlg_ffeeddccbbaa99887766554433221100").unwrap();
        for (n, (id, field, credential)) in [
            (id(), true, None),
            (by_header.clone(), false, Some(Credential::bearer("s3cret"))),
        ]
        .into_iter()
        .enumerate()
        {
            ex.handle(
                Timestamp::from_unix_millis(1_750_000_000_000),
                ExecutorInput::Request {
                    request: RequestId(n as u64 + 1),
                    credential,
                    origin: None,
                    body: invite(&id, field),
                },
            )
            .unwrap();
        }
        let limit = |id: Option<&DelegationId>, c: Option<&Credential>| {
            ex.message_body_limit(
                id,
                c,
                Some(3 << 20),
                BodyLimits {
                    max: 256 << 20,
                    unauthenticated: 1 << 20,
                },
            )
        };
        // The reference delegator's START: no header, 3 MiB, for the delegation its INVITE's
        // `auth` field bound.
        assert_eq!(limit(Some(&id()), None), Ok(256 << 20));
        // Unknown, bound to a header, no id: refused before the body is read.
        let unknown = DelegationId::new("dlg_00000000000000000000000000000009").unwrap();
        for i in [Some(&unknown), Some(&by_header), None] {
            assert_eq!(limit(i, None).unwrap_err().0, 401, "{i:?}");
        }
        // A wrong header, even on the bound delegation.
        assert_eq!(
            limit(Some(&id()), Some(&Credential::bearer("x")))
                .unwrap_err()
                .0,
            401
        );
        assert_eq!(
            limit(Some(&by_header), Some(&Credential::bearer("s3cret"))),
            Ok(256 << 20)
        );
    }
}
