//! The delegator daemon's HTTP API (WIRE.md §6, the reference's shape) and a Rust client.
//!
//! | Method + path | Body / answer |
//! |---|---|
//! | `POST /delegate` | `{executorUrl, environment:{resources:[{name,type,source,mode}]}, task:{description,prompt}, ttlSeconds?, accessMode?, snapshotMode?, auth?, allowSensitive?}` → `{delegationId}` once started (400 `{error,code,hint}` on admission/decline) |
//! | `GET /delegations` | `{activeDelegations, delegations:[…]}` |
//! | `GET /delegation/{id}` | the record |
//! | `GET /delegation/{id}/wait?timeout=S` | the record once ended (or 408 after S seconds) |
//! | `DELETE /delegation/{id}` | `{ok:true}` (cancel) |
//! | `GET /delegation/{id}/events?tail=1` | its live events as SSE (`data: {type: state\|progress\|snapshot\|transfer\|connection_lost\|ended, …}`), ending after `ended`; with `tail=1` the last 40 progress lines first (else only the last) |
//! | `GET /delegation/{id}/snapshots` | `{snapshots:[…]}` |
//! | `GET /delegation/{id}/snapshots/{sid}/diff?max_bytes=N` | what applying it would do: `{files:[{path,change,diff?,note?}], conflicts, refused, skipped_resources, unchanged, truncated}` (nothing is written) |
//! | `POST /delegation/{id}/snapshots/{sid}/apply` / `…/discard` | `{ok:true}` |
//! | `GET /health` | `{status:"ok"}` |
//! | `/ui/…` | the dashboard in a browser (`dashboard` module; `POST /ui/code` with the token gives a one-time sign-in link) |
//!
//! The API lends any local directory to any executor, so [`DaemonApi`] guards every request,
//! before its body is read, against callers other than the daemon's own clients:
//!
//! 1. `Host` must name the listen address ([`security::host_allowed`]): a web page that had
//!    its domain name rebound to 127.0.0.1 is refused (DNS rebinding), 403.
//! 2. An `Origin` header must be the daemon's own ([`security::origin_allowed`]): every
//!    cross-site request a browser makes carries a foreign one, 403.
//! 3. `Authorization: Bearer <token>` with the daemon's token (a random token in
//!    `<state>/daemon.token`, mode 0600, read by the `awcp` CLI and `awcp-mcp`), 401.
//! 4. A request body must be `application/json` (a page can send `text/plain` without a CORS
//!    preflight; JSON needs one, which this API never grants), 415.
//!
//! The dashboard's session cookie stands in for the token (3) on reads, and on other methods
//! only with the daemon's own `Origin` (2), which browsers send with them.

use std::time::Duration;

use awcp_proto::engine::delegator::SnapshotStatus;
use awcp_proto::{DelegationId, DelegatorEvent, ErrorCode, ErrorInfo, SnapshotId};
use bytes::Bytes;
use futures::StreamExt;
use http::Method;
use http_body_util::BodyExt;
use serde_json::{json, Value};

use super::{DelegateParams, DelegatorError, DelegatorHandle};
use crate::net::{self, json_response, ResponseBody};
use crate::runtime::Runtime;
use crate::security;

pub mod api;
mod client;
mod dashboard;
mod events;
mod json;

pub use client::{DaemonClient, DaemonError};
use json::{bad, ok_json, parse_delegate, usage};

/// Delegates and waits until the delegation is started (or ended), like the reference daemon.
pub async fn delegate_started(
    d: &DelegatorHandle,
    params: DelegateParams,
) -> Result<DelegationId, DelegatorError> {
    let mut events = d.events();
    let id = d.delegate(params).await?;
    while let Some(ev) = events.next().await {
        // What "started" means is the engine's to say.
        match ev.start_outcome(&id) {
            Some(Ok(())) => return Ok(id),
            Some(Err(e)) => return Err(DelegatorError::Protocol(e)),
            None => {}
        }
    }
    Err(DelegatorError::Closed)
}

/// Who may call the daemon API: its token and the names it is reached by.
#[derive(Clone)]
pub struct DaemonAccess {
    /// The token every request presents as `Authorization: Bearer <token>`.
    pub token: String,
    /// The address the API listens on (the `Host` and `Origin` checks use it).
    pub listen: std::net::SocketAddr,
    /// Further names clients reach it by (`name` or `name:port`), e.g. behind a proxy.
    pub allowed_hosts: Vec<String>,
}

impl std::fmt::Debug for DaemonAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DaemonAccess")
            .field("token", &"<redacted>")
            .field("listen", &self.listen)
            .field("allowed_hosts", &self.allowed_hosts)
            .finish()
    }
}

