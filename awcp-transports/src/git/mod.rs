//! The git transport's mechanisms: the workspace as a commit on a per-delegation branch, the
//! executor's result as a commit on top of it (WIRE.md §11.3, and what this implementation
//! does beyond the reference, §11.6).
//!
//! Everything shells out to the `git` binary ([`Git`]), the one implementation every git
//! server speaks with, rather than a library: `git2` would add libgit2's C build and has no
//! smart-HTTP server; `gix` pushes only partly and is a large tree of crates. Every call runs
//! with a controlled environment ([`Git::command`]): no inherited `GIT_*` variable, no
//! terminal prompt, no hooks, no fsmonitor, no signing, and, unless the call talks to the
//! user's own remote ([`Config::User`]), neither the user's nor the system's configuration.
//! Credentials reach git per call through the environment ([`Credential`]), never through a
//! configuration file, the work tree or a log.
//!
//! Map:
//! - [`base`]: the delegator's base commit, written from the archive it packed (so the same
//!   files, ignore rules and secret-looking-file rules as the archive transport);
//! - [`result`]: the delegator's reading of the executor's branch: fetched (objects checked),
//!   refused where the archive transport refuses, and turned into a delta snapshot ZIP that
//!   the archive transport's all-or-nothing apply writes, with its conflict detection;
//! - [`work`]: the executor's clone into a work directory without `.git/`, its commit and
//!   push;
//! - [`serve`]: one request of git's smart HTTP protocol through `git http-backend`.

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::error::TransportError;

pub mod base;
pub mod delegator;
pub mod executor;
pub mod result;
pub mod serve;
pub mod work;

pub use delegator::{ssh_auth, GitDelegator, GitDelegatorConfig, PreparedBase};
pub use executor::{GitExecutor, EXECUTOR_PROTOCOLS};

/// The branch of a delegation's result: `awcp/<delegation-id>` (the reference executor's
/// default prefix and name for its task branch).
pub fn delegation_branch(delegation_id: &str) -> String {
    format!("awcp/{delegation_id}")
}

/// The branch a delegator lends a delegation's base commit on: `awcp/<delegation-id>-base`.
/// Not the result's branch: the reference executor clones the base branch, then creates its
/// task branch `awcp/<id>` (`checkout -b`), which fails where the two names are one. These two
/// are the only refs this implementation ever pushes.
pub fn base_branch(delegation_id: &str) -> String {
    format!("awcp/{delegation_id}-base")
}

/// Whose configuration a git call reads besides the command line's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Config {
    /// None: `GIT_CONFIG_GLOBAL=/dev/null`, `GIT_CONFIG_NOSYSTEM=1`. Every local operation,
    /// and every call of an executor (credentials come with the call).
    Isolated,
    /// The user's global and system configuration (credential helpers, `insteadOf`, ssh
    /// settings): the delegator's push, fetch and delete on the remote the user named.
    User,
}

/// A credential given to one git call, through the environment only.
#[derive(Clone, Default, PartialEq, Eq)]
pub enum Credential {
    /// None (a capability URL, or a remote that needs none).
    #[default]
    None,
    /// A token, sent as HTTP Basic `x-access-token:<token>` (`http.extraHeader`, set through
    /// `GIT_CONFIG_COUNT`): what GitHub, GitLab, Gitea and Bitbucket accept for tokens.
    Token(String),
    /// SSH with host keys always checked (`StrictHostKeyChecking=yes`, never a prompt):
    /// against the one pinned key of `known_hosts` if given (whatever the host's name),
    /// else against the user's own `known_hosts`.
    SshKey {
        /// A private key in a file of mode 0600 (written by the caller outside the work tree,
        /// removed at release), the only identity offered; `None`: the user's own.
        key_file: Option<PathBuf>,
        /// A `known_hosts` file whose one entry, for the host name [`PINNED_HOST`], is the
        /// server's host key ([`known_hosts_line`]).
        known_hosts: Option<PathBuf>,
    },
}

impl core::fmt::Debug for Credential {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Credential::None => f.write_str("None"),
            Credential::Token(_) => f.write_str("Token(<redacted>)"),
            Credential::SshKey { .. } => f.write_str("SshKey(..)"),
        }
    }
}

/// A committer (and author) identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// Name.
    pub name: String,
    /// E-mail address.
    pub email: String,
}

impl Identity {
    /// The delegator's identity for base commits.
    pub fn delegator() -> Identity {
        Identity {
            name: "AWCP Delegator".into(),
            email: "delegator@awcp.local".into(),
        }
    }

    /// The executor's default identity (the reference's).
    pub fn executor() -> Identity {
        Identity {
            name: "AWCP Executor".into(),
            email: "executor@awcp.local".into(),
        }
    }

