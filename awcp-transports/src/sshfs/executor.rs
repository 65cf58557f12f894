//! [`SshfsExecutor`]: mounts the delegator's export with `sshfs`, the credential in 0600 files
//! and the host key pinned. `sshfs` runs in the foreground as a child of this process, so its
//! messages (a host key mismatch, a lost connection) and its process are its own to report and
//! to end; whether the work directory is mounted is read from the mount table, never from a
//! `stat` that a dead FUSE mount fails.

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use awcp_proto::{AccessMode, SshfsHandle, TransportHandle, TransportKind};

use super::procs::{self, Proc};
use super::{allowed_option, mounts, run_helper};
use crate::archive::Delivery;
use crate::cancel::CancelFlag;
use crate::error::TransportError;
use crate::snapshot::{CapturedSnapshot, SnapshotKind};
use crate::traits::{DependencyMissing, ExecutorTransport, SetupReport, SetupRequest};

/// Executor-side configuration.
#[derive(Clone, Debug)]
pub struct SshfsExecutorConfig {
    /// Where per-mount credential files live (`<key_dir>/<work dir name>/`, mode 0700).
    pub key_dir: PathBuf,
    /// The `sshfs` program.
    pub sshfs: String,
    /// The `fusermount` program.
    pub fusermount: String,
    /// How long a mount may take (then it is killed → `SETUP_FAILED`).
    pub mount_timeout: Duration,
    /// How long an unmount may take.
    pub unmount_timeout: Duration,
    /// How long the liveness check at release may wait for the delegator's answer.
    pub probe_timeout: Duration,
}

impl SshfsExecutorConfig {
    /// Defaults with credential files under `key_dir`.
    pub fn new(key_dir: impl Into<PathBuf>) -> Self {
        SshfsExecutorConfig {
            key_dir: key_dir.into(),
            sshfs: "sshfs".into(),
            fusermount: "fusermount".into(),
            mount_timeout: Duration::from_secs(30),
            unmount_timeout: Duration::from_secs(10),
            probe_timeout: Duration::from_secs(10),
        }
    }
}

/// A running `sshfs -f`: the child and the tail of what it printed.
struct MountProc {
    child: Child,
    stderr: Arc<Mutex<String>>,
    /// Signalled when stderr is closed (sshfs and the ssh it started are gone).
    stderr_done: mpsc::Receiver<()>,
    /// The mount point as the mount table shows it.
    target: PathBuf,
}

impl MountProc {
    fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn last_message(&self) -> Option<String> {
        let s = self.stderr.lock().unwrap_or_else(|p| p.into_inner());
        s.lines()
            .rev()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .map(str::to_owned)
    }

    /// Waits for sshfs to exit (it does once unmounted) at most `timeout`, then kills it and
    /// the `ssh` processes it started. Always reaps it.
    fn stop(mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while self.running() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        if self.running() {
            let me = self.child.id() as i32;
            let mut victims: Vec<Proc> = procs::pids()
                .into_iter()
                .filter(|&p| procs::stat(p).is_some_and(|s| s.ppid == me))
                .filter_map(procs::proc_of)
                .collect();
            victims.extend(procs::proc_of(me));
            procs::kill_and_wait(&victims, timeout);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = self.stderr_done.recv_timeout(Duration::from_secs(1));
    }
}

/// The SSHFS transport, executor side. See the [module docs](super).
pub struct SshfsExecutor {
    config: SshfsExecutorConfig,
    mounts: Mutex<BTreeMap<PathBuf, MountProc>>,
}

const INSTALL_HINT: &str = "install sshfs and FUSE (Debian/Ubuntu: apt-get install sshfs; \
Fedora: dnf install fuse-sshfs) and make /dev/fuse usable (containers: --device /dev/fuse \
--cap-add SYS_ADMIN)";

fn setup_failed(msg: impl Into<String>) -> TransportError {
    TransportError::Setup(msg.into())
}

fn program_runs(program: &str, arg: &str) -> bool {
    Command::new(program)
        .arg(arg)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Host names: letters, digits, `.`, `-`, `:` (IPv6), not starting with `-`.
fn valid_host(h: &str) -> bool {
    !h.is_empty()
        && h.len() <= 253
        && !h.starts_with('-')
        && h.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b':')
}

/// POSIX-ish user names.
fn valid_user(u: &str) -> bool {
    let mut b = u.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
        && u.len() <= 32
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-' || c == b'.')
}

/// Absolute, no `..`, no control characters, no commas (they would split `-o` lists).
fn valid_locator(p: &str) -> bool {
    p.starts_with('/')
        && p.len() <= 4096
        && !p.split('/').any(|c| c == "..")
        && !p.chars().any(|c| c.is_control() || c == ',')
}

fn write_private(path: &Path, text: &str) -> Result<(), TransportError> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| TransportError::io("credential file", e))?;
    f.write_all(text.as_bytes())
        .map_err(|e| TransportError::io("credential file", e))?;
    if !text.ends_with('\n') {
        f.write_all(b"\n")
            .map_err(|e| TransportError::io("credential file", e))?;
    }
    Ok(())
}

