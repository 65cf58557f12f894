//! Which shipped files hold credentials: by their name or place ([`SENSITIVE_PATTERNS`],
//! [`is_sensitive_name`]) and, for small files, by their first bytes ([`holds_private_key`]).
//! Admission ([`super::admission`]) refuses a workspace that would ship one unless the
//! delegator allows it.

/// Patterns of files that hold credentials (WIRE.md §9, and the well-known credential files
/// of common tools). A pattern without `/` is matched against a path's base name; one with `/`
/// against its last components (`.aws/credentials` matches `home/.aws/credentials`); each
/// component as a whole, `*` matching any run of characters and `?` one. Besides these names,
/// a small file whose first bytes are a private key is sensitive whatever its name
/// ([`holds_private_key`]). A delegator lends them only with `--allow-sensitive`, or leaves
/// them out with `.awcpignore`.
pub const SENSITIVE_PATTERNS: &[&str] = &[
    // Environment files, and keys and key stores by extension.
    ".env",
    ".env.*",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "*.jks",
    "*.keystore",
    "*.ppk",
    "*.kdbx",
    // SSH private keys (and their `.pub` and backups, by the same names).
    "id_rsa",
    "id_rsa.*",
    "id_dsa",
    "id_dsa.*",
    "id_ecdsa",
    "id_ecdsa.*",
    "id_ecdsa_sk",
    "id_ecdsa_sk.*",
    "id_ed25519",
    "id_ed25519.*",
    "id_ed25519_sk",
    "id_ed25519_sk.*",
    "id_xmss",
    "id_xmss.*",
    // GPG.
    ".gnupg/secring.gpg",
    ".gnupg/private-keys-v1.d/*",
    // Cloud CLIs.
    "credentials.json",
    "service-account*.json",
    "application_default_credentials.json",
    ".aws/credentials",
    ".config/gcloud/credentials.db",
    ".config/gcloud/access_tokens.db",
    ".azure/accessTokens.json",
    ".azure/msal_token_cache.*",
    ".oci/config",
    ".s3cfg",
    ".boto",
    // Package managers and registries.
    ".npmrc",
    ".pypirc",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".gem/credentials",
    ".composer/auth.json",
    ".m2/settings-security.xml",
    // Containers and clusters.
    ".docker/config.json",
    ".kube/config",
    // Databases.
    ".pgpass",
    ".my.cnf",
    ".mylogin.cnf",
    // Git, hosting and the network.
    ".git-credentials",
    ".netrc",
    "_netrc",
    ".config/gh/hosts.yml",
    ".vault-token",
    ".terraform.d/credentials.tfrc.json",
    ".htpasswd",
];

/// Whether `path` (`/`-separated) matches one of [`SENSITIVE_PATTERNS`].
pub fn is_sensitive_name(path: &str) -> bool {
    let base = path.rsplit('/').next().unwrap_or(path);
    SENSITIVE_PATTERNS.iter().any(|p| match p.rsplit_once('/') {
        None => ends_can_match(p, base) && glob(p, base),
        Some((_, last)) => {
            ends_can_match(last, base) && glob(last, base) && path_suffix_matches(p, path)
        }
    })
}

/// Whether the last components of `path` match the components of `pattern`, one for one.
fn path_suffix_matches(pattern: &str, path: &str) -> bool {
    let mut comps = path.rsplit('/');
    pattern
        .rsplit('/')
        .all(|p| comps.next().is_some_and(|c| glob(p, c)))
}

/// Files up to this size are looked into for a private key ([`holds_private_key`]); keys are
/// a few KiB at most.
pub const KEY_SNIFF_MAX_FILE_BYTES: u64 = 16 * 1024;

/// How many bytes of a file's start [`holds_private_key`] needs to see.
pub const KEY_SNIFF_HEAD_BYTES: usize = 1024;

