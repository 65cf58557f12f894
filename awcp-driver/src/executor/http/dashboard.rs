//! The executor's dashboard under `/ui/` ([`crate::dashboard`]): the tasks it holds, their
//! leases, and the tail of each agent's output.
//!
//! With `--auth-token` the page asks for that token once (a form posting
//! `POST /ui/login {"token"}`) and keeps a session cookie derived from it; the token is never
//! in a URL. Without a token the page is as open as the executor's API (loopback only), with
//! the same Host check. Any request a page of another origin sends is refused.

use awcp_proto::engine::auth::SecretDigest;
use bytes::Bytes;
use http::Method;
use maud::{html, Markup};
use serde_json::json;

use super::ExecutorHandle;
use crate::dashboard::{
    self, clock, html_response, human_duration, page, session::Sessions, ClockKind, NavLink,
};
use crate::net::{json_response, ResponseBody};

const SERVER: &str = "AWCP executor";

fn nav() -> [NavLink<'static>; 1] {
    [NavLink {
        href: "/ui/",
        label: "Tasks",
        current: true,
    }]
}

/// `scheme://authority` of `url` (a public URL may carry a path prefix, an `Origin` never).
fn origin_of(url: &str) -> Option<String> {
    let u: http::Uri = url.parse().ok()?;
    Some(format!("{}://{}", u.scheme_str()?, u.authority()?))
}

/// The port the browser used (the cookie's name carries it: two executors on one host keep
/// their sessions apart).
fn port_of(origin: Option<&str>) -> u16 {
    origin
        .and_then(|o| o.parse::<http::Uri>().ok())
        .and_then(|u| u.port_u16())
        .unwrap_or(0)
}