    fn env(&self, cmd: &mut Command) {
        for who in ["AUTHOR", "COMMITTER"] {
            cmd.env(format!("GIT_{who}_NAME"), &self.name);
            cmd.env(format!("GIT_{who}_EMAIL"), &self.email);
        }
    }
}

/// The `git` binary and how it is called.
#[derive(Clone, Debug)]
pub struct Git {
    program: PathBuf,
    /// `GIT_ALLOW_PROTOCOL`: the URL schemes a call may use (`None`: git's defaults).
    allow_protocols: Option<String>,
}

impl Default for Git {
    fn default() -> Self {
        Git {
            program: PathBuf::from("git"),
            allow_protocols: None,
        }
    }
}

/// Settings every call gets on its command line: nothing of the repository or of the user
/// runs code, signs, or waits for a person.
const SAFE_CONFIG: &[&str] = &[
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "gc.auto=0",
    "maintenance.auto=false",
    "advice.detachedHead=false",
    "init.defaultBranch=main",
    // A stalled HTTP transfer ends (under 1 KB/s for a minute) instead of hanging.
    "http.lowSpeedLimit=1000",
    "http.lowSpeedTime=60",
];

impl Git {
    /// `git` from the search path.
    pub fn new() -> Git {
        Git::default()
    }

    /// Only these URL schemes (`GIT_ALLOW_PROTOCOL`, e.g. `"http:https:ssh"`): an executor
    /// never lets a delegator's URL reach its own files (`file://`) or run a command (`ext::`).
    pub fn allow_protocols(mut self, schemes: &str) -> Git {
        self.allow_protocols = Some(schemes.to_owned());
        self
    }

    /// Whether the binary runs (`git --version`); its version line.
    pub fn version(&self) -> Result<String, TransportError> {
        let out = self.run(self.command(Config::Isolated).arg("--version"), None)?;
        Ok(String::from_utf8_lossy(&out).trim().to_owned())
    }

    /// A `git` command with the controlled environment (see the [module docs](self)).
    pub fn command(&self, config: Config) -> Command {
        let mut cmd = Command::new(&self.program);
        // Whatever called us (a hook, a shell inside a repository) may have set GIT_DIR,
        // GIT_WORK_TREE, GIT_INDEX_FILE, GIT_CONFIG_*…: none of them may redirect a call.
        let keep_user = |k: &str| {
            config == Config::User && matches!(k, "GIT_SSH" | "GIT_SSH_COMMAND" | "GIT_ASKPASS")
        };
        for (k, _) in std::env::vars_os() {
            if let Some(k) = k.to_str() {
                if k.starts_with("GIT_") && !keep_user(k) {
                    cmd.env_remove(k);
                }
            }
        }
        cmd.env("GIT_TERMINAL_PROMPT", "0")
            .env("LC_ALL", "C")
            .env("LANGUAGE", "")
            .env("GIT_OPTIONAL_LOCKS", "0");
        if config == Config::Isolated {
            cmd.env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("GIT_CONFIG_NOSYSTEM", "1");
        }
        if let Some(p) = &self.allow_protocols {
            cmd.env("GIT_ALLOW_PROTOCOL", p);
        }
        for c in SAFE_CONFIG {
            cmd.arg("-c").arg(c);
        }
        cmd.stdin(Stdio::null());
        cmd
    }

    /// [`Git::command`] on the repository `git_dir` (and the work tree `work_tree`, if any).
    pub fn in_repo(&self, config: Config, git_dir: &Path, work_tree: Option<&Path>) -> Command {
        let mut cmd = self.command(config);
        // Absolute: the command runs in another directory than its caller's.
        let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
        let (git_dir, work_tree) = (absolute(git_dir), work_tree.map(absolute));
        let (git_dir, work_tree) = (git_dir.as_path(), work_tree.as_deref());
        let mut a = OsString::from("--git-dir=");
        a.push(git_dir);
        cmd.arg(a);
        if let Some(w) = work_tree {
            let mut a = OsString::from("--work-tree=");
            a.push(w);
            cmd.arg(a);
            cmd.current_dir(w);
        } else {
            cmd.current_dir(git_dir);
        }
        cmd
    }