/// The daemon API of a delegator behind its access checks (module docs): what a driver's
/// daemon server serves. Archive URLs are not here ([`DelegatorHandle::handle_archive_http`]).
#[derive(Clone)]
pub struct DaemonApi {
    delegator: DelegatorHandle,
    access: std::sync::Arc<DaemonAccess>,
    sessions: std::sync::Arc<crate::dashboard::session::Sessions>,
}

fn refuse(status: u16, error: &str, hint: &str) -> http::Response<ResponseBody> {
    let mut r = json_response(status, json!({"error": error, "hint": hint}).to_string());
    if status == 401 {
        r.headers_mut().insert(
            http::header::WWW_AUTHENTICATE,
            http::HeaderValue::from_static("Bearer realm=\"awcp-daemon\""),
        );
    }
    r
}

impl DaemonApi {
    /// The API of `delegator`, guarded by `access`.
    pub fn new(delegator: DelegatorHandle, access: DaemonAccess) -> Self {
        let sessions =
            crate::dashboard::session::Sessions::new("daemon", &access.token, access.listen.port());
        DaemonApi {
            delegator,
            access: std::sync::Arc::new(access),
            sessions: std::sync::Arc::new(sessions),
        }
    }

    /// The delegator behind the API.
    pub fn delegator(&self) -> &DelegatorHandle {
        &self.delegator
    }

    /// The API as an [`agent_rt::Handler`] for agent-rt's server ([`Self::handle_http`]).
    pub fn http_handler(&self) -> agent_rt::Handler {
        let api = self.clone();
        agent_rt::Handler::new(move |req| {
            let api = api.clone();
            async move { api.handle_http(req).await }
        })
    }

    /// The access checks of the module docs, on the request's headers; `Some` refusal.
    pub fn check<B>(&self, req: &http::Request<B>) -> Option<http::Response<ResponseBody>> {
        if let Some(refused) = self.check_host_and_origin(req) {
            return Some(refused);
        }
        // `GET /` says what this is and how to use it, token or not (nothing about any
        // delegation); the Host and Origin checks above still apply.
        let root = req.method() == Method::GET && req.uri().path() == "/";
        if !root && !self.token_presented(req) && !self.session_presented(req) {
            return Some(refuse(
                401,
                "missing or invalid daemon token",
                "Send `Authorization: Bearer <token>` with the token from <state-dir>/daemon.token (the awcp CLI and awcp-mcp read it from --state-dir, or take --daemon-token / AWCP_DAEMON_TOKEN).",
            ));
        }
        self.check_body_type(req)
    }

    /// Checks 1 and 2 of the module docs (Host, Origin).
    fn check_host_and_origin<B>(
        &self,
        req: &http::Request<B>,
    ) -> Option<http::Response<ResponseBody>> {
        let a = &self.access;
        let host = header(req, http::header::HOST).or(req.uri().authority().map(|x| x.as_str()));
        if !host.is_some_and(|h| security::host_allowed(h, a.listen, &a.allowed_hosts)) {
            return Some(refuse(
                403,
                &format!("Host {:?} is not this daemon's address", host.unwrap_or("")),
                "Address the daemon by the IP it listens on (or localhost); other names need --allowed-host.",
            ));
        }
        if let Some(origin) = header(req, http::header::ORIGIN) {
            if !security::origin_allowed(origin, a.listen, &a.allowed_hosts) {
                return Some(refuse(
                    403,
                    &format!("requests from web origin {origin:?} are not accepted"),
                    "The daemon API is for the awcp CLI, awcp-mcp, its dashboard and programs holding its token, not for other web pages.",
                ));
            }
        }
        None
    }

    /// Check 3: the request carries the daemon token.
    fn token_presented<B>(&self, req: &http::Request<B>) -> bool {
        header(req, http::header::AUTHORIZATION)
            .and_then(|v| {
                v.trim()
                    .strip_prefix("Bearer ")
                    .or(v.trim().strip_prefix("bearer "))
            })
            .map(str::trim)
            .is_some_and(|t| {
                awcp_proto::engine::auth::SecretDigest::of(&self.access.token).matches(t)
            })
    }

    /// The dashboard's session cookie stands in for the token: on reads, and on any other
    /// method only with an `Origin` header (checked to be the daemon's own before this), which
    /// browsers send with every such request a page makes. A cookie alone never changes
    /// anything.
    fn session_presented<B>(&self, req: &http::Request<B>) -> bool {
        let safe = matches!(*req.method(), Method::GET | Method::HEAD);
        (safe || header(req, http::header::ORIGIN).is_some())
            && self.sessions.has_session(req.headers())
    }