/// Whether `head`, the first bytes of a file, holds a private key: a PEM block (`-----BEGIN
/// … PRIVATE KEY-----`, OpenSSH, PKCS#1/#8, EC, DSA, encrypted, or `PGP PRIVATE KEY BLOCK`,
/// possibly after a few lines of text as OpenSSL writes them), or a PuTTY key file. A
/// certificate or public key (`BEGIN CERTIFICATE`, `BEGIN PUBLIC KEY`) is not one.
pub fn holds_private_key(head: &[u8]) -> bool {
    const BEGIN: &[u8] = b"-----BEGIN ";
    if head.starts_with(b"PuTTY-User-Key-File-") {
        return true;
    }
    let mut rest = head;
    while let Some(at) = rest.windows(BEGIN.len()).position(|w| w == BEGIN) {
        let after = &rest[at + BEGIN.len()..];
        let line = after.split(|&b| b == b'\n').next().unwrap_or(after);
        if line.windows(11).any(|w| w == b"PRIVATE KEY") {
            return true;
        }
        rest = after;
    }
    false
}

/// A cheap necessary condition for `glob(pattern, name)` with an ASCII `pattern`: where the
/// pattern begins or ends with a literal character, the name begins or ends with that byte.
/// (A name's first or last byte that is not ASCII belongs to a character no ASCII literal
/// matches.) Most names fail here for most patterns, without the matcher.
fn ends_can_match(pattern: &str, name: &str) -> bool {
    let (p, n) = (pattern.as_bytes(), name.as_bytes());
    let literal = |c: &u8| *c != b'*' && *c != b'?';
    let agrees = |pc: Option<&u8>, nc: Option<&u8>| match (pc.filter(|c| literal(c)), nc) {
        (Some(pc), Some(nc)) => pc == nc,
        (Some(_), None) => false,
        (None, _) => true,
    };
    agrees(p.first(), n.first()) && agrees(p.last(), n.last())
}

/// Whole-string glob match with `*` (any run) and `?` (one character). Matches bytes when
/// the name is ASCII (the patterns are), characters otherwise; allocates only for the latter.
fn glob(pattern: &str, name: &str) -> bool {
    if name.is_ascii() && pattern.is_ascii() {
        glob_units(pattern.as_bytes(), name.as_bytes(), b'*', b'?')
    } else {
        let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
        glob_units(&p, &n, '*', '?')
    }
}