impl ExecutorHandle {
    /// Answers a `/ui` request. `origin` is the origin the browser used (the public URL's, or
    /// from `Host`); an `Origin` header naming another is refused.
    pub(super) async fn dashboard<B>(
        &self,
        req: http::Request<B>,
        origin: Option<String>,
    ) -> http::Response<ResponseBody>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let path = req.uri().path().to_owned();
        if let Some(a) = dashboard::asset(&path) {
            return a;
        }
        let sent_origin = req
            .headers()
            .get(http::header::ORIGIN)
            .map(|v| v.to_str().unwrap_or(""));
        if let Some(o) = sent_origin {
            if origin.as_deref().and_then(origin_of).as_deref() != Some(o) {
                return json_response(
                    403,
                    json!({"error": format!("requests from web origin {o:?} are not accepted")})
                        .to_string(),
                );
            }
        }
        let sessions = self.opts.auth.as_ref().map(|a| {
            self.opts.dashboard_sessions.get_or_init(|| {
                Sessions::new("executor", &a.credential, port_of(origin.as_deref()))
            })
        });
        let method = req.method().clone();
        let segs: Vec<String> = path
            .trim_end_matches('/')
            .split('/')
            .skip(2)
            .map(str::to_owned)
            .collect();
        let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
        // A cookie alone changes nothing: other methods need the (checked) Origin header.
        let safe = matches!(method, Method::GET | Method::HEAD);
        let signed_in = match &sessions {
            None => true,
            Some(s) => (safe || sent_origin.is_some()) && s.has_session(req.headers()),
        };
        match (&method, segs.as_slice(), &sessions) {
            (&Method::POST, ["login"], Some(s)) => {
                let json = req
                    .headers()
                    .get(http::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|t| t.starts_with("application/json"));
                if !json || sent_origin.is_none() {
                    return json_response(
                        403,
                        json!({"error": "sign in from the dashboard's own page"}).to_string(),
                    );
                }
                let body = match agent_rt::body::read_body(req.into_body(), 4096).await {
                    Ok(b) => b,
                    Err(_) => {
                        return json_response(400, json!({"error": "unreadable"}).to_string())
                    }
                };
                let token = serde_json::from_slice::<serde_json::Value>(&body)
                    .ok()
                    .and_then(|v| v.get("token")?.as_str().map(str::to_owned))
                    .unwrap_or_default();
                let expected = self.opts.auth.as_ref().map(|a| a.credential.as_str());
                if expected.is_some_and(|e| SecretDigest::of(e).matches(token.trim())) {
                    let mut r = json_response(200, json!({"ok": true}).to_string());
                    if let Some(c) = s
                        .new_session_cookie()
                        .and_then(|c| http::HeaderValue::from_str(&c).ok())
                    {
                        r.headers_mut().insert(http::header::SET_COOKIE, c);
                    }
                    r
                } else {
                    json_response(
                        401,
                        json!({"error": "that is not this executor's token"}).to_string(),
                    )
                }
            }
            (&Method::POST, ["logout"], Some(s)) => {
                s.revoke(req.headers());
                dashboard::redirect("/ui/", Some(&s.clear_cookie()))
            }
            (_, _, _) if !signed_in => login_page(),
            (&Method::GET, [], _) => html_response(
                200,
                page(
                    "Tasks",
                    SERVER,
                    &nav(),
                    &[("poll", "2000".into())],
                    html! {
                        div #tasks data-refresh="/ui/fragments/tasks" { (self.tasks().await) }
                        @if sessions.is_some() {
                            form method="post" action="/ui/logout" { button type="submit" { "Sign out" } }
                        }
                    },
                ),
            ),
            (&Method::GET, ["fragments", "tasks"], _) => html_response(200, self.tasks().await),
            _ => html_response(
                404,
                page(
                    "Not found",
                    SERVER,
                    &nav(),
                    &[],
                    html! { p { a href="/ui/" { "Tasks" } } },
                ),
            ),
        }
    }

    async fn tasks(&self) -> Markup {
        let mut all = self.overview().await;
        all.reverse();
        let now = dashboard::now();
        html! {
            @if all.is_empty() { p { "No tasks. Delegators reach this executor at " code { "/awcp" } "." } }
            @for t in &all {
                @let s = &t.summary;
                article.task aria-labelledby={ "t-" (s.id.as_str()) } {
                    h2 id={ "t-" (s.id.as_str()) } { (s.description) }
                    dl.facts {
                        dt { "State" } dd { span class={ "badge state-" (s.state.as_str()) } { (s.state.as_str()) } }
                        dt { "Delegation" } dd.mono { (s.id.as_str()) }
                        @if s.round > 1 { dt { "Round" } dd { (s.round) } }
                        dt { "Work directory" } dd.mono { @if s.work_dir.is_empty() { "—" } @else { (s.work_dir) } }
                        dt { "Running for" } dd {
                            @match s.started_at {
                                Some(at) if s.state.as_str() == "active" => (clock(ClockKind::Since, &at.to_rfc3339(), &human_duration(dashboard::secs_between(at, now)))),
                                _ => "—",
                            }
                        }
                        dt { "Lease left" } dd {
                            @match s.expires_at {
                                Some(at) => (clock(ClockKind::Until, &at.to_rfc3339(), &human_duration(dashboard::secs_between(now, at)))),
                                None => "—",
                            }
                        }
                    }
                    h3 { "Agent output (last lines)" }
                    @if t.output_tail.is_empty() { p.note { "Nothing printed yet." } }
                    @else { pre.tail tabindex="0" { @for l in &t.output_tail { (l) "\n" } } }
                }
            }
        }
    }
}

fn login_page() -> http::Response<ResponseBody> {
    dashboard::locked_page(
        SERVER,
        html! {
            p { "This executor needs its token (" code { "--auth-token" } ") to show its tasks." }
            form #login.stack {
                label for="token" { "Token" }
                input #token name="token" type="password" autocomplete="current-password" required;
                div.actions { button.primary type="submit" { "Sign in" } }
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_public_url_with_a_path_has_the_origin_browsers_send() {
        assert_eq!(
            origin_of("https://relay.example/e/x").as_deref(),
            Some("https://relay.example")
        );
        assert_eq!(
            origin_of("http://127.0.0.1:10200").as_deref(),
            Some("http://127.0.0.1:10200")
        );
        assert_eq!(port_of(Some("http://127.0.0.1:10200/p")), 10200);
        assert_eq!(port_of(Some("https://relay.example/e/x")), 0);
    }
}
