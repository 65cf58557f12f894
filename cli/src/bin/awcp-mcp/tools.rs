//! The MCP tools (WIRE.md §12) on top of the delegator daemon's HTTP API.
//!
//! Every tool answers with readable text plus `structuredContent` (a JSON object). Bad
//! arguments, unknown ids and daemon failures come back as tool errors (`isError: true`) with a
//! message saying what was wrong; they never take the server down.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use awcp_driver::delegator::daemon::{api, DaemonClient, DaemonError};
use awcp_proto::engine::delegator::FetchedResult;
use awcp_proto::DelegationId;
use awcp_tokio::TokioRuntime;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ProgressToken,
    ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{Peer, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};

use crate::progress::Hub;
use serde::Deserialize;
use serde_json::{json, Value};

/// Server-wide defaults (from the command line).
#[derive(Clone, Debug)]
pub struct Defaults {
    /// Lease length when the call gives none.
    pub ttl_seconds: u64,
    /// Access mode when the call gives none.
    pub access_mode: String,
    /// Snapshot mode when the call gives none.
    pub snapshot_mode: String,
    /// Transport when the call gives none.
    pub transport: String,
    /// Transports the daemon has (`None`: unknown, an external daemon decides).
    pub transports: Option<Vec<String>>,
    /// Longest a foreground `delegate` waits before it returns the id (the client's patience).
    pub foreground_budget: Duration,
    /// Whether background delegations outlive this server (an external daemon holds them).
    pub survives_exit: bool,
}

/// Where a foreground `delegate` sends `notifications/progress`: the client and its token.
pub struct ProgressSink {
    peer: Peer<RoleServer>,
    token: ProgressToken,
    count: f64,
}

impl ProgressSink {
    /// The sink of a request, if the client asked for progress (`_meta.progressToken`).
    pub fn of(ctx: &RequestContext<RoleServer>) -> Option<ProgressSink> {
        Some(ProgressSink {
            peer: ctx.peer.clone(),
            token: ctx.meta.get_progress_token()?,
            count: 0.0,
        })
    }

    async fn send(&mut self, message: String) {
        self.count += 1.0;
        let p =
            ProgressNotificationParam::new(self.token.clone(), self.count).with_message(message);
        if let Err(e) = self.peer.notify_progress(p).await {
            tracing::debug!(error = %e, "progress notification not sent");
        }
    }
}

/// The MCP server: a daemon client, the defaults and the peer section of `delegate`.
#[derive(Clone)]
pub struct AwcpMcp {
    client: DaemonClient<TokioRuntime>,
    http: awcp_driver::net::HttpClient<TokioRuntime>,
    daemon_url: String,
    defaults: Arc<Defaults>,
    peers_section: Arc<String>,
    single_peer: Option<String>,
    hub: Option<Arc<Hub>>,
}

const TERMINAL: [&str; 4] = ["completed", "error", "cancelled", "expired"];

fn is_terminal(v: &Value) -> bool {
    v["state"].as_str().is_some_and(|s| TERMINAL.contains(&s))
}

/// Whether a delegation is over: terminal, its result applied (or not) and everything
/// released. A completed delegation still applying its result is not over yet; reading it as
/// over would report "stored but not applied" for a result about to be applied.
fn is_over(v: &Value) -> bool {
    v["ended"] == true
}

/// Whether a multi-round delegation (`keep_open`) is between rounds: its round has ended and
/// it waits for `delegate_continue` or `delegate_close`. For the round, that is "over".
fn is_idle(v: &Value) -> bool {
    v["state"] == "idle"
}

/// The snapshot of the round an idle delegation last ran (the newest it received).
fn latest_snapshot(v: &Value) -> Option<&Value> {
    v["snapshots"].as_array().and_then(|s| s.last())
}

/// Whether the round an idle delegation just ran left its result unapplied: its snapshot
/// could not be stored (`failed`) or was kept pending with the reason it was not applied.
fn round_not_applied(v: &Value) -> bool {
    is_idle(v)
        && latest_snapshot(v).is_some_and(|s| {
            s["status"] == "failed" || (s["status"] == "pending" && !s["error"].is_null())
        })
}

/// Whether a delegation record ended without success for the caller: its result was not
/// applied, it failed or expired, or the executor was unreachable (a cancel is not a failure);
/// for an idle multi-round delegation, whether the round's result was not applied.
fn unsuccessful(v: &Value) -> bool {
    if is_idle(v) {
        return round_not_applied(v);
    }
    match v["outcome"]["status"].as_str() {
        Some("not_applied" | "unreachable") => true,
        Some("failed") => v["state"] != "cancelled",
        _ => false,
    }
}

/// A record a wait ended with, as a tool's answer: an idle one (its round ended, waiting for
/// `delegate_continue` or `delegate_close`) is not still running.
fn settled(mut v: Value) -> (String, Value) {
    if is_idle(&v) {
        v["stillRunning"] = json!(false);
    }
    (report(&v), v)
}

/// A tool failure: text for the model, and the same as structured content.
struct ToolError {
    message: String,
    extra: Value,
}

impl ToolError {
    fn new(message: impl Into<String>) -> Self {
        ToolError {
            message: message.into(),
            extra: Value::Null,
        }
    }
}

impl From<DaemonError> for ToolError {
    fn from(mut e: DaemonError) -> Self {
        if e.status == 404 && e.message.starts_with("unknown delegation") {
            e.hint = Some(
                "the daemon has no such delegation; after a restart, delegate_recover with \
                 peer_url asks the executor"
                    .into(),
            );
        }
        ToolError {
            message: e.to_string(),
            extra: json!({"status": e.status, "code": e.code, "hint": e.hint}),
        }
    }
}

type ToolResult = Result<(String, Value), ToolError>;

fn ok_result(text: String, structured: Value) -> CallToolResult {
    let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
    r.structured_content = Some(structured);
    r
}

/// A tool error: `isError` with the message as text, and no `structuredContent` (a tool's
/// structured results must match its `outputSchema`, which describes a delegation; clients
/// such as the TypeScript SDK's reject a result that does not, and the model would never see
/// the message). Status, code and hint are appended to the text.
fn err_result(e: ToolError) -> CallToolResult {
    let mut text = format!("Error: {}", e.message);
    if let Value::Object(m) = e.extra {
        for (k, v) in m {
            match v {
                Value::Null => {}
                Value::String(s) => text.push_str(&format!("\n{k}: {s}")),
                v => text.push_str(&format!("\n{k}: {v}")),
            }
        }
    }
    CallToolResult::error(vec![ContentBlock::text(text)])
}

fn args<T: for<'de> Deserialize<'de>>(tool: &str, a: &Option<JsonObject>) -> Result<T, ToolError> {
    let v = Value::Object(a.clone().unwrap_or_default());
    serde_json::from_value(v)
        .map_err(|e| ToolError::new(format!("invalid arguments for {tool}: {e}")))
}

fn schema(v: Value) -> Arc<JsonObject> {
    match v {
        Value::Object(m) => Arc::new(m),
        _ => unreachable!("schemas are objects"),
    }
}

#[derive(Deserialize)]
struct ResourceArg {
    name: String,
    path: String,
    mode: Option<String>,
}

#[derive(Deserialize)]
struct DelegateArgs {
    description: String,
    prompt: String,
    workspace_dir: Option<String>,
    resources: Option<Vec<ResourceArg>>,
    cwd: Option<String>,
    peer_url: Option<String>,
    ttl_seconds: Option<u64>,
    access_mode: Option<String>,
    snapshot_mode: Option<String>,
    transport: Option<String>,
    auth_type: Option<String>,
    auth_credential: Option<String>,
    #[serde(default)]
    background: bool,
    #[serde(default)]
    allow_sensitive: bool,
    #[serde(default)]
    keep_open: bool,
}

/// `delegate_continue`'s arguments (the reference `dev` branch's names).
#[derive(Deserialize)]
struct ContinueArgs {
    delegation_id: String,
    prompt: String,
    description: Option<String>,
    #[serde(default)]
    background: bool,
}

/// What a wait waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Until {
    /// The delegation has ended (and everything is released).
    End,
    /// The running round has ended and its result is applied (`idle`), or the delegation has
    /// ended: a delegation that is not kept open ends with its one round.
    Round,
}

#[derive(Deserialize)]
struct OutputArgs {
    delegation_id: String,
    #[serde(default)]
    block: bool,
    timeout: Option<u64>,
}

#[derive(Deserialize)]
struct CancelArgs {
    delegation_id: Option<String>,
    #[serde(default)]
    all: bool,
}

#[derive(Deserialize)]
struct IdArgs {
    delegation_id: String,
}

#[derive(Deserialize)]
struct SnapshotArgs {
    delegation_id: String,
    snapshot_id: String,
}

#[derive(Deserialize)]
struct RecoverArgs {
    delegation_id: String,
    peer_url: Option<String>,
    auth_type: Option<String>,
    auth_credential: Option<String>,
}