    /// Check 4: a body is JSON.
    fn check_body_type<B>(&self, req: &http::Request<B>) -> Option<http::Response<ResponseBody>> {
        let has_body = header(req, http::header::TRANSFER_ENCODING).is_some()
            || header(req, http::header::CONTENT_LENGTH)
                .is_some_and(|l| l.trim().parse::<u64>().map_or(true, |n| n > 0));
        if has_body || req.uri().path().trim_end_matches('/') == "/delegate" {
            let json = header(req, http::header::CONTENT_TYPE).is_some_and(|t| {
                t.split(';')
                    .next()
                    .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
            });
            if !json {
                return Some(refuse(
                    415,
                    "request bodies must be application/json",
                    "Send `Content-Type: application/json`.",
                ));
            }
        }
        None
    }

    /// Answers one request: the access checks, then the API (or the dashboard under `/ui`).
    pub async fn handle_http<B>(&self, req: http::Request<B>) -> http::Response<ResponseBody>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let path = req.uri().path();
        if path == "/ui" || path.starts_with("/ui/") {
            if let Some(refused) = self
                .check_host_and_origin(&req)
                .or_else(|| self.check_body_type(&req))
            {
                return refused;
            }
            let access = if self.token_presented(&req) {
                dashboard::Access::Token
            } else if self.session_presented(&req) {
                dashboard::Access::Session
            } else {
                dashboard::Access::None
            };
            // No route of the dashboard reads a body.
            let (parts, _) = req.into_parts();
            return dashboard::handle(
                &self.delegator,
                &self.sessions,
                self.access.listen,
                access,
                &parts,
            )
            .await;
        }
        // A browser opening the daemon's address is shown the dashboard's door.
        let browser = req.method() == Method::GET
            && path == "/"
            && header(&req, http::header::ACCEPT).is_some_and(|a| a.contains("text/html"));
        if browser && self.check_host_and_origin(&req).is_none() {
            return crate::dashboard::redirect("/ui/", None);
        }
        match self.check(&req) {
            Some(refused) => refused,
            None => route(&self.delegator, req).await,
        }
    }
}

/// Header `name` as text (a header that is not text reads as a NUL, which matches nothing).
fn header<B>(req: &http::Request<B>, name: http::header::HeaderName) -> Option<&str> {
    req.headers()
        .get(name)
        .map(|v| v.to_str().unwrap_or("\u{0}"))
}

