//! The daemon's dashboard under `/ui/` ([`crate::dashboard`]): delegations live, each with
//! its events, snapshots and a staged one's diff, buttons that call the daemon API, and a
//! form that delegates.
//!
//! | Route | |
//! |---|---|
//! | `POST /ui/code` | (daemon token) a one-time login code: `{code, url, expiresInSeconds}` |
//! | `GET /ui/login?code=C` | spends the code, sets the session cookie, redirects to `/ui/` |
//! | `POST /ui/logout` | ends the session |
//! | `GET /ui/` | the delegations |
//! | `GET /ui/new` | the form that delegates (it posts to `POST /delegate`) |
//! | `GET /ui/d/{id}` | one delegation: facts, live events, snapshots, buttons |
//! | `GET /ui/d/{id}/s/{sid}` | what applying a snapshot would do: file tree and diffs |
//! | `GET /ui/fragments/…` | the live parts of those pages, re-fetched by the script |
//! | `GET /ui/events` | server-sent events: which delegation changed |
//! | `GET /ui/assets/…` | the stylesheet, the script, the icon (public) |
//!
//! Every route but the assets, the login and the code needs a session (or the token); the
//! daemon's Host and Origin checks run first on all of them.

use std::collections::BTreeMap;

use awcp_proto::engine::delegator::{DelegationView, SnapshotStatus};
use awcp_proto::{DelegationId, SnapshotId, Timestamp};
use bytes::Bytes;
use futures::StreamExt;
use maud::{html, Markup};
use serde_json::json;

use super::api::{self, LiveEvent};
use super::DelegatorHandle;
use crate::dashboard::{
    self, clock, diff_markup, html_response, human_duration, now, page, query_param, redirect,
    secs_between, session::CODE_LIFETIME, ClockKind, NavLink,
};
use crate::delegator::{ChangeKind, Preview, PreviewLimits};
use crate::net::{json_response, ResponseBody};

const SERVER: &str = "AWCP daemon";

/// What a request to `/ui/…` may do.
pub(super) enum Access {
    /// It carries the daemon token.
    Token,
    /// It carries a valid session cookie.
    Session,
    /// Neither.
    None,
}

fn nav(current: &str) -> Vec<NavLink<'static>> {
    vec![
        NavLink {
            href: "/ui/",
            label: "Delegations",
            current: current == "list",
        },
        NavLink {
            href: "/ui/new",
            label: "New delegation",
            current: current == "new",
        },
    ]
}

