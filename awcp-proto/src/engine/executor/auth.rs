//! Who may act on an executor's assignments: the credential the executor requires, the
//! credential a request presents, and which credential authorises which request.
//!
//! ## The rules (executor with [`RequiredAuth`])
//!
//! * **Headers first.** A request's headers are judged by [`check_headers`] before its body is
//!   read: a wrong credential, a credential of a type the executor does not accept, or an
//!   unsupported `Authorization` scheme is refused at once (HTTP 401); `GET /awcp/status` needs
//!   the credential; a body larger than the unauthenticated limit needs it too, except a
//!   message (`POST /awcp`) naming a delegation its INVITE bound without a header: its first
//!   bytes are looked at for the delegation id ([`DelegationIdScanner`]) and the engine
//!   chooses the limit ([`message_body_verdict`]): the reference delegator's START inlines
//!   the whole workspace.
//! * **INVITE** is authenticated by a valid credential header, or else by its `auth` field
//!   (how the reference delegator sends it). The credential that authenticated it is bound to
//!   the delegation: only its [`SecretDigest`] is kept, never the secret.
//! * **Later requests naming the delegation** (START, ERROR, SSE, result, ack, cancel, snapshot
//!   downloads) are authorised by the bound credential in a header. If the INVITE itself came
//!   without a header (the reference delegator never sends one), they are also accepted
//!   without any header ([`Binding::DelegationId`]): the delegation id, chosen at random by
//!   the delegator and never listed to unauthenticated callers, is then the capability. That
//!   mode requires an id that cannot be guessed ([`DelegationId::is_unguessable`]). A request
//!   that presents a wrong credential is refused in every mode.
//! * Requests for an unknown delegation without a credential are refused with 401, so an
//!   unauthenticated caller cannot even learn which ids exist.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::{ErrorCode, ErrorInfo};
use crate::id::DelegationId;
use crate::wire::AuthType;

mod body;

pub use self::body::{
    message_body_verdict, peek_delegation_id, DelegationIdScanner, Scan, PEEK_BYTES,
};

/// A credential presented with a request: `Authorization: Bearer …` (type `bearer`),
/// `X-API-Key: …` (type `api_key`), or INVITE's `auth` field (its declared type). `Debug` never
/// prints the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    /// How it was presented.
    pub auth_type: AuthType,
    /// The secret.
    pub secret: String,
}

impl Credential {
    /// A bearer token.
    pub fn bearer(secret: impl Into<String>) -> Self {
        Credential {
            auth_type: AuthType::Bearer,
            secret: secret.into(),
        }
    }

    /// An API key.
    pub fn api_key(secret: impl Into<String>) -> Self {
        Credential {
            auth_type: AuthType::ApiKey,
            secret: secret.into(),
        }
    }
}

impl core::fmt::Debug for Credential {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Credential")
            .field("auth_type", &self.auth_type)
            .field("secret", &"<redacted>")
            .finish()
    }
}

/// What a request's headers present.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Presented {
    /// No credential header.
    Nothing,
    /// A credential.
    Credential(Credential),
    /// An `Authorization` header with a scheme other than `Bearer` (named here).
    Unsupported(String),
}

impl Presented {
    /// The credential, if one was presented.
    pub fn credential(&self) -> Option<&Credential> {
        match self {
            Presented::Credential(c) => Some(c),
            Presented::Nothing | Presented::Unsupported(_) => None,
        }
    }

    /// The credential, if one was presented.
    pub fn into_credential(self) -> Option<Credential> {
        match self {
            Presented::Credential(c) => Some(c),
            Presented::Nothing | Presented::Unsupported(_) => None,
        }
    }
}

/// The SHA-256 of a secret: what an executor keeps, and journals, to verify a credential
/// later without storing it. Comparisons are constant-time. `Debug` shows a short prefix.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SecretDigest([u8; 32]);

impl SecretDigest {
    /// The digest of `secret`.
    pub fn of(secret: &str) -> Self {
        SecretDigest(Sha256::digest(secret.as_bytes()).into())
    }

