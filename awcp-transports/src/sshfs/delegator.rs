//! [`SshfsDelegator`]: the CA, per-delegation keys and certificates, the principals file and
//! the jail's bind mounts.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use awcp_proto::{
    AccessMode, DelegationId, SshCredential, SshEndpoint, SshfsHandle, Timestamp, TransportHandle,
    TransportKind,
};
use ssh_key::certificate::{Builder, CertType};
use ssh_key::rand_core::{OsRng, RngCore};
use ssh_key::{Algorithm, LineEnding, PrivateKey};

use super::{is_mount_point, mounts, run_helper};
use crate::cancel::CancelFlag;
use crate::error::TransportError;
use crate::snapshot::{ApplyReport, ApplyRequest};
use crate::traits::{DelegatorTransport, PrepareRequest, Prepared};

/// Delegator-side configuration.
#[derive(Clone, Debug)]
pub struct SshfsDelegatorConfig {
    /// Private state: the CA key `ca` (created on first use, mode 0600) and `ca.pub`.
    pub state_dir: PathBuf,
    /// Where the principals files live (`<dir>/<user>`, read by sshd as the login user: the
    /// path must be root-owned and not group/world-writable).
    pub principals_dir: PathBuf,
    /// sshd's `ChrootDirectory` (root-owned, 0711). Requires the right to bind-mount.
    pub jail_root: PathBuf,
    /// The SSH server the executor connects to (host, port, SFTP login user).
    pub endpoint: SshEndpoint,
    /// The sshd host public key file, pinned in the handle.
    pub host_public_key: PathBuf,
    /// Timeout of `mount`/`umount`.
    pub helper_timeout: Duration,
}

impl SshfsDelegatorConfig {
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

struct Delegation {
    principal: String,
    token_dir: PathBuf,
    binds: Vec<PathBuf>,
}

/// The SSHFS transport, delegator side. See the [module docs](super).
pub struct SshfsDelegator {
    config: SshfsDelegatorConfig,
    ca: PrivateKey,
    host_key: String,
    state: Mutex<BTreeMap<String, Delegation>>,
}

fn io(ctx: &str) -> impl FnOnce(std::io::Error) -> TransportError + '_ {
    move |e| TransportError::io(ctx, e)
}

fn key_err(e: ssh_key::Error) -> TransportError {
    TransportError::Unsupported(format!("ssh key: {e}"))
}

