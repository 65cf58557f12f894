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