/// Answers one daemon API request (after [`DaemonApi::check`]).
async fn route<B>(d: &DelegatorHandle, req: http::Request<B>) -> http::Response<ResponseBody>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or("").to_owned();
    let segs: Vec<&str> = path.trim_end_matches('/').split('/').skip(1).collect();
    let sid_of = |s: &str| SnapshotId::new(s).map_err(|e| bad(format!("snapshot id: {e}")));
    let id_of = |s: &str| DelegationId::new(s).map_err(|e| bad(format!("delegation id: {e}")));
    match (method, segs.as_slice()) {
        (Method::GET, []) => json_response(200, root_document().to_string()),
        (Method::GET, ["health"]) => json_response(200, json!({"status": "ok"}).to_string()),
        (Method::POST, ["delegate"]) => {
            // A declared length over the limit is refused before the body is read.
            let body = match agent_rt::body::read_body(req.into_body(), 1024 * 1024).await {
                Ok(b) => b,
                Err(e) => return bad(format!("request body too large or unreadable: {e}")),
            };
            let params = match parse_delegate(&body) {
                Ok(p) => p,
                Err(e) => return bad(e),
            };
            match delegate_started(d, params).await {
                Ok(id) => ok_json(&api::Delegated {
                    delegation_id: id.as_str().into(),
                }),
                Err(e) => usage(e),
            }
        }
        (Method::GET, ["delegations"]) => {
            let all = d.list().await;
            ok_json(&api::Delegations {
                active_delegations: all.iter().filter(|v| !v.state.is_terminal()).count(),
                delegations: all
                    .iter()
                    .map(|v| api::Summary {
                        id: v.request.id.as_str().into(),
                        state: v.state.as_str().into(),
                        executor_url: v.request.peer.clone(),
                        created_at: v.created_at.to_rfc3339(),
                        description: v.request.task.description.clone(),
                    })
                    .collect(),
            })
        }
        (m, ["delegation", id, rest @ ..]) => {
            let id = match id_of(id) {
                Ok(i) => i,
                Err(r) => return r,
            };
            match (m, rest) {
                (Method::GET, []) => match d.get(&id).await {
                    Some(v) => ok_json(&api::Record::of(&v)),
                    None => not_found(&id),
                },
                (Method::GET, ["wait"]) => {
                    let secs = query
                        .split('&')
                        .find_map(|kv| kv.strip_prefix("timeout="))
                        .and_then(|t| t.parse::<u64>().ok());
                    // `until=round`: until the running round ends (multi-round), not the
                    // delegation.
                    let round = query.split('&').any(|kv| kv == "until=round");
                    let wait = || async {
                        if round {
                            d.wait_round(&id).await
                        } else {
                            d.wait(&id).await
                        }
                    };
                    let waited = match secs {
                        None => wait().await,
                        Some(s) => {
                            let w = std::pin::pin!(wait());
                            let t = std::pin::pin!(d.timer(Duration::from_secs(s)));
                            match futures::future::select(w, t).await {
                                futures::future::Either::Left((v, _)) => v,
                                futures::future::Either::Right(_) => {
                                    return json_response(
                                        408,
                                        json!({"error": "still running", "timeout": s}).to_string(),
                                    )
                                }
                            }
                        }
                    };
                    match waited {
                        Ok(v) => ok_json(&api::Record::of(&v)),
                        Err(DelegatorError::Usage(_)) => not_found(&id),
                        Err(e) => json_response(
                            503,
                            json!({"error": e.to_string(), "hint": "The daemon is stopping; the delegation resumes when it starts again."}).to_string(),
                        ),
                    }
                }
                (Method::POST, ["continue"]) => {
                    let body = match agent_rt::body::read_body(req.into_body(), 1024 * 1024).await {
                        Ok(b) => b,
                        Err(e) => return bad(format!("request body too large or unreadable: {e}")),
                    };
                    let task = match serde_json::from_slice::<api::ContinueBody>(&body) {
                        Ok(b) if !b.task.prompt.is_empty() => b.task,
                        Ok(_) => return bad("task.prompt is required"),
                        Err(e) => return bad(format!("not a continue request: {e}")),
                    };
                    let task = awcp_proto::TaskSpec {
                        description: if task.description.is_empty() {
                            crate::delegator::first_line(&task.prompt, 80)
                        } else {
                            task.description
                        },
                        prompt: task.prompt,
                    };
                    match d.continue_delegation(&id, task).await {
                        Ok(round) => ok_json(&api::Continued { ok: true, round }),
                        Err(e) => usage(e),
                    }
                }
                (Method::POST, ["close"]) => match d.close(&id).await {
                    Ok(()) => json_response(200, json!({"ok": true}).to_string()),
                    Err(e) => usage(e),
                },
                (Method::DELETE, []) => match d.cancel(&id).await {
                    Ok(()) => json_response(200, json!({"ok": true}).to_string()),
                    Err(e) => usage(e),
                },
                (Method::GET, ["events"]) => {
                    let tail = query.split('&').any(|kv| kv == "tail=1");
                    events::stream(d, id, tail).await
                }
                (Method::GET, ["snapshots"]) => match d.get(&id).await {
                    Some(v) => ok_json(&api::Snapshots {
                        snapshots: v
                            .snapshots
                            .iter()
                            .map(|s| api::Snapshot::of(&v, s))
                            .collect(),
                    }),
                    None => not_found(&id),
                },
                (Method::POST, ["snapshots", sid, "apply"]) => {
                    let sid = match sid_of(sid) {
                        Ok(s) => s,
                        Err(r) => return r,
                    };
                    match d.apply_snapshot_and_wait(&id, &sid).await {
                        Ok(()) => json_response(200, json!({"ok": true}).to_string()),
                        Err(e) => usage(e),
                    }
                }
                (Method::GET, ["snapshots", sid, "diff"]) => {
                    let sid = match sid_of(sid) {
                        Ok(s) => s,
                        Err(r) => return r,
                    };
                    let limits = diff_limits(Some(&query));
                    match d.preview_snapshot(&id, &sid, limits).await {
                        Ok(p) => ok_json(&p),
                        Err(e) => usage(e),
                    }
                }
                (Method::POST, ["snapshots", sid, "discard"]) => {
                    let sid = match sid_of(sid) {
                        Ok(s) => s,
                        Err(r) => return r,
                    };
                    match d.discard_snapshot(&id, &sid).await {
                        Ok(()) => json_response(200, json!({"ok": true}).to_string()),
                        Err(e) => usage(e),
                    }
                }
                _ => json_response(
                    404,
                    json!({"error": format!("no route {path}")}).to_string(),
                ),
            }
        }
        _ => json_response(
            404,
            json!({"error": format!("no route {path}")}).to_string(),
        ),
    }
}