    /// Runs `cmd` to its end: its standard output, or an error naming `git`'s subcommand and
    /// the end of its standard error (credentials in URLs removed, see [`redact`]). `stdin`:
    /// bytes to write to its standard input.
    pub fn run(&self, cmd: &mut Command, stdin: Option<&[u8]>) -> Result<Vec<u8>, TransportError> {
        let what = describe(cmd);
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        if stdin.is_some() {
            cmd.stdin(Stdio::piped());
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| TransportError::io(format!("running {what}"), e))?;
        let err = child.stderr.take().map(spawn_reader);
        if let (Some(bytes), Some(mut w)) = (stdin, child.stdin.take()) {
            use std::io::Write;
            // A git that exits early closes its end: its status says why.
            let _ = w.write_all(bytes);
        }
        let mut out = Vec::new();
        if let Some(mut o) = child.stdout.take() {
            o.read_to_end(&mut out)
                .map_err(|e| TransportError::io(format!("reading {what}"), e))?;
        }
        let status = child
            .wait()
            .map_err(|e| TransportError::io(format!("waiting for {what}"), e))?;
        let stderr = err
            .map(|h| h.join().unwrap_or_default())
            .unwrap_or_default();
        if status.success() {
            Ok(out)
        } else {
            Err(failed(&what, &stderr))
        }
    }

    /// [`Git::run`] of a command whose output is one line (an object id, a ref).
    pub fn line(&self, cmd: &mut Command) -> Result<String, TransportError> {
        let out = self.run(cmd, None)?;
        Ok(String::from_utf8_lossy(&out).trim().to_owned())
    }
}

/// Reads a child's pipe to its end on a thread (at most the last 64 KiB are kept).
pub(crate) fn spawn_reader<R: Read + Send + 'static>(mut r: R) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut buf = [0u8; 8192];
        while let Ok(n) = r.read(&mut buf) {
            if n == 0 {
                break;
            }
            kept.extend_from_slice(&buf[..n]);
            if kept.len() > 64 * 1024 {
                kept.drain(..kept.len() - 64 * 1024);
            }
        }
        kept
    })
}

/// `git <subcommand>` of a command, for messages (never its other arguments: URLs, paths).
fn describe(cmd: &Command) -> String {
    let sub = cmd
        .get_args()
        .filter_map(|a| a.to_str())
        .scan(false, |after_c, a| {
            let skip = *after_c;
            *after_c = a == "-c";
            Some((skip, a))
        })
        .find(|(skip, a)| !skip && !a.starts_with('-'))
        .map(|(_, a)| a.to_owned())
        .unwrap_or_default();
    format!("git {sub}")
}

/// A failed git call as a transport error: the subcommand and the last lines of what it said.
pub(crate) fn failed(what: &str, stderr: &[u8]) -> TransportError {
    let text = String::from_utf8_lossy(stderr);
    let tail: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let tail = tail[tail.len().saturating_sub(4)..].join("; ");
    TransportError::Git(format!("{what} failed: {}", redact(&tail)))
}

/// `text` with the user information of every URL in it (`https://user:secret@host`) replaced
/// by `***`: git names the remote it failed on, and a URL may carry a credential.
pub fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| c.is_whitespace() || c == '\'' || c == '"')
            .unwrap_or(tail.len());
        let authority_end = tail[..end].find('/').unwrap_or(end);
        match tail[..authority_end].rfind('@') {
            Some(at) => {
                out.push_str("***");
                rest = &tail[at..];
            }
            None => rest = tail,
        }
    }
    out.push_str(rest);
    out
}

pub use awcp_proto::wire::repo_url_for_messages as url_for_messages;

/// `e` with every mention of `url` (git names the remote it failed on) replaced by
/// [`url_for_messages`]: a served repository's URL is a bearer capability until release.
pub(crate) fn hide_url(e: TransportError, url: &str) -> TransportError {
    let bare = url.trim_end_matches('/');
    match e {
        TransportError::Git(m) if !bare.is_empty() => {
            TransportError::Git(m.replace(bare, &url_for_messages(url)))
        }
        other => other,
    }
}

/// Sets `cred` on `cmd` (environment only). `GIT_CONFIG_COUNT` is git's way to pass settings
/// that no file holds (git 2.31 and later).
pub(crate) fn with_credential(cmd: &mut Command, cred: &Credential) {
    match cred {
        Credential::None => {}
        Credential::Token(t) => {
            use base64::Engine as _;
            let basic =
                base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{t}"));
            cmd.env("GIT_CONFIG_COUNT", "1")
                .env("GIT_CONFIG_KEY_0", "http.extraHeader")
                .env(
                    "GIT_CONFIG_VALUE_0",
                    format!("Authorization: Basic {basic}"),
                );
        }
        Credential::SshKey {
            key_file,
            known_hosts,
        } => {
            let mut ssh = String::from(
                "ssh -o BatchMode=yes -o StrictHostKeyChecking=yes \
                 -o ServerAliveInterval=15 -o ServerAliveCountMax=4",
            );
            if let Some(k) = key_file {
                ssh.push_str(&format!(
                    " -i {} -o IdentitiesOnly=yes -o IdentityAgent=none",
                    shell_quote(&k.to_string_lossy())
                ));
            }
            if let Some(k) = known_hosts {
                ssh.push_str(&format!(
                    " -o UserKnownHostsFile={} -o GlobalKnownHostsFile=/dev/null \
                     -o HostKeyAlias={PINNED_HOST} -o UpdateHostKeys=no",
                    shell_quote(&k.to_string_lossy())
                ));
            }
            cmd.env("GIT_SSH_COMMAND", ssh);
        }
    }
}

