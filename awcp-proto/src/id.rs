//! Validated identifiers.
//!
//! Ids come from the peer and end up as path components (work directories, record files,
//! snapshot folders), so every id is validated when it is decoded or built, before anything uses
//! it: 1 to [`MAX_ID_LEN`] characters from `A-Z a-z 0-9 _ - .`, not starting with `.` or `-`
//! (so never `.`, `..`, a hidden file or a command-line option), and never containing a path
//! separator.

use core::fmt;
use std::sync::Arc;

/// Longest id accepted, in bytes.
pub const MAX_ID_LEN: usize = 128;

/// Why an id was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// The id is empty.
    #[error("id is empty")]
    Empty,
    /// The id is longer than [`MAX_ID_LEN`].
    #[error("id is {0} bytes long; at most {MAX_ID_LEN} allowed")]
    TooLong(usize),
    /// The id holds a character outside `A-Z a-z 0-9 _ - .`.
    #[error("id contains {0:?}; only letters, digits, '_', '-' and '.' are allowed")]
    BadChar(char),
    /// The id starts with `.` or `-`.
    #[error("id may not start with {0:?}")]
    BadStart(char),
}

/// Which bytes an id may hold (`A-Z a-z 0-9 _ - .`), by value.
static ID_BYTES: [bool; 256] = {
    let mut ok = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        ok[b] = c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.');
        b += 1;
    }
    ok
};

/// Checks the id rules shared by every id type.
pub fn validate_id(s: &str) -> Result<(), IdError> {
    if s.is_empty() {
        return Err(IdError::Empty);
    }
    if s.len() > MAX_ID_LEN {
        return Err(IdError::TooLong(s.len()));
    }
    // Byte-wise: every allowed character is ASCII, so the first byte outside the set starts
    // the offending character.
    if let Some(i) = s.bytes().position(|b| !ID_BYTES[usize::from(b)]) {
        return Err(IdError::BadChar(
            s[i..].chars().next().unwrap_or('\u{fffd}'),
        ));
    }
    match s.as_bytes().first() {
        Some(&b @ (b'.' | b'-')) => Err(IdError::BadStart(char::from(b))),
        _ => Ok(()),
    }
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        //
        // Shared, immutable text: ids are cloned into timers, outputs, events and records
        // many times per delegation, and a clone is a reference count, not an allocation.
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(Arc<str>);

        impl $name {
            /// Validates and wraps `s` (one allocation: the shared text).
            pub fn new(s: impl AsRef<str>) -> Result<Self, IdError> {
                let s = s.as_ref();
                validate_id(s)?;
                Ok($name(Arc::from(s)))
            }

            /// The id as a string slice (safe to use as one path component).
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), self.0)
            }
        }

        impl core::str::FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, IdError> {
                $name::new(s)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                $name::new(s).map_err(serde::de::Error::custom)
            }
        }
    };
}

id_type!(
    /// A delegation (lease) id, chosen by the delegator: `dlg_` + 32 hex in the reference.
    DelegationId
);
id_type!(
    /// A snapshot id, chosen by the executor: `snap_` + 12 hex in the reference.
    SnapshotId
);
id_type!(
    /// The name of an exported resource; it becomes a directory name on the executor.
    ResourceName
);

impl DelegationId {
    /// Builds the reference-style id `dlg_<32 hex>` from 16 caller-supplied random bytes.
    pub fn from_random(bytes: [u8; 16]) -> Self {
        DelegationId(hex("dlg_", &bytes).into())
    }

    /// Whether the id carries at least 128 bits' worth of random-looking digits: after an
    /// optional `dlg_` prefix and without dashes, 32 or more hex digits (the reference's
    /// `dlg_<32 hex>`, ours, or a UUID). Only such an id can stand for a credential (an
    /// executor accepts a reference delegator's header-less requests by id).
    pub fn is_unguessable(&self) -> bool {
        let rest = self.0.strip_prefix("dlg_").unwrap_or(&self.0);
        let digits = rest.chars().filter(|c| *c != '-');
        let n = digits.clone().count();
        n >= 32 && digits.into_iter().all(|c| c.is_ascii_hexdigit())
    }
}

