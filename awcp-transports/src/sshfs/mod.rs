//! The SSHFS transport: the executor mounts the delegator's export view over SFTP, so results
//! flow back live and no snapshot is transferred.
//!
//! Security model (the reference's holes of WIRE.md §14 items 1–7 closed):
//! - **Credentials**: per delegation a fresh ED25519 key and a user certificate signed by the
//!   delegator's CA ([`SshfsDelegator`]): valid from signing until the lease expiry, one
//!   principal unique to the delegation (`awcp-<id>`), no extensions (so no pty, port, agent or
//!   X11 forwarding, no user rc) and the critical option `force-command=internal-sftp` (with
//!   `-R` for `ro`), so the key can run an SFTP server and nothing else.
//! - **Revocation, and the end of access**: sshd accepts a certificate only if its principal is
//!   listed in the `AuthorizedPrincipalsFile`; ending a delegation (release, cancel, or the
//!   lease running out, which the delegator enforces itself: sshd checks a certificate's end
//!   only at login) removes the line, so the key is refused from then on, and ends every
//!   session of the delegation: the certificate forces `internal-sftp -d /<token>`, so each of
//!   its sessions works in the export's directory, and the SFTP login user's processes that
//!   hold a path there (working directory or an open handle) are killed before the bind
//!   mounts are unmounted — not lazily, so no handle opened during the lease survives it.
//! - **Many delegations, many processes**: a registry shared by every delegator process
//!   (`<principals dir>/.awcp-<user>/`, see `registry.rs`) records each delegation with the
//!   process that owns it; principal lines are added and removed one at a time under a file
//!   lock, and a sweep ends only delegations whose process is gone.
//! - **Identity**: every delegation logs in as the same Unix user, so what isolates one
//!   delegation's export from another's is the random path token in its `exportLocator`: a
//!   session (alive only during its own lease) can reach any export whose token it knows.
//!   Tokens are 128 random bits, the jail is not listable, and files created through any
//!   export belong to that user.
//! - **What the executor leaves behind** (`rw`): the bind mounts are `nosuid,nodev`; at the
//!   end, set-id bits the executor set are removed and symlinks it created that point outside
//!   the workspace are reported or removed ([`EscapingSymlinks`]); the driver tells the user.
//! - **Jail**: sshd's `ChrootDirectory` (see [`sshd_config`]) is a root-owned jail directory
//!   with mode 0711 (not listable); each delegation gets `<jail>/<token>/<resource>`, where the
//!   token is 128 random bits and each resource is a bind mount of the source directory (`ro`
//!   bind mount for `ro` resources). The executor sees `exportLocator = /<token>/` and nothing
//!   outside it: not `/etc`, not other delegations, not the delegator's real paths. Symlinks
//!   resolve inside the chroot, so a link to `~/.ssh` leads nowhere.
//! - **Host key pinning**: the handle carries the sshd host public key (`hostKey`); the
//!   executor writes it to a private known_hosts file and mounts with
//!   `StrictHostKeyChecking=yes`.
//! - **Executor command line**: the handle's fields are validated and its `options` pass an
//!   allow-list ([`allowed_option`]); the ssh client ignores user and system ssh config
//!   (`-F /dev/null`) and the agent.

mod delegator;
mod executor;
mod procs;
mod registry;
mod residue;
mod setup;

pub use delegator::{ensure_ca, SshfsDelegator, SshfsDelegatorConfig};
pub use executor::{SshfsExecutor, SshfsExecutorConfig};
pub use residue::EscapingSymlinks;
pub use setup::{check_chroot_path, sshd_config, SshdConfigParams, CHROOT_REQUIREMENT};

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use crate::cancel::CancelFlag;

/// Whether a delegator-supplied sshfs option `key=value` may reach the command line, and in
/// which form. Only these pass: `reconnect` (no value), `ServerAliveInterval` and
/// `ServerAliveCountMax` (1–3600), `cache` and `Compression` (`yes`/`no`).
pub fn allowed_option(key: &str, value: &str) -> Option<String> {
    let number = |v: &str| {
        !v.is_empty()
            && v.len() <= 4
            && v.bytes().all(|b| b.is_ascii_digit())
            && matches!(v.parse::<u32>(), Ok(1..=3600))
    };
    let yes_no = |v: &str| v == "yes" || v == "no";
    match key {
        "reconnect" if value.is_empty() => Some("reconnect".into()),
        "ServerAliveInterval" | "ServerAliveCountMax" if number(value) => {
            Some(format!("{key}={value}"))
        }
        "cache" if yes_no(value) => Some(format!("cache={value}")),
        "Compression" if yes_no(value) => Some(format!("Compression={value}")),
        _ => None,
    }
}