/// `path` as the mount table names it: the parent resolved (the last component may be a dead
/// FUSE mount that cannot be resolved).
fn mount_target(path: &Path) -> PathBuf {
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => fs::canonicalize(parent)
            .map(|p| p.join(name))
            .unwrap_or_else(|_| path.to_path_buf()),
        _ => path.to_path_buf(),
    }
}

/// Whether the mount table has a mount at `target`.
fn mounted(target: &Path) -> bool {
    mounts().iter().any(|(p, _)| p == target)
}

/// Whether the mount answers a request that has to reach the delegator (`statvfs` is not
/// cached by FUSE; sshfs forwards it), within `timeout`.
fn reaches_delegator(target: &Path, timeout: Duration) -> bool {
    let (tx, rx) = mpsc::channel();
    let p = target.to_path_buf();
    let spawned = std::thread::Builder::new()
        .name("awcp-sshfs-probe".into())
        .spawn(move || {
            let _ = tx.send(rustix::fs::statvfs(&p).is_ok());
        });
    spawned.is_ok() && rx.recv_timeout(timeout).unwrap_or(false)
}

/// The error for a mount that did not come up, from what ssh/sshfs printed.
fn mount_error(status: &str, stderr: &str) -> TransportError {
    if stderr.contains("REMOTE HOST IDENTIFICATION HAS CHANGED")
        || stderr.contains("Host key verification failed")
    {
        return setup_failed(
            "the delegator's SSH host key did not match the key pinned in the handle \
             (hostKey); refusing to connect",
        );
    }
    let tail: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let tail = tail[tail.len().saturating_sub(3)..].join(" / ");
    setup_failed(format!(
        "sshfs could not mount the export ({status}): {tail}"
    ))
}

impl SshfsExecutor {
    /// An executor transport with this configuration.
    pub fn new(config: SshfsExecutorConfig) -> Self {
        SshfsExecutor {
            config,
            mounts: Mutex::new(BTreeMap::new()),
        }
    }

