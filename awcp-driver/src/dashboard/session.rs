//! Who may see a dashboard: one-time login codes and the session cookie they are exchanged
//! for.
//!
//! A browser never holds the server's token. `awcp dashboard` asks the daemon (with the
//! token) for a **one-time code**; opening `/ui/login?code=…` spends it and sets a session
//! cookie, so the link left in the browser's history opens nothing. The cookie is
//! `HttpOnly; SameSite=Strict; Path=/` and reads `v1.<expiry>.<nonce>.<mac>`: an HMAC-SHA256,
//! keyed by a hash of the server's token, over the page kind, the expiry and a random nonce.
//! It is checked without any stored state (a restarted daemon still knows its sessions) and
//! stops working when it expires or the token changes.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// How long a login code may wait to be opened.
pub const CODE_LIFETIME: Duration = Duration::from_secs(120);
/// How long a session lasts.
pub const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);
/// Codes waiting at once; the oldest is dropped past it.
const MAX_CODES: usize = 32;

/// The login codes and session cookies of one dashboard (module docs).
pub struct Sessions {
    kind: &'static str,
    key: [u8; 32],
    cookie: String,
    codes: Mutex<HashMap<String, Instant>>,
    /// Sessions signed out (nonce → expiry): refused until they expire anyway. Kept in memory
    /// only: a restarted server forgets them.
    revoked: Mutex<HashMap<String, u64>>,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
            .field("kind", &self.kind)
            .field("cookie", &self.cookie)
            .finish_non_exhaustive()
    }
}

