//! The origin (`scheme://host[:port]`) a client used to reach a server: what URLs handed back to
//! that client (snapshot downloads, agent cards) should be built from when no public URL is
//! configured.
//!
//! By default it comes from the connection (TLS or not) and the `Host` header. Behind a
//! reverse proxy that terminates TLS or rewrites `Host`, the proxy's `Forwarded` /
//! `X-Forwarded-Proto` / `X-Forwarded-Host` headers say what the client used; they are
//! honoured only when the caller trusts them (they are plain request headers any client can
//! send), and a configured public URL always wins over all of this.

use crate::server::ConnInfo;

/// Whether `s` is a plain `host[:port]` (no user info, path or spaces).
fn valid_authority(s: &str) -> bool {
    !s.is_empty()
        && !s.contains('@')
        && s.parse::<http::uri::Authority>()
            .map(|a| a.as_str() == s)
            .unwrap_or(false)
        && match s.rsplit_once(':') {
            // `http::uri::Authority` accepts any digits as a port.
            Some((_, port)) if !port.contains(']') => port.parse::<u16>().is_ok(),
            _ => true,
        }
}

fn header<'a, B>(req: &'a http::Request<B>, name: &str) -> Option<&'a str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

/// `(proto, host)` from the first element of an RFC 7239 `Forwarded` header.
fn forwarded(value: &str) -> (Option<String>, Option<String>) {
    let first = value.split(',').next().unwrap_or("");
    let (mut proto, mut host) = (None, None);
    for pair in first.split(';') {
        let Some((k, v)) = pair.split_once('=') else {
            continue;
        };
        let v = v.trim().trim_matches('"').to_owned();
        match k.trim().to_ascii_lowercase().as_str() {
            "proto" => proto = Some(v),
            "host" => host = Some(v),
            _ => {}
        }
    }
    (proto, host)
}

