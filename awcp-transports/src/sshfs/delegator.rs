//! [`SshfsDelegator`]: the CA, per-delegation keys and certificates, the shared registry of
//! live delegations, the jail's bind mounts, and ending every session of a delegation at its
//! end (release, cancel, or lease expiry).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use awcp_proto::{
    AccessMode, DelegationId, SshCredential, SshEndpoint, SshfsHandle, Timestamp, TransportHandle,
    TransportKind,
};
use rustix::io::Errno;
use rustix::mount::{mount_bind, mount_remount, unmount, MountFlags, UnmountFlags};
use ssh_key::certificate::{Builder, CertType};
use ssh_key::rand_core::{OsRng, RngCore};
use ssh_key::{Algorithm, LineEnding, PrivateKey};

use super::mounts;
use super::procs::{self, Proc};
use super::registry::{Owner, Record, Registry, RwSource};
use super::residue::{self, EscapingSymlinks};
use crate::cancel::CancelFlag;
use crate::error::TransportError;
use crate::snapshot::{ApplyReport, ApplyRequest};
use crate::traits::{DelegatorTransport, PrepareRequest, Prepared, ReleaseReport};

/// Delegator-side configuration.
#[derive(Clone, Debug)]
pub struct SshfsDelegatorConfig {
    /// Private state: the CA key `ca` (created on first use, mode 0600) and `ca.pub`.
    pub state_dir: PathBuf,
    /// Where the principals files live (`<dir>/<user>`, read by sshd as the login user: the
    /// path must be root-owned and not group/world-writable). The registry of live delegations
    /// shared by every delegator process is `<dir>/.awcp-<user>/`.
    pub principals_dir: PathBuf,
    /// sshd's `ChrootDirectory` (root-owned, 0711, and every directory above it root-owned and
    /// not group/world-writable: not under `/tmp`). Requires the right to bind-mount.
    pub jail_root: PathBuf,
    /// The SSH server the executor connects to (host, port, SFTP login user; not root).
    pub endpoint: SshEndpoint,
    /// The sshd host public key file, pinned in the handle.
    pub host_public_key: PathBuf,
    /// How long ended sessions may take to exit before an unmount gives up waiting.
    pub helper_timeout: Duration,
    /// What to do at release with symlinks the executor left that point outside the workspace.
    pub escaping_symlinks: EscapingSymlinks,
}

impl SshfsDelegatorConfig {
    /// A configuration with default timeouts and policies.
    pub fn new(
        state_dir: impl Into<PathBuf>,
        principals_dir: impl Into<PathBuf>,
        jail_root: impl Into<PathBuf>,
        endpoint: SshEndpoint,
        host_public_key: impl Into<PathBuf>,
    ) -> Self {
        SshfsDelegatorConfig {
            state_dir: state_dir.into(),
            principals_dir: principals_dir.into(),
            jail_root: jail_root.into(),
            endpoint,
            host_public_key: host_public_key.into(),
            helper_timeout: Duration::from_secs(10),
            escaping_symlinks: EscapingSymlinks::default(),
        }
    }

    /// The CA private key path.
    pub fn ca_key_path(&self) -> PathBuf {
        self.state_dir.join("ca")
    }

    /// The CA public key path (for `TrustedUserCAKeys`).
    pub fn ca_public_key_path(&self) -> PathBuf {
        self.state_dir.join("ca.pub")
    }

    /// The principals file of the login user.
    pub fn principals_file(&self) -> PathBuf {
        self.principals_dir.join(&self.endpoint.user)
    }
}

/// Where one delegation of this process is.
enum Phase {
    Live,
    /// The lease ran out and the reaper is ending it.
    Ending,
    /// Ended by the reaper; the report waits for `release`.
    Ended(Result<ReleaseReport, String>),
}

struct Live {
    record: Record,
    phase: Phase,
}

struct Inner {
    config: SshfsDelegatorConfig,
    ca: PrivateKey,
    host_key: String,
    login_uid: u32,
    registry: Registry,
    owner: Owner,
    live: Mutex<BTreeMap<String, Live>>,
    changed: Condvar,
    stop: std::sync::atomic::AtomicBool,
}

