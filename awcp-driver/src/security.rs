//! Deployment safety shared by the servers and the binaries: secrets from the OS random source
//! (failing closed), the delegator daemon's token file, the `Host`/`Origin` checks that keep web
//! pages away from a local daemon, and which addresses a server may listen on without TLS or
//! authentication. Pure functions where possible, so each rule is unit-tested.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

/// The OS random source failed: no secret or id is made up instead.
#[derive(Debug, thiserror::Error)]
#[error("the OS random source is unavailable ({0}); refusing to make up ids or secrets")]
pub struct RandomUnavailable(pub String);

/// `N` bytes from the OS random source.
pub fn random_bytes<const N: usize>() -> Result<[u8; N], RandomUnavailable> {
    random_bytes_from(|b| getrandom::fill(b).map_err(|e| e.to_string()))
}

/// `N` bytes from `fill` (the OS source in [`random_bytes`]; a failing one in tests).
pub fn random_bytes_from<const N: usize>(
    fill: impl FnOnce(&mut [u8]) -> Result<(), String>,
) -> Result<[u8; N], RandomUnavailable> {
    let mut b = [0u8; N];
    fill(&mut b).map_err(RandomUnavailable)?;
    Ok(b)
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

/// A fresh random token: 32 bytes from the OS, in hex (64 characters).
pub fn random_token() -> Result<String, RandomUnavailable> {
    Ok(hex(&random_bytes::<32>()?))
}

/// Where the daemon keeps its token: `<state_dir>/daemon.token`.
pub fn daemon_token_path(state_dir: &Path) -> PathBuf {
    state_dir.join("daemon.token")
}

/// Reads the daemon token of `state_dir`, creating it (random, mode 0600, never overwritten)
/// at first start. A token file readable by others is made private again, with a warning.
pub fn load_or_create_daemon_token(state_dir: &Path) -> std::io::Result<String> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let path = daemon_token_path(state_dir);
    std::fs::create_dir_all(state_dir)?;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
    {
        Ok(mut f) => {
            let token = random_token().map_err(std::io::Error::other)?;
            f.write_all(token.as_bytes())?;
            f.write_all(b"\n")?;
            f.sync_all()?;
            return Ok(token);
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = std::fs::metadata(&path)?;
    if meta.permissions().mode() & 0o077 != 0 {
        tracing::warn!(path = %path.display(), "daemon token file was readable by others; now mode 0600");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    }
    let mut text = String::new();
    std::fs::File::open(&path)?.read_to_string(&mut text)?;
    let token = text.trim().to_owned();
    if token.len() < 16 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "{} holds no usable token (delete it to make a new one)",
                path.display()
            ),
        ));
    }
    Ok(token)
}

/// Reads the daemon token of `state_dir` if there is one (clients never create it).
pub fn read_daemon_token(state_dir: &Path) -> Option<String> {
    std::fs::read_to_string(daemon_token_path(state_dir))
        .ok()
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty())
}

/// Splits a `Host` header (or an origin's authority) into name and port (`default` if none).
fn split_host(host: &str, default: u16) -> Option<(String, u16)> {
    let host = host.trim();
    if let Some(rest) = host.strip_prefix('[') {
        let (ip, tail) = rest.split_once(']')?;
        let port = match tail.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None if tail.is_empty() => default,
            None => return None,
        };
        return Some((ip.to_ascii_lowercase(), port));
    }
    match host.rsplit_once(':') {
        Some((name, p)) => Some((name.to_ascii_lowercase(), p.parse().ok()?)),
        None => Some((host.to_ascii_lowercase(), default)),
    }
}

/// Whether a request's `Host` header names a server listening on `listen` — the defence
/// against DNS rebinding, where a web page's own domain name is made to resolve to the server:
/// its requests then carry that name. Accepted: an IP address literal (the listen address
/// itself, or any address when listening on an unspecified address), `localhost` on a
/// loopback or unspecified address, and the names in `allowed` (`name` or `name:port`); the
/// port must be the listen port.
pub fn host_allowed(host: &str, listen: SocketAddr, allowed: &[String]) -> bool {
    let Some((name, port)) = split_host(host, 80) else {
        return false;
    };
    if allowed.iter().any(|a| {
        let a = a.to_ascii_lowercase();
        a == name || a == format!("{name}:{port}")
    }) {
        return true;
    }
    if port != listen.port() {
        return false;
    }
    match name.parse::<IpAddr>() {
        Ok(ip) => listen.ip().is_unspecified() || ip == listen.ip(),
        Err(_) => {
            name == "localhost" && (listen.ip().is_loopback() || listen.ip().is_unspecified())
        }
    }
}

/// Whether an `Origin` header names a page served by this server (same host rules as
/// [`host_allowed`]). Any other origin is a foreign web page (`null` included).
pub fn origin_allowed(origin: &str, listen: SocketAddr, allowed: &[String]) -> bool {
    let (default, rest) = if let Some(r) = origin.strip_prefix("http://") {
        (80, r)
    } else if let Some(r) = origin.strip_prefix("https://") {
        (443, r)
    } else {
        return false;
    };
    if rest.contains('/') {
        return false;
    }
    split_host(rest, default).is_some_and(|(name, port)| {
        let authority = if name.contains(':') {
            format!("[{name}]:{port}")
        } else {
            format!("{name}:{port}")
        };
        host_allowed(&authority, listen, allowed)
    })
}

