//! URL origins (scheme, host, port): the engine decides by them which requests may carry a
//! delegation's credential; the HTTP binding re-exports them.

/// The origin of an absolute URL: lowercase scheme and host, and the port (the scheme's
/// default when absent). `None` if `url` is not `scheme://authority…`.
pub fn origin(url: &str) -> Option<(String, String, u16)> {
    let (scheme, rest) = url.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = match hostport.rsplit_once(':') {
        Some((h, p)) if !p.contains(']') => (h, Some(p.parse::<u16>().ok()?)),
        _ => (hostport, None),
    };
    if host.is_empty() {
        return None;
    }
    let default = match scheme.as_str() {
        "http" => 80,
        "https" => 443,
        _ => return None,
    };
    Some((scheme, host.to_ascii_lowercase(), port.unwrap_or(default)))
}

/// Whether two URLs have the same origin (scheme, host, port). A credential meant for one
/// server is only ever sent to URLs of that server's origin.
pub fn same_origin(a: &str, b: &str) -> bool {
    matches!((origin(a), origin(b)), (Some(x), Some(y)) if x == y)
}

/// Whether `host` (a host as [`origin`] gives it: lowercase, an IPv6 address in brackets) is an
/// IP address literal rather than a name: a dotted-quad IPv4 address, or a bracketed IPv6 one.
/// (Written out: this sans-IO crate does not use the standard library's network module.)
pub fn is_ip_literal(host: &str) -> bool {
    if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        // Hex groups, colons and an embedded IPv4 tail; no DNS name has a colon.
        return inner.contains(':')
            && inner
                .chars()
                .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.');
    }
    let parts: Vec<&str> = host.split('.').collect();
    parts.len() == 4
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.len() <= 3
                && p.parse::<u8>().is_ok()
                && p.bytes().all(|b| b.is_ascii_digit())
        })
}

#[cfg(test)]
mod tests {
    use super::is_ip_literal;

    #[test]
    fn ip_literals_are_told_from_names() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "[::1]",
            "[fe80::1]",
            "[::ffff:127.0.0.1]",
        ] {
            assert!(is_ip_literal(ip), "{ip}");
        }
        for name in [
            "localhost",
            "evil.example",
            "1.2.3",
            "256.1.1.1",
            "1.2.3.4.5",
            "[evil]",
            "[]",
            "a.b.c.d",
            "+1.2.3.4",
        ] {
            assert!(!is_ip_literal(name), "{name}");
        }
    }
}