/// The SSHFS transport, delegator side. See the [module docs](super).
pub struct SshfsDelegator {
    inner: Arc<Inner>,
    reaper: Option<JoinHandle<()>>,
}

fn io(ctx: &str) -> impl FnOnce(std::io::Error) -> TransportError + '_ {
    move |e| TransportError::io(ctx, e)
}

fn errno(ctx: &str) -> impl FnOnce(Errno) -> TransportError + '_ {
    move |e| TransportError::io(ctx, e.into())
}

fn key_err(e: ssh_key::Error) -> TransportError {
    TransportError::Unsupported(format!("ssh key: {e}"))
}

fn random_hex(bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    OsRng.fill_bytes(&mut b);
    hex::encode(b)
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Loads or creates the CA key at `path` (see [`SshfsDelegatorConfig::ca_key_path`]) and
/// returns its public key in OpenSSH format (for `TrustedUserCAKeys`).
pub fn ensure_ca(path: &Path) -> Result<String, TransportError> {
    let ca = load_or_create_ca(path)?;
    ca.public_key().to_openssh().map_err(key_err)
}

/// Loads the CA key at `path`, creating it (ED25519, mode 0600, `.pub` beside it) if missing.
pub(crate) fn load_or_create_ca(path: &Path) -> Result<PrivateKey, TransportError> {
    if path.exists() {
        let mode = fs::metadata(path)
            .map_err(io("CA key"))?
            .permissions()
            .mode();
        if mode & 0o077 != 0 {
            return Err(TransportError::Unsupported(
                "the CA key is readable by others; refusing to use it (chmod 600)".into(),
            ));
        }
        return PrivateKey::read_openssh_file(path).map_err(key_err);
    }
    if let Some(dir) = path.parent() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io("state dir"))?;
    }
    let mut ca = PrivateKey::random(&mut OsRng, Algorithm::Ed25519).map_err(key_err)?;
    ca.set_comment("awcp-ca");
    let text = ca.to_openssh(LineEnding::LF).map_err(key_err)?;
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io("CA key"))?;
    f.write_all(text.as_bytes()).map_err(io("CA key"))?;
    let public = ca.public_key().to_openssh().map_err(key_err)?;
    fs::write(path.with_extension("pub"), format!("{public}\n")).map_err(io("CA public key"))?;
    Ok(ca)
}

/// The user id of `user` (as NSS resolves it: `id -u`).
fn user_id(user: &str) -> Result<u32, TransportError> {
    let out = std::process::Command::new("id")
        .args(["-u", "--", user])
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(io("id -u"))?;
    let uid = String::from_utf8_lossy(&out.stdout).trim().parse::<u32>();
    match (out.status.success(), uid) {
        (true, Ok(uid)) => Ok(uid),
        _ => Err(TransportError::Unsupported(format!(
            "the SFTP login user `{user}` does not exist (create it as `awcp sshfs setup` says)"
        ))),
    }
}

