//! Which executors a relay knows, by what credential, and which connection serves each now.
//!
//! * An executor is **registered** under a name with the SHA-256 of its token
//!   ([`SecretDigest`]), with the SHA-256 of its TLS client certificate ([`CertDigest`]), or
//!   with both: the relay never keeps a token. The driver loads registrations from its
//!   configuration (digests in hex, [`SecretDigest::from_hex`], [`CertDigest::from_hex`]).
//! * A connection **authenticates** with a token and, if its TLS connection presented one
//!   (verified by the driver's TLS against its client CA), a client certificate
//!   ([`Registry::authenticate_with`]). Either credential's digest picks the registration, and
//!   so the name: a client never names itself. A credential that matches no registration is
//!   refused, so one executor cannot take another's name; a token cannot take a name
//!   registered only with a certificate, nor a certificate a name registered only with a
//!   token. A token and a certificate naming two different executors are refused too.
//! * A name is **bound** to at most one connection. A second connection for the same name
//!   (the executor reconnecting while its old connection is not yet known dead) replaces the
//!   first; the relay closes the old one and aborts its streams.
//!
//! Lookup is by the digest in an ordered map: the time it takes depends on the digest, never
//! on the token itself.

use std::collections::BTreeMap;

use crate::engine::auth::SecretDigest;

use super::ConnectionId;

/// An executor's public name: the `<name>` of `https://relay/e/<name>/awcp`. One to 63
/// characters of `a-z`, `0-9`, `-`, `_` and `.`, starting with a letter or digit (safe in a
/// URL path as it is, and in a host name label if a relay maps names to subdomains).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ExecutorName(String);

/// A name that breaks [`ExecutorName`]'s rules.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid executor name {0:?}: 1-63 of a-z, 0-9, '-', '_', '.', starting with a letter or digit"
)]
pub struct InvalidName(pub String);

impl ExecutorName {
    /// Checks `name` against the rules.
    pub fn new(name: impl Into<String>) -> Result<Self, InvalidName> {
        let name = name.into();
        let ok = (1..=63).contains(&name.len())
            && name.bytes().enumerate().all(|(i, b)| {
                b.is_ascii_lowercase()
                    || b.is_ascii_digit()
                    || (i > 0 && matches!(b, b'-' | b'_' | b'.'))
            });
        if ok {
            Ok(ExecutorName(name))
        } else {
            Err(InvalidName(name.chars().take(80).collect()))
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl core::fmt::Display for ExecutorName {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The SHA-256 of a TLS client certificate (its leaf, DER): how a registry names an executor
/// that authenticates by certificate. Not a secret (a certificate is public; what proves it is
/// the TLS handshake, which the driver's TLS verified). `Debug` shows a short prefix.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CertDigest([u8; 32]);

impl CertDigest {
    /// A digest the driver computed (e.g. agent-rt's `ClientCertificate::sha256`).
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        CertDigest(bytes)
    }

    /// The digest of a certificate's DER bytes.
    pub fn of_der(der: &[u8]) -> Self {
        use sha2::Digest;
        CertDigest(sha2::Sha256::digest(der).into())
    }

    /// The digest's bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Lowercase hex (64 characters).
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Parses 64 hex digits (either case).
    pub fn from_hex(s: &str) -> Option<Self> {
        let mut out = [0u8; 32];
        hex::decode_to_slice(s, &mut out).ok()?;
        Some(CertDigest(out))
    }
}

impl core::fmt::Debug for CertDigest {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "CertDigest({}…)", &self.to_hex()[..8])
    }
}

/// Why a registration was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// The name is registered with another token.
    #[error("executor name {0} is registered with another token")]
    NameTaken(ExecutorName),
    /// The token is registered for another name.
    #[error("this token is registered for executor {0}")]
    TokenInUse(ExecutorName),
    /// The name is registered with another client certificate.
    #[error("executor name {0} is registered with another certificate")]
    CertificateNameTaken(ExecutorName),
    /// The client certificate is registered for another name.
    #[error("this certificate is registered for executor {0}")]
    CertificateInUse(ExecutorName),
}

/// Why a connection's credentials were refused ([`Registry::authenticate_with`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthRefusal {
    /// Neither the token nor the certificate (if any) is registered.
    #[error("invalid token")]
    Unknown,
    /// A certificate was presented; neither it nor the token is registered.
    #[error("invalid token or client certificate")]
    UnknownWithCertificate,
    /// The token and the certificate are registered for two different executors.
    #[error("token and client certificate name different executors")]
    Conflict,
}

/// What a name is registered with.
#[derive(Clone, Debug, Default)]
struct Registration {
    token: Option<SecretDigest>,
    cert: Option<CertDigest>,
}