/// Why the delegator daemon may not listen on `addr`: anything but a loopback address exposes
/// its API (and the tokens on it) to the network, so it needs TLS, or an explicit
/// `--insecure-plain-http` from an operator who protects the network otherwise.
pub fn daemon_listen_refusal(
    addr: SocketAddr,
    tls: bool,
    insecure_plain_http: bool,
) -> Option<String> {
    if addr.ip().is_loopback() || tls || insecure_plain_http {
        return None;
    }
    Some(format!(
        "refusing to serve the daemon API on {addr} without TLS: its token and every workspace path would cross the network in clear text. Listen on a loopback address, serve TLS (--tls-cert/--tls-key), or pass --insecure-plain-http if the network is protected otherwise (a VPN, an SSH tunnel)"
    ))
}

/// What the executor's default policy says about serving on `addr`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExecutorExposure {
    /// Fine as configured.
    Ok,
    /// Allowed, but worth a warning (the message).
    Warn(String),
    /// Refused (the message).
    Refuse(String),
}

/// An executor without `--auth-token` runs code for anyone who can reach it: on a loopback
/// address that is every local user and process (a warning); on any other address it is the
/// network, which needs `--insecure-no-auth` to be explicit.
pub fn executor_exposure(
    addr: SocketAddr,
    has_auth: bool,
    insecure_no_auth: bool,
) -> ExecutorExposure {
    if has_auth {
        return ExecutorExposure::Ok;
    }
    if addr.ip().is_loopback() {
        return ExecutorExposure::Warn(format!(
            "running without --auth-token on {addr}: any local user or process can delegate tasks to this executor"
        ));
    }
    if insecure_no_auth {
        return ExecutorExposure::Warn(format!(
            "running without --auth-token on {addr} (--insecure-no-auth): anyone who can reach it can run tasks here and read what is delegated"
        ));
    }
    ExecutorExposure::Refuse(format!(
        "refusing to listen on {addr} without --auth-token: anyone on the network could run tasks here. Set --auth-token (or AWCP_AUTH_TOKEN), listen on 127.0.0.1, or pass --insecure-no-auth"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn random_fails_closed() {
        let r = random_bytes_from::<16>(|_| Err("no entropy".into()));
        assert!(r.unwrap_err().to_string().contains("no entropy"));
        assert_eq!(random_token().unwrap().len(), 64);
        assert_ne!(random_token().unwrap(), random_token().unwrap());
    }

    #[test]
    fn hosts_must_name_the_listen_address() {
        let lo = a("127.0.0.1:3100");
        assert!(host_allowed("127.0.0.1:3100", lo, &[]));
        assert!(host_allowed("localhost:3100", lo, &[]));
        assert!(host_allowed("LOCALHOST:3100", lo, &[]));
        assert!(!host_allowed("evil.example:3100", lo, &[]));
        assert!(!host_allowed("127.0.0.1:3101", lo, &[]));
        assert!(!host_allowed("127.0.0.1", lo, &[]));
        assert!(!host_allowed("10.0.0.1:3100", lo, &[]));
        assert!(!host_allowed("", lo, &[]));
        assert!(host_allowed("daemon.lan:3100", lo, &["daemon.lan".into()]));
        let any = a("0.0.0.0:3100");
        assert!(host_allowed("192.168.1.5:3100", any, &[]));
        assert!(!host_allowed("evil.example:3100", any, &[]));
        let v6 = a("[::1]:3100");
        assert!(host_allowed("[::1]:3100", v6, &[]));
        assert!(host_allowed("localhost:3100", v6, &[]));
    }

    #[test]
    fn origins_must_be_the_server_itself() {
        let lo = a("127.0.0.1:3100");
        assert!(origin_allowed("http://127.0.0.1:3100", lo, &[]));
        assert!(origin_allowed("http://localhost:3100", lo, &[]));
        assert!(!origin_allowed("http://evil.example", lo, &[]));
        assert!(!origin_allowed("http://evil.example:3100", lo, &[]));
        assert!(!origin_allowed("null", lo, &[]));
        assert!(!origin_allowed("http://127.0.0.1:3100/x", lo, &[]));
        assert!(origin_allowed("http://[::1]:3100", a("[::1]:3100"), &[]));
    }

    #[test]
    fn network_addresses_need_tls_or_auth_or_an_explicit_flag() {
        assert_eq!(daemon_listen_refusal(a("127.0.0.1:1"), false, false), None);
        assert_eq!(daemon_listen_refusal(a("[::1]:1"), false, false), None);
        assert!(daemon_listen_refusal(a("0.0.0.0:1"), false, false).is_some());
        assert!(daemon_listen_refusal(a("192.0.2.1:1"), false, false).is_some());
        assert_eq!(daemon_listen_refusal(a("0.0.0.0:1"), true, false), None);
        assert_eq!(daemon_listen_refusal(a("0.0.0.0:1"), false, true), None);

        assert_eq!(
            executor_exposure(a("0.0.0.0:1"), true, false),
            ExecutorExposure::Ok
        );
        assert!(matches!(
            executor_exposure(a("127.0.0.1:1"), false, false),
            ExecutorExposure::Warn(_)
        ));
        assert!(matches!(
            executor_exposure(a("0.0.0.0:1"), false, false),
            ExecutorExposure::Refuse(_)
        ));
        assert!(matches!(
            executor_exposure(a("0.0.0.0:1"), false, true),
            ExecutorExposure::Warn(_)
        ));
    }

    #[test]
    fn token_file_is_created_private_and_reused() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let t = load_or_create_daemon_token(d.path()).unwrap();
        let p = daemon_token_path(d.path());
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(load_or_create_daemon_token(d.path()).unwrap(), t);
        assert_eq!(read_daemon_token(d.path()).as_deref(), Some(t.as_str()));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(load_or_create_daemon_token(d.path()).unwrap(), t);
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
}