impl SnapshotId {
    /// Builds the reference-style id `snap_<12 hex>` from 6 caller-supplied random bytes.
    pub fn from_random(bytes: [u8; 6]) -> Self {
        SnapshotId(hex("snap_", &bytes).into())
    }

    /// `snap_result`: the id the delegator gives the result archive an [S] executor sends on
    /// `done` (it has no snapshot id of its own). A valid id (tested).
    pub(crate) fn of_done_result() -> Self {
        SnapshotId("snap_result".into())
    }
}

/// `prefix` followed by `bytes` in lowercase hex.
fn hex(prefix: &str, bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(prefix.len() + bytes.len() * 2);
    s.push_str(prefix);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_done_result_id_is_valid() {
        let id = SnapshotId::of_done_result();
        assert_eq!(SnapshotId::new(id.as_str()), Ok(id));
    }

    #[test]
    fn accepts_reference_and_seed_ids() {
        for s in [
            "dlg_0a1b2c3d4e5f60718293a4b5c6d7e8f9",
            "dlg_a1b2c3d4",
            "snap_9c2e41d07a3b",
            "workspace",
            "v1.2-rc",
        ] {
            assert!(validate_id(s).is_ok(), "{s}");
        }
    }

    #[test]
    fn refuses_path_tricks() {
        assert_eq!(validate_id(""), Err(IdError::Empty));
        assert_eq!(validate_id(".."), Err(IdError::BadStart('.')));
        assert_eq!(validate_id("."), Err(IdError::BadStart('.')));
        assert_eq!(validate_id("-rf"), Err(IdError::BadStart('-')));
        assert_eq!(validate_id("a/b"), Err(IdError::BadChar('/')));
        assert_eq!(validate_id("a\\b"), Err(IdError::BadChar('\\')));
        assert_eq!(validate_id("a\0"), Err(IdError::BadChar('\0')));
        assert_eq!(validate_id("é"), Err(IdError::BadChar('é')));
        assert_eq!(
            validate_id(&"a".repeat(MAX_ID_LEN + 1)),
            Err(IdError::TooLong(MAX_ID_LEN + 1))
        );
    }

    #[test]
    fn exactly_letters_digits_underscore_dash_and_dot_are_allowed_after_the_first_character() {
        for c in (0..=0x24ffu32).filter_map(char::from_u32) {
            let allowed = c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
            let id = format!("a{c}");
            let expected = if allowed {
                Ok(())
            } else {
                Err(IdError::BadChar(c))
            };
            assert_eq!(validate_id(&id), expected, "{c:?}");
        }
    }

    #[test]
    fn random_ids_have_reference_shape() {
        let id = DelegationId::from_random([0xab; 16]);
        assert_eq!(id.as_str().len(), 4 + 32);
        assert!(id.as_str().starts_with("dlg_abab"));
        assert_eq!(
            SnapshotId::from_random([1; 6]).as_str(),
            "snap_010101010101"
        );
    }

    #[test]
    fn only_long_hex_ids_are_unguessable() {
        for s in [
            "dlg_0a1b2c3d4e5f60718293a4b5c6d7e8f9",
            "0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9",
            "dlg_0A1B2C3D4E5F60718293A4B5C6D7E8F9ff",
        ] {
            assert!(DelegationId::new(s).unwrap().is_unguessable(), "{s}");
        }
        for s in [
            "dlg_a1b2c3d4",
            "dlg_1",
            "dlg_0a1b2c3d4e5f60718293a4b5c6d7e8fz",
            "task-42",
        ] {
            assert!(!DelegationId::new(s).unwrap().is_unguessable(), "{s}");
        }
        assert!(DelegationId::from_random([7; 16]).is_unguessable());
    }
}