    fn key_dir_for(&self, work_dir: &Path) -> PathBuf {
        let name = work_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "mount".into());
        self.config.key_dir.join(name)
    }

    /// Builds the `sshfs` argument list after validating every field of the handle.
    fn command_args(
        &self,
        h: &SshfsHandle,
        work_dir: &Path,
        keys: &Path,
        access: AccessMode,
    ) -> Result<Vec<String>, TransportError> {
        let ep = &h.endpoint;
        if !valid_host(&ep.host) {
            return Err(setup_failed("endpoint host is not a host name"));
        }
        if !valid_user(&ep.user) {
            return Err(setup_failed("endpoint user is not a user name"));
        }
        if ep.port == 0 {
            return Err(setup_failed("endpoint port is 0"));
        }
        if !valid_locator(&h.export_locator) {
            return Err(setup_failed("exportLocator is not a plain absolute path"));
        }
        let mut opts = vec![
            format!("IdentityFile={}", keys.join("id").display()),
            format!("CertificateFile={}", keys.join("id-cert.pub").display()),
            format!("UserKnownHostsFile={}", keys.join("known_hosts").display()),
            "GlobalKnownHostsFile=/dev/null".into(),
            "StrictHostKeyChecking=yes".into(),
            "UpdateHostKeys=no".into(),
            "IdentitiesOnly=yes".into(),
            "IdentityAgent=none".into(),
            "BatchMode=yes".into(),
            "PasswordAuthentication=no".into(),
            "KbdInteractiveAuthentication=no".into(),
            format!("Port={}", ep.port),
            "reconnect".into(),
            "ServerAliveInterval=15".into(),
            "ServerAliveCountMax=3".into(),
        ];
        for (k, v) in &h.options {
            let Some(o) = allowed_option(k, v) else {
                return Err(setup_failed(format!("sshfs option `{k}` is not allowed")));
            };
            opts.push(o);
        }
        if access == AccessMode::Ro {
            opts.push("ro".into());
        }
        for o in &opts {
            if o.contains(',') {
                return Err(setup_failed("an option contains a comma"));
            }
        }
        Ok(vec![
            // Foreground: the process stays this one's child, its stderr stays readable.
            "-f".into(),
            "-F".into(),
            "/dev/null".into(),
            "-o".into(),
            opts.join(","),
            format!("{}@{}:{}", ep.user, ep.host, h.export_locator),
            work_dir.to_string_lossy().into_owned(),
        ])
    }
    fn write_credentials(&self, h: &SshfsHandle, keys: &Path) -> Result<(), TransportError> {
        let _ = fs::remove_dir_all(keys);
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(keys)
            .map_err(|e| TransportError::io("credential dir", e))?;
        ssh_key::PrivateKey::from_openssh(&h.credential.private_key)
            .map_err(|_| setup_failed("credential.privateKey is not an OpenSSH private key"))?;
        let cert = h
            .credential
            .certificate
            .as_deref()
            .ok_or_else(|| setup_failed("the handle carries no certificate"))?;
        ssh_key::Certificate::from_openssh(cert.trim())
            .map_err(|_| setup_failed("credential.certificate is not an OpenSSH certificate"))?;
        let host_key = h.host_key.as_deref().ok_or_else(|| {
            setup_failed("the handle carries no hostKey; refusing to mount an unpinned host")
        })?;
        let pk = ssh_key::PublicKey::from_openssh(host_key.trim())
            .map_err(|_| setup_failed("hostKey is not an OpenSSH public key"))?;
        let pk = pk.to_openssh().map_err(|_| setup_failed("hostKey"))?;
        let ep = &h.endpoint;
        let pattern = if ep.port == 22 {
            ep.host.clone()
        } else {
            format!("[{}]:{}", ep.host, ep.port)
        };
        write_private(&keys.join("id"), &h.credential.private_key)?;
        write_private(&keys.join("id-cert.pub"), cert.trim())?;
        write_private(&keys.join("known_hosts"), &format!("{pattern} {pk}"))?;
        Ok(())
    }

    /// Detaches the work directory and ends this mount's processes. Fails (after removing
    /// everything anyway) when the connection to the delegator was lost — what the task wrote
    /// since may be missing — or when the mount was busy and had to be detached lazily.
    fn unmount(&self, work_dir: &Path) -> Result<(), TransportError> {
        let target = mount_target(work_dir);
        let mut mp = self
            .mounts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&target);
        let mut problems = Vec::new();
        if mounted(&target) {
            if let Some(m) = mp.as_mut() {
                let healthy = m.running() && reaches_delegator(&target, self.config.probe_timeout);
                if !healthy {
                    let said = m
                        .last_message()
                        .map(|l| format!(" (sshfs: {l})"))
                        .unwrap_or_default();
                    problems.push(format!(
                        "the connection to the delegator's sshd was lost{said}; what the task \
                         wrote since may be missing"
                    ));
                }
            }
            let fm = self.config.fusermount.as_str();
            let t = self.config.unmount_timeout;
            if let Err(e) = run_helper(fm, &[Path::new("-u"), &target], t) {
                problems.push(format!(
                    "the work directory was still in use ({e}); it was detached lazily"
                ));
                if let Err(e) = run_helper(fm, &[Path::new("-uz"), &target], t) {
                    problems.push(format!("lazy unmount: {e}"));
                }
            }
        }
        if let Some(m) = mp {
            m.stop(self.config.unmount_timeout);
        }
        self.kill_strays(|mp| mp == target);
        if mounted(&target) {
            problems.push("the work directory is still mounted".into());
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(TransportError::Release(problems.join("; ")))
        }
    }

    /// Kills `sshfs` processes (not children of this process: left by a previous run) whose
    /// mount point satisfies `which`, and the `ssh` processes they started.
    fn kill_strays(&self, which: impl Fn(&Path) -> bool) {
        let program = Path::new(&self.config.sshfs)
            .file_name()
            .map(|n| n.to_owned())
            .unwrap_or_default();
        let mut victims = Vec::new();
        for pid in procs::pids() {
            let argv = procs::cmdline(pid);
            let is_sshfs = argv
                .first()
                .is_some_and(|a| Path::new(a).file_name() == Some(program.as_os_str()));
            if is_sshfs && argv.last().is_some_and(|m| which(Path::new(m))) {
                victims.extend(procs::proc_of(pid));
                victims.extend(
                    procs::pids()
                        .into_iter()
                        .filter(|&c| procs::stat(c).is_some_and(|s| s.ppid == pid))
                        .filter_map(procs::proc_of),
                );
            }
        }
        if !victims.is_empty() {
            tracing::info!(processes = victims.len(), "ending leftover sshfs processes");
            procs::kill_and_wait(&victims, self.config.unmount_timeout);
        }
    }

    fn mount(
        &self,
        work_dir: &Path,
        h: &SshfsHandle,
        access: AccessMode,
        cancel: &CancelFlag,
    ) -> Result<(), TransportError> {
        let keys = self.key_dir_for(work_dir);
        let args = self.command_args(h, work_dir, &keys, access)?;
        self.write_credentials(h, &keys)?;
        fs::create_dir_all(work_dir).map_err(|e| TransportError::io("work directory", e))?;
        if fs::read_dir(work_dir)
            .map(|mut r| r.next().is_some())
            .unwrap_or(false)
        {
            return Err(TransportError::WorkDirNotEmpty);
        }
        let target = mount_target(work_dir);
        if mounted(&target) {
            return Err(setup_failed("the work directory is already a mount point"));
        }
        let mut child = Command::new(&self.config.sshfs)
            .args(&args)
            .env_remove("SSH_AUTH_SOCK")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| TransportError::io("running sshfs", e))?;
        let stderr = Arc::new(Mutex::new(String::new()));
        let (done_tx, stderr_done) = mpsc::channel();
        if let Some(mut pipe) = child.stderr.take() {
            let buf = stderr.clone();
            std::thread::spawn(move || {
                let mut chunk = [0u8; 4096];
                while let Ok(n) = pipe.read(&mut chunk) {
                    if n == 0 {
                        break;
                    }
                    let mut b = buf.lock().unwrap_or_else(|p| p.into_inner());
                    b.push_str(&String::from_utf8_lossy(&chunk[..n]));
                    if b.len() > 64 * 1024 {
                        let cut = b.len() - 32 * 1024;
                        let cut = (cut..b.len()).find(|&i| b.is_char_boundary(i)).unwrap_or(0);
                        b.drain(..cut);
                    }
                }
                let _ = done_tx.send(());
            });
        }
        let mut m = MountProc {
            child,
            stderr,
            stderr_done,
            target: target.clone(),
        };
        // In the foreground sshfs mounts first and connects then: the mount is ready once a
        // request reaches the delegator; if the connection fails, sshfs unmounts and exits
        // with the reason on stderr.
        let deadline = Instant::now() + self.config.mount_timeout;
        loop {
            if let Ok(Some(st)) = m.child.try_wait() {
                let _ = m.stderr_done.recv_timeout(Duration::from_secs(2));
                let text = m.stderr.lock().unwrap_or_else(|p| p.into_inner()).clone();
                let e = mount_error(&st.to_string(), &text);
                m.stop(self.config.unmount_timeout);
                if mounted(&target) {
                    let _ = run_helper(
                        &self.config.fusermount,
                        &[Path::new("-uz"), &target],
                        self.config.unmount_timeout,
                    );
                }
                return Err(e);
            }
            if mounted(&target) {
                let left = deadline.saturating_duration_since(Instant::now());
                if reaches_delegator(&target, left) {
                    break;
                }
                // Not usable: sshfs is giving up; its exit (next round) says why.
                let exit_by = Instant::now() + self.config.unmount_timeout;
                while m.running() && Instant::now() < exit_by {
                    std::thread::sleep(Duration::from_millis(10));
                }
                if m.running() {
                    self.mounts
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(target.clone(), m);
                    let _ = self.unmount(work_dir);
                    return Err(setup_failed("the mounted export does not answer"));
                }
                continue;
            }
            let failed = if cancel.is_cancelled() {
                Some(TransportError::Cancelled)
            } else if Instant::now() >= deadline {
                Some(setup_failed("sshfs timed out"))
            } else {
                None
            };
            if let Some(e) = failed {
                self.mounts
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(target.clone(), m);
                let _ = self.unmount(work_dir);
                return Err(e);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.mounts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(m.target.clone(), m);
        Ok(())
    }
}