use crate::security::{hex, random_bytes};

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Sessions {
    /// The sessions of a `kind` of dashboard (`daemon`, `executor`) whose server holds
    /// `secret`; the cookie is named `awcp_<kind>_<port>` (cookies are shared by every port of
    /// a host: one name per server keeps two dashboards on one machine apart).
    pub fn new(kind: &'static str, secret: &str, port: u16) -> Self {
        let mut h = Sha256::new();
        h.update(b"awcp dashboard session v1\0");
        h.update(kind.as_bytes());
        h.update([0]);
        h.update(secret.as_bytes());
        Sessions {
            kind,
            key: h.finalize().into(),
            cookie: format!("awcp_{kind}_{port}"),
            codes: Mutex::new(HashMap::new()),
            revoked: Mutex::new(HashMap::new()),
        }
    }

    /// The cookie's name.
    pub fn cookie_name(&self) -> &str {
        &self.cookie
    }

    /// A new one-time login code, valid for [`CODE_LIFETIME`]; `None` if the system has no
    /// random numbers to give.
    pub fn issue_code(&self) -> Option<String> {
        let code = hex(&random_bytes::<24>().ok()?);
        let mut codes = self.codes.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        codes.retain(|_, t| now.duration_since(*t) < CODE_LIFETIME);
        if codes.len() >= MAX_CODES {
            if let Some(oldest) = codes
                .iter()
                .min_by_key(|(_, t)| **t)
                .map(|(c, _)| c.clone())
            {
                codes.remove(&oldest);
            }
        }
        codes.insert(code.clone(), now);
        Some(code)
    }

    /// Spends `code`: `true` once for a code issued less than [`CODE_LIFETIME`] ago.
    pub fn redeem_code(&self, code: &str) -> bool {
        let mut codes = self.codes.lock().unwrap_or_else(|p| p.into_inner());
        match codes.remove(code) {
            Some(t) => t.elapsed() < CODE_LIFETIME,
            None => false,
        }
    }

    fn mac(&self, expiry: u64, nonce: &str) -> Hmac<Sha256> {
        // HMAC takes a key of any length.
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("HMAC accepts every key length"));
        m.update(self.kind.as_bytes());
        m.update(b"|");
        m.update(expiry.to_string().as_bytes());
        m.update(b"|");
        m.update(nonce.as_bytes());
        m
    }

    /// The `Set-Cookie` value of a new session; `None` without random numbers.
    pub fn new_session_cookie(&self) -> Option<String> {
        let nonce = hex(&random_bytes::<16>().ok()?);
        let expiry = now_secs() + SESSION_LIFETIME.as_secs();
        let mac = hex(&self.mac(expiry, &nonce).finalize().into_bytes());
        Some(format!(
            "{}=v1.{expiry}.{nonce}.{mac}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}",
            self.cookie,
            SESSION_LIFETIME.as_secs()
        ))
    }

    /// The `Set-Cookie` value that ends the session in the browser.
    pub fn clear_cookie(&self) -> String {
        format!(
            "{}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0",
            self.cookie
        )
    }

    /// Whether the request's `Cookie` headers carry a valid, unexpired session.
    pub fn has_session(&self, headers: &http::HeaderMap) -> bool {
        self.sessions_in(headers).next().is_some()
    }

    /// Signs out the sessions the request carries: refused from now on (until this server
    /// restarts; they expire anyway).
    pub fn revoke(&self, headers: &http::HeaderMap) {
        let found: Vec<(String, u64)> = self.sessions_in(headers).collect();
        let now = now_secs();
        let mut revoked = self.revoked.lock().unwrap_or_else(|p| p.into_inner());
        revoked.retain(|_, expiry| *expiry > now);
        revoked.extend(found);
    }

    /// The valid sessions (nonce, expiry) in the request's `Cookie` headers.
    fn sessions_in<'a>(
        &'a self,
        headers: &'a http::HeaderMap,
    ) -> impl Iterator<Item = (String, u64)> + 'a {
        headers
            .get_all(http::header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|kv| kv.trim().split_once('='))
            .filter(|(k, _)| *k == self.cookie)
            .filter_map(|(_, v)| self.valid(v))
            .filter(|(nonce, _)| {
                !self
                    .revoked
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .contains_key(nonce)
            })
    }

    /// The nonce and expiry of a valid session cookie value.
    fn valid(&self, value: &str) -> Option<(String, u64)> {
        let mut parts = value.split('.');
        let (Some("v1"), Some(expiry), Some(nonce), Some(mac), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return None;
        };
        let expiry = expiry.parse::<u64>().ok()?;
        if expiry <= now_secs() || nonce.len() != 32 || mac.len() != 64 {
            return None;
        }
        let mac = unhex(mac)?;
        // Constant-time comparison.
        self.mac(expiry, nonce).verify_slice(&mac).ok()?;
        Some((nonce.to_owned(), expiry))
    }
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cookie_header(set_cookie: &str) -> http::HeaderMap {
        let pair = set_cookie.split(';').next().unwrap_or_default();
        let mut h = http::HeaderMap::new();
        h.insert(http::header::COOKIE, pair.parse().expect("ascii"));
        h
    }

    #[test]
    fn a_code_opens_once() {
        let s = Sessions::new("daemon", "t0ken", 3100);
        let code = s.issue_code().expect("random");
        assert!(!s.redeem_code("nope"));
        assert!(s.redeem_code(&code));
        assert!(!s.redeem_code(&code), "a code is spent by its first use");
    }

    #[test]
    fn a_session_is_valid_for_its_server_and_token_only() {
        let s = Sessions::new("daemon", "t0ken", 3100);
        let c = s.new_session_cookie().expect("random");
        assert!(c.contains("HttpOnly") && c.contains("SameSite=Strict"));
        assert!(s.has_session(&cookie_header(&c)));
        // Another token, another kind of page: not a session there.
        assert!(!Sessions::new("daemon", "other", 3100).has_session(&cookie_header(&c)));
        assert!(!Sessions::new("executor", "t0ken", 3100).has_session(&cookie_header(&c)));
        // Tampered.
        let forged = c.replacen("v1.", "v1.9", 1);
        assert!(!s.has_session(&cookie_header(&forged)));
        assert!(!s.has_session(&http::HeaderMap::new()));
    }

    #[test]
    fn a_signed_out_session_is_refused() {
        let s = Sessions::new("daemon", "t0ken", 3100);
        let a = cookie_header(&s.new_session_cookie().expect("random"));
        let b = cookie_header(&s.new_session_cookie().expect("random"));
        s.revoke(&a);
        assert!(!s.has_session(&a));
        assert!(s.has_session(&b), "other sessions go on");
    }

    #[test]
    fn an_expired_session_is_refused() {
        let s = Sessions::new("daemon", "t0ken", 3100);
        let nonce = "00".repeat(16);
        let expiry = now_secs() - 1;
        let mac = hex(&s.mac(expiry, &nonce).finalize().into_bytes());
        let c = format!("awcp_daemon_3100=v1.{expiry}.{nonce}.{mac}");
        assert!(!s.has_session(&cookie_header(&c)));
    }
}
