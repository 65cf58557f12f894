//! The browser dashboards: the daemon's (delegations, their live events, staged results as
//! diffs, apply / discard / cancel, a form to delegate) and the executor's (tasks, leases,
//! the tail of each agent's output), served under `/ui/` by the server they show.
//!
//! Pages are rendered on the server with [`maud`] (every value is HTML-escaped unless a
//! template says otherwise, and none does), styled by one embedded stylesheet and made live
//! by one small embedded script (`assets/dashboard.js`, no library): it re-fetches
//! server-rendered fragments when a server-sent event says something changed, ticks the
//! elapsed and lease clocks, and sends the buttons' requests. Nothing is loaded from
//! elsewhere, no script is inline, and every page carries a strict Content-Security-Policy
//! ([`CSP`]) and refuses to be framed.
//!
//! Who may look is [`session::Sessions`]'s business; which requests a page may send is the
//! server's own Origin/Host checks' (a page of another origin is refused whatever cookie its
//! browser holds).

pub mod session;

use bytes::Bytes;
use maud::{html, Markup, DOCTYPE};

use crate::net::ResponseBody;

/// The Content-Security-Policy of every dashboard response: scripts, styles and connections
/// to this origin only, no inline script or style, no plugins, no framing, forms posting
/// nowhere else.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

const STYLE: &str = include_str!("assets/dashboard.css");
const SCRIPT: &str = include_str!("assets/dashboard.js");
const ICON: &str = include_str!("assets/icon.svg");

/// Where the assets are served (public: they hold nothing about any delegation).
pub const ASSET_PREFIX: &str = "/ui/assets/";

fn with_headers(
    status: u16,
    content_type: &str,
    cache: &str,
    body: impl Into<Bytes>,
) -> http::Response<ResponseBody> {
    http::Response::builder()
        .status(status)
        .header("content-type", content_type)
        .header("content-security-policy", CSP)
        .header("x-frame-options", "DENY")
        .header("x-content-type-options", "nosniff")
        .header("referrer-policy", "no-referrer")
        .header("cross-origin-opener-policy", "same-origin")
        .header("cross-origin-resource-policy", "same-origin")
        .header("cache-control", cache)
        .body(crate::net::full(body.into()))
        .unwrap_or_else(|_| unreachable!("static headers are valid"))
}

/// An HTML page or fragment (never cached: it shows live state).
pub fn html_response(status: u16, markup: Markup) -> http::Response<ResponseBody> {
    with_headers(
        status,
        "text/html; charset=utf-8",
        "no-store",
        markup.into_string(),
    )
}

/// A redirect to `location` (a path of this server), with an optional `Set-Cookie`.
pub fn redirect(location: &str, set_cookie: Option<&str>) -> http::Response<ResponseBody> {
    let mut r = with_headers(303, "text/plain; charset=utf-8", "no-store", "");
    if let Ok(v) = http::HeaderValue::from_str(location) {
        r.headers_mut().insert(http::header::LOCATION, v);
    }
    if let Some(c) = set_cookie.and_then(|c| http::HeaderValue::from_str(c).ok()) {
        r.headers_mut().insert(http::header::SET_COOKIE, c);
    }
    r
}

/// The embedded asset at `path` (under [`ASSET_PREFIX`]), or `None`.
pub fn asset(path: &str) -> Option<http::Response<ResponseBody>> {
    let (ty, body) = match path.strip_prefix(ASSET_PREFIX)? {
        "dashboard.css" => ("text/css; charset=utf-8", STYLE),
        "dashboard.js" => ("text/javascript; charset=utf-8", SCRIPT),
        "icon.svg" => ("image/svg+xml", ICON),
        _ => return None,
    };
    Some(with_headers(200, ty, "no-cache", body))
}

/// One link of a page's navigation.
pub struct NavLink<'a> {
    /// Where it goes.
    pub href: &'a str,
    /// What it says.
    pub label: &'a str,
    /// Whether it is the page shown.
    pub current: bool,
}