/// The preview limits of `GET …/snapshots/{sid}/diff?max_bytes=N` (default
/// [`PreviewLimits::default`], at most 8 MiB of diff text).
fn diff_limits(query: Option<&str>) -> crate::delegator::PreviewLimits {
    let mut limits = crate::delegator::PreviewLimits::default();
    if let Some(n) = query
        .unwrap_or("")
        .split('&')
        .find_map(|kv| kv.strip_prefix("max_bytes="))
        .and_then(|v| v.parse::<usize>().ok())
    {
        limits.max_diff_bytes = n.min(8 << 20);
    }
    limits
}

/// What `GET /` answers: what this server is, its version, its routes and how to
/// authenticate, and the CLI commands that use them.
pub fn root_document() -> Value {
    json!({
        "name": "awcp delegator daemon",
        "version": env!("CARGO_PKG_VERSION"),
        "description": "Delegates local directories to AWCP executors (the reference daemon's HTTP API).",
        "authentication": "Authorization: Bearer <token> on every route but this one; the token is in <state-dir>/daemon.token (the awcp CLI and awcp-mcp read it).",
        "routes": {
            "POST /delegate": "start a delegation (JSON: executorUrl, environment, task, …)",
            "GET /delegations": "list delegations",
            "GET /delegation/{id}": "one delegation",
            "GET /delegation/{id}/wait?timeout=SECONDS": "wait until it ends (with &until=round: until its running round ends)",
            "POST /delegation/{id}/continue": "start the next round of an idle multi-round delegation (JSON: task {description, prompt})",
            "POST /delegation/{id}/close": "end an idle multi-round delegation",
            "GET /delegation/{id}/events": "its live events (server-sent events), until it ends",
            "DELETE /delegation/{id}": "cancel",
            "GET /delegation/{id}/snapshots": "its snapshots",
            "GET /delegation/{id}/snapshots/{snapshotId}/diff?max_bytes=N": "what applying a staged snapshot would do (files added, modified, deleted, unified diffs); nothing is written",
            "POST /delegation/{id}/snapshots/{snapshotId}/apply": "apply a staged snapshot",
            "POST /delegation/{id}/snapshots/{snapshotId}/discard": "discard a staged snapshot",
            "GET /health": "liveness",
            "GET /ui/": "the dashboard in a browser (sign in with the one-time link `awcp dashboard` prints)",
        },
        "cli": ["awcp delegate DIR --daemon --peer URL --prompt TEXT", "awcp delegate DIR --daemon --rounds …", "awcp continue ID --prompt TEXT", "awcp close ID", "awcp list", "awcp status ID", "awcp wait ID", "awcp cancel ID", "awcp snapshots ID", "awcp diff ID [SNAPSHOT]", "awcp apply ID SNAPSHOT", "awcp discard ID SNAPSHOT", "awcp dashboard"],
    })
}

pub(super) fn not_found(id: &DelegationId) -> http::Response<ResponseBody> {
    json_response(
        404,
        json!({"error": format!("unknown delegation {id}"), "hint": "List delegations with `awcp list` (GET /delegations)."}).to_string(),
    )
}

impl DelegatorHandle {
    /// Applies a staged snapshot and waits until it is applied (or failed).
    pub async fn apply_snapshot_and_wait(
        &self,
        id: &DelegationId,
        sid: &SnapshotId,
    ) -> Result<(), DelegatorError> {
        let mut events = self.events();
        self.apply_snapshot(id, sid).await?;
        while let Some(ev) = events.next().await {
            if let DelegatorEvent::Snapshot {
                id: eid,
                snapshot_id,
                status,
            } = ev
            {
                if eid == *id && snapshot_id == *sid {
                    match status {
                        SnapshotStatus::Applied => return Ok(()),
                        SnapshotStatus::Failed(e) => return Err(DelegatorError::Protocol(e)),
                        // Not applied: it stays pending, with the reason on its record.
                        SnapshotStatus::Pending | SnapshotStatus::Discarded => {
                            let reason = self.get(id).await.and_then(|v| {
                                v.snapshots.into_iter().find(|s| s.id == *sid)?.error
                            });
                            return Err(DelegatorError::Protocol(reason.unwrap_or_else(|| {
                                ErrorInfo::new(
                                    ErrorCode::TransportError,
                                    format!("snapshot {sid} was not applied"),
                                )
                            })));
                        }
                        SnapshotStatus::InFlight => {}
                    }
                }
            }
        }
        Err(DelegatorError::Closed)
    }
}