impl SshfsDelegator {
    /// Loads (or creates) the CA, reads the host key, opens the registry shared with the other
    /// delegator processes, and ends what processes that are gone left behind (their
    /// principals, sessions, bind mounts and token directories). Live delegations of other
    /// processes are left alone.
    pub fn new(config: SshfsDelegatorConfig) -> Result<Self, TransportError> {
        let ca = load_or_create_ca(&config.ca_key_path())?;
        let host_key = fs::read_to_string(&config.host_public_key).map_err(io("host key"))?;
        let host_key = host_key
            .split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ");
        ssh_key::PublicKey::from_openssh(&host_key).map_err(key_err)?;
        super::check_chroot_path(&config.jail_root).map_err(TransportError::Unsupported)?;
        let login_uid = user_id(&config.endpoint.user)?;
        if login_uid == 0 {
            return Err(TransportError::Unsupported(
                "the SFTP login user must not be root".into(),
            ));
        }
        let registry = Registry::open(&config.principals_dir, &config.endpoint.user)?;
        let me = procs::proc_of(std::process::id() as i32).ok_or_else(|| {
            TransportError::Unsupported("cannot read this process in /proc".into())
        })?;
        let inner = Arc::new(Inner {
            config,
            ca,
            host_key,
            login_uid,
            registry,
            owner: Owner {
                pid: me.pid,
                start: me.start,
                instance: random_hex(8),
            },
            live: Mutex::new(BTreeMap::new()),
            changed: Condvar::new(),
            stop: std::sync::atomic::AtomicBool::new(false),
        });
        inner.sweep()?;
        let reaper = {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name("awcp-sshfs-reaper".into())
                .spawn(move || inner.reap())
                .map_err(io("sshfs reaper thread"))?
        };
        Ok(SshfsDelegator {
            inner,
            reaper: Some(reaper),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &SshfsDelegatorConfig {
        &self.inner.config
    }

    /// The CA public key in OpenSSH format.
    pub fn ca_public_key(&self) -> String {
        self.inner.ca.public_key().to_openssh().unwrap_or_default()
    }
}

impl Drop for SshfsDelegator {
    /// Stops the reaper and ends the delegations still live: nobody could release them later.
    fn drop(&mut self) {
        self.inner
            .stop
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.inner.changed.notify_all();
        if let Some(h) = self.reaper.take() {
            let _ = h.join();
        }
        let ids: Vec<String> = self.inner.lock().keys().cloned().collect();
        for id in ids {
            if let Err(e) = self.inner.release(&id) {
                tracing::warn!(delegation = %id, "ending an sshfs delegation at shutdown: {e}");
            }
        }
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Live>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ends the delegations of processes that are gone and removes principal lines no record
    /// names. Each stale record is taken over (its owner becomes this process) before it is
    /// ended, so two sweeping processes do not end it twice, and a crash mid-way leaves it
    /// for the next sweep.
    fn sweep(&self) -> Result<(), TransportError> {
        let stale: Vec<Record> = {
            let l = self.registry.lock()?;
            let mut stale = Vec::new();
            for mut r in l.records() {
                if r.owner.gone() {
                    r.owner = self.owner.clone();
                    l.put(&r)?;
                    stale.push(r);
                }
            }
            for line in l.remove_orphan_principals()? {
                tracing::info!(line = %line, "removed a principal no live delegation records");
            }
            stale
        };
        for r in stale {
            tracing::info!(delegation = %r.delegation, "ending an sshfs delegation whose process is gone");
            match self.end(&r) {
                Ok(rep) => {
                    for w in rep.warnings {
                        tracing::warn!(delegation = %r.delegation, "{w}");
                    }
                }
                Err(e) => tracing::warn!(delegation = %r.delegation, "ending it failed: {e}"),
            }
        }
        Ok(())
    }

    /// The reaper thread: ends each delegation of this transport when its lease runs out, even
    /// if nobody calls `release` (the certificate's end is checked by sshd only at login).
    fn reap(self: Arc<Self>) {
        let mut guard = self.lock();
        loop {
            if self.stop.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            let now = unix_ms();
            let due: Vec<(String, Record)> = guard
                .iter()
                .filter(|(_, l)| matches!(l.phase, Phase::Live) && l.record.expires_at_ms <= now)
                .map(|(id, l)| (id.clone(), l.record.clone()))
                .collect();
            if !due.is_empty() {
                for (id, _) in &due {
                    if let Some(l) = guard.get_mut(id) {
                        l.phase = Phase::Ending;
                    }
                }
                drop(guard);
                let mut done = Vec::new();
                for (id, r) in due {
                    tracing::info!(delegation = %id, "sshfs lease expired: ending its sessions");
                    done.push((id, self.end(&r).map_err(|e| e.to_string())));
                }
                // Expired delegations of processes that are gone are this process's to end too.
                if let Err(e) = self.sweep() {
                    tracing::warn!("sshfs sweep failed: {e}");
                }
                guard = self.lock();
                for (id, r) in done {
                    if let Some(l) = guard.get_mut(&id) {
                        l.phase = Phase::Ended(r);
                    }
                }
                self.changed.notify_all();
                continue;
            }
            let next = guard
                .values()
                .filter(|l| matches!(l.phase, Phase::Live))
                .map(|l| l.record.expires_at_ms)
                .min();
            guard = match next {
                Some(at) => {
                    let wait = Duration::from_millis(at.saturating_sub(now).max(1));
                    self.changed
                        .wait_timeout(guard, wait)
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
                None => self.changed.wait(guard).unwrap_or_else(|p| p.into_inner()),
            };
        }
    }

    /// Ends one delegation: revoke its principal, end every session that uses its export (so
    /// no handle opened during the lease survives), check what the executor left, unmount the
    /// bind mounts (not lazily, unless something outside the sessions still holds them),
    /// remove the directories and finally the record.
    fn end(&self, r: &Record) -> Result<ReleaseReport, TransportError> {
        let mut warnings = Vec::new();
        // Revoke first: from here on sshd refuses the certificate. Whatever happens, the rest
        // still runs (a principal line left behind has no record: the next sweep removes it).
        let revoked = self
            .registry
            .lock()
            .and_then(|l| l.remove_principal(&r.principal));
        self.end_sessions(&r.token_dir);
        // A connection that authenticated with this certificate and holds no channel (`ssh -M
        // -N`) is in none of the export's paths, and sshd checks the certificate only at
        // login: end every connection of the login user that serves no other live delegation.
        self.end_idle_connections(&r.token_dir);
        for s in &r.rw_sources {
            warnings.extend(residue::inspect(
                &s.name,
                &s.path,
                r.lease_start,
                self.login_uid,
                self.config.escaping_symlinks,
            ));
        }
        warnings.extend(self.unmount_all(&r.token_dir));
        remove_token_dir(&r.token_dir);
        // A login accepted in the instant before the revocation may have entered the export
        // after the first pass: its working directory now shows as deleted.
        self.end_sessions(&r.token_dir);
        self.registry.lock()?.remove(&r.principal);
        revoked?;
        Ok(ReleaseReport { warnings })
    }

    /// Kills every process of the SFTP login user that holds a path under `dir` (working
    /// directory — the certificate's `internal-sftp -d /<token>` puts every session of the
    /// delegation there —, root or an open file), and the session process above it, then
    /// waits until they are gone.
    fn end_sessions(&self, dir: &Path) -> usize {
        let mut victims = BTreeSet::new();
        for pid in procs::pids() {
            if procs::uid(pid) != Some(self.login_uid) {
                continue;
            }
            if !procs::held_paths(pid)
                .iter()
                .any(|p| procs::is_under(p, dir))
            {
                continue;
            }
            victims.extend(procs::proc_of(pid));
            // `sshd: user@internal-sftp` runs below `sshd: user@notty` (also the login user).
            if let Some(st) = procs::stat(pid) {
                let parent_is_session = procs::uid(st.ppid) == Some(self.login_uid)
                    && procs::cmdline(st.ppid)
                        .first()
                        .is_some_and(|a| a.starts_with("sshd"));
                if parent_is_session {
                    victims.extend(procs::proc_of(st.ppid));
                }
            }
        }
        if victims.is_empty() {
            return 0;
        }
        let victims: Vec<Proc> = victims.into_iter().collect();
        tracing::info!(
            sessions = victims.len(),
            "ending sshd sessions of an ended delegation"
        );
        let left = procs::kill_and_wait(&victims, self.config.helper_timeout);
        if !left.is_empty() {
            tracing::warn!(left = ?left, "sshd session processes did not exit");
        }
        victims.len()
    }

    /// Ends every SSH connection of the SFTP login user that does not serve a live delegation
    /// other than the one whose export is `ending`: a connection serves a delegation when it,
    /// or one of its sessions, works in that delegation's export (the certificate's
    /// `internal-sftp -d /<token>` puts every SFTP session there, and the SFTP protocol cannot
    /// change it). That ends the connections of the ended delegation however they sit: idle
    /// (`sshd: user@notty` with no channel, e.g. an `ssh -M -N` master), or with a session
    /// that could not enter the removed export and works from the jail's root. Sessions are
    /// only ever opened over connections, so after this no channel of the ended certificate
    /// can be opened. A connection of another delegation caught between its login and its
    /// SFTP channel (a few milliseconds) is ended too: its mount fails and says so, which is
    /// safe; it is never left able to reach another export.
    fn end_idle_connections(&self, ending: &Path) -> usize {
        let live: Vec<PathBuf> = match self.registry.lock() {
            Ok(l) => l
                .records()
                .into_iter()
                .map(|r| r.token_dir)
                .filter(|d| d != ending)
                .collect(),
            Err(e) => {
                tracing::warn!("reading the sshfs registry: {e}");
                return 0;
            }
        };
        // The login user's sshd processes (`sshd: user@notty`, `sshd: user@internal-sftp`,
        // or `sshd-session: …` on newer OpenSSH), with their parents.
        let sshd: BTreeMap<i32, procs::Stat> = procs::pids()
            .into_iter()
            .filter(|&pid| procs::uid(pid) == Some(self.login_uid))
            .filter(|&pid| {
                procs::cmdline(pid)
                    .first()
                    .is_some_and(|a| a.starts_with("sshd"))
            })
            .filter_map(|pid| Some((pid, procs::stat(pid)?)))
            .collect();
        let serves_live = |pid: i32| {
            std::fs::read_link(format!("/proc/{pid}/cwd"))
                .map(|cwd| {
                    let cwd = cwd.to_string_lossy();
                    live.iter().any(|d| procs::is_under(&cwd, d))
                })
                .unwrap_or(false)
        };
        // A connection is its topmost login-user sshd process; it serves a live delegation
        // if it or any login-user sshd process below it works in a live export.
        let root_of = |mut pid: i32| {
            while let Some(st) = sshd.get(&pid) {
                if !sshd.contains_key(&st.ppid) {
                    break;
                }
                pid = st.ppid;
            }
            pid
        };
        let mut serving = BTreeSet::new();
        for &pid in sshd.keys() {
            if serves_live(pid) {
                serving.insert(root_of(pid));
            }
        }
        let victims: Vec<Proc> = sshd
            .keys()
            .filter(|&&pid| !serving.contains(&root_of(pid)))
            .filter_map(|&pid| procs::proc_of(pid))
            .collect();
        if victims.is_empty() {
            return 0;
        }
        tracing::info!(
            processes = victims.len(),
            "ending SSH connections that serve no live delegation"
        );
        let left = procs::kill_and_wait(&victims, self.config.helper_timeout);
        if !left.is_empty() {
            tracing::warn!(left = ?left, "sshd connection processes did not exit");
        }
        victims.len()
    }

    /// Unmounts every mount below `dir`, deepest first. Returns warnings for mounts that had to
    /// be detached lazily.
    fn unmount_all(&self, dir: &Path) -> Vec<String> {
        let mut warnings = Vec::new();
        let mut below: Vec<PathBuf> = mounts()
            .into_iter()
            .map(|(p, _)| p)
            .filter(|p| p.starts_with(dir) && p != dir)
            .collect();
        below.sort();
        for p in below.iter().rev() {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
            let name = name.unwrap_or_default();
            match unmount(p, UnmountFlags::empty()) {
                Ok(()) | Err(Errno::INVAL) | Err(Errno::NOENT) => continue,
                Err(Errno::BUSY) => {}
                Err(e) => {
                    warnings.push(format!("unmounting the export of `{name}` failed: {e}"));
                    continue;
                }
            }
            // Still busy: a session the first pass missed, or another process in the export.
            self.end_sessions(p);
            if unmount(p, UnmountFlags::empty()).is_ok() {
                continue;
            }
            match unmount(p, UnmountFlags::DETACH) {
                Ok(()) => warnings.push(format!(
                    "the export of `{name}` was still in use by a process that is not an SFTP \
                     session; it was detached lazily"
                )),
                Err(e) => warnings.push(format!("unmounting the export of `{name}` failed: {e}")),
            }
        }
        warnings
    }

    fn certificate(
        &self,
        id: &DelegationId,
        principal: &str,
        token: &str,
        key: &PrivateKey,
        expires_at: Timestamp,
        access: AccessMode,
    ) -> Result<String, TransportError> {
        let now = unix_ms() / 1000;
        let until = expires_at.as_unix_millis() / 1000;
        if until <= now {
            return Err(TransportError::Unsupported(
                "the lease has already expired".into(),
            ));
        }
        let mut b = Builder::new_with_random_nonce(&mut OsRng, key.public_key(), now, until)
            .map_err(key_err)?;
        let mut serial = [0u8; 8];
        OsRng.fill_bytes(&mut serial);
        b.serial(u64::from_le_bytes(serial)).map_err(key_err)?;
        b.key_id(format!("awcp-{id}")).map_err(key_err)?;
        b.cert_type(CertType::User).map_err(key_err)?;
        b.valid_principal(principal).map_err(key_err)?;
        // `-d`: every session of this certificate works in its export's directory, which is
        // how release finds (and ends) them. `-R`: read-only.
        let command = match access {
            AccessMode::Ro => format!("internal-sftp -R -d /{token}"),
            AccessMode::Rw => format!("internal-sftp -d /{token}"),
        };
        b.critical_option("force-command", command)
            .map_err(key_err)?;
        // No extensions: no pty, no port/agent/X11 forwarding, no user rc.
        b.comment(format!("awcp-{id}")).map_err(key_err)?;
        let cert = b.sign(&self.ca).map_err(key_err)?;
        cert.to_openssh().map_err(key_err)
    }

    /// Makes the export of one delegation; the record is in the registry before anything it
    /// names exists.
    fn prepare(
        &self,
        req: &PrepareRequest<'_>,
        expires_at: Timestamp,
    ) -> Result<(Record, SshfsHandle), TransportError> {
        let id = req.delegation_id;
        let principal = format!("awcp-{id}");
        let token = random_hex(16);
        let mut record = Record {
            principal: principal.clone(),
            delegation: id.to_string(),
            token_dir: self.config.jail_root.join(&token),
            owner: self.owner.clone(),
            expires_at_ms: expires_at.as_unix_millis(),
            lease_start: (i64::MAX, 0),
            rw_sources: Vec::new(),
        };
        {
            let l = self.registry.lock()?;
            if let Some(other) = l.get(&principal) {
                if !other.owner.gone() {
                    return Err(TransportError::Unsupported(format!(
                        "delegation {id} is already exported over sshfs by process {}",
                        other.owner.pid
                    )));
                }
            }
            l.put(&record)?;
        }
        let made = self.make_export(req, &mut record, &token, expires_at);
        match made {
            Ok(h) => Ok((record, h)),
            Err(e) => {
                if let Err(e2) = self.end(&record) {
                    tracing::warn!(delegation = %id, "cleaning up a failed export: {e2}");
                }
                Err(e)
            }
        }
    }

    fn make_export(
        &self,
        req: &PrepareRequest<'_>,
        record: &mut Record,
        token: &str,
        expires_at: Timestamp,
    ) -> Result<SshfsHandle, TransportError> {
        let id = req.delegation_id;
        let token_dir = record.token_dir.clone();
        fs::DirBuilder::new()
            .mode(0o755)
            .create(&token_dir)
            .map_err(io("jail token dir"))?;
        for r in req.resources {
            let src = fs::canonicalize(&r.source_path)
                .map_err(|_| TransportError::WorkspaceNotFound(r.name.to_string()))?;
            if !src.is_dir() {
                return Err(TransportError::WorkspaceInvalid(format!(
                    "{} is not a directory",
                    r.name
                )));
            }
            let target = token_dir.join(r.name.as_str());
            fs::DirBuilder::new()
                .mode(0o755)
                .create(&target)
                .map_err(io("jail resource dir"))?;
            let ro = req.access_mode == AccessMode::Ro || r.mode == AccessMode::Ro;
            mount_bind(&src, &target).map_err(errno("bind mount into the jail"))?;
            // Nothing set-id or a device node in the export is honoured through it.
            let mut flags = MountFlags::BIND | MountFlags::NOSUID | MountFlags::NODEV;
            if ro {
                flags |= MountFlags::RDONLY;
            }
            mount_remount(&target, flags, "").map_err(errno("remounting the bind mount"))?;
            if !ro {
                record.rw_sources.push(RwSource {
                    name: r.name.to_string(),
                    path: src,
                });
            }
        }
        // The lease begins now, on the kernel's clock: what changes after this is the
        // executor's doing.
        record.lease_start = residue::change_time(&token_dir).map_err(io("jail token dir"))?;
        let mut key = PrivateKey::random(&mut OsRng, Algorithm::Ed25519).map_err(key_err)?;
        key.set_comment(format!("awcp-{id}"));
        let cert = self.certificate(
            id,
            &record.principal,
            token,
            &key,
            expires_at,
            req.access_mode,
        )?;
        let private_key = key.to_openssh(LineEnding::LF).map_err(key_err)?.to_string();
        {
            let l = self.registry.lock()?;
            l.put(record)?;
            l.add_principal(&record.principal)?;
        }
        Ok(SshfsHandle {
            endpoint: self.config.endpoint.clone(),
            export_locator: format!("/{token}/"),
            credential: SshCredential {
                private_key,
                certificate: Some(cert),
            },
            options: BTreeMap::new(),
            host_key: Some(self.host_key.clone()),
        })
    }

    /// Ends delegation `id` of this transport (waiting for the reaper if it is ending it) and
    /// returns what release found.
    fn release(&self, id: &str) -> Result<ReleaseReport, TransportError> {
        let mut guard = self.lock();
        loop {
            match guard.get(id).map(|l| &l.phase) {
                None => return Ok(ReleaseReport::default()),
                Some(Phase::Ending) => {
                    guard = self.changed.wait(guard).unwrap_or_else(|p| p.into_inner());
                }
                Some(Phase::Live) | Some(Phase::Ended(_)) => break,
            }
        }
        let l = guard.remove(id).expect("present");
        drop(guard);
        self.changed.notify_all();
        match l.phase {
            Phase::Ended(r) => r.map_err(TransportError::Unsupported),
            _ => {
                let r = self.end(&l.record);
                tracing::info!(delegation = %id, "sshfs export revoked and removed");
                r
            }
        }
    }
}

/// Removes `<jail>/<token>` and the (now unmounted, empty) resource directories in it; never
/// anything still mounted, never recursively.
fn remove_token_dir(dir: &Path) {
    let mounted: BTreeSet<PathBuf> = mounts().into_iter().map(|(p, _)| p).collect();
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if mounted.contains(&p) {
                tracing::warn!(path = %p.display(), "still mounted; left in place");
                continue;
            }
            let _ = fs::remove_dir(&p);
        }
    }
    let _ = fs::remove_dir(dir);
}

impl DelegatorTransport for SshfsDelegator {
    fn kind(&self) -> TransportKind {
        TransportKind::Sshfs
    }

    fn prepare(
        &self,
        _req: &PrepareRequest<'_>,
        _cancel: &CancelFlag,
    ) -> Result<Prepared, TransportError> {
        Err(TransportError::Unsupported(
            "sshfs is a live transport: use prepare_live".into(),
        ))
    }

    fn prepare_live(
        &self,
        req: &PrepareRequest<'_>,
        expires_at: Timestamp,
        _cancel: &CancelFlag,
    ) -> Result<TransportHandle, TransportError> {
        let id = req.delegation_id;
        if crate::id_is_unsafe(id.as_str()) {
            return Err(TransportError::WorkspaceInvalid(
                "delegation id unfit as a path component".into(),
            ));
        }
        let inner = &self.inner;
        inner.release(id.as_str())?;
        inner.sweep()?;
        let (record, handle) = inner.prepare(req, expires_at)?;
        inner.lock().insert(
            id.to_string(),
            Live {
                record,
                phase: Phase::Live,
            },
        );
        inner.changed.notify_all();
        tracing::info!(delegation = %id, "sshfs export ready");
        Ok(TransportHandle::Sshfs(handle))
    }

    fn apply_snapshot(
        &self,
        _req: ApplyRequest<'_>,
        _cancel: &CancelFlag,
    ) -> Result<ApplyReport, TransportError> {
        Err(TransportError::Unsupported(
            "sshfs changes are live; there is no snapshot to apply".into(),
        ))
    }

    fn release(&self, delegation_id: &DelegationId) -> Result<ReleaseReport, TransportError> {
        self.inner.release(delegation_id.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ca_created_once_with_mode_0600() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("state/ca");
        let a = load_or_create_ca(&p).unwrap();
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert!(p.with_extension("pub").exists());
        let b = load_or_create_ca(&p).unwrap();
        assert_eq!(a.public_key(), b.public_key());
        fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).unwrap();
        assert!(load_or_create_ca(&p).is_err());
    }
}