/// A process's exit, output tail, or why it did not finish.
pub(crate) enum Finished {
    Exited(ExitStatus, String),
    TimedOut,
    Cancelled,
}

/// Waits for `child` at most `timeout`, killing it on timeout or when `cancel` is raised.
/// `std` has no wait-with-timeout, so the exit is polled every 20 ms. Returns the exit status
/// and the captured stderr (at most 64 KiB).
pub(crate) fn wait_child(mut child: Child, timeout: Duration, cancel: &CancelFlag) -> Finished {
    let stderr = child.stderr.take();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(e) = stderr {
            let _ = e.take(64 * 1024).read_to_string(&mut s);
        }
        s
    });
    let deadline = std::time::Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(st)) => {
                // A daemonised child (sshfs) may keep stderr open; do not block on it.
                let err = if reader.is_finished() {
                    reader.join().unwrap_or_default()
                } else {
                    String::new()
                };
                return Finished::Exited(st, err);
            }
            Ok(None) => {}
            Err(_) => return Finished::TimedOut,
        }
        let timed_out = std::time::Instant::now() >= deadline;
        if timed_out || cancel.is_cancelled() {
            let _ = child.kill();
            let _ = child.wait();
            return if timed_out {
                Finished::TimedOut
            } else {
                Finished::Cancelled
            };
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs a short helper command (mount, umount, fusermount) with a timeout; `Ok(())` on exit 0,
/// else the stderr text.
pub(crate) fn run_helper(program: &str, args: &[&Path], timeout: Duration) -> Result<(), String> {
    let child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{program}: {e}"))?;
    match wait_child(child, timeout, &CancelFlag::new()) {
        Finished::Exited(st, _) if st.success() => Ok(()),
        Finished::Exited(st, err) => Err(format!("{program} failed ({st}): {}", err.trim())),
        Finished::TimedOut => Err(format!("{program} timed out")),
        Finished::Cancelled => Err(format!("{program} cancelled")),
    }
}

/// Mount points from `/proc/self/mounts` with their filesystem type.
pub(crate) fn mounts() -> Vec<(PathBuf, String)> {
    let Ok(text) = std::fs::read_to_string("/proc/self/mounts") else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|l| {
            let mut f = l.split(' ');
            let _src = f.next()?;
            let target = f.next()?;
            let fstype = f.next()?;
            Some((PathBuf::from(unescape_mount(target)), fstype.to_owned()))
        })
        .collect()
}

/// Undoes the octal escapes (`\040` for a space …) of `/proc/mounts`.
fn unescape_mount(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() {
            let oct = &b[i + 1..(i + 4).min(b.len())];
            if oct.len() == 3 && oct.iter().all(|c| (b'0'..=b'7').contains(c)) {
                let v = u16::from(oct[0] - b'0') * 64
                    + u16::from(oct[1] - b'0') * 8
                    + u16::from(oct[2] - b'0');
                out.push(v as u8);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn option_allow_list() {
        assert_eq!(
            allowed_option("reconnect", "").as_deref(),
            Some("reconnect")
        );
        assert_eq!(
            allowed_option("ServerAliveInterval", "15").as_deref(),
            Some("ServerAliveInterval=15")
        );
        assert_eq!(allowed_option("ServerAliveInterval", "0"), None);
        assert_eq!(allowed_option("ServerAliveInterval", "15,ro"), None);
        assert_eq!(allowed_option("cache", "maybe"), None);
        assert_eq!(allowed_option("ssh_command", "sh -c id"), None);
        assert_eq!(allowed_option("ProxyCommand", "nc evil 22"), None);
        assert_eq!(allowed_option("follow_symlinks", ""), None);
        assert_eq!(allowed_option("allow_other", ""), None);
        assert_eq!(allowed_option("reconnect", "x"), None);
    }

    #[test]
    fn mount_unescape() {
        assert_eq!(unescape_mount("/a\\040b"), "/a b");
        assert_eq!(unescape_mount("/plain"), "/plain");
        assert_eq!(unescape_mount("/x\\"), "/x\\");
    }
}