/// The host name a pinned host key is filed under (`HostKeyAlias`): the key is checked
/// whatever name or port the repository URL gives.
pub const PINNED_HOST: &str = "awcp-pinned-host";

/// The `known_hosts` line that pins `host_key` (an OpenSSH public key, `<type> <base64>
/// [comment]`) for [`PINNED_HOST`]; an error if it is not one public key (nothing else, no
/// second line or marker, reaches the file).
pub fn known_hosts_line(host_key: &str) -> Result<String, TransportError> {
    let key = ssh_key::PublicKey::from_openssh(host_key.trim())
        .map_err(|e| TransportError::Unsupported(format!("the host key is not one: {e}")))?;
    let mut key = key;
    key.set_comment("");
    let text = key
        .to_openssh()
        .map_err(|e| TransportError::Unsupported(format!("the host key is not one: {e}")))?;
    Ok(format!("{PINNED_HOST} {}\n", text.trim()))
}

/// `s` quoted for the shell git runs `GIT_SSH_COMMAND` with.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

pub use awcp_proto::wire::{is_branch_name, is_object_id};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_host_key_is_one_public_key_line_and_nothing_else() {
        let key =
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGb1QfI1zQzAKZ2zVfBfCQdwRQ3B7oH1v6qKQ2y3lD4k";
        let line = known_hosts_line(&format!("{key} host@example\n")).unwrap();
        assert_eq!(line, format!("{PINNED_HOST} {key}\n"));
        for bad in [
            "",
            "not a key",
            "@cert-authority * ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGb1QfI1zQzAKZ2zVfBfCQdwRQ3B7oH1v6qKQ2y3lD4k",
            &format!("{key}\n* ssh-ed25519 AAAA"),
            "ssh-ed25519 !!!!",
        ] {
            assert!(known_hosts_line(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn credentials_in_urls_are_redacted() {
        assert_eq!(
            redact("fatal: unable to access 'https://u:tok@h.example/r.git/': 403"),
            "fatal: unable to access 'https://***@h.example/r.git/': 403"
        );
        assert_eq!(redact("no url here"), "no url here");
        assert_eq!(
            redact("http://h/a@b and ssh://git@h:22/r"),
            "http://h/a@b and ssh://***@h:22/r"
        );
    }

    #[test]
    fn urls_in_messages_keep_scheme_and_host_only() {
        assert_eq!(
            url_for_messages("http://127.0.0.1:9/git/SECRET/repo.git"),
            "http://127.0.0.1:9/…"
        );
        assert_eq!(url_for_messages("ssh://git@h:22/r.git"), "ssh://h:22/…");
        assert_eq!(url_for_messages("git@h:r.git"), "(a repository)");
        let e = hide_url(
            TransportError::Git(
                "git fetch failed: fatal: unable to access 'http://h/git/SECRET/repo.git/': 500"
                    .into(),
            ),
            "http://h/git/SECRET/repo.git",
        );
        assert!(!e.to_string().contains("SECRET"), "{e}");
    }

    #[test]
    fn branch_names() {
        for ok in ["awcp/dlg_1", "main", "feature/x-y_z.1"] {
            assert!(is_branch_name(ok), "{ok}");
        }
        for bad in [
            "",
            "-x",
            "--upload-pack=x",
            "a..b",
            "a b",
            "a:b",
            "x.lock",
            "a/",
            "/a",
            "a//b",
            "a@{1}",
            "a/.b",
            "@",
            "a\\b",
            "a\nb",
        ] {
            assert!(!is_branch_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn object_ids() {
        assert!(is_object_id(&"a".repeat(40)));
        assert!(is_object_id(&"0".repeat(64)));
        assert!(!is_object_id(&"A".repeat(40)));
        assert!(!is_object_id("HEAD"));
    }

    #[test]
    fn messages_name_the_subcommand_only() {
        let g = Git::new();
        let mut c = g.command(Config::Isolated);
        c.arg("push").arg("https://u:p@h/r");
        assert_eq!(describe(&c), "git push");
    }
}
