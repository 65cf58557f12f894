//! Issue 53: who may see and use the dashboards, against the real `awcp daemon` (two side by
//! side) and `awcp-executor` binaries over raw HTTP/1.1 on 127.0.0.1: the one-time code,
//! the session cookie (its flags, its forgery, its use on another daemon), the rule that a
//! cookie alone changes nothing without the server's own `Origin`, foreign origins and
//! hosts, the executor's token sign-in, and the security headers of every page.
//! (`dashboard_browser.rs` does the same things from a real browser.)

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use awcp_tests::bins::{self, KillOnDrop};

/// An answer: status, headers (lower-case names), body.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Sends one request (`Connection: close`) to `authority` with `headers` and reads the whole
/// answer.
fn request(
    authority: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    let mut s = TcpStream::connect(authority).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        head.push_str(&format!("Host: {authority}\r\n"));
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Answer {
        status,
        headers,
        body: body.to_owned(),
    }
}

fn authority(url: &str) -> String {
    url.trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_owned()
}

/// A daemon, its authority and token.
fn daemon(dir: &std::path::Path, name: &str) -> (KillOnDrop, String, String) {
    let state = dir.join(name);
    let (child, url) = bins::spawn_daemon(&state);
    (
        KillOnDrop(child),
        authority(&url),
        bins::daemon_token(&state),
    )
}

/// A one-time code of the daemon at `at`, asked for with `token`.
fn code(at: &str, token: &str) -> Answer {
    request(
        at,
        "POST",
        "/ui/code",
        &[("Authorization", &format!("Bearer {token}"))],
        "",
    )
}

/// `name=value` of a `Set-Cookie` answer.
fn cookie_pair(a: &Answer) -> String {
    a.header("set-cookie")
        .expect("a session cookie")
        .split(';')
        .next()
        .unwrap()
        .to_owned()
}

fn assert_page_headers(a: &Answer) {
    let csp = a.header("content-security-policy").unwrap_or_default();
    assert!(csp.contains("default-src 'none'"), "{csp}");
    assert!(csp.contains("script-src 'self'"), "{csp}");
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert_eq!(a.header("x-frame-options"), Some("DENY"));
    assert_eq!(a.header("referrer-policy"), Some("no-referrer"));
}

#[test]
fn the_daemon_dashboard_opens_with_a_one_time_code_and_a_cookie_alone_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (_a, a, token_a) = daemon(dir.path(), "a");
    let (_b, b, token_b) = daemon(dir.path(), "b");

    // Without a session: a page that says how to get in, nothing else; the API refuses.
    let locked = request(&a, "GET", "/ui/", &[], "");
    assert_eq!(locked.status, 401);
    assert!(locked.body.contains("awcp dashboard"), "{}", locked.body);
    assert!(!locked.body.contains("tbody"), "{}", locked.body);
    assert_page_headers(&locked);
    assert_eq!(
        request(&a, "GET", "/ui/fragments/list", &[], "").status,
        401
    );
    assert_eq!(request(&a, "GET", "/ui/events", &[], "").status, 401);

    // Codes: only with this daemon's token, spent once, this daemon's only.
    assert_eq!(request(&a, "POST", "/ui/code", &[], "").status, 401);
    assert_eq!(code(&a, &token_b).status, 401);
    let c = code(&a, &token_a);
    assert_eq!(c.status, 200, "{}", c.body);
    let v: serde_json::Value = serde_json::from_str(&c.body).unwrap();
    let the_code = v["code"].as_str().unwrap().to_owned();
    assert!(v["url"].as_str().unwrap().ends_with(&the_code));
    let login = format!("/ui/login?code={the_code}");
    assert_eq!(request(&b, "GET", &login, &[], "").status, 401);
    let signed = request(&a, "GET", &login, &[], "");
    assert_eq!(signed.status, 303);
    assert_eq!(signed.header("location"), Some("/ui/"));
    let set = signed.header("set-cookie").unwrap().to_owned();
    for flag in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(set.contains(flag), "{set}");
    }
    assert!(!set.contains(&token_a), "the cookie is not the token");
    assert_eq!(request(&a, "GET", &login, &[], "").status, 401, "spent");
    let cookie = cookie_pair(&signed);

    // The cookie reads the dashboard and the API of this daemon.
    let list = request(&a, "GET", "/ui/", &[("Cookie", &cookie)], "");
    assert_eq!(list.status, 200);
    assert!(list.body.contains("tbody"), "{}", list.body);
    assert_page_headers(&list);
    assert_eq!(
        request(&a, "GET", "/delegations", &[("Cookie", &cookie)], "").status,
        200
    );
    // Not another daemon's, even renamed to that daemon's cookie name.
    let port_b = b.rsplit(':').next().unwrap();
    let renamed = cookie.replacen(
        &cookie[..cookie.find('=').unwrap()],
        &format!("awcp_daemon_{port_b}"),
        1,
    );
    for c in [&cookie, &renamed] {
        assert_eq!(
            request(&b, "GET", "/delegations", &[("Cookie", c)], "").status,
            401
        );
    }
    // Forged or tampered: nothing.
    let (name, value) = cookie.split_once('=').unwrap();
    let mut forged = value.to_owned();
    let last = forged.pop().unwrap();
    forged.push(if last == '0' { '1' } else { '0' });
    assert_eq!(
        request(
            &a,
            "GET",
            "/ui/",
            &[("Cookie", &format!("{name}={forged}"))],
            ""
        )
        .status,
        401
    );

    // Changes: the cookie needs the daemon's own Origin with it.
    let own = format!("http://{a}");
    let close = "/delegation/dlg_00000000000000000000000000000000/close";
    let cancel = "/delegation/dlg_00000000000000000000000000000000";
    for (method, path) in [("POST", close), ("DELETE", cancel)] {
        let no_origin = request(&a, method, path, &[("Cookie", &cookie)], "");
        assert_eq!(no_origin.status, 401, "{method} {path}: {}", no_origin.body);
        let foreign = request(
            &a,
            method,
            path,
            &[("Cookie", &cookie), ("Origin", "http://127.0.0.1:1")],
            "",
        );
        assert_eq!(foreign.status, 403, "{method} {path}");
        let same = request(
            &a,
            method,
            path,
            &[("Cookie", &cookie), ("Origin", &own)],
            "",
        );
        assert_eq!(same.status, 404, "{method} {path}: {}", same.body);
    }
    // A form post (not JSON) is refused whatever it carries.
    let form = request(
        &a,
        "POST",
        "/delegate",
        &[
            ("Cookie", &cookie),
            ("Origin", &own),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        "x=1",
    );
    assert_eq!(form.status, 415);
    // DNS rebinding: another name for 127.0.0.1 is refused, cookie or not.
    let rebound = request(
        &a,
        "GET",
        "/ui/",
        &[("Cookie", &cookie), ("Host", "evil.example")],
        "",
    );
    assert_eq!(rebound.status, 403);
    // A code is no cookie and the token is no session: a token in the cookie opens nothing.
    assert_eq!(
        request(
            &a,
            "GET",
            "/ui/",
            &[("Cookie", &format!("{name}={token_a}"))],
            ""
        )
        .status,
        401
    );

    // Assets are public (they hold nothing), with the same headers.
    let js = request(&a, "GET", "/ui/assets/dashboard.js", &[], "");
    assert_eq!(js.status, 200);
    assert!(js
        .header("content-type")
        .unwrap()
        .starts_with("text/javascript"));
    assert_page_headers(&js);

    // Sign-out clears the cookie, and a copy of it is refused from then on.
    let out = request(
        &a,
        "POST",
        "/ui/logout",
        &[("Cookie", &cookie), ("Origin", &own)],
        "",
    );
    assert_eq!(out.status, 303);
    assert!(out.header("set-cookie").unwrap().contains("Max-Age=0"));
    assert_eq!(
        request(&a, "GET", "/ui/", &[("Cookie", &cookie)], "").status,
        401
    );
}