/// The executor credential of a call: both parameters or neither. A credential without its
/// type is refused rather than dropped (it would silently go unsent); a type alone too.
/// A daemon answer as the JSON the tools report (their text is rendered from it, and it is
/// their `structuredContent`).
fn json_of<T: serde::Serialize>(answer: T) -> Value {
    serde_json::to_value(answer).unwrap_or(Value::Null)
}

/// A resource of a `POST /delegate` body.
fn resource(name: &str, dir: &Path, mode: &str) -> Result<api::DelegateResource, ToolError> {
    let source = dir
        .to_str()
        .ok_or_else(|| ToolError::new(format!("{}: not a UTF-8 path", dir.display())))?;
    Ok(api::DelegateResource {
        name: Some(name.to_owned()),
        kind: "fs".into(),
        source: Some(source.to_owned()),
        mode: Some(mode.to_owned()),
    })
}

fn auth_of(
    auth_type: &Option<String>,
    credential: &Option<String>,
) -> Result<Option<awcp_proto::wire::Auth>, ToolError> {
    match (auth_type, credential) {
        (Some(t), Some(c)) => {
            if !["api_key", "bearer", "oauth2"].contains(&t.as_str()) {
                return Err(ToolError::new(format!(
                    "auth_type must be api_key, bearer or oauth2, not {t:?}"
                )));
            }
            Ok(Some(awcp_proto::wire::Auth {
                auth_type: awcp_proto::wire::AuthType::parse(t),
                credential: c.clone(),
                metadata: Default::default(),
            }))
        }
        (None, Some(_)) => Err(ToolError::new(
            "auth_credential needs auth_type (api_key, bearer or oauth2): without it the \
             credential would not be sent",
        )),
        (Some(_), None) => Err(ToolError::new(
            "auth_type needs auth_credential (the credential to present to the executor)",
        )),
        (None, None) => Ok(None),
    }
}

/// A peer URL as `--peers` takes it: the executor's base URL or its AWCP URL (`<base>/awcp`),
/// normalised to the AWCP URL. Only http(s) URLs are accepted.
fn normalise_peer(peer: &str) -> Result<String, ToolError> {
    let peer = peer.trim();
    if !(peer.starts_with("http://") || peer.starts_with("https://")) {
        return Err(ToolError::new(format!(
            "peer_url must be an http(s) URL, not {peer:?}"
        )));
    }
    Ok(awcp_proto::http_binding::awcp_url(peer))
}

/// Resolves `p` against `cwd` (or the process's directory) and checks it is a directory.
pub fn resolve_dir(p: &str, cwd: Option<&str>) -> Result<PathBuf, String> {
    let path = Path::new(p);
    let full = if path.is_absolute() {
        path.to_path_buf()
    } else {
        let base = match cwd {
            Some(c) => PathBuf::from(c),
            None => std::env::current_dir().map_err(|e| format!("no current directory: {e}"))?,
        };
        base.join(path)
    };
    match std::fs::metadata(&full) {
        Ok(m) if m.is_dir() => std::fs::canonicalize(&full)
            .map_err(|e| format!("{}: {e} (WORKSPACE_NOT_FOUND)", full.display())),
        Ok(_) => Err(format!(
            "{} is not a directory (WORKSPACE_INVALID)",
            full.display()
        )),
        Err(e) => Err(format!(
            "workspace directory {} does not exist: {e} (WORKSPACE_NOT_FOUND)",
            full.display()
        )),
    }
}

fn check_mode(what: &str, m: &str) -> Result<(), ToolError> {
    match m {
        "ro" | "rw" => Ok(()),
        _ => Err(ToolError::new(format!(
            "{what} must be \"ro\" or \"rw\", not {m:?}"
        ))),
    }
}

fn state_line(v: &Value) -> String {
    let mut s = format!(
        "Delegation: {}\nState: {}\n",
        v["id"].as_str().unwrap_or("?"),
        v["state"].as_str().unwrap_or("?"),
    );
    if let Some(round) = v["round"].as_u64().filter(|r| *r > 1 || is_idle(v)) {
        s.push_str(&format!("Round: {round}\n"));
    }
    s.push_str(&format!(
        "Executor: {}\nCreated: {}\n",
        v["executorUrl"].as_str().unwrap_or("?"),
        v["createdAt"].as_str().unwrap_or("?"),
    ));
    s
}

fn snapshot_counts(v: &Value) -> (usize, usize, usize, usize) {
    let snaps = v["snapshots"].as_array().cloned().unwrap_or_default();
    let count = |s: &str| {
        snaps
            .iter()
            .filter(|x| x["status"].as_str() == Some(s))
            .count()
    };
    (
        snaps.len(),
        count("pending"),
        count("applied"),
        count("discarded"),
    )
}

/// A delegation record as the daemon reports it (`GET /delegation/{id}`), with what this
/// server adds: `latestProgress`, and for a foreground `delegate` that outlasted its budget
/// `delegationId` + `stillRunning`; or, for `delegate(background=true)`, the start receipt.
fn record_schema() -> Value {
    let text = json!({"type": "string"});
    let opt_obj = json!({"type": ["object", "null"]});
    json!({
        "type": "object",
        "properties": {
            "id": text, "delegationId": text, "state": text,
            "executorUrl": text, "peerUrl": text,
            "snapshots": {"type": "array", "items": snapshot_schema()},
            "snapshotMode": text,
            "snapshotPolicy": {"type": "object"},
            "result": opt_obj, "error": opt_obj, "outcome": {"type": "object"},
            "activeLease": opt_obj,
            "leaseConfig": {"type": "object"},
            "latestProgress": {"type": "object", "properties": {
                "line": text, "message": {"type": ["string", "null"]},
                "progress": {"type": ["number", "null"]},
                "bytesSent": {"type": "integer"}, "bytesReceived": {"type": "integer"}}},
            "stillRunning": {"type": "boolean"},
            "round": {"type": "integer", "minimum": 0},
            "background": {"type": "boolean"},
            "keepOpen": {"type": "boolean"},
            "survivesServerExit": {"type": "boolean"},
            "resources": {"type": "array"},
            "warnings": {"type": "array", "items": text},
        },
        "required": ["state"]
    })
}

fn snapshot_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "status": {"type": "string", "enum": ["in_flight", "pending", "applied", "discarded", "failed"]},
            "summary": {"type": ["string", "null"]},
            "recommended": {"type": ["boolean", "null"]},
            "metadata": {"type": ["object", "null"]},
            "changedFiles": {"type": "array", "items": {"type": "string"}},
            "error": {"type": ["object", "null"]},
            "preview": {
                "type": "object",
                "description": "For a pending snapshot: what applying it would do (nothing written yet).",
                "properties": {
                    "files": {"type": "array", "items": {"type": "object", "properties": {
                        "path": {"type": "string"},
                        "change": {"type": "string", "enum": ["added", "modified", "deleted"]},
                        "diff": {"type": "string"},
                        "note": {"type": "string"}
                    }, "required": ["path", "change"]}},
                    "conflicts": {"type": "array", "items": {"type": "string"}},
                    "truncated": {"type": "boolean"}
                }
            },
        },
        "required": ["id", "status"]
    })
}

/// Each tool's hints and the schema of the `structuredContent` it returns on success.
fn tool_contract(name: &str) -> (ToolAnnotations, Value) {
    let a = ToolAnnotations::new();
    let text = json!({"type": "string"});
    let snapshot_done = json!({
        "type": "object",
        "properties": {"ok": {"type": "boolean"}, "delegationId": text, "snapshotId": text,
                       "status": text},
        "required": ["ok", "delegationId", "snapshotId", "status"]
    });
    match name {
        // Writes the executor's result into the workspace (auto mode): destructive.
        "delegate" => (
            a.read_only(false)
                .destructive(true)
                .idempotent(false)
                .open_world(true),
            record_schema(),
        ),
        "delegate_output" => (a.read_only(true).open_world(false), record_schema()),
        // Runs another round, whose result is written into the workspace (auto mode).
        "delegate_continue" => (
            a.read_only(false)
                .destructive(true)
                .idempotent(false)
                .open_world(true),
            record_schema(),
        ),
        // Ends the delegation: the executor discards its work directory.
        "delegate_close" => (
            a.read_only(false)
                .destructive(true)
                .idempotent(true)
                .open_world(true),
            record_schema(),
        ),
        "delegate_cancel" => (
            a.read_only(false)
                .destructive(true)
                .idempotent(true)
                .open_world(true),
            json!({
                "type": "object",
                "properties": {"cancelled": {"type": "array", "items": text},
                               "count": {"type": "integer"},
                               "failed": {"type": "array"}},
                "required": ["cancelled", "count"]
            }),
        ),
        "delegate_snapshots" => (
            a.read_only(true).open_world(false),
            json!({
                "type": "object",
                "properties": {"snapshots": {"type": "array", "items": snapshot_schema()}},
                "required": ["snapshots"]
            }),
        ),
        "delegate_apply_snapshot" => (
            a.read_only(false)
                .destructive(true)
                .idempotent(false)
                .open_world(false),
            snapshot_done,
        ),
        "delegate_discard_snapshot" => (
            a.read_only(false)
                .destructive(true)
                .idempotent(true)
                .open_world(false),
            snapshot_done,
        ),
        "delegate_list" => (
            a.read_only(true).open_world(false),
            json!({
                "type": "object",
                "properties": {
                    "activeDelegations": {"type": "integer"},
                    "delegations": {"type": "array", "items": {"type": "object"}}
                },
                "required": ["activeDelegations", "delegations"]
            }),
        ),
        "delegate_recover" => (
            a.read_only(true).open_world(true),
            json!({
                "type": "object",
                "properties": {
                    "source": {"type": "string", "enum": ["daemon", "executor"]},
                    "delegation": {"type": "object"},
                    "delegationId": text, "executorUrl": text, "state": text,
                    "applicable": {"type": "boolean"},
                    "result": {"type": "object"}, "error": {"type": "object"},
                    "snapshotId": {"type": ["string", "null"]},
                },
                "required": ["source"]
            }),
        ),
        _ => (a, json!({"type": "object"})),
    }
}