fn glob_units<T: Copy + PartialEq>(p: &[T], n: &[T], any_run: T, any_one: T) -> bool {
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while let Some(&c) = n.get(ni) {
        match p.get(pi) {
            Some(&s) if s == any_run => {
                star = Some((pi, ni));
                pi += 1;
            }
            Some(&q) if q == any_one || q == c => {
                pi += 1;
                ni += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    pi = sp + 1;
                    ni = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    p.get(pi..)
        .unwrap_or_default()
        .iter()
        .all(|c| *c == any_run)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::admission::WorkspaceStats;

    proptest::proptest! {
        /// The quick test on the ends never refuses a name the matcher would take.
        #[test]
        fn the_quick_end_test_agrees_with_the_matcher(
            name in "(id_|\\.|service-|credentials|é|)[a-z_.é\\-]{0,12}(\\.pem|\\.json|\\.key|é|)",
        ) {
            let slow = SENSITIVE_PATTERNS.iter().any(|p| glob(p, &name));
            proptest::prop_assert_eq!(is_sensitive_name(&name), slow);
        }
    }

    #[test]
    fn sensitive_names_are_found_by_their_base_name() {
        for name in [
            ".env",
            "a/.env.local",
            "k.pem",
            "x/id_rsa",
            "id_ed25519.pub",
            "service-account-1.json",
            ".npmrc",
        ] {
            assert!(is_sensitive_name(name), "{name}");
        }
        for name in [
            "",
            "src/main.rs",
            "env",
            ".envy",
            "pem",
            "id_rsa2",
            "é.pem.bak",
            "a.pem/b",
        ] {
            assert!(!is_sensitive_name(name), "{name}");
        }
    }

    #[test]
    fn sensitive_names_follow_the_spec_patterns() {
        for yes in [
            ".env",
            ".env.local",
            "a/b/.env.production",
            "server.pem",
            "tls.key",
            "cert.p12",
            "x.pfx",
            "id_rsa",
            "id_rsa.pub",
            "home/.ssh/id_ed25519",
            "id_ed25519.old",
            "id_ecdsa",
            "credentials.json",
            "service-account.json",
            "service-account-prod.json",
            ".npmrc",
            "deep/.pypirc",
        ] {
            assert!(is_sensitive_name(yes), "{yes}");
        }
        for no in [
            "env",
            "my.env",
            ".envrc",
            "key.txt",
            "id_rsa_backup",
            "credentials.json.bak",
            "service.json",
            "a/.env/x.txt",
            "keys.rs",
            "pem",
        ] {
            assert!(!is_sensitive_name(no), "{no}");
        }
    }

    #[test]
    fn well_known_credential_files_are_sensitive_by_their_place() {
        for yes in [
            "ws/.aws/credentials",
            "ws/.netrc",
            "ws/_netrc",
            "ws/.git-credentials",
            "ws/.pgpass",
            "ws/.ssh/id_dsa",
            "ws/.ssh/id_ecdsa_sk",
            "ws/home/.docker/config.json",
            "ws/.kube/config",
            "ws/.config/gcloud/application_default_credentials.json",
            "ws/.cargo/credentials.toml",
            "ws/.gnupg/private-keys-v1.d/ABCD.key",
            "ws/.gnupg/private-keys-v1.d/ABCD",
            "ws/.azure/msal_token_cache.json",
            "ws/.config/gh/hosts.yml",
            "ws/.vault-token",
            "ws/store.jks",
        ] {
            assert!(is_sensitive_name(yes), "{yes}");
        }
        for no in [
            "ws/credentials",
            "ws/aws/credentials",
            "ws/config.json",
            "ws/docker/config.json",
            "ws/.kube/config.d",
            "ws/kube/config",
            "ws/config",
            "ws/hosts.yml",
            "ws/.gnupg/pubring.kbx",
            "ws/id_card.png",
        ] {
            assert!(!is_sensitive_name(no), "{no}");
        }
    }

    #[test]
    fn a_private_key_is_found_by_its_content_not_a_certificate() {
        for key in [
            &b"-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn"[..],
            b"-----BEGIN RSA PRIVATE KEY-----\n",
            b"-----BEGIN EC PRIVATE KEY-----\n",
            b"-----BEGIN PRIVATE KEY-----\n",
            b"-----BEGIN ENCRYPTED PRIVATE KEY-----\n",
            b"-----BEGIN PGP PRIVATE KEY BLOCK-----\n",
            b"Bag Attributes\n    localKeyID: 01\n-----BEGIN PRIVATE KEY-----\n",
            b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n-----BEGIN PRIVATE KEY-----",
            b"PuTTY-User-Key-File-3: ssh-ed25519\n",
        ] {
            assert!(holds_private_key(key), "{}", String::from_utf8_lossy(key));
        }
        for not in [
            &b"-----BEGIN CERTIFICATE-----\nMIIB\n"[..],
            b"-----BEGIN PUBLIC KEY-----\n",
            b"ssh-ed25519 AAAAC3Nz user@host\n",
            b"see PRIVATE KEY handling in the docs",
            b"-----BEGIN \nPRIVATE KEY",
            b"",
        ] {
            assert!(!holds_private_key(not), "{}", String::from_utf8_lossy(not));
        }
        let mut s = WorkspaceStats::default();
        s.add_file_with_head(
            "ws/deploy",
            400,
            Some(b"-----BEGIN OPENSSH PRIVATE KEY-----\n"),
        );
        s.add_file_with_head("ws/ca.crt", 400, Some(b"-----BEGIN CERTIFICATE-----\n"));
        s.add_file_with_head("ws/tls.key", 400, None);
        assert_eq!(s.sensitive_files, ["ws/deploy", "ws/tls.key"]);
    }
}