    /// Whether `secret` has this digest (constant-time in the secret's content).
    pub fn matches(&self, secret: &str) -> bool {
        Self::of(secret).0.ct_eq(&self.0).into()
    }

    /// Lowercase hex (64 characters).
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Parses [`Self::to_hex`]'s output.
    pub fn from_hex(s: &str) -> Option<Self> {
        let mut out = [0u8; 32];
        hex::decode_to_slice(s, &mut out).ok()?;
        Some(SecretDigest(out))
    }
}

impl core::fmt::Debug for SecretDigest {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "SecretDigest({}…)", &self.to_hex()[..8])
    }
}

/// How the later requests of an authenticated delegation prove themselves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binding {
    /// Each carries the bound credential in a header (our delegator; the INVITE had one).
    Header,
    /// A header is optional: naming the (unguessable) delegation id suffices, as the reference
    /// delegator sends its credential only in INVITE's `auth`. A wrong header is still refused.
    DelegationId,
}

impl Binding {
    /// `header` or `delegationId` (journal records).
    pub fn as_str(self) -> &'static str {
        match self {
            Binding::Header => "header",
            Binding::DelegationId => "delegationId",
        }
    }

    /// Parses [`Self::as_str`]'s output.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "header" => Some(Binding::Header),
            "delegationId" => Some(Binding::DelegationId),
            _ => None,
        }
    }
}

/// The credential bound to one assignment at INVITE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BoundCredential {
    /// Digest of the secret that authenticated the INVITE.
    pub digest: SecretDigest,
    /// How later requests must prove themselves.
    pub binding: Binding,
}

/// A credential the executor requires (`--auth-token`, `--auth-type`).
#[derive(Clone, PartialEq, Eq)]
pub struct RequiredAuth {
    /// Accepted credential types (`bearer`, `api_key`); empty accepts any type.
    pub types: Vec<AuthType>,
    /// The secret.
    pub credential: String,
}

impl core::fmt::Debug for RequiredAuth {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RequiredAuth")
            .field("types", &self.types)
            .field("credential", &"<redacted>")
            .finish()
    }
}

impl RequiredAuth {
    /// Whether a credential of type `t` is accepted.
    pub fn accepts_type(&self, t: &AuthType) -> bool {
        self.types.is_empty() || self.types.contains(t)
    }

    /// Whether `c` is the required credential, of an accepted type (constant-time in the
    /// secrets' content and length).
    pub fn accepts(&self, c: &Credential) -> bool {
        self.accepts_type(&c.auth_type) && SecretDigest::of(&self.credential).matches(&c.secret)
    }
}

/// The error every refused credential gets (no detail on what was wrong).
pub fn auth_failed() -> ErrorInfo {
    ErrorInfo::new(ErrorCode::AuthFailed, "missing or invalid credential")
}

/// Which kind of executor endpoint a request is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `POST /awcp` (INVITE, START, ERROR).
    Message,
    /// An endpoint naming one delegation (`/awcp/tasks/{id}/…`, `/awcp/cancel/{id}`).
    Delegation,
    /// `GET /awcp/status`: lists every delegation.
    Status,
    /// The A2A agent card: public by design (delegators discover executors with it).
    Public,
}

/// Body size limits for [`check_headers`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BodyLimits {
    /// Largest body accepted at all.
    pub max: u64,
    /// Largest body accepted from a request without a credential header when auth is on (an
    /// INVITE, or a reference delegator's START with a small inline archive).
    pub unauthenticated: u64,
}

/// The verdict on a request's headers, before its body is read.
#[derive(Clone, Debug, PartialEq)]
pub enum HeaderVerdict {
    /// Answer at once with this HTTP status and error; read nothing (a driver may discard
    /// the body before it ends the answer, so that a client still sending sees it).
    Refuse {
        /// HTTP status (401 or 413).
        status: u16,
        /// The error.
        error: ErrorInfo,
    },
    /// Read at most `body_limit` bytes and hand the request to the engine.
    Proceed {
        /// Body limit for this request.
        body_limit: u64,
    },
    /// A message without a credential header that may be larger than the unauthenticated
    /// limit: feed its first bytes to a [`DelegationIdScanner`] (which looks at no more than
    /// `peek`), then ask [`super::Executor::message_body_limit`] which limit applies.
    Peek {
        /// How many leading bytes are looked at, at most.
        peek: u64,
    },
}