impl ExecutorTransport for SshfsExecutor {
    fn kind(&self) -> TransportKind {
        TransportKind::Sshfs
    }

    fn check_dependency(&self) -> Result<(), DependencyMissing> {
        let missing = |what: &str| DependencyMissing {
            hint: format!("{what}; {INSTALL_HINT}"),
        };
        if !program_runs(&self.config.sshfs, "--version") {
            return Err(missing(&format!(
                "`{}` is not installed",
                self.config.sshfs
            )));
        }
        if !program_runs(&self.config.fusermount, "-V") {
            return Err(missing(&format!(
                "`{}` is not installed",
                self.config.fusermount
            )));
        }
        if let Err(e) = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
        {
            return Err(missing(&format!("/dev/fuse is not usable ({e})")));
        }
        Ok(())
    }

    fn setup(
        &self,
        _req: SetupRequest<'_>,
        _cancel: &CancelFlag,
    ) -> Result<SetupReport, TransportError> {
        Err(TransportError::Unsupported(
            "sshfs is a live transport: use setup_live".into(),
        ))
    }

    fn setup_live(
        &self,
        work_dir: &Path,
        handle: &TransportHandle,
        access_mode: AccessMode,
        cancel: &CancelFlag,
    ) -> Result<(), TransportError> {
        let TransportHandle::Sshfs(h) = handle else {
            return Err(TransportError::Unsupported(format!(
                "sshfs cannot set up a {} handle",
                handle.kind().as_str()
            )));
        };
        let r = self.mount(work_dir, h, access_mode, cancel);
        if r.is_err() {
            let _ = fs::remove_dir_all(self.key_dir_for(work_dir));
        }
        r
    }