/// Why the executor refused `GET …/result`: its error text, else the body, else the status's
/// meaning; with what to do for 401/403. Never ends in an empty `: `.
fn executor_refusal(status: u16, url: &str, v: &Value, body: &[u8]) -> String {
    let said = v
        .get("error")
        .and_then(|e| {
            e.as_str()
                .or_else(|| e.get("message").and_then(Value::as_str))
        })
        .map(str::to_owned)
        .or_else(|| {
            // An AWCP ERROR message: `code` and `message`.
            let m = v.get("message").and_then(Value::as_str)?;
            Some(match v.get("code").and_then(Value::as_str) {
                Some(c) => format!("{c}: {m}"),
                None => m.to_owned(),
            })
        })
        .or_else(|| {
            let b = String::from_utf8_lossy(body).trim().to_owned();
            (!b.is_empty()).then(|| b.chars().take(300).collect())
        })
        .or_else(|| {
            http::StatusCode::from_u16(status)
                .ok()
                .and_then(|s| s.canonical_reason())
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "no explanation".to_owned());
    let mut m = format!("the executor answered HTTP {status} for {url}: {said}");
    if status == 401 || status == 403 {
        m.push_str(
            " (the executor requires a credential: pass auth_type and auth_credential, as for \
             delegate)",
        );
    }
    m
}

/// Most bytes of unified diff `delegate_snapshots` shows per pending snapshot.
const MCP_DIFF_BYTES: usize = 16 * 1024;

/// Most file names `delegate_snapshots` lists per snapshot and kind.
const MAX_LISTED_FILES: usize = 50;

/// `  changed (3): a, b, c` from a metadata file list; empty when there is none.
fn file_list(kind: &str, files: &Value) -> String {
    let names: Vec<&str> = files
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if names.is_empty() {
        return String::new();
    }
    let mut line = format!(
        "  {kind} ({}): {}",
        names.len(),
        names
            .iter()
            .take(MAX_LISTED_FILES)
            .copied()
            .collect::<Vec<_>>()
            .join(", ")
    );
    if names.len() > MAX_LISTED_FILES {
        line.push_str(&format!(", … and {} more", names.len() - MAX_LISTED_FILES));
    }
    line.push('\n');
    line
}

/// What the executor changed of the requested lease: a shorter maximum, a downgraded access.
pub fn lease_note(v: &Value) -> String {
    let mut s = String::new();
    let requested = v["leaseConfig"]["ttlSeconds"].as_u64();
    let max = v["executorConstraints"]["maxTtlSeconds"].as_u64();
    if let (Some(req), Some(max)) = (requested, max) {
        if max < req {
            s.push_str(&format!(
                "Lease shortened by the executor: {req} s requested, at most {max} s granted{}.\n",
                v["activeLease"]["expiresAt"]
                    .as_str()
                    .map(|e| format!(" (ends {e})"))
                    .unwrap_or_default()
            ));
        }
    }
    let asked = v["leaseConfig"]["accessMode"].as_str();
    let got = v["executorConstraints"]["acceptedAccessMode"].as_str();
    if let (Some(asked), Some(got)) = (asked, got) {
        if asked != got {
            s.push_str(&format!(
                "Access changed by the executor: {asked} requested, {got} granted.\n"
            ));
        }
    }
    s
}

/// `Summary:` and `Highlights:` of a record's result (empty without one).
fn summary_lines(v: &Value) -> String {
    let mut s = String::new();
    if let Some(r) = v.get("result").filter(|r| !r.is_null()) {
        s.push_str(&format!(
            "\nSummary: {}\n",
            r["summary"].as_str().unwrap_or("")
        ));
        let hl: Vec<&str> = r["highlights"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if !hl.is_empty() {
            s.push_str("Highlights:\n");
            for h in hl {
                s.push_str(&format!("- {h}\n"));
            }
        }
    }
    s
}

/// The report of an idle multi-round delegation: the round that ended, its result and where
/// that went, and what comes next.
fn round_report(v: &Value) -> String {
    let id = v["id"].as_str().unwrap_or("?");
    let round = v["round"].as_u64().unwrap_or(1);
    let mut s = format!(
        "\nRound {round} has ended; the delegation is idle (kept open), the executor keeps its \
         work directory.\n"
    );
    s.push_str(&summary_lines(v));
    if let Some(snap) = latest_snapshot(v) {
        let sid = snap["id"].as_str().unwrap_or("?");
        let e = &snap["error"];
        match snap["status"].as_str().unwrap_or("") {
            "applied" => {
                s.push_str(&format!(
                    "\nThe round's result (snapshot {sid}) has been applied to the local \
                     workspace.\n"
                ));
                let changed: Vec<String> = snap["changed"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|c| c.as_str().map(str::to_owned))
                    .collect();
                s.push_str(&awcp_aip_cli::changed_lines_titled(&changed, "Changed"));
            }
            "pending" if !e.is_null() => s.push_str(&format!(
                "\nThe round's result was NOT applied: {}: {}\n{}Nothing of it was written. \
                 Snapshot {sid} is kept: fix the cause, then delegate_apply_snapshot (or \
                 delegate_discard_snapshot) with snapshot_id \"{sid}\".\n",
                e["code"].as_str().unwrap_or("?"),
                e["message"].as_str().unwrap_or(""),
                e["hint"]
                    .as_str()
                    .map(|h| format!("Hint: {h}\n"))
                    .unwrap_or_default()
            )),
            "pending" => s.push_str(&format!(
                "\nThe round's result (snapshot {sid}) is pending: review it with \
                 delegate_snapshots, then delegate_apply_snapshot or delegate_discard_snapshot.\n"
            )),
            "failed" => s.push_str(&format!(
                "\nThe round's result was NOT applied: snapshot {sid} could not be stored: {}\n",
                e["message"].as_str().unwrap_or("")
            )),
            "discarded" => s.push_str(&format!(
                "\nThe round's result (snapshot {sid}) was discarded.\n"
            )),
            _ => {}
        }
    }
    s.push_str(&format!(
        "\nNext: delegate_continue with delegation_id \"{id}\" and a new prompt runs round {} \
         in the same executor work directory; delegate_close with delegation_id \"{id}\" ends \
         the delegation. An idle delegation nobody continues is closed automatically (after 5 \
         minutes by default).\n",
        round + 1
    ));
    s
}

/// The human-readable report of a delegation record (also used for `delegate` foreground).
pub fn report(v: &Value) -> String {
    let mut s = state_line(v);
    s.push_str(&lease_note(v));
    let mode = v["snapshotPolicy"]["mode"].as_str().unwrap_or("auto");
    let (total, pending, applied, discarded) = snapshot_counts(v);
    s.push_str(&format!(
        "Snapshot mode: {mode}; snapshots: {total} ({pending} pending, {applied} applied, {discarded} discarded)\n"
    ));
    match v["state"].as_str().unwrap_or("") {
        "idle" => s.push_str(&round_report(v)),
        "completed" => {
            s.push_str(&summary_lines(v));
            let o = &v["outcome"];
            if o["status"] == "not_applied" {
                let e = &o["error"];
                s.push_str(&format!(
                    "\nThe result was NOT applied: {}: {}\n",
                    e["code"].as_str().unwrap_or("?"),
                    e["message"].as_str().unwrap_or("")
                ));
                if let Some(h) = e["hint"].as_str() {
                    s.push_str(&format!("Hint: {h}\n"));
                }
                match o["snapshotId"].as_str() {
                    Some(sid) => s.push_str(&format!(
                        "Nothing of it was written. Snapshot {sid} is kept: fix the cause, then \
                         delegate_apply_snapshot (or delegate_discard_snapshot) with snapshot_id \
                         \"{sid}\".\n"
                    )),
                    None => s.push_str(
                        "Nothing of it was written; the executor was not acknowledged and keeps \
                         the result until its retention ends.\n",
                    ),
                }
            } else if pending > 0 {
                s.push_str(&format!(
                    "\n{pending} snapshot(s) pending: review them with delegate_snapshots, then \
                     delegate_apply_snapshot or delegate_discard_snapshot.\n"
                ));
            } else if applied > 0 {
                s.push_str("\nThe result has been applied to the local workspace.\n");
                let changed: Vec<String> = v["snapshots"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|x| x["status"] == "applied")
                    .flat_map(|x| x["changed"].as_array().cloned().unwrap_or_default())
                    .filter_map(|c| c.as_str().map(str::to_owned))
                    .collect();
                s.push_str(&awcp_aip_cli::changed_lines_titled(&changed, "Changed"));
            }
        }
        "error" | "expired" => {
            if let Some(e) = v.get("error").filter(|e| !e.is_null()) {
                s.push_str(&format!(
                    "\nError: {}: {}\n",
                    e["code"].as_str().unwrap_or("?"),
                    e["message"].as_str().unwrap_or("")
                ));
                if let Some(h) = e["hint"].as_str() {
                    s.push_str(&format!("Hint: {h}\n"));
                }
            }
        }
        "cancelled" => s.push_str("\nThe delegation was cancelled.\n"),
        _ => s.push_str(
            "\nStill running. Call delegate_output with block=true to wait for the result.\n",
        ),
    }
    let not_shipped: Vec<String> = v["notShipped"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|x| {
            format!(
                "- {} ({})\n",
                x["path"].as_str().unwrap_or(""),
                x["reason"].as_str().unwrap_or("")
            )
        })
        .collect();
    if !not_shipped.is_empty() {
        let total = v["notShippedCount"].as_u64().unwrap_or(0);
        s.push_str(&format!("\nNot shipped to the executor ({total}):\n"));
        s.extend(not_shipped);
    }
    // What ending the lease found (e.g. links out of the workspace the executor left).
    for w in v["warnings"].as_array().into_iter().flatten() {
        s.push_str(&format!("Warning: {}\n", w.as_str().unwrap_or("")));
    }
    s
}

impl AwcpMcp {
    /// A server talking to the daemon at `daemon_url` with its `token`.
    pub fn new(
        daemon_url: &str,
        token: Option<String>,
        defaults: Defaults,
        peers: &[crate::peers::Peer],
        tls: awcp_driver::net::ClientTls,
        hub: Option<Arc<Hub>>,
    ) -> Self {
        AwcpMcp {
            client: DaemonClient::new(TokioRuntime, daemon_url)
                .with_tls(tls.clone())
                .with_token(token),
            http: awcp_driver::net::HttpClient::new(TokioRuntime, tls),
            daemon_url: daemon_url.to_owned(),
            defaults: Arc::new(defaults),
            peers_section: Arc::new(crate::peers::describe(peers)),
            single_peer: match peers {
                [p] => Some(p.awcp_url.clone()),
                _ => None,
            },
            hub,
        }
    }

    /// Whether background delegations outlive this server, for the model.
    fn survival_note(&self) -> String {
        if self.defaults.survives_exit {
            format!(
                "Background delegations survive this MCP server exiting: the daemon at {} \
                 keeps them (delegate_recover re-attaches in a later session).",
                self.daemon_url
            )
        } else {
            "Background delegations do NOT survive this MCP server exiting: its in-process \
             daemon ends with it (the executor may finish the task, but its result is not \
             applied here; delegate_recover can still read it from the executor). Start the \
             server with --daemon-url to keep them."
                .to_owned()
        }
    }

    /// The daemon client.
    pub fn client(&self) -> &DaemonClient<TokioRuntime> {
        &self.client
    }

    /// The tool list, with the peers' cards in `delegate`'s description.
    pub fn tools(&self) -> Vec<Tool> {
        let delegate_desc = format!(
            "Delegate a local directory (workspace) to a remote AWCP executor agent for one task. \
             The executor works on a copy of the directory under a time-limited lease; its \
             changes come back as a snapshot that is applied locally (snapshot_mode auto), kept \
             for review (staged: see delegate_snapshots) or dropped (discard). With \
             background=false (default) the call waits for the result, sending progress \
             notifications (the executor's messages, bytes moved) when the client gives a \
             progressToken; if the delegation is still running after {} seconds (before common \
             MCP clients give up on a request) it returns the delegation id with state running \
             instead, and you follow it with delegate_output (block=true). With background=true \
             it returns the delegation id at once (then use delegate_output). With \
             keep_open=true the delegation stays open after its first round for more rounds in \
             the executor's same work directory: the call returns when that round has ended and \
             its result is applied (state idle), then delegate_continue runs the next round and \
             delegate_close ends it. {}{}",
            self.defaults.foreground_budget.as_secs(),
            self.survival_note(),
            self.peers_section
        );
        let id = json!({"type": "string", "description": "The delegation id (dlg_…) returned by delegate."});
        let snapshot_id = json!({
            "type": "string",
            "description": "The snapshot (snap_…), as delegate_snapshots lists it."
        });
        let tools = vec![
            Tool::new(
                "delegate",
                delegate_desc,
                schema(json!({
                    "type": "object",
                    "properties": {
                        "description": {"type": "string", "description": "Short label of the task."},
                        "prompt": {"type": "string", "description": "Full instructions for the executor."},
                        "workspace_dir": {"type": "string", "description": "Directory to lend (relative paths are resolved against cwd). Sent as the resource \"workspace\"."},
                        "resources": {"type": "array", "description": "Several directories to lend (wins over workspace_dir).",
                            "items": {"type": "object", "properties": {
                                "name": {"type": "string"}, "path": {"type": "string"},
                                "mode": {"type": "string", "enum": ["ro", "rw"]}},
                                "required": ["name", "path"]}},
                        "cwd": {"type": "string", "description": "Base directory for relative paths (default: the server's working directory)."},
                        "peer_url": {"type": "string", "description": "The executor's base or AWCP URL, e.g. http://127.0.0.1:10200 or http://127.0.0.1:10200/awcp (optional when the server knows exactly one peer)."},
                        "ttl_seconds": {"type": "integer", "minimum": 1, "description": format!("Lease length in seconds (default {}).", self.defaults.ttl_seconds)},
                        "access_mode": {"type": "string", "enum": ["ro", "rw"], "description": format!("Access to the workspace (default {}).", self.defaults.access_mode)},
                        "snapshot_mode": {"type": "string", "enum": ["auto", "staged", "discard"], "description": format!("What to do with the result (default {}).", self.defaults.snapshot_mode)},
                        "transport": {"type": "string", "enum": self.offered_transports(), "description": format!("Data plane (default {}): only the transports this server's daemon can use.", self.defaults.transport)},
                        "auth_type": {"type": "string", "enum": ["api_key", "bearer", "oauth2"], "description": "Credential type for the executor (required with auth_credential)."},
                        "auth_credential": {"type": "string", "description": "Credential for the executor (requires auth_type)."},
                        "background": {"type": "boolean", "default": false, "description": "Return at once with the delegation id."},
                        "allow_sensitive": {"type": "boolean", "default": false, "description": "Lend secret-looking files (.env, private keys, credentials.json, …). Without it such a workspace is refused with SENSITIVE_FILES listing them; listing them in .awcpignore keeps them home instead."},
                        "keep_open": {"type": "boolean", "default": false, "description": "Keep the delegation open after its first round for delegate_continue (the next round, in the executor's same work directory) and delegate_close (the end). The foreground call returns when the first round has ended and its result is applied: state idle. An idle delegation nobody continues is closed after 5 minutes; an executor that cannot keep it open (e.g. over sshfs) simply completes it."}
                    },
                    "required": ["description", "prompt"]
                })),
            ),
            Tool::new(
                "delegate_output",
                "Status and result of a delegation. With block=true, waits until it ends or \
                 timeout seconds pass, sending progress notifications meanwhile; if it is still \
                 running then, the result says so (stillRunning: true) and you call \
                 delegate_output again. A delegation kept open (keep_open) whose round has \
                 ended is idle: its round is over (stillRunning: false, the round's result \
                 applied or staged) and it waits for delegate_continue or delegate_close.",
                schema(json!({
                    "type": "object",
                    "properties": {
                        "delegation_id": id,
                        "block": {"type": "boolean", "default": false, "description": "Wait for the delegation to end (one kept open: for its running round to end, state idle)."},
                        "timeout": {"type": "integer", "minimum": 1, "description": "Seconds to wait with block=true (default: the server's --foreground-budget, 45 s, under the 60 s request timeout of common clients)."}
                    },
                    "required": ["delegation_id"]
                })),
            ),
            Tool::new(
                "delegate_continue",
                format!(
                    "Start the next round of an idle delegation (one started by delegate with \
                     keep_open=true whose round has ended): the executor works in its same work \
                     directory (nothing is sent again) on these new instructions. With \
                     background=false (default) the call waits until the round has ended and \
                     its result is applied (state idle again), sending progress notifications \
                     when the client gives a progressToken, and returns the delegation record \
                     (round, state, snapshots, summary); if the round is still running after {} \
                     seconds it returns with stillRunning: true instead, and you follow it with \
                     delegate_output (block=true). Afterwards call delegate_continue again or \
                     delegate_close.",
                    self.defaults.foreground_budget.as_secs()
                ),
                schema(json!({
                    "type": "object",
                    "properties": {
                        "delegation_id": id,
                        "prompt": {"type": "string", "description": "Full instructions for this round: the whole task as it now stands, not only what changed."},
                        "description": {"type": "string", "description": "Short label of the round (default: the prompt's first line)."},
                        "background": {"type": "boolean", "default": false, "description": "Return as soon as the round has started (then delegate_output with block=true)."}
                    },
                    "required": ["delegation_id", "prompt"]
                })),
            ),
            Tool::new(
                "delegate_close",
                "End an idle delegation kept open with keep_open (no round running): the \
                 executor frees its work directory; the results of earlier rounds stay as they \
                 were applied or staged. Waits until the delegation has ended (state completed) \
                 and returns its record. To stop a running round, use delegate_cancel.",
                schema(json!({
                    "type": "object",
                    "properties": {"delegation_id": id},
                    "required": ["delegation_id"]
                })),
            ),
            Tool::new(
                "delegate_cancel",
                "Cancel a running delegation (delegation_id), or every running one (all=true).",
                schema(json!({
                    "type": "object",
                    "properties": {
                        "delegation_id": id,
                        "all": {"type": "boolean", "default": false, "description": "Cancel every running delegation (wins over delegation_id)."}
                    }
                })),
            ),
            Tool::new(
                "delegate_snapshots",
                "List a delegation's result snapshots (id, summary, status, recommended flag, size); for a pending one, what applying it would do: files added, modified and deleted with unified diffs (at most 16 KiB), and local edits it conflicts with. Review it before delegate_apply_snapshot.",
                schema(json!({
                    "type": "object",
                    "properties": {"delegation_id": id},
                    "required": ["delegation_id"]
                })),
            ),
            Tool::new(
                "delegate_apply_snapshot",
                "Apply a staged snapshot to the local workspace.",
                schema(json!({
                    "type": "object",
                    "properties": {"delegation_id": id, "snapshot_id": snapshot_id},
                    "required": ["delegation_id", "snapshot_id"]
                })),
            ),
            Tool::new(
                "delegate_discard_snapshot",
                "Discard a staged snapshot (the workspace is left as it is).",
                schema(json!({
                    "type": "object",
                    "properties": {"delegation_id": id, "snapshot_id": snapshot_id},
                    "required": ["delegation_id", "snapshot_id"]
                })),
            ),
            Tool::new(
                "delegate_list",
                "List the delegations the daemon knows, newest last: id, state, executor, \
                 description and when each started; how many are still running. Use an id with \
                 delegate_output, delegate_snapshots or delegate_cancel.",
                schema(json!({"type": "object", "properties": {}})),
            ),
            Tool::new(
                "delegate_recover",
                "Re-attach to a delegation after a restart of this server or of the daemon. If \
                 the daemon still knows the id, reports its full record (and the other tools \
                 work on it as before). Otherwise asks the executor at peer_url for the task's \
                 state and result (summary, highlights, error, whether a snapshot is waiting); \
                 such a result can be read but not applied, because the local delegation state \
                 (workspace, lease, snapshot staging) was lost with the restart.",
                schema(json!({
                    "type": "object",
                    "properties": {
                        "delegation_id": id,
                        "peer_url": {"type": "string", "description": "The executor the delegation went to: its base URL or AWCP URL (…/awcp)."},
                        "auth_type": {"type": "string", "enum": ["api_key", "bearer", "oauth2"], "description": "Credential type for a token-protected executor (with auth_credential)."},
                        "auth_credential": {"type": "string", "description": "Credential for the executor (requires auth_type)."}
                    },
                    "required": ["delegation_id"]
                })),
            ),
        ];
        tools
            .into_iter()
            .map(|t| {
                let (annotations, output) = tool_contract(&t.name);
                t.with_annotations(annotations)
                    .with_raw_output_schema(schema(output))
            })
            .collect()
    }

    /// The transports `delegate` offers: the in-process daemon's (archive; storage with a
    /// bucket in the environment or `--serve-archives`; git with `--git-remote` or
    /// `--serve-archives`), or for a shared daemon every one this build implements (archive,
    /// sshfs, storage, git; that daemon decides): never one the in-process daemon could only
    /// fail with "not available".
    fn offered_transports(&self) -> Vec<String> {
        self.defaults.transports.clone().unwrap_or_else(|| {
            ["archive", "sshfs", "storage", "git"]
                .map(str::to_owned)
                .to_vec()
        })
    }

    /// Runs one tool; `sink` receives a foreground `delegate`'s progress.
    pub async fn call(
        &self,
        name: &str,
        a: &Option<JsonObject>,
        sink: Option<ProgressSink>,
    ) -> CallToolResult {
        let r = match name {
            "delegate" => self.delegate(a, sink).await,
            "delegate_output" => self.output(a, sink).await,
            "delegate_continue" => self.continue_round(a, sink).await,
            "delegate_close" => self.close(a, sink).await,
            "delegate_cancel" => self.cancel(a).await,
            "delegate_snapshots" => self.snapshots(a).await,
            "delegate_apply_snapshot" => self.apply(a).await,
            "delegate_discard_snapshot" => self.discard(a).await,
            "delegate_recover" => self.recover(a).await,
            "delegate_list" => self.list().await,
            other => Err(ToolError::new(format!("unknown tool {other:?}"))),
        };
        match r {
            // A delegation record that did not succeed (result not applied, task failed,
            // executor unreachable) is reported with isError, the record as structured content.
            Ok((text, structured))
                if matches!(
                    name,
                    "delegate" | "delegate_output" | "delegate_continue" | "delegate_close"
                ) && unsuccessful(&structured) =>
            {
                tracing::info!(tool = name, outcome = %structured["outcome"]["status"], "delegation did not succeed");
                let mut r = CallToolResult::error(vec![ContentBlock::text(text)]);
                r.structured_content = Some(structured);
                r
            }
            Ok((text, structured)) => ok_result(text, structured),
            Err(e) => {
                tracing::info!(tool = name, error = %e.message, "tool error");
                err_result(e)
            }
        }
    }

    async fn delegate(&self, a: &Option<JsonObject>, sink: Option<ProgressSink>) -> ToolResult {
        let a: DelegateArgs = args("delegate", a)?;
        if a.description.trim().is_empty() {
            return Err(ToolError::new("description must not be empty"));
        }
        if a.prompt.trim().is_empty() {
            return Err(ToolError::new("prompt must not be empty"));
        }
        let peer = a.peer_url.clone().or_else(|| self.single_peer.clone()).ok_or_else(|| {
            ToolError::new("peer_url is required (the executor's AWCP URL, e.g. http://127.0.0.1:10200/awcp)")
        })?;
        let peer = normalise_peer(&peer)?;
        let auth = auth_of(&a.auth_type, &a.auth_credential)?;
        let access = a
            .access_mode
            .clone()
            .unwrap_or_else(|| self.defaults.access_mode.clone());
        check_mode("access_mode", &access)?;
        let ttl = a.ttl_seconds.unwrap_or(self.defaults.ttl_seconds);
        if ttl == 0 {
            return Err(ToolError::new("ttl_seconds must be a positive integer"));
        }
        let snapshot_mode = a
            .snapshot_mode
            .clone()
            .unwrap_or_else(|| self.defaults.snapshot_mode.clone());
        if !["auto", "staged", "discard"].contains(&snapshot_mode.as_str()) {
            return Err(ToolError::new(format!(
                "snapshot_mode must be auto, staged or discard, not {snapshot_mode:?}"
            )));
        }
        let transport = a
            .transport
            .clone()
            .unwrap_or_else(|| self.defaults.transport.clone());
        if let Some(have) = &self.defaults.transports {
            if !have.contains(&transport) {
                return Err(ToolError::new(format!(
                    "transport {transport:?} is not available in this server's daemon (available: {})",
                    have.join(", ")
                )));
            }
        }
        let cwd = a.cwd.as_deref();
        let mut resources = Vec::new();
        match (&a.resources, &a.workspace_dir) {
            (Some(list), _) if !list.is_empty() => {
                for r in list {
                    let mode = r.mode.clone().unwrap_or_else(|| access.clone());
                    check_mode(&format!("resources[{}].mode", r.name), &mode)?;
                    let dir = resolve_dir(&r.path, cwd).map_err(ToolError::new)?;
                    resources.push(resource(&r.name, &dir, &mode)?);
                }
            }
            (_, Some(w)) => {
                let dir = resolve_dir(w, cwd).map_err(ToolError::new)?;
                resources.push(resource("workspace", &dir, &access)?);
            }
            _ => {
                return Err(ToolError::new(
                    "give workspace_dir (the directory to lend) or resources",
                ))
            }
        }
        let names: Vec<String> = resources.iter().filter_map(|r| r.name.clone()).collect();
        let body = api::DelegateBody {
            executor_url: Some(peer.clone()),
            environment: Some(api::DelegateEnvironment { resources }),
            task: Some(api::Task {
                description: a.description.clone(),
                prompt: a.prompt.clone(),
            }),
            ttl_seconds: Some(ttl),
            access_mode: Some(access),
            snapshot_mode: Some(snapshot_mode.clone()),
            transport: Some(transport),
            auth: auth.map(|x| api::DelegateAuth {
                auth_type: Some(x.auth_type.as_str().to_owned()),
                credential: Some(x.credential),
            }),
            allow_sensitive: Some(a.allow_sensitive),
            keep_open: a.keep_open.then_some(true),
            ..Default::default()
        };
        let id = self.client.delegate(&body).await?;
        tracing::info!(%id, %peer, background = a.background, keep_open = a.keep_open, "delegation started");
        if a.background {
            let mut text = format!(
                "Delegation started in the background.\nDelegation: {id}\nExecutor: {peer}\nResources: {}\n",
                names.join(", ")
            );
            if snapshot_mode == "staged" {
                text.push_str("Snapshot mode: staged — the result will wait for delegate_apply_snapshot or delegate_discard_snapshot.\n");
            }
            text.push_str(&format!(
                "Use delegate_output with delegation_id \"{id}\" (block=true to wait) to get the result.\n"
            ));
            if a.keep_open {
                text.push_str(
                    "Kept open: after its first round the delegation is idle (delegate_output \
                     says so); then delegate_continue runs the next round and delegate_close \
                     ends it.\n",
                );
            }
            text.push_str(&format!("{}\n", self.survival_note()));
            return Ok((
                text,
                json!({"delegationId": id, "state": "started", "executorUrl": peer,
                       "resources": names, "snapshotMode": snapshot_mode, "background": true,
                       "keepOpen": a.keep_open,
                       "survivesServerExit": self.defaults.survives_exit}),
            ));
        }
        let started = format!("delegation {id} started with {peer}");
        let budget = self.defaults.foreground_budget;
        let until = if a.keep_open {
            Until::Round
        } else {
            Until::End
        };
        self.wait_within(&id, until, budget, sink, started).await
    }

    /// `delegate_continue`: starts the next round of an idle delegation and, unless in the
    /// background, waits (within the foreground budget) until it has ended and its result is
    /// applied.
    async fn continue_round(
        &self,
        a: &Option<JsonObject>,
        sink: Option<ProgressSink>,
    ) -> ToolResult {
        let a: ContinueArgs = args("delegate_continue", a)?;
        if a.prompt.trim().is_empty() {
            return Err(ToolError::new("prompt must not be empty"));
        }
        let id = a.delegation_id.as_str();
        let task = api::Task {
            description: a.description.clone().unwrap_or_default(),
            prompt: a.prompt.clone(),
        };
        let round = self
            .client
            .continue_delegation(id, &task)
            .await
            .map_err(|mut e| {
                if matches!(e.status, 400 | 409) && e.hint.is_none() {
                    e.hint = Some(
                        "delegate_continue needs an idle delegation: one started with \
                         keep_open=true whose round has ended (delegate_output says state idle)"
                            .into(),
                    );
                }
                ToolError::from(e)
            })?;
        tracing::info!(%id, round, background = a.background, "round started");
        if a.background {
            let text = format!(
                "Round {round} of delegation {id} started in the background.\nUse \
                 delegate_output with delegation_id \"{id}\" and block=true to wait until it \
                 has ended (state idle); then delegate_continue or delegate_close.\n{}\n",
                self.survival_note()
            );
            return Ok((
                text,
                json!({"delegationId": id, "id": id, "state": "running", "round": round,
                       "background": true, "survivesServerExit": self.defaults.survives_exit}),
            ));
        }
        let started = format!("round {round} of delegation {id} started");
        let budget = self.defaults.foreground_budget;
        self.wait_within(id, Until::Round, budget, sink, started)
            .await
    }

    /// `delegate_close`: closes an idle delegation and waits (within the foreground budget)
    /// until it has ended.
    async fn close(&self, a: &Option<JsonObject>, sink: Option<ProgressSink>) -> ToolResult {
        let a: IdArgs = args("delegate_close", a)?;
        let id = a.delegation_id.as_str();
        self.client.close(id).await.map_err(|mut e| {
            if matches!(e.status, 400 | 409) && e.hint.is_none() {
                e.hint = Some(
                    "delegate_close ends an idle delegation (kept open with keep_open, no round \
                     running); a running one is stopped with delegate_cancel"
                        .into(),
                );
            }
            ToolError::from(e)
        })?;
        tracing::info!(%id, "delegation closed");
        let first = format!("closing delegation {id}");
        let budget = self.defaults.foreground_budget;
        self.wait_within(id, Until::End, budget, sink, first).await
    }

    /// Waits for a delegation for at most `budget`, forwarding its progress to `sink` (the
    /// first notification says `first`); at the end of the budget, a result that says it is
    /// still running (not an error), so the call returns before the client's own timeout.
    async fn wait_within(
        &self,
        id: &str,
        until: Until,
        budget: Duration,
        mut sink: Option<ProgressSink>,
        first: String,
    ) -> ToolResult {
        let mut updates = self.hub.as_ref().map(|h| h.subscribe());
        if let Some(s) = sink.as_mut() {
            s.send(first).await;
        }
        // A whole-second long poll a little past the budget; the budget timer decides.
        let wait = async {
            let poll = budget + Duration::from_secs(1);
            match until {
                Until::End => self.client.wait(id, poll).await,
                Until::Round => self.client.wait_round(id, poll).await,
            }
            .map(json_of)
        };
        tokio::pin!(wait);
        let deadline = tokio::time::sleep(budget);
        tokio::pin!(deadline);
        loop {
            let update = async {
                match updates.as_mut() {
                    Some(rx) => loop {
                        match rx.recv().await {
                            Ok((of, latest)) if of == id => return Some(latest),
                            Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                            Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
                        }
                    },
                    None => None,
                }
            };
            tokio::select! {
                r = &mut wait => match r {
                    Ok(v) => return Ok(settled(v)),
                    Err(e) if e.status == 408 => break,
                    Err(e) => return Err(e.into()),
                },
                () = &mut deadline => break,
                Some(latest) = update, if sink.is_some() => {
                    if let Some(s) = sink.as_mut() {
                        s.send(latest.line()).await;
                    }
                }
            }
        }
        // Still running at the end of the budget: hand the id back before the client gives up.
        let mut v = self.client.get(id).await.map(json_of)?;
        if is_over(&v) {
            return Ok(settled(v));
        }
        if until == Until::Round && is_idle(&v) {
            // The round ended just now: its result settles (is applied) in a moment.
            match self.client.wait_round(id, Duration::from_secs(1)).await {
                Ok(r) => return Ok(settled(json_of(r))),
                Err(e) if e.status == 408 => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.add_progress(&mut v);
        let what = match v["round"].as_u64() {
            Some(n) if until == Until::Round && is_idle(&v) => {
                format!("Round {n} of delegation {id} has ended, but its result is still being applied: it")
            }
            Some(n) if until == Until::Round && n > 1 => format!("Round {n} of delegation {id}"),
            _ => format!("Delegation {id}"),
        };
        let text = format!(
            "{what} is still running after {} s, so this call returns before the MCP \
             client's request timeout; the delegation keeps running.\nUse delegate_output with \
             delegation_id \"{id}\" and block=true to wait for the result.\n{}\n\n{}",
            budget.as_secs(),
            self.survival_note(),
            self.report_with_progress(&v)
        );
        v["delegationId"] = json!(id);
        v["stillRunning"] = json!(true);
        Ok((text, v))
    }

    /// [`report`] plus the latest progress line the in-process daemon heard.
    fn report_with_progress(&self, v: &Value) -> String {
        let mut text = report(v);
        if let Some(l) = v["latestProgress"]["line"]
            .as_str()
            .filter(|l| !l.is_empty())
        {
            text.push_str(&format!("Latest progress: {l}\n"));
        }
        text
    }

    /// `delegate_list`: every delegation the daemon knows, one line each.
    async fn list(&self) -> ToolResult {
        let l = self.client.list().await?;
        let mut text = format!(
            "{} delegation(s), {} still running.\n",
            l.delegations.len(),
            l.active_delegations
        );
        for d in &l.delegations {
            text.push_str(&format!(
                "- {} {} at {} (started {}): {}\n",
                d.id, d.state, d.executor_url, d.created_at, d.description
            ));
        }
        let v = serde_json::to_value(&l)
            .map_err(|e| ToolError::new(format!("the daemon's list: {e}")))?;
        Ok((text, v))
    }

    /// `delegate_output`: the record now, or with `block`, once it ends or the wait's budget
    /// (`timeout`, else the foreground budget, below common clients' 60 s) runs out, with
    /// progress notifications meanwhile.
    async fn output(&self, a: &Option<JsonObject>, sink: Option<ProgressSink>) -> ToolResult {
        let a: OutputArgs = args("delegate_output", a)?;
        if a.timeout == Some(0) {
            return Err(ToolError::new("timeout must be a positive integer"));
        }
        let mut v = self.client.get(&a.delegation_id).await.map(json_of)?;
        if !a.block || is_over(&v) {
            if is_idle(&v) {
                v["stillRunning"] = json!(false);
            }
            self.add_progress(&mut v);
            return Ok((self.report_with_progress(&v), v));
        }
        let budget = a
            .timeout
            .map_or(self.defaults.foreground_budget, Duration::from_secs);
        let first = format!("waiting for delegation {}", a.delegation_id);
        // Until the running round ends: for a delegation kept open, idle (returned at once
        // when it is idle already); for any other, its end.
        self.wait_within(&a.delegation_id, Until::Round, budget, sink, first)
            .await
    }

    /// Adds `latestProgress` to a record: the in-process daemon's latest progress line, or
    /// (a shared daemon, `--daemon-url`) the executor's latest message from the record.
    fn add_progress(&self, v: &mut Value) {
        let latest = v["id"]
            .as_str()
            .and_then(|id| self.hub.as_ref()?.latest(id));
        if let Some(l) = latest {
            v["latestProgress"] = json!({"line": l.line(), "message": l.message,
                "progress": l.progress, "bytesSent": l.bytes_sent, "bytesReceived": l.bytes_received});
        } else if let (Some(m), false) = (v["lastProgress"].as_str(), v["ended"] == true) {
            v["latestProgress"] = json!({"line": format!("executor: {m}"), "message": m});
        }
    }

    async fn cancel(&self, a: &Option<JsonObject>) -> ToolResult {
        let a: CancelArgs = args("delegate_cancel", a)?;
        if a.all {
            let list = self.client.list().await.map(json_of)?;
            let mut cancelled = Vec::new();
            let mut failed = Vec::new();
            for d in list["delegations"].as_array().into_iter().flatten() {
                if is_terminal(d) {
                    continue;
                }
                let id = d["id"].as_str().unwrap_or_default();
                match self.client.cancel(id).await {
                    Ok(()) => cancelled.push(id.to_owned()),
                    Err(e) => failed.push(json!({"id": id, "error": e.to_string()})),
                }
            }
            let mut text = format!("Cancelled {} delegation(s).\n", cancelled.len());
            for id in &cancelled {
                text.push_str(&format!("- {id}\n"));
            }
            if !failed.is_empty() {
                text.push_str(&format!("{} could not be cancelled.\n", failed.len()));
            }
            return Ok((
                text,
                json!({"cancelled": cancelled, "count": cancelled.len(), "failed": failed}),
            ));
        }
        let Some(id) = a.delegation_id else {
            return Err(ToolError::new(
                "give delegation_id, or all=true to cancel every running delegation",
            ));
        };
        self.client.cancel(&id).await?;
        Ok((
            format!("Cancelled delegation {id}.\n"),
            json!({"cancelled": [id], "count": 1}),
        ))
    }

    async fn snapshots(&self, a: &Option<JsonObject>) -> ToolResult {
        let a: IdArgs = args("delegate_snapshots", a)?;
        let list = self.client.snapshots(&a.delegation_id).await?.snapshots;
        // A pending snapshot comes with what applying it would do (bounded: the model reads
        // it), so it can be reviewed before delegate_apply_snapshot.
        let mut previews = Vec::with_capacity(list.len());
        for s in &list {
            previews.push(match s.status.as_str() {
                "pending" => self
                    .client
                    .diff(&a.delegation_id, &s.id, MCP_DIFF_BYTES)
                    .await
                    .ok(),
                _ => None,
            });
        }
        let mut text = format!(
            "Delegation {}: {} snapshot(s)\n",
            a.delegation_id,
            list.len()
        );
        for (s, preview) in list.iter().zip(&previews) {
            text.push_str(&format!(
                "\n- {} [{}]{}\n  {}\n",
                s.id,
                s.status,
                if s.recommended { " (recommended)" } else { "" },
                s.summary
            ));
            let m = |k: &str| s.metadata.get(k).cloned().unwrap_or(Value::Null);
            if let Some(n) = m("fileCount").as_u64() {
                text.push_str(&format!("  files: {n}"));
                if let Some(b) = m("totalBytes").as_u64() {
                    text.push_str(&format!(", {b} bytes"));
                }
                text.push('\n');
            }
            match preview {
                Some(p) => {
                    text.push_str("  applying it would do:\n");
                    for line in awcp_aip_cli::diff_view::render(p).lines() {
                        text.push_str(&format!("    {line}\n"));
                    }
                }
                None => {
                    text.push_str(&file_list("changed", &m("changedFiles")));
                    text.push_str(&file_list("deleted", &m("deletedFiles")));
                }
            }
            if let Some(e) = &s.error {
                let why = [e.code.as_str(), e.message.as_str()]
                    .into_iter()
                    .filter(|x| !x.is_empty())
                    .collect::<Vec<_>>()
                    .join(": ");
                let verb = if s.status == "failed" {
                    "failed"
                } else {
                    "could not be applied"
                };
                text.push_str(&format!("  {verb}: {why}\n"));
                if let Some(h) = &e.hint {
                    text.push_str(&format!("  hint: {h}\n"));
                }
            }
        }
        let any_pending = list.iter().any(|s| s.status == "pending");
        let mut v = json!({"snapshots": list});
        if let Some(entries) = v["snapshots"].as_array_mut() {
            for (e, p) in entries.iter_mut().zip(previews) {
                if let Some(p) = p {
                    e["preview"] = json_of(p);
                }
            }
        }
        if any_pending {
            text.push_str("\nApply one with delegate_apply_snapshot or drop it with delegate_discard_snapshot.\n");
        }
        Ok((text, v))
    }

    async fn apply(&self, a: &Option<JsonObject>) -> ToolResult {
        let a: SnapshotArgs = args("delegate_apply_snapshot", a)?;
        self.client.apply(&a.delegation_id, &a.snapshot_id).await?;
        Ok((
            format!(
                "Applied snapshot {} of delegation {} to the local workspace.\n",
                a.snapshot_id, a.delegation_id
            ),
            json!({"ok": true, "delegationId": a.delegation_id, "snapshotId": a.snapshot_id, "status": "applied"}),
        ))
    }

    async fn discard(&self, a: &Option<JsonObject>) -> ToolResult {
        let a: SnapshotArgs = args("delegate_discard_snapshot", a)?;
        self.client
            .discard(&a.delegation_id, &a.snapshot_id)
            .await?;
        Ok((
            format!(
                "Discarded snapshot {} of delegation {}.\n",
                a.snapshot_id, a.delegation_id
            ),
            json!({"ok": true, "delegationId": a.delegation_id, "snapshotId": a.snapshot_id, "status": "discarded"}),
        ))
    }

    async fn recover(&self, a: &Option<JsonObject>) -> ToolResult {
        let a: RecoverArgs = args("delegate_recover", a)?;
        let id = DelegationId::new(a.delegation_id.as_str())
            .map_err(|e| ToolError::new(format!("delegation_id: {e}")))?;
        match self.client.get(id.as_str()).await.map(json_of) {
            Ok(v) => {
                let text = format!(
                    "Re-attached: the daemon at {} still tracks this delegation; delegate_output, \
                     delegate_snapshots and the apply/discard tools work on it.\n\n{}",
                    self.daemon_url,
                    report(&v)
                );
                return Ok((text, json!({"source": "daemon", "delegation": v})));
            }
            Err(e) if e.status == 404 => {}
            Err(e) => return Err(e.into()),
        }
        let Some(peer) = a.peer_url.clone().or_else(|| self.single_peer.clone()) else {
            return Err(ToolError::new(format!(
                "the daemon does not know delegation {id}; give peer_url to ask the executor"
            )));
        };
        let peer = normalise_peer(&peer)?;
        let headers: Vec<(&str, String)> = auth_of(&a.auth_type, &a.auth_credential)?
            .map(|x| awcp_proto::http_binding::credential_header(&x))
            .into_iter()
            .collect();
        let url = awcp_proto::http_binding::result_url(&peer, &id);
        let (status, body) = self
            .http
            .request(
                http::Method::GET,
                &url,
                &headers,
                None,
                Duration::from_secs(30),
                512 * 1024 * 1024,
            )
            .await
            .map_err(|e| ToolError::new(format!("cannot reach the executor at {url}: {e}")))?;
        let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        if !(200..300).contains(&status) && v.get("status").is_none() {
            return Err(ToolError::new(executor_refusal(status, &url, &v, &body)));
        }
        let fetched = awcp_proto::http_binding::decode_result(&id, &v)
            .map_err(|e| ToolError::new(format!("unreadable result from {url}: {e}")))?;
        let lost = "This server no longer has the delegation's local state (it was lost with the \
                    restart), so the lease cannot be re-joined and no snapshot can be applied from \
                    here; re-delegate if you need the changes in the workspace.";
        let (state, text, extra) = match fetched {
            FetchedResult::Running => (
                "running",
                format!("The executor at {peer} reports delegation {id} as still running.\n{lost}\n"),
                json!({}),
            ),
            FetchedResult::NotFound => {
                return Err(ToolError {
                    message: format!("neither the daemon nor the executor at {peer} knows delegation {id}"),
                    extra: json!({"delegationId": id.as_str(), "state": "not_found"}),
                })
            }
            FetchedResult::NotApplicable => (
                "not_applicable",
                format!("The executor at {peer} has no result to hand out for {id} (not applicable for its transport).\n{lost}\n"),
                json!({}),
            ),
            FetchedResult::Error(e) => (
                "error",
                format!(
                    "The executor at {peer} reports delegation {id} failed: {}: {}\n{}{lost}\n",
                    e.code.as_str(),
                    e.message,
                    e.hint.as_ref().map(|h| format!("Hint: {h}\n")).unwrap_or_default()
                ),
                json!({"error": {"code": e.code.as_str(), "message": e.message, "hint": e.hint}}),
            ),
            FetchedResult::Completed { outcome, snapshot } => {
                let mut t = format!(
                    "The executor at {peer} reports delegation {id} completed.\nSummary: {}\n",
                    outcome.summary
                );
                for h in &outcome.highlights {
                    t.push_str(&format!("- {h}\n"));
                }
                if let Some(s) = &snapshot {
                    t.push_str(&format!("A result snapshot ({}) is held by the executor.\n", s.snapshot_id));
                }
                t.push_str(lost);
                t.push('\n');
                (
                    "completed",
                    t,
                    json!({"result": {"summary": outcome.summary, "highlights": outcome.highlights},
                           "snapshotId": snapshot.as_ref().map(|s| s.snapshot_id.to_string())}),
                )
            }
        };
        let mut structured = json!({"source": "executor", "delegationId": id.as_str(),
                                    "executorUrl": peer, "state": state, "applicable": false});
        if let Value::Object(m) = extra {
            for (k, v) in m {
                structured[k] = v;
            }
        }
        Ok((text, structured))
    }
}

impl ServerHandler for AwcpMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("awcp-mcp", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Delegate local directories to remote AWCP executor agents: use `delegate`, then \
                 `delegate_output` for background delegations, and the snapshot tools for staged \
                 results. A delegation started with keep_open=true takes more rounds with \
                 `delegate_continue` and ends with `delegate_close`.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools().into_iter().find(|t| t.name.as_ref() == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let sink = ProgressSink::of(&context);
        Ok(self
            .call(&request.name, &request.arguments, sink)
            .await
            .into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_need_their_type_and_peers_are_normalised() {
        let e = auth_of(&None, &Some("t".into())).expect_err("refused");
        assert!(e.message.contains("auth_type"), "{}", e.message);
        assert!(auth_of(&Some("bearer".into()), &None).is_err());
        assert!(auth_of(&Some("basic".into()), &Some("t".into())).is_err());
        let a = auth_of(&Some("api_key".into()), &Some("k".into()))
            .ok()
            .flatten()
            .expect("both given");
        assert_eq!(
            awcp_proto::http_binding::credential_header(&a),
            ("x-api-key", "k".to_owned())
        );
        for given in [
            "http://h:1",
            "http://h:1/",
            "http://h:1/awcp",
            "http://h:1/awcp/",
        ] {
            assert_eq!(normalise_peer(given).ok().unwrap(), "http://h:1/awcp");
        }
        assert!(normalise_peer("h:1").is_err());
    }

    #[test]
    fn executor_refusals_always_say_something() {
        let m = executor_refusal(401, "http://x/awcp/tasks/d/result", &Value::Null, b"");
        assert!(m.ends_with("(the executor requires a credential: pass auth_type and auth_credential, as for delegate)"), "{m}");
        assert!(
            m.contains("HTTP 401 for http://x/awcp/tasks/d/result: Unauthorized"),
            "{m}"
        );
        let m = executor_refusal(
            401,
            "u",
            &json!({"type": "ERROR", "code": "AUTH_FAILED", "message": "missing credential"}),
            b"{}",
        );
        assert!(
            m.contains("u: AUTH_FAILED: missing credential (the executor"),
            "{m}"
        );
        let m = executor_refusal(500, "u", &json!({"error": {"message": "boom"}}), b"{}");
        assert!(m.ends_with("u: boom"), "{m}");
        let m = executor_refusal(502, "u", &Value::Null, b" bad gateway \n");
        assert!(m.ends_with("u: bad gateway"), "{m}");
        let m = executor_refusal(599, "u", &Value::Null, b"");
        assert!(!m.trim_end().ends_with(':'), "{m}");
    }

    #[test]
    fn shortened_leases_and_changed_files_are_reported() {
        let v = json!({"leaseConfig": {"ttlSeconds": 3600, "accessMode": "rw"},
            "executorConstraints": {"maxTtlSeconds": 600, "acceptedAccessMode": "ro"},
            "activeLease": {"expiresAt": "2026-11-23T10:10:00Z"}});
        let n = lease_note(&v);
        assert!(n.contains("Lease shortened by the executor: 3600 s requested, at most 600 s granted (ends 2026-11-23T10:10:00Z)"), "{n}");
        assert!(n.contains("rw requested, ro granted"), "{n}");
        let v = json!({"leaseConfig": {"ttlSeconds": 60, "accessMode": "rw"},
            "executorConstraints": {"maxTtlSeconds": 600, "acceptedAccessMode": null}});
        assert_eq!(lease_note(&v), "");
        let many: Vec<String> = (0..60).map(|i| format!("f{i}")).collect();
        let l = file_list("changed", &json!(many));
        assert!(
            l.starts_with("  changed (60): f0, f1") && l.ends_with(", … and 10 more\n"),
            "{l}"
        );
        assert_eq!(file_list("deleted", &Value::Null), "");
    }

    #[test]
    fn relative_dirs_resolve_against_cwd() {
        let t = std::env::temp_dir();
        let sub = t.join(format!("awcp-mcp-test-{}", std::process::id()));
        std::fs::create_dir_all(&sub).unwrap();
        let name = sub.file_name().unwrap().to_str().unwrap();
        let got = resolve_dir(name, Some(t.to_str().unwrap())).unwrap();
        assert_eq!(got, std::fs::canonicalize(&sub).unwrap());
        let e = resolve_dir("definitely-missing-dir", Some(t.to_str().unwrap())).unwrap_err();
        assert!(e.contains("does not exist"), "{e}");
        std::fs::remove_dir_all(&sub).unwrap();
    }

    #[test]
    fn an_idle_round_is_over_for_the_round_and_says_what_comes_next() {
        let v = json!({"id": "dlg_1", "state": "idle", "round": 2, "ended": false,
            "outcome": {"status": "running"},
            "snapshots": [{"id": "s1", "status": "applied"},
                          {"id": "s2", "status": "applied", "changed": ["workspace/b.txt"]}],
            "result": {"summary": "did round two", "highlights": []}});
        let r = report(&v);
        assert!(
            r.contains("Round: 2") && r.contains("Round 2 has ended"),
            "{r}"
        );
        assert!(
            r.contains("did round two") && r.contains("snapshot s2"),
            "{r}"
        );
        assert!(r.contains("workspace/b.txt"), "{r}");
        assert!(
            r.contains("delegate_continue") && r.contains("delegate_close"),
            "{r}"
        );
        assert!(!r.contains("Still running"), "{r}");
        assert!(!unsuccessful(&v));
        let (_, s) = settled(v);
        assert_eq!(s["stillRunning"], false);
        // The round's result could not be applied: not a success.
        let v = json!({"id": "dlg_1", "state": "idle", "round": 1,
            "outcome": {"status": "running"},
            "snapshots": [{"id": "s1", "status": "pending",
                "error": {"code": "TRANSPORT_ERROR", "message": "conflicts"}}]});
        assert!(unsuccessful(&v));
        assert!(report(&v).contains("NOT applied: TRANSPORT_ERROR: conflicts"));
        // A running delegation is not settled.
        let (_, s) = settled(json!({"state": "running"}));
        assert!(s.get("stillRunning").is_none());
    }

    #[test]
    fn report_mentions_pending_snapshots_and_errors() {
        let v = json!({"id": "dlg_1", "state": "completed", "executorUrl": "http://x/awcp",
            "snapshotPolicy": {"mode": "staged"},
            "snapshots": [{"id": "s1", "status": "pending"}],
            "result": {"summary": "did it", "highlights": ["a"]}});
        let r = report(&v);
        assert!(
            r.contains("did it") && r.contains("1 snapshot(s) pending"),
            "{r}"
        );
        let v = json!({"id": "dlg_1", "state": "error",
            "error": {"code": "TASK_FAILED", "message": "boom", "hint": "retry"}});
        let r = report(&v);
        assert!(
            r.contains("TASK_FAILED: boom") && r.contains("Hint: retry"),
            "{r}"
        );
        let v = json!({"id": "dlg_1", "state": "completed",
            "warnings": ["symlink `workspace/x` → `/etc` created by the executor points outside the workspace: removed"]});
        let r = report(&v);
        assert!(r.contains("Warning: symlink `workspace/x` → `/etc`"), "{r}");
    }
}