/// The refusal of a body over `limit` bytes (413), whoever sends it.
fn too_large(limit: u64) -> (u16, ErrorInfo) {
    (
        413,
        ErrorInfo {
            code: ErrorCode::WorkspaceTooLarge,
            message: format!("request body exceeds the executor's limit of {limit} bytes"),
            hint: Some(
                "Delegate a smaller workspace, or use the archive URL mode so the archive is fetched instead of inlined.".into(),
            ),
        },
    )
}

/// The refusal of an `n`-byte body without a credential header, over `limit` (401).
fn needs_header(n: u64, limit: u64) -> (u16, ErrorInfo) {
    (
        401,
        ErrorInfo {
            code: ErrorCode::AuthFailed,
            message: format!(
                "a {n}-byte body needs the credential in a header; without one at most {limit} bytes are read"
            ),
            hint: Some(
                "Send `Authorization: Bearer <token>` or `X-API-Key: <key>` with the request.".into(),
            ),
        },
    )
}

/// Judges a request from its headers alone: see the [module docs](self) for the rules.
/// `content_length` is the announced body length, if any.
pub fn check_headers(
    auth: Option<&RequiredAuth>,
    endpoint: Endpoint,
    presented: &Presented,
    content_length: Option<u64>,
    limits: BodyLimits,
) -> HeaderVerdict {
    let refuse = |status, error| HeaderVerdict::Refuse { status, error };
    let too_large = |limit: u64| {
        let (status, error) = too_large(limit);
        refuse(status, error)
    };
    let Some(req) = auth else {
        return match content_length {
            Some(n) if n > limits.max => too_large(limits.max),
            _ => HeaderVerdict::Proceed {
                body_limit: limits.max,
            },
        };
    };
    match (presented, endpoint) {
        (_, Endpoint::Public) => HeaderVerdict::Proceed {
            body_limit: limits.unauthenticated,
        },
        (Presented::Unsupported(scheme), _) => refuse(
            401,
            ErrorInfo {
                code: ErrorCode::AuthFailed,
                message: format!("unsupported Authorization scheme {scheme:?}"),
                hint: Some("Send `Authorization: Bearer <token>` or `X-API-Key: <key>`.".into()),
            },
        ),
        (Presented::Credential(c), _) if !req.accepts(c) => refuse(401, auth_failed()),
        (Presented::Credential(_), _) => match content_length {
            Some(n) if n > limits.max => too_large(limits.max),
            _ => HeaderVerdict::Proceed {
                body_limit: limits.max,
            },
        },
        (Presented::Nothing, Endpoint::Status) => refuse(401, auth_failed()),
        (Presented::Nothing, Endpoint::Message) => {
            let limit = limits.unauthenticated.min(limits.max);
            match content_length {
                Some(n) if n <= limit => HeaderVerdict::Proceed { body_limit: limit },
                Some(n) if n > limits.max => too_large(limits.max),
                // Larger than an unauthenticated body may be, or of unknown length: a START
                // for a delegation its INVITE bound may be read whole (the reference
                // delegator's), which only its first bytes tell.
                _ => HeaderVerdict::Peek {
                    peek: PEEK_BYTES.min(limits.max),
                },
            }
        }
        (Presented::Nothing, Endpoint::Delegation) => {
            let limit = limits.unauthenticated.min(limits.max);
            match content_length {
                Some(n) if n > limit => {
                    let (status, error) = needs_header(n, limit);
                    refuse(status, error)
                }
                _ => HeaderVerdict::Proceed { body_limit: limit },
            }
        }
    }
}

