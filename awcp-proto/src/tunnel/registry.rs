//! Which executors a relay knows, by what token, and which connection serves each now.
//!
//! * An executor is **registered** under a name with the SHA-256 of its token
//!   ([`SecretDigest`]): the relay never keeps a token. The driver loads registrations from
//!   its configuration (digests in hex, [`SecretDigest::from_hex`]).
//! * A connection **authenticates** with a token; the token's digest picks the registration,
//!   and so the name: a client never names itself. A token that matches no registration is
//!   refused, so one executor cannot take another's name.
//! * A name is **bound** to at most one connection. A second connection with the same token
//!   (the executor reconnecting while its old connection is not yet known dead) replaces the
//!   first; the relay closes the old one and aborts its streams.
//!
//! Lookup is by the digest's hex text in an ordered map: the time it takes depends on the
//! digest, never on the token itself.

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
}

/// Registrations and live bindings ([module docs](self)).
#[derive(Clone, Debug, Default)]
pub struct Registry {
    /// name → the token's digest.
    by_name: BTreeMap<ExecutorName, SecretDigest>,
    /// the digest's hex → name.
    by_digest: BTreeMap<String, ExecutorName>,
    /// name → the connection serving it.
    online: BTreeMap<ExecutorName, ConnectionId>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `name` with the digest of its token. Registering the same pair again does
    /// nothing; a name registered with another token, or a token registered for another name,
    /// is refused.
    pub fn register(
        &mut self,
        name: ExecutorName,
        digest: SecretDigest,
    ) -> Result<(), RegistryError> {
        let hex = digest.to_hex();
        if let Some(existing) = self.by_name.get(&name) {
            return if *existing == digest {
                Ok(())
            } else {
                Err(RegistryError::NameTaken(name))
            };
        }
        if let Some(other) = self.by_digest.get(&hex) {
            return Err(RegistryError::TokenInUse(other.clone()));
        }
        self.by_digest.insert(hex, name.clone());
        self.by_name.insert(name, digest);
        Ok(())
    }

    /// Removes `name`'s registration; returns the connection that served it, if one did (the
    /// relay closes it: [`super::Relay::unregister`]).
    pub(crate) fn unregister(&mut self, name: &ExecutorName) -> Option<Option<ConnectionId>> {
        let digest = self.by_name.remove(name)?;
        self.by_digest.remove(&digest.to_hex());
        Some(self.online.remove(name))
    }

    /// The name `token` is registered for.
    pub fn authenticate(&self, token: &str) -> Option<&ExecutorName> {
        self.by_digest.get(&SecretDigest::of(token).to_hex())
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