/// Answers a `/ui` request (after the daemon's Host and Origin checks).
pub(super) async fn handle(
    d: &DelegatorHandle,
    sessions: &dashboard::session::Sessions,
    listen: std::net::SocketAddr,
    access: Access,
    req: &http::request::Parts,
) -> http::Response<ResponseBody> {
    use http::Method;
    let (method, headers) = (&req.method, &req.headers);
    let path = req.uri.path();
    let query = req.uri.query().unwrap_or("");
    if let Some(a) = dashboard::asset(path) {
        return a;
    }
    let segs: Vec<&str> = path.trim_end_matches('/').split('/').skip(2).collect();
    match (method, segs.as_slice(), &access) {
        (&Method::POST, ["code"], Access::Token) => match sessions.issue_code() {
            Some(code) => json_response(
                200,
                json!({
                    "code": code,
                    "url": format!("http://{listen}/ui/login?code={code}"),
                    "expiresInSeconds": CODE_LIFETIME.as_secs(),
                })
                .to_string(),
            ),
            None => json_response(
                503,
                json!({"error": "no random numbers for a login code"}).to_string(),
            ),
        },
        (&Method::POST, ["code"], _) => json_response(
            401,
            json!({"error": "a login code needs the daemon token", "hint": "Run `awcp dashboard`."}).to_string(),
        ),
        (&Method::GET, ["login"], _) => {
            let code = query_param(query, "code").unwrap_or("");
            if !code.is_empty() && sessions.redeem_code(code) {
                match sessions.new_session_cookie() {
                    Some(c) => redirect("/ui/", Some(&c)),
                    None => locked("The daemon could not draw a session key; try again."),
                }
            } else {
                locked("This sign-in link is used, expired or incomplete.")
            }
        }
        (&Method::POST, ["logout"], _) => {
            sessions.revoke(headers);
            redirect("/ui/", Some(&sessions.clear_cookie()))
        }
        (_, _, Access::None) => locked("This page needs a sign-in link."),
        (&Method::GET, [], _) => list_page(d).await,
        (&Method::GET, ["fragments", "list"], _) => html_response(200, list_rows(d).await),
        (&Method::GET, ["events"], _) => events(d),
        (&Method::GET, ["new"], _) => html_response(
            200,
            page(
                "New delegation",
                SERVER,
                &nav("new"),
                &[],
                new_form(),
            ),
        ),
        (&Method::GET, ["d", id], _) => match DelegationId::new(id) {
            Ok(id) => delegation_page(d, &id).await,
            Err(_) => not_found(),
        },
        (&Method::GET, ["fragments", "d", id], _) => match DelegationId::new(id) {
            Ok(id) => match d.get(&id).await {
                Some(v) => html_response(200, delegation_parts(&v, &d.sources(&id).await)),
                None => not_found(),
            },
            Err(_) => not_found(),
        },
        (&Method::GET, ["d", id, "s", sid], _) => {
            match (DelegationId::new(id), SnapshotId::new(sid)) {
                (Ok(id), Ok(sid)) => diff_page(d, &id, &sid).await,
                _ => not_found(),
            }
        }
        _ => not_found(),
    }
}

fn locked(why: &str) -> http::Response<ResponseBody> {
    dashboard::locked_page(
        SERVER,
        html! {
            p { (why) }
            p { "Run " code { "awcp dashboard" } " on this machine: it prints a one-time link that signs this browser in." }
        },
    )
}

fn not_found() -> http::Response<ResponseBody> {
    html_response(
        404,
        page(
            "Not found",
            SERVER,
            &nav(""),
            &[],
            html! { p { "No such delegation or snapshot. " a href="/ui/" { "All delegations" } } },
        ),
    )
}

fn state_badge(state: &str) -> Markup {
    html! { span class={ "badge state-" (state) } { (state) } }
}

async fn list_page(d: &DelegatorHandle) -> http::Response<ResponseBody> {
    let rows = list_rows(d).await;
    html_response(
        200,
        page(
            "Delegations",
            SERVER,
            &nav("list"),
            &[("changes", "/ui/events".into())],
            html! {
                div.table-wrap {
                    table.delegations {
                        caption.visually-hidden { "Delegations, newest first" }
                        thead {
                            tr {
                                th scope="col" { "Delegation" }
                                th scope="col" { "State" }
                                th scope="col" { "Executor" }
                                th scope="col" { "Workspace" }
                                th scope="col" { "Elapsed" }
                                th scope="col" { "Lease left" }
                            }
                        }
                        tbody #rows data-refresh="/ui/fragments/list" { (rows) }
                    }
                }
                form method="post" action="/ui/logout" { button type="submit" { "Sign out" } }
            },
        ),
    )
}

async fn list_rows(d: &DelegatorHandle) -> Markup {
    let mut all = d.list().await;
    all.sort_by_key(|v| std::cmp::Reverse(v.created_at));
    let mut sources = Vec::with_capacity(all.len());
    for v in &all {
        sources.push(d.sources(&v.request.id).await);
    }
    let now = now();
    html! {
        @if all.is_empty() {
            tr { td colspan="6" { "No delegations yet. " a href="/ui/new" { "Start one" } " or run " code { "awcp delegate DIR --daemon --peer URL --prompt …" } "." } }
        }
        @for (v, src) in all.iter().zip(&sources) {
            @let id = v.request.id.as_str();
            tr data-id=(id) {
                td data-label="Delegation" {
                    a href={ "/ui/d/" (id) } { (v.request.task.description) }
                    br; small.mono { (id) }
                }
                td data-label="State" { (state_badge(v.state.as_str())) }
                td data-label="Executor" { span.mono { (v.request.peer) } }
                td data-label="Workspace" { (workspace(src)) }
                td data-label="Elapsed" { (elapsed(v, now)) }
                td data-label="Lease left" { (lease_left(v, now)) }
            }
        }
    }
}