/// A whole page: `title`, the server's name (`AWCP daemon`, `AWCP executor`), its
/// navigation, and `main`. `live` sets the page's `data-*` attributes the script reads:
/// `events` (one delegation's SSE stream, shown in its log), `changes` (the feed of which
/// delegation changed) with `id` (the one the page shows), `poll` (a refresh period in ms).
pub fn page(
    title: &str,
    server: &str,
    nav: &[NavLink<'_>],
    live: &[(&str, String)],
    main: Markup,
) -> Markup {
    let get = |name: &str| live.iter().find(|(k, _)| *k == name).map(|(_, v)| v);
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="color-scheme" content="light dark";
                meta name="referrer" content="no-referrer";
                title { (title) " · " (server) }
                link rel="icon" href={ (ASSET_PREFIX) "icon.svg" } type="image/svg+xml";
                link rel="stylesheet" href={ (ASSET_PREFIX) "dashboard.css" };
                script defer src={ (ASSET_PREFIX) "dashboard.js" } {}
            }
            body data-events=[get("events")] data-changes=[get("changes")] data-id=[get("id")] data-poll=[get("poll")] {
                a.skip href="#main" { "Skip to content" }
                header.top {
                    span.brand { (server) }
                    @if !nav.is_empty() {
                        nav aria-label="Main" {
                            ul {
                                @for l in nav {
                                    li {
                                        @if l.current {
                                            a href=(l.href) aria-current="page" { (l.label) }
                                        } @else {
                                            a href=(l.href) { (l.label) }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
                main #main tabindex="-1" {
                    h1 { (title) }
                    p #status role="status" aria-live="polite" {}
                    (main)
                }
            }
        }
    }
}

/// The page shown without a session: what this is and how to get in, nothing else.
pub fn locked_page(server: &str, how: Markup) -> http::Response<ResponseBody> {
    html_response(401, page("Sign-in needed", server, &[], &[], how))
}

/// `2m 05s`, `3h 04m`, `12s`: a duration for a person.
pub fn human_duration(secs: i64) -> String {
    let (sign, s) = if secs < 0 { ("-", -secs) } else { ("", secs) };
    let (h, m, s) = (s / 3600, (s % 3600) / 60, s % 60);
    if h > 0 {
        format!("{sign}{h}h {m:02}m")
    } else if m > 0 {
        format!("{sign}{m}m {s:02}s")
    } else {
        format!("{sign}{s}s")
    }
}

/// The wall clock now, as a protocol timestamp (what the pages' clocks start from).
pub fn now() -> awcp_proto::Timestamp {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    awcp_proto::Timestamp::from_unix_millis(ms)
}

/// Whole seconds from `a` to `b` (negative when `b` is earlier).
pub fn secs_between(a: awcp_proto::Timestamp, b: awcp_proto::Timestamp) -> i64 {
    let (a, b) = (
        i128::from(a.as_unix_millis()),
        i128::from(b.as_unix_millis()),
    );
    i64::try_from((b - a) / 1000).unwrap_or(0)
}

/// A clock the script keeps ticking: the time since `since` (RFC 3339) or until `until`,
/// rendered now as `now_text`.
pub fn clock(attr: ClockKind, at: &str, now_text: &str) -> Markup {
    match attr {
        ClockKind::Since => html! { time data-since=(at) datetime=(at) { (now_text) } },
        ClockKind::Until => html! { time data-until=(at) datetime=(at) { (now_text) } },
    }
}

/// Which way a [`clock`] counts.
#[derive(Clone, Copy, Debug)]
pub enum ClockKind {
    /// Elapsed since.
    Since,
    /// Left until.
    Until,
}

/// The query parameter `name` of `query` (no percent-decoding: the values used here are
/// hex codes and plain words).
pub fn query_param<'a>(query: &'a str, name: &str) -> Option<&'a str> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// A unified diff as lines classed for colour (`add`, `del`, `hunk`, `meta`).
pub fn diff_markup(diff: &str) -> Markup {
    html! {
        pre.diff tabindex="0" {
            code {
                @for line in diff.lines() {
                    @let class = if line.starts_with("+++") || line.starts_with("---") {
                        "meta"
                    } else if line.starts_with('+') {
                        "add"
                    } else if line.starts_with('-') {
                        "del"
                    } else if line.starts_with("@@") {
                        "hunk"
                    } else {
                        "ctx"
                    };
                    span class=(class) { (line) "\n" }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_escaped() {
        let m = page(
            "<script>alert(1)</script>",
            "AWCP daemon",
            &[],
            &[],
            diff_markup("+<img src=x onerror=alert(1)>"),
        )
        .into_string();
        assert!(!m.contains("<script>alert"));
        assert!(!m.contains("<img src=x"));
        assert!(m.contains("&lt;img src=x"));
    }

    #[test]
    fn every_response_carries_the_policy() {
        let r = html_response(200, html! { p { "x" } });
        assert_eq!(r.headers()["content-security-policy"], CSP);
        assert_eq!(r.headers()["x-frame-options"], "DENY");
        assert!(asset("/ui/assets/dashboard.js").is_some());
        assert!(asset("/ui/assets/../secret").is_none());
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(125), "2m 05s");
        assert_eq!(human_duration(3 * 3600 + 240), "3h 04m");
        assert_eq!(human_duration(-5), "-5s");
    }
}