/// Registrations and live bindings ([module docs](self)).
#[derive(Clone, Debug, Default)]
pub struct Registry {
    /// name → its credentials' digests.
    by_name: BTreeMap<ExecutorName, Registration>,
    /// the token digest's hex → name.
    by_digest: BTreeMap<String, ExecutorName>,
    /// the certificate's digest → name.
    by_cert: BTreeMap<CertDigest, ExecutorName>,
    /// name → the connection serving it.
    online: BTreeMap<ExecutorName, ConnectionId>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `name` with the digest of its token (a name registered with a certificate
    /// may have a token too). Registering the same pair again does nothing; a name registered
    /// with another token, or a token registered for another name, is refused.
    pub fn register(
        &mut self,
        name: ExecutorName,
        digest: SecretDigest,
    ) -> Result<(), RegistryError> {
        let hex = digest.to_hex();
        if let Some(existing) = self.by_name.get(&name).and_then(|r| r.token) {
            return if existing == digest {
                Ok(())
            } else {
                Err(RegistryError::NameTaken(name))
            };
        }
        if let Some(other) = self.by_digest.get(&hex) {
            return Err(RegistryError::TokenInUse(other.clone()));
        }
        self.by_digest.insert(hex, name.clone());
        self.by_name.entry(name).or_default().token = Some(digest);
        Ok(())
    }

    /// Registers `name` with the digest of its TLS client certificate (a name registered with
    /// a token may have a certificate too). Registering the same pair again does nothing; a
    /// name registered with another certificate, or a certificate registered for another name,
    /// is refused.
    pub fn register_certificate(
        &mut self,
        name: ExecutorName,
        cert: CertDigest,
    ) -> Result<(), RegistryError> {
        if let Some(existing) = self.by_name.get(&name).and_then(|r| r.cert) {
            return if existing == cert {
                Ok(())
            } else {
                Err(RegistryError::CertificateNameTaken(name))
            };
        }
        if let Some(other) = self.by_cert.get(&cert) {
            return Err(RegistryError::CertificateInUse(other.clone()));
        }
        self.by_cert.insert(cert, name.clone());
        self.by_name.entry(name).or_default().cert = Some(cert);
        Ok(())
    }

    /// Removes `name`'s registration; returns the connection that served it, if one did (the
    /// relay closes it: [`super::Relay::unregister`]).
    pub(crate) fn unregister(&mut self, name: &ExecutorName) -> Option<Option<ConnectionId>> {
        let r = self.by_name.remove(name)?;
        if let Some(digest) = r.token {
            self.by_digest.remove(&digest.to_hex());
        }
        if let Some(cert) = r.cert {
            self.by_cert.remove(&cert);
        }
        Some(self.online.remove(name))
    }

    /// The name `token` is registered for.
    pub fn authenticate(&self, token: &str) -> Option<&ExecutorName> {
        self.by_digest.get(&SecretDigest::of(token).to_hex())
    }

    /// The name a connection's credentials pick: its token's, or its verified client
    /// certificate's (`cert`), whichever is registered. The token may then be empty or
    /// anything. Both registered for different names is refused
    /// ([`AuthRefusal::Conflict`]).
    pub fn authenticate_with(
        &self,
        token: &str,
        cert: Option<&CertDigest>,
    ) -> Result<&ExecutorName, AuthRefusal> {
        let by_token = self.authenticate(token);
        let by_cert = cert.and_then(|c| self.by_cert.get(c));
        match (by_token, by_cert) {
            (Some(a), Some(b)) if a != b => Err(AuthRefusal::Conflict),
            (Some(name), _) | (None, Some(name)) => Ok(name),
            (None, None) if cert.is_some() => Err(AuthRefusal::UnknownWithCertificate),
            (None, None) => Err(AuthRefusal::Unknown),
        }
    }

    /// Whether any executor is registered by client certificate (a relay that cannot verify
    /// client certificates could never serve it).
    pub fn has_certificates(&self) -> bool {
        !self.by_cert.is_empty()
    }

    /// Whether `name` is registered.
    pub fn is_registered(&self, name: &ExecutorName) -> bool {
        self.by_name.contains_key(name)
    }

    /// The connection serving `name` now.
    pub fn connection(&self, name: &ExecutorName) -> Option<ConnectionId> {
        self.online.get(name).copied()
    }

    /// The registered names, in order.
    pub fn names(&self) -> impl Iterator<Item = &ExecutorName> {
        self.by_name.keys()
    }

    /// Binds `name` to `conn`; returns the connection it replaces.
    pub(crate) fn bind(&mut self, name: ExecutorName, conn: ConnectionId) -> Option<ConnectionId> {
        self.online.insert(name, conn).filter(|old| *old != conn)
    }

    /// Unbinds `name` if `conn` is the one serving it.
    pub(crate) fn unbind(&mut self, name: &ExecutorName, conn: ConnectionId) -> bool {
        if self.online.get(name) == Some(&conn) {
            self.online.remove(name);
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> ExecutorName {
        ExecutorName::new(s).unwrap()
    }

    #[test]
    fn names_follow_the_rules() {
        for good in ["a", "alice", "exec-1", "a.b_c", "0"] {
            assert!(ExecutorName::new(good).is_ok(), "{good}");
        }
        for bad in ["", "-a", "Alice", "a/b", "a b", "é", &"a".repeat(64)] {
            assert!(ExecutorName::new(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_token_picks_its_name_and_no_other() {
        let mut r = Registry::new();
        r.register(name("alice"), SecretDigest::of("ta")).unwrap();
        r.register(name("bob"), SecretDigest::of("tb")).unwrap();
        assert_eq!(r.authenticate("ta"), Some(&name("alice")));
        assert_eq!(r.authenticate("tb"), Some(&name("bob")));
        assert_eq!(r.authenticate("tc"), None);
        // Idempotent; but a name or a token cannot be registered twice.
        assert_eq!(r.register(name("alice"), SecretDigest::of("ta")), Ok(()));
        assert_eq!(
            r.register(name("alice"), SecretDigest::of("tc")),
            Err(RegistryError::NameTaken(name("alice")))
        );
        assert_eq!(
            r.register(name("carol"), SecretDigest::of("tb")),
            Err(RegistryError::TokenInUse(name("bob")))
        );
    }

    fn cert(b: u8) -> CertDigest {
        CertDigest::from_bytes([b; 32])
    }

    #[test]
    fn a_certificate_picks_its_name_and_a_token_cannot_take_it() {
        let mut r = Registry::new();
        r.register(name("alice"), SecretDigest::of("ta")).unwrap();
        r.register_certificate(name("bob"), cert(1)).unwrap();
        // bob by his certificate, whatever the token says (empty, or unknown).
        assert_eq!(r.authenticate_with("", Some(&cert(1))), Ok(&name("bob")));
        assert_eq!(
            r.authenticate_with("junk", Some(&cert(1))),
            Ok(&name("bob"))
        );
        // Another certificate (verified by the TLS, but not registered) is no one.
        assert_eq!(
            r.authenticate_with("", Some(&cert(2))),
            Err(AuthRefusal::UnknownWithCertificate)
        );
        // bob's name is registered only with a certificate: no token takes it.
        assert_eq!(r.authenticate_with("", None), Err(AuthRefusal::Unknown));
        assert_eq!(r.authenticate("tb"), None);
        // alice's name is registered only with a token: no certificate takes it, and her
        // token with another certificate is still alice.
        assert_eq!(
            r.authenticate_with("ta", Some(&cert(2))),
            Ok(&name("alice"))
        );
        assert_eq!(r.authenticate_with("ta", None), Ok(&name("alice")));
        // A token and a certificate naming two executors: refused.
        assert_eq!(
            r.authenticate_with("ta", Some(&cert(1))),
            Err(AuthRefusal::Conflict)
        );
        // One certificate per name, one name per certificate; idempotent.
        assert_eq!(r.register_certificate(name("bob"), cert(1)), Ok(()));
        assert_eq!(
            r.register_certificate(name("bob"), cert(3)),
            Err(RegistryError::CertificateNameTaken(name("bob")))
        );
        assert_eq!(
            r.register_certificate(name("carol"), cert(1)),
            Err(RegistryError::CertificateInUse(name("bob")))
        );
        // A name may have both: either credential serves it.
        r.register_certificate(name("alice"), cert(4)).unwrap();
        assert_eq!(r.authenticate_with("", Some(&cert(4))), Ok(&name("alice")));
        assert_eq!(
            r.authenticate_with("ta", Some(&cert(4))),
            Ok(&name("alice"))
        );
        assert_eq!(r.unregister(&name("alice")), Some(None));
        assert_eq!(
            r.authenticate_with("ta", Some(&cert(4))),
            Err(AuthRefusal::UnknownWithCertificate)
        );
    }

    #[test]
    fn certificate_digests_read_and_write_hex() {
        let d = CertDigest::of_der(b"not really DER");
        assert_eq!(CertDigest::from_hex(&d.to_hex()), Some(d));
        assert_eq!(CertDigest::from_hex(&d.to_hex().to_uppercase()), Some(d));
        assert_eq!(CertDigest::from_hex("00"), None);
        assert_eq!(CertDigest::from_hex(&"g".repeat(64)), None);
        assert_eq!(CertDigest::from_hex(&"é".repeat(32)), None);
    }

    #[test]
    fn a_binding_is_replaced_and_unbound_only_by_its_connection() {
        let mut r = Registry::new();
        r.register(name("alice"), SecretDigest::of("ta")).unwrap();
        assert_eq!(r.bind(name("alice"), ConnectionId(1)), None);
        assert_eq!(
            r.bind(name("alice"), ConnectionId(2)),
            Some(ConnectionId(1))
        );
        assert!(!r.unbind(&name("alice"), ConnectionId(1)));
        assert_eq!(r.connection(&name("alice")), Some(ConnectionId(2)));
        assert_eq!(r.unregister(&name("alice")), Some(Some(ConnectionId(2))));
        assert_eq!(r.authenticate("ta"), None);
        assert_eq!(r.unregister(&name("alice")), None);
    }
}