fn workspace(src: &[(String, std::path::PathBuf)]) -> Markup {
    html! {
        @if src.is_empty() { "—" }
        @for (i, (name, path)) in src.iter().enumerate() {
            @if i > 0 { br; }
            span.mono title=(name) { (path.display()) }
        }
    }
}

fn elapsed(v: &DelegationView, now: Timestamp) -> Markup {
    if v.ended {
        html! { (human_duration(secs_between(v.created_at, v.updated_at))) }
    } else {
        clock(
            ClockKind::Since,
            &v.created_at.to_rfc3339(),
            &human_duration(secs_between(v.created_at, now)),
        )
    }
}

fn lease_left(v: &DelegationView, now: Timestamp) -> Markup {
    match v.expires_at {
        Some(at) if !v.ended => clock(
            ClockKind::Until,
            &at.to_rfc3339(),
            &human_duration(secs_between(now, at)),
        ),
        _ => html! { "—" },
    }
}

/// `GET /ui/events`: one `data: {"id", "type"}` per change of any delegation, forever.
fn events(d: &DelegatorHandle) -> http::Response<ResponseBody> {
    let body = d
        .events()
        .filter_map(|e| {
            let v = LiveEvent::of(&e).map(|(id, ev)| {
                let kind = serde_json::to_value(&ev)
                    .ok()
                    .and_then(|v| v.get("type").cloned())
                    .unwrap_or_default();
                json!({"id": id.as_str(), "type": kind}).to_string()
            });
            futures::future::ready(v)
        })
        .map(|s| {
            Ok::<_, crate::net::BoxError>(hyper::body::Frame::data(Bytes::from(
                awcp_proto::sse::encode_data(&s),
            )))
        });
    let mut r = http::Response::new(http_body_util::BodyExt::boxed_unsync(
        http_body_util::StreamBody::new(body),
    ));
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/event-stream"),
    );
    r.headers_mut().insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-cache"),
    );
    r
}

async fn delegation_page(d: &DelegatorHandle, id: &DelegationId) -> http::Response<ResponseBody> {
    let Some(v) = d.get(id).await else {
        return not_found();
    };
    let src = d.sources(id).await;
    let tail = d.output_tail(id).await;
    let idt = id.as_str();
    let mut live = vec![("changes", "/ui/events".to_owned()), ("id", idt.to_owned())];
    if !v.ended {
        live.push(("events", format!("/delegation/{idt}/events?tail=1")));
    }
    html_response(
        200,
        page(
            &v.request.task.description,
            SERVER,
            &nav(""),
            &live,
            html! {
                div #parts data-refresh={ "/ui/fragments/d/" (idt) } { (delegation_parts(&v, &src)) }
                section aria-labelledby="log-h" {
                    h2 #log-h { "Live events" }
                    // An ended delegation's last lines; a live one's come with its stream
                    // (`?tail=1`: the lines so far, then each new one).
                    ol #log.log aria-live="polite" {
                        @if v.ended {
                            @for m in &tail { li.progress { (m) } }
                            @if tail.is_empty() {
                                @if let Some(m) = &v.last_progress { li.progress { (m) } }
                            }
                            li.state { "ended: " (v.state.as_str()) }
                        }
                    }
                }
                details {
                    summary { "Task prompt" }
                    pre.prompt { (v.request.task.prompt) }
                }
            },
        ),
    )
}