fn random_hex(bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    OsRng.fill_bytes(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
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

impl SshfsDelegator {
    /// Loads (or creates) the CA, reads the host key, and sweeps what a crash left: stale bind
    /// mounts and token directories in the jail, and principals (the file is rewritten empty,
    /// revoking every certificate of a previous run).
    pub fn new(config: SshfsDelegatorConfig) -> Result<Self, TransportError> {
        let ca = load_or_create_ca(&config.ca_key_path())?;
        let host_key = fs::read_to_string(&config.host_public_key).map_err(io("host key"))?;
        let host_key = host_key
            .split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ");
        ssh_key::PublicKey::from_openssh(&host_key).map_err(key_err)?;
        let me = SshfsDelegator {
            config,
            ca,
            host_key,
            state: Mutex::new(BTreeMap::new()),
        };
        me.sweep();
        me.write_principals(&BTreeMap::new())?;
        Ok(me)
    }

    /// The configuration.
    pub fn config(&self) -> &SshfsDelegatorConfig {
        &self.config
    }

    /// The CA public key in OpenSSH format.
    pub fn ca_public_key(&self) -> String {
        self.ca.public_key().to_openssh().unwrap_or_default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Delegation>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn sweep(&self) {
        let jail = &self.config.jail_root;
        let mut stale: Vec<PathBuf> = mounts()
            .into_iter()
            .map(|(p, _)| p)
            .filter(|p| p.starts_with(jail) && p != jail)
            .collect();
        stale.sort();
        for p in stale.iter().rev() {
            tracing::info!(path = %p.display(), "removing a stale bind mount from the jail");
            unmount(p, self.config.helper_timeout);
        }
        if let Ok(rd) = fs::read_dir(jail) {
            for e in rd.flatten() {
                remove_token_dir(&e.path());
            }
        }
    }

    /// Writes the principals file atomically from the live delegations.
    fn write_principals(&self, live: &BTreeMap<String, Delegation>) -> Result<(), TransportError> {
        let dir = &self.config.principals_dir;
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)
            .map_err(io("principals dir"))?;
        let mut text = String::new();
        for d in live.values() {
            // `restrict` turns off every forwarding and the pty even if the cert allowed them.
            text.push_str(&format!("restrict {}\n", d.principal));
        }
        let path = self.config.principals_file();
        let tmp = path.with_extension("tmp");
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o644)
            .open(&tmp)
            .map_err(io("principals file"))?;
        f.write_all(text.as_bytes())
            .map_err(io("principals file"))?;
        f.sync_all().map_err(io("principals file"))?;
        fs::rename(&tmp, &path).map_err(io("principals file"))
    }

    fn certificate(
        &self,
        id: &DelegationId,
        principal: &str,
        key: &PrivateKey,
        expires_at: Timestamp,
        access: AccessMode,
    ) -> Result<String, TransportError> {
        let now = unix_now();
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
        let command = match access {
            AccessMode::Ro => "internal-sftp -R",
            AccessMode::Rw => "internal-sftp",
        };
        b.critical_option("force-command", command)
            .map_err(key_err)?;
        // No extensions: no pty, no port/agent/X11 forwarding, no user rc.
        b.comment(format!("awcp-{id}")).map_err(key_err)?;
        let cert = b.sign(&self.ca).map_err(key_err)?;
        cert.to_openssh().map_err(key_err)
    }
}

fn unmount(p: &Path, timeout: Duration) {
    if run_helper("umount", &[p], timeout).is_err() {
        let lazy = Path::new("-l");
        if let Err(e) = run_helper("umount", &[lazy, p], timeout) {
            tracing::warn!(path = %p.display(), "unmount failed: {e}");
        }
    }
}

fn remove_token_dir(dir: &Path) {
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if is_mount_point(&p) {
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
        self.release(id)?;
        let token = random_hex(16);
        let token_dir = self.config.jail_root.join(&token);
        fs::DirBuilder::new()
            .mode(0o755)
            .create(&token_dir)
            .map_err(io("jail token dir"))?;
        let mut d = Delegation {
            principal: format!("awcp-{id}"),
            token_dir: token_dir.clone(),
            binds: Vec::new(),
        };
        let result = (|| {
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
                let opts = Path::new(if ro { "bind,ro" } else { "bind" });
                run_helper(
                    "mount",
                    &[Path::new("-o"), opts, &src, &target],
                    self.config.helper_timeout,
                )
                .map_err(|e| {
                    TransportError::Unsupported(format!("bind mount into the jail: {e}"))
                })?;
                d.binds.push(target);
            }
            let mut key = PrivateKey::random(&mut OsRng, Algorithm::Ed25519).map_err(key_err)?;
            key.set_comment(format!("awcp-{id}"));
            let cert = self.certificate(id, &d.principal, &key, expires_at, req.access_mode)?;
            let private_key = key.to_openssh(LineEnding::LF).map_err(key_err)?.to_string();
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
        })();
        let mut st = self.lock();
        match result {
            Ok(h) => {
                st.insert(id.to_string(), d);
                self.write_principals(&st)?;
                tracing::info!(delegation = %id, "sshfs export ready");
                Ok(TransportHandle::Sshfs(h))
            }
            Err(e) => {
                for b in d.binds.iter().rev() {
                    unmount(b, self.config.helper_timeout);
                }
                remove_token_dir(&d.token_dir);
                Err(e)
            }
        }
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

    fn release(&self, delegation_id: &DelegationId) -> Result<(), TransportError> {
        let mut st = self.lock();
        let Some(d) = st.remove(delegation_id.as_str()) else {
            return Ok(());
        };
        // Revoke first: from here on sshd refuses the certificate.
        self.write_principals(&st)?;
        drop(st);
        for b in d.binds.iter().rev() {
            unmount(b, self.config.helper_timeout);
        }
        remove_token_dir(&d.token_dir);
        tracing::info!(delegation = %delegation_id, "sshfs export revoked and removed");
        Ok(())
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
