//! What only a web browser sends to a local agent server, and how to tell.
//!
//! A server that runs an agent on this machine (an AWCP executor, an AIP partner) and listens
//! on a loopback or private address without a credential can be reached by any web page the
//! user opens: the page can POST to it (a "simple" cross-site request needs no CORS
//! preflight when its body is `text/plain`), and with DNS rebinding it can also read the
//! answers (the page's own name is made to resolve to the server, so its requests carry that
//! name in `Host` and no `Origin` on a `GET`). Programs (delegators, leaders, SDKs) send JSON,
//! no `Origin`, and a `Host` naming the server. The two rules here refuse the rest; each
//! protocol answers a [`Refusal`] with its own status and error body.

use crate::origin::{is_ip_literal, origin};

/// Why a request is refused as one a web page made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The request carries an `Origin` header (browsers add one to every cross-site request
    /// and every `POST`; the programs that speak these protocols send none). HTTP 403.
    WebOrigin(String),
    /// The request has a body that is not `application/json`. HTTP 415.
    NotJson,
    /// `Host` names a host the server was not told it is reached by (DNS rebinding). HTTP 421.
    ForeignHost(String),
}

impl Refusal {
    /// The HTTP status to answer with.
    pub fn status(&self) -> u16 {
        match self {
            Refusal::WebOrigin(_) => 403,
            Refusal::NotJson => 415,
            Refusal::ForeignHost(_) => 421,
        }
    }

    /// A sentence saying why, quoting at most 64 characters of what the request sent.
    pub fn message(&self) -> String {
        let cut = |s: &str| s.chars().take(64).collect::<String>();
        match self {
            Refusal::WebOrigin(o) => {
                format!("requests from web origin {:?} are not accepted", cut(o))
            }
            Refusal::NotJson => "request bodies must be application/json".to_owned(),
            Refusal::ForeignHost(h) => {
                format!("Host {:?} is not a name this server is reached by", cut(h))
            }
        }
    }
}

/// Refuses what only a web browser sends: an `Origin` header, or a body (`has_body`) whose
/// `Content-Type` is not `application/json` (parameters such as `; charset=utf-8` allowed).
pub fn refuse_browser_request(
    origin: Option<&str>,
    content_type: Option<&str>,
    has_body: bool,
) -> Option<Refusal> {
    if let Some(o) = origin {
        return Some(Refusal::WebOrigin(o.to_owned()));
    }
    let json = content_type.is_some_and(|t| {
        t.split(';')
            .next()
            .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
    });
    (has_body && !json).then_some(Refusal::NotJson)
}

/// Refuses a request whose `Host` names a host the server was not told it is reached by.
/// Accepted: an IP address literal, `localhost` (and names under `.localhost`), the host of
/// `public_url`, and the names in `allowed` (`name` or `name:port`, any case). A request
/// without `Host` (HTTP/1.0) is accepted: a browser always sends one.
pub fn refuse_foreign_host(
    host: Option<&str>,
    public_url: Option<&str>,
    allowed: &[String],
) -> Option<Refusal> {
    let host = host?.trim();
    (!host_is_ours(host, public_url, allowed)).then(|| Refusal::ForeignHost(host.to_owned()))
}

/// Whether `host` (`name[:port]`, `[v6]:port`) is one of ours (see [`refuse_foreign_host`]).
fn host_is_ours(host: &str, public_url: Option<&str>, allowed: &[String]) -> bool {
    let Some((_, name, _)) = origin(&format!("http://{host}")) else {
        return false;
    };
    if is_ip_literal(&name) || name == "localhost" || name.ends_with(".localhost") {
        return true;
    }
    let host = host.to_ascii_lowercase();
    allowed.iter().any(|a| {
        let a = a.trim().to_ascii_lowercase();
        a == name || a == host
    }) || public_url
        .and_then(origin)
        .is_some_and(|(_, public_host, _)| public_host == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn browsers_are_told_from_programs() {
        let json = Some("application/json; charset=utf-8");
        assert_eq!(refuse_browser_request(None, json, true), None);
        assert_eq!(refuse_browser_request(None, None, false), None);
        assert_eq!(
            refuse_browser_request(None, Some("text/plain"), true),
            Some(Refusal::NotJson)
        );
        assert_eq!(
            refuse_browser_request(None, None, true),
            Some(Refusal::NotJson)
        );
        let r = refuse_browser_request(Some("https://evil.example"), json, true);
        assert_eq!(r, Some(Refusal::WebOrigin("https://evil.example".into())));
        assert_eq!(r.map(|r| r.status()), Some(403));
    }

    #[test]
    fn only_the_servers_own_names_pass_as_host() {
        let allowed = ["agents.lan".to_owned(), "box:8080".to_owned()];
        let public = Some("https://exec.example.com/awcp");
        for ok in [
            "127.0.0.1:4000",
            "[::1]:4000",
            "localhost",
            "LOCALHOST:1",
            "a.localhost:2",
            "agents.lan:9",
            "box:8080",
            "exec.example.com",
            "10.0.0.2",
        ] {
            assert_eq!(
                refuse_foreign_host(Some(ok), public, &allowed),
                None,
                "{ok}"
            );
        }
        for bad in [
            "evil.example",
            "box:9090",
            "localhost.evil.example",
            "",
            "exec.example.com.evil",
        ] {
            let r = refuse_foreign_host(Some(bad), public, &allowed);
            assert_eq!(r.as_ref().map(Refusal::status), Some(421), "{bad}");
        }
        assert_eq!(refuse_foreign_host(None, None, &[]), None);
    }
}