/// The parts of a delegation's page that change: its facts, buttons and snapshots.
fn delegation_parts(v: &DelegationView, src: &[(String, std::path::PathBuf)]) -> Markup {
    let id = v.request.id.as_str();
    let now = now();
    let record = api::Record::of(v);
    html! {
        dl.facts {
            dt { "State" } dd #state { (state_badge(v.state.as_str())) }
            dt { "Delegation" } dd.mono { (id) }
            dt { "Executor" } dd.mono { (v.request.peer) }
            dt { "Workspace" } dd { (workspace(src)) }
            dt { "Elapsed" } dd { (elapsed(v, now)) }
            dt { "Lease left" } dd { (lease_left(v, now)) }
            @if v.request.keep_open { dt { "Round" } dd { (record.round) } }
            dt { "Outcome" } dd { (record.outcome.message) }
            @if let Some(e) = &v.error {
                dt { "Error" } dd.error { (e.code.as_str()) ": " (e.message) }
            }
        }
        @if !v.ended {
            div.actions {
                button type="button" data-method="DELETE" data-url={ "/delegation/" (id) }
                    data-confirm="Cancel this delegation?" data-done="Cancelled." { "Cancel delegation" }
            }
        }
        section aria-labelledby="snaps-h" {
            h2 #snaps-h { "Snapshots" }
            @if v.snapshots.is_empty() {
                p { "No snapshot yet." }
            } @else {
                ul.snapshots {
                    @for s in &v.snapshots {
                        @let sid = s.id.as_str();
                        li data-snapshot=(sid) {
                            span class={ "badge snap-" (snapshot_status(&s.status)) } { (snapshot_status(&s.status)) }
                            " "
                            span.mono { (sid) }
                            @if s.recommended { " " span.badge.recommended { "recommended" } }
                            @if !s.summary.is_empty() { p.summary { (s.summary) } }
                            @if let Some(e) = &s.error { p.error { (e.message) } }
                            @if matches!(s.status, SnapshotStatus::Pending) {
                                div.actions {
                                    a.button href={ "/ui/d/" (id) "/s/" (sid) } { "Review diff" }
                                    (apply_discard(id, sid, None))
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn snapshot_status(s: &SnapshotStatus) -> &'static str {
    match s {
        SnapshotStatus::Pending => "pending",
        SnapshotStatus::InFlight => "applying",
        SnapshotStatus::Applied => "applied",
        SnapshotStatus::Discarded => "discarded",
        SnapshotStatus::Failed(_) => "failed",
    }
}

fn apply_discard(id: &str, sid: &str, then: Option<&str>) -> Markup {
    html! {
        button.primary type="button" data-method="POST" data-url={ "/delegation/" (id) "/snapshots/" (sid) "/apply" }
            data-done="Applied." data-then=[then] { "Apply" }
        button type="button" data-method="POST" data-url={ "/delegation/" (id) "/snapshots/" (sid) "/discard" }
            data-confirm="Discard this snapshot? Its changes are dropped." data-done="Discarded." data-then=[then] { "Discard" }
    }
}

async fn diff_page(
    d: &DelegatorHandle,
    id: &DelegationId,
    sid: &SnapshotId,
) -> http::Response<ResponseBody> {
    let Some(v) = d.get(id).await else {
        return not_found();
    };
    let back = format!("/ui/d/{}", id.as_str());
    let title = format!("Snapshot {}", sid.as_str());
    let body = match d.preview_snapshot(id, sid, PreviewLimits::default()).await {
        Ok(p) => preview_markup(&p),
        Err(e) => html! { p.error role="alert" { "No diff: " (e.to_string()) } },
    };
    let pending = v
        .snapshots
        .iter()
        .any(|s| s.id == *sid && matches!(s.status, SnapshotStatus::Pending));
    html_response(
        200,
        page(
            &title,
            SERVER,
            &nav(""),
            &[],
            html! {
                p { a href=(back) { "← " (v.request.task.description) } }
                @if pending {
                    div.actions { (apply_discard(id.as_str(), sid.as_str(), Some(&back))) }
                }
                (body)
            },
        ),
    )
}

/// A directory tree of changed paths (`resource/dir/file`).
#[derive(Default)]
struct Tree<'a> {
    dirs: BTreeMap<&'a str, Tree<'a>>,
    files: Vec<(&'a str, usize)>,
}

fn tree_markup(t: &Tree<'_>, p: &Preview) -> Markup {
    html! {
        ul {
            @for (name, sub) in &t.dirs {
                li.dir { span { (name) "/" } (tree_markup(sub, p)) }
            }
            @for (name, i) in &t.files {
                @let f = &p.files[*i];
                li { a href={ "#f" (i) } { (change_mark(f.change)) " " (name) } }
            }
        }
    }
}

fn change_mark(c: ChangeKind) -> Markup {
    let (class, text) = match c {
        ChangeKind::Added => ("added", "added"),
        ChangeKind::Modified => ("modified", "changed"),
        ChangeKind::Deleted => ("deleted", "removed"),
    };
    html! { span class={ "badge change-" (class) } { (text) } }
}

fn preview_markup(p: &Preview) -> Markup {
    let mut tree = Tree::default();
    for (i, f) in p.files.iter().enumerate() {
        let mut parts: Vec<&str> = f.path.split('/').collect();
        let name = parts.pop().unwrap_or("");
        let mut t = &mut tree;
        for part in parts {
            t = t.dirs.entry(part).or_default();
        }
        t.files.push((name, i));
    }
    let count = |k: ChangeKind| p.files.iter().filter(|f| f.change == k).count();
    html! {
        p.counts {
            (count(ChangeKind::Added)) " added, "
            (count(ChangeKind::Modified)) " changed, "
            (count(ChangeKind::Deleted)) " removed, "
            (p.unchanged) " unchanged"
        }
        @if !p.conflicts.is_empty() {
            div.warn role="alert" {
                p { "Edited here since it was lent (applying refuses until they are resolved):" }
                ul { @for c in &p.conflicts { li.mono { (c) } } }
            }
        }
        @if !p.refused.is_empty() {
            div.warn {
                p { "Refused (never written):" }
                ul { @for c in &p.refused { li.mono { (c) } } }
            }
        }
        @if p.files.is_empty() { p { "No changes to apply." } }
        @else {
            div.review {
                nav.tree aria-label="Changed files" { (tree_markup(&tree, p)) }
                div.files {
                    @for (i, f) in p.files.iter().enumerate() {
                        section.file id={ "f" (i) } aria-label=(f.path) {
                            h2.file-head { (change_mark(f.change)) " " span.mono { (f.path) } }
                            @if let Some(n) = &f.note { p.note { (n) } }
                            @if let Some(diff) = &f.diff { (diff_markup(diff)) }
                        }
                    }
                }
            }
        }
        @if p.truncated { p.note { "Some diffs were left out to keep this page small; " code { "awcp diff ID SNAPSHOT --max-bytes N" } " shows more." } }
    }
}

fn new_form() -> Markup {
    html! {
        form #new-delegation.stack novalidate {
            label for="workspace" { "Workspace directory (on this machine)" }
            input #workspace name="workspace" required autocomplete="off" placeholder="/home/me/project";
            label for="executor" { "Executor URL" }
            input #executor name="executor" type="url" required placeholder="http://127.0.0.1:10200/awcp";
            label for="token" { "Executor token (if it asks for one)" }
            input #token name="token" type="password" autocomplete="off";
            label for="description" { "Description" }
            input #description name="description" placeholder="(the prompt's first line)";
            label for="prompt" { "Prompt" }
            textarea #prompt name="prompt" rows="5" required {}
            fieldset {
                legend { "Result" }
                label { input type="radio" name="snapshotMode" value="staged" checked; " staged: review it here, then apply" }
                label { input type="radio" name="snapshotMode" value="auto"; " auto: apply it when it arrives" }
                label { input type="radio" name="snapshotMode" value="discard"; " discard" }
            }
            label for="ttl" { "Lease (seconds)" }
            input #ttl name="ttlSeconds" type="number" min="1" value="3600";
            label { input #readonly name="readonly" type="checkbox"; " read-only" }
            div.actions { button.primary type="submit" { "Delegate" } }
        }
    }
}