/// The origin the client used for `req`, or `None` if the request does not say (no valid
/// `Host`). `trust_forwarded` honours proxy headers (see the module docs).
pub fn request_origin<B>(req: &http::Request<B>, trust_forwarded: bool) -> Option<String> {
    let conn_tls = req.extensions().get::<ConnInfo>().map(|c| c.tls);
    let mut scheme = match (conn_tls, req.uri().scheme_str()) {
        (Some(true), _) => "https".to_owned(),
        (Some(false), _) => "http".to_owned(),
        (None, Some(s)) => s.to_ascii_lowercase(),
        (None, None) => "http".to_owned(),
    };
    let mut host = header(req, "host")
        .map(str::to_owned)
        .or_else(|| req.uri().authority().map(|a| a.as_str().to_owned()));
    if trust_forwarded {
        let (mut p, mut h) = header(req, "forwarded").map(forwarded).unwrap_or_default();
        let first = |v: &str| v.split(',').next().unwrap_or("").trim().to_owned();
        if p.is_none() {
            p = header(req, "x-forwarded-proto").map(first);
        }
        if h.is_none() {
            h = header(req, "x-forwarded-host").map(first);
        }
        if let Some(p) = p.map(|p| p.to_ascii_lowercase()) {
            if p == "http" || p == "https" {
                scheme = p;
            }
        }
        if let Some(h) = h.filter(|h| valid_authority(h)) {
            host = Some(h);
        }
    }
    let host = host.filter(|h| valid_authority(h))?;
    if scheme != "http" && scheme != "https" {
        return None;
    }
    Some(format!("{scheme}://{host}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(headers: &[(&str, &str)], tls: Option<bool>) -> http::Request<()> {
        let mut b = http::Request::builder().uri("/awcp");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let mut r = b.body(()).unwrap();
        if let Some(tls) = tls {
            r.extensions_mut().insert(ConnInfo {
                remote_addr: "127.0.0.1:1".parse().unwrap(),
                local_addr: "127.0.0.1:2".parse().unwrap(),
                tls,
            });
        }
        r
    }

    #[test]
    fn origin_from_host_and_connection() {
        let r = req(&[("host", "exec.example:8443")], Some(true));
        assert_eq!(
            request_origin(&r, false).as_deref(),
            Some("https://exec.example:8443")
        );
        let r = req(&[("host", "127.0.0.1:9")], Some(false));
        assert_eq!(
            request_origin(&r, false).as_deref(),
            Some("http://127.0.0.1:9")
        );
        let r = req(&[("host", "[::1]:9")], None);
        assert_eq!(request_origin(&r, false).as_deref(), Some("http://[::1]:9"));
    }

    #[test]
    fn hostile_hosts_are_refused() {
        for h in ["evil@x", "x/y", "x y", "", "x:99999"] {
            let r = req(&[("host", h)], Some(false));
            assert_eq!(request_origin(&r, false), None, "{h:?}");
        }
    }

    #[test]
    fn forwarded_headers_only_when_trusted() {
        let h = [
            ("host", "10.0.0.5:10200"),
            ("x-forwarded-proto", "https"),
            ("x-forwarded-host", "exec.example"),
        ];
        let r = req(&h, Some(false));
        assert_eq!(
            request_origin(&r, false).as_deref(),
            Some("http://10.0.0.5:10200")
        );
        assert_eq!(
            request_origin(&r, true).as_deref(),
            Some("https://exec.example")
        );
        let r = req(
            &[
                ("host", "a:1"),
                (
                    "forwarded",
                    "for=1.2.3.4;proto=https;host=\"b:2\", proto=http",
                ),
            ],
            Some(false),
        );
        assert_eq!(request_origin(&r, true).as_deref(), Some("https://b:2"));
        let r = req(
            &[("host", "a:1"), ("x-forwarded-proto", "gopher")],
            Some(false),
        );
        assert_eq!(request_origin(&r, true).as_deref(), Some("http://a:1"));
    }
}

/// The local address this machine would use to reach `host:port` (resolving `host`; no packet
/// is sent). A server bound to an unspecified address (`0.0.0.0`, `::`) can hand a peer URLs
/// with this address in them. Blocking (name resolution): run it on the blocking pool.
pub fn local_ip_towards(host: &str, port: u16) -> std::io::Result<std::net::IpAddr> {
    use std::net::{ToSocketAddrs, UdpSocket};
    let target = (host, port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no address"))?;
    let bind: std::net::SocketAddr = if target.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let s = UdpSocket::bind(bind)?;
    s.connect(target)?;
    Ok(s.local_addr()?.ip())
}

/// `base` (`scheme://host:port`) with an unspecified host (`0.0.0.0`, `[::]`) replaced by the
/// local address that reaches `peer_url`'s host; `base` unchanged otherwise or on failure.
/// Blocking (see [`local_ip_towards`]).
pub fn concrete_base_for(base: &str, peer_url: &str) -> String {
    let (Ok(b), Ok(p)) = (base.parse::<http::Uri>(), peer_url.parse::<http::Uri>()) else {
        return base.to_owned();
    };
    let host = b
        .host()
        .unwrap_or("")
        .trim_start_matches('[')
        .trim_end_matches(']');
    let unspecified = host
        .parse::<std::net::IpAddr>()
        .map(|ip| ip.is_unspecified())
        .unwrap_or(false);
    let (Some(scheme), Some(port), Some(phost)) = (b.scheme_str(), b.port_u16(), p.host()) else {
        return base.to_owned();
    };
    if !unspecified {
        return base.to_owned();
    }
    let pport = p.port_u16().unwrap_or(if p.scheme_str() == Some("https") {
        443
    } else {
        80
    });
    let phost = phost.trim_start_matches('[').trim_end_matches(']');
    match local_ip_towards(phost, pport) {
        Ok(std::net::IpAddr::V6(ip)) => format!("{scheme}://[{ip}]:{port}"),
        Ok(ip) => format!("{scheme}://{ip}:{port}"),
        Err(_) => base.to_owned(),
    }
}

#[cfg(test)]
mod route_tests {
    #[test]
    fn unspecified_bases_become_the_route_source() {
        assert_eq!(
            super::concrete_base_for("http://0.0.0.0:3100", "http://127.0.0.1:10200/awcp"),
            "http://127.0.0.1:3100"
        );
        assert_eq!(
            super::concrete_base_for("https://d.example:3100", "http://127.0.0.1:1/"),
            "https://d.example:3100"
        );
    }
}