#[test]
fn the_executor_dashboard_needs_its_token_from_its_own_page() {
    let dir = tempfile::tempdir().unwrap();
    let token = "executor-dashboard-token";
    let mut cmd = bins::executor_command(dir.path(), "true");
    cmd.env("AWCP_AUTH_TOKEN", token);
    let (child, url) = bins::spawn_announcing(&mut cmd, bins::EXECUTOR_ANNOUNCES);
    let _ex = KillOnDrop(child);
    let at = authority(&url);
    let own = format!("http://{at}");

    let page = request(&at, "GET", "/ui/", &[], "");
    assert_eq!(page.status, 401);
    assert!(page.body.contains("id=\"login\""), "{}", page.body);
    assert_page_headers(&page);
    assert_eq!(
        request(&at, "GET", "/ui/fragments/tasks", &[], "").status,
        401
    );
    // The bearer header of the API is not a browser session.
    let json = ("Content-Type", "application/json");
    let login = |headers: &[(&str, &str)], t: &str| {
        request(
            &at,
            "POST",
            "/ui/login",
            headers,
            &format!("{{\"token\":\"{t}\"}}"),
        )
    };
    assert_eq!(login(&[json, ("Origin", &own)], "wrong").status, 401);
    assert_eq!(login(&[json], token).status, 403, "not from its own page");
    assert_eq!(
        login(&[json, ("Origin", "http://127.0.0.1:1")], token).status,
        403
    );
    let ok = login(&[json, ("Origin", &own)], token);
    assert_eq!(ok.status, 200, "{}", ok.body);
    let set = ok.header("set-cookie").unwrap();
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    assert!(!set.contains(token));
    let cookie = cookie_pair(&ok);
    let tasks = request(
        &at,
        "GET",
        "/ui/fragments/tasks",
        &[("Cookie", &cookie)],
        "",
    );
    assert_eq!(tasks.status, 200);
    assert!(tasks.body.contains("No tasks"), "{}", tasks.body);
    // The cookie is no credential for the protocol's endpoints.
    assert_eq!(
        request(&at, "GET", "/awcp/status", &[("Cookie", &cookie)], "").status,
        401
    );
    // Signed out: a copy of the cookie opens nothing.
    let out = request(
        &at,
        "POST",
        "/ui/logout",
        &[("Cookie", &cookie), ("Origin", &own)],
        "",
    );
    assert_eq!(out.status, 303);
    assert_eq!(
        request(
            &at,
            "GET",
            "/ui/fragments/tasks",
            &[("Cookie", &cookie)],
            ""
        )
        .status,
        401
    );
}

#[test]
fn an_executor_without_a_token_shows_its_page_to_its_own_host_only() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = bins::executor_command(dir.path(), "true");
    cmd.env_remove("AWCP_AUTH_TOKEN");
    let (child, url) = bins::spawn_announcing(&mut cmd, bins::EXECUTOR_ANNOUNCES);
    let _ex = KillOnDrop(child);
    let at = authority(&url);
    let page = request(&at, "GET", "/ui/", &[], "");
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("id=\"tasks\""));
    let rebound = request(&at, "GET", "/ui/", &[("Host", "evil.example")], "");
    assert_eq!(rebound.status, 421, "DNS rebinding: {}", rebound.body);
    let foreign = request(
        &at,
        "GET",
        "/ui/fragments/tasks",
        &[("Origin", "http://evil.example")],
        "",
    );
    assert_eq!(foreign.status, 403);
}