    fn capture(
        &self,
        _work_dir: &Path,
        _kind: SnapshotKind,
        _delivery: &Delivery,
        _cancel: &CancelFlag,
    ) -> Result<CapturedSnapshot, TransportError> {
        Err(TransportError::Unsupported(
            "sshfs changes are live; there is no snapshot".into(),
        ))
    }

    fn release(&self, work_dir: &Path) -> Result<(), TransportError> {
        let r = self.unmount(work_dir);
        let _ = fs::remove_dir_all(self.key_dir_for(work_dir));
        if !mounted(&mount_target(work_dir)) {
            // The mount point is empty now; never recurse into it.
            let _ = fs::remove_dir(work_dir);
        }
        r
    }

    fn recover(&self, work_root: &Path) {
        let root = mount_target(work_root);
        for (p, fstype) in mounts() {
            if fstype == "fuse.sshfs" && p.starts_with(&root) {
                tracing::info!(path = %p.display(), "removing a stale sshfs mount");
                let fm = self.config.fusermount.as_str();
                let t = self.config.unmount_timeout;
                let _ = run_helper(fm, &[Path::new("-uz"), &p], t);
            }
        }
        self.kill_strays(|mp| mp.starts_with(&root) || mp.starts_with(work_root));
        if let Ok(rd) = fs::read_dir(&self.config.key_dir) {
            for e in rd.flatten() {
                tracing::info!(path = %e.path().display(), "removing stale sshfs credentials");
                let _ = fs::remove_dir_all(e.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use awcp_proto::{SshCredential, SshEndpoint};
    use std::collections::BTreeMap;

    fn handle() -> SshfsHandle {
        SshfsHandle {
            endpoint: SshEndpoint {
                host: "127.0.0.1".into(),
                port: 2222,
                user: "awcp".into(),
            },
            export_locator: "/abc/".into(),
            credential: SshCredential {
                private_key: String::new(),
                certificate: None,
            },
            options: BTreeMap::new(),
            host_key: None,
        }
    }

    #[test]
    fn command_line_is_validated() {
        let x = SshfsExecutor::new(SshfsExecutorConfig::new("/k"));
        let w = Path::new("/w/d1");
        let k = Path::new("/k/d1");
        let args = x.command_args(&handle(), w, k, AccessMode::Ro).unwrap();
        assert_eq!(args[0], "-f");
        assert_eq!(args[1], "-F");
        assert!(args[4].contains("StrictHostKeyChecking=yes"));
        assert!(args[4].ends_with(",ro"));
        assert_eq!(args[5], "awcp@127.0.0.1:/abc/");

        let mut h = handle();
        h.options.insert("ssh_command".into(), "sh -c id".into());
        assert!(x.command_args(&h, w, k, AccessMode::Rw).is_err());
        let mut h = handle();
        h.options
            .insert("ServerAliveInterval".into(), "5,ssh_command=x".into());
        assert!(x.command_args(&h, w, k, AccessMode::Rw).is_err());
        let mut h = handle();
        h.endpoint.host = "-oProxyCommand=x".into();
        assert!(x.command_args(&h, w, k, AccessMode::Rw).is_err());
        let mut h = handle();
        h.endpoint.user = "-x".into();
        assert!(x.command_args(&h, w, k, AccessMode::Rw).is_err());
        let mut h = handle();
        h.export_locator = "/a/../../etc".into();
        assert!(x.command_args(&h, w, k, AccessMode::Rw).is_err());
        let mut h = handle();
        h.options.insert("reconnect".into(), String::new());
        h.options.insert("cache".into(), "no".into());
        assert!(x.command_args(&h, w, k, AccessMode::Rw).is_ok());
    }

    #[test]
    fn unpinned_handles_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let x = SshfsExecutor::new(SshfsExecutorConfig::new(d.path()));
        let key = ssh_key::PrivateKey::random(
            &mut ssh_key::rand_core::OsRng,
            ssh_key::Algorithm::Ed25519,
        )
        .unwrap();
        let mut h = handle();
        h.credential.private_key = key.to_openssh(ssh_key::LineEnding::LF).unwrap().to_string();
        h.credential.certificate = Some("ssh-ed25519-cert-v01@openssh.com AAAA".into());
        let e = x.write_credentials(&h, &d.path().join("k")).unwrap_err();
        assert!(e.to_string().contains("certificate"), "{e}");
    }

    #[test]
    fn missing_sshfs_is_dep_missing_with_a_hint() {
        let mut c = SshfsExecutorConfig::new("/k");
        c.sshfs = "/nonexistent/sshfs".into();
        let e = SshfsExecutor::new(c).check_dependency().unwrap_err();
        assert!(e.hint.contains("apt-get install sshfs"), "{}", e.hint);
    }
}