/// A body turned out longer than its `limit` while it was read (it announced no length, or a
/// wrong one): without authentication where it is required it is the credential's fault
/// (401, the unauthenticated limit applied), else the body is too large (413).
/// `authenticated`: the request presented a credential header, or named a delegation whose
/// binding stands for one (the authenticated limit applied,
/// [`super::Executor::message_body_limit`]).
pub fn body_over_limit(
    auth: Option<&RequiredAuth>,
    authenticated: bool,
    limit: u64,
) -> (u16, ErrorInfo) {
    if auth.is_some() && !authenticated {
        return (
            401,
            ErrorInfo {
                code: ErrorCode::AuthFailed,
                message: format!("without a credential header at most {limit} bytes are read"),
                hint: Some(
                    "Send `Authorization: Bearer <token>` or `X-API-Key: <key>` with the request."
                        .into(),
                ),
            },
        );
    }
    too_large(limit)
}

/// Decides whether `presented` may act on a delegation whose INVITE bound `bound` (`None`: the
/// delegation is unknown or was accepted without auth). `Ok` if auth is off.
pub fn authorize(
    auth: Option<&RequiredAuth>,
    bound: Option<&BoundCredential>,
    presented: Option<&Credential>,
) -> Result<(), ErrorInfo> {
    let Some(req) = auth else {
        return Ok(());
    };
    let ok = match (bound, presented) {
        (Some(b), Some(c)) => req.accepts_type(&c.auth_type) && b.digest.matches(&c.secret),
        (Some(b), None) => b.binding == Binding::DelegationId,
        (None, Some(c)) => req.accepts(c),
        (None, None) => false,
    };
    if ok {
        Ok(())
    } else {
        Err(auth_failed())
    }
}

/// Authenticates an INVITE for delegation `id`: by the header credential if one was presented,
/// else by the INVITE's `auth` field. Returns what to bind to the delegation (`None` if auth is
/// off).
pub fn authenticate_invite(
    auth: Option<&RequiredAuth>,
    id: &DelegationId,
    header: Option<&Credential>,
    field: Option<&crate::wire::Auth>,
) -> Result<Option<BoundCredential>, ErrorInfo> {
    let Some(req) = auth else {
        return Ok(None);
    };
    if let Some(c) = header {
        return if req.accepts(c) {
            Ok(Some(BoundCredential {
                digest: SecretDigest::of(&c.secret),
                binding: Binding::Header,
            }))
        } else {
            Err(auth_failed())
        };
    }
    let Some(a) = field else {
        return Err(auth_failed());
    };
    let c = Credential {
        auth_type: a.auth_type.clone(),
        secret: a.credential.clone(),
    };
    if !req.accepts(&c) {
        return Err(auth_failed());
    }
    if !id.is_unguessable() {
        return Err(ErrorInfo {
            code: ErrorCode::AuthFailed,
            message: format!(
                "delegation id {id} can be guessed, so it cannot stand for the credential on later requests"
            ),
            hint: Some(
                "Use a random id (dlg_ + 32 hex digits), or send the credential in a header (Authorization: Bearer / X-API-Key) on every request.".into(),
            ),
        });
    }
    Ok(Some(BoundCredential {
        digest: SecretDigest::of(&a.credential),
        binding: Binding::DelegationId,
    }))
}

impl super::Executor {
    /// Whether `presented` may act on `id` (rules: [`crate::engine::auth`]).
    pub(super) fn authorized(&self, id: &DelegationId, presented: Option<&Credential>) -> bool {
        self.authorize(Some(id), presented).is_ok()
    }

    /// Whether a request presenting `presented` (a header credential, if any) may act on
    /// delegation `id`, or on the whole executor (`None`: status). Drivers ask this before
    /// answering with a stream, so a refused subscription gets HTTP 401; every request is
    /// checked again when it reaches the engine.
    pub fn authorize(
        &self,
        id: Option<&DelegationId>,
        presented: Option<&Credential>,
    ) -> Result<(), ErrorInfo> {
        let bound = id
            .and_then(|id| self.assignments.get(id))
            .and_then(|a| a.auth.as_ref());
        match (id, bound) {
            // Executor-wide requests always need the configured credential.
            (None, _) => authorize(self.config.auth.as_ref(), None, presented),
            (Some(_), b) => authorize(self.config.auth.as_ref(), b, presented),
        }
    }
}

#[cfg(test)]
mod tests;
