//! A private sshd for the SSHFS tests and benchmark: its own config, host key, CA, jail,
//! principals file and SFTP login user, on a free loopback port. Everything is removed in
//! `Drop` (mounts, the user, the sshd process, the files).

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use awcp_proto::SshEndpoint;
use awcp_transports::sshfs::{sshd_config, SshdConfigParams};
use awcp_transports::{SshfsDelegator, SshfsDelegatorConfig, SshfsExecutor, SshfsExecutorConfig};

/// Why these tests cannot run here, if they cannot.
pub fn missing_prerequisite() -> Option<String> {
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is absent".into());
    }
    for p in [
        "/usr/sbin/sshd",
        "/usr/bin/sshfs",
        "/usr/bin/fusermount",
        "/usr/bin/ssh-keygen",
        "/usr/bin/sftp",
        "/usr/sbin/useradd",
    ] {
        if !Path::new(p).exists() {
            return Some(format!(
                "{p} is absent (apt-get install openssh-server sshfs)"
            ));
        }
    }
    let uid = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Some("not root (the test creates a login user and bind mounts)".into());
    }
    None
}

/// Skips the calling test with a clear message when a prerequisite is missing.
#[macro_export]
macro_rules! require_sshfs {
    () => {
        if let Some(why) = sshfs_support::missing_prerequisite() {
            eprintln!("SKIPPED: sshfs tests need a real sshd and FUSE: {why}");
            return;
        }
    };
}

/// useradd/userdel lock /etc/passwd; tests create users one at a time.
static USERS: Mutex<()> = Mutex::new(());

fn run(cmd: &mut Command) {
    let out = cmd.output().expect("spawn");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A running private sshd and the delegator/executor transports wired to it.
pub struct Sshd {
    /// Base directory (under /run: every component root-owned, as ChrootDirectory and
    /// StrictModes require).
    pub base: PathBuf,
    /// The SFTP login user.
    pub user: String,
    /// sshd's port on 127.0.0.1.
    pub port: u16,
    /// The delegator's workspace (owned by `user`).
    pub workspace: PathBuf,
    /// The executor's work root.
    pub work_root: PathBuf,
    /// The executor's credential dir.
    pub key_dir: PathBuf,
    /// The jail.
    pub jail: PathBuf,
    /// The principals file.
    pub principals_file: PathBuf,
    /// The delegator transport.
    pub delegator: Arc<SshfsDelegator>,
    /// sshd's log lines.
    pub log: Arc<Mutex<Vec<String>>>,
    child: Child,
    _dir: tempfile::TempDir,
}

impl Sshd {
    /// Creates the user, the files and starts sshd; returns once sshd listens.
    pub fn start() -> Sshd {
        let dir = tempfile::Builder::new()
            .prefix("awcp-sshfs-")
            .tempdir_in("/run")
            .unwrap();
        let base = dir.path().to_path_buf();
        chmod(&base, 0o755);
        let user = format!(
            "awcpt{}",
            base.file_name().unwrap().to_string_lossy()[11..]
                .to_ascii_lowercase()
                .replace(|c: char| !c.is_ascii_alphanumeric(), "x")
        );
        {
            let _g = USERS.lock().unwrap_or_else(|p| p.into_inner());
            run(Command::new("/usr/sbin/useradd").args([
                "-r",
                "-M",
                // Not locked ('!'), yet no password: sshd without PAM refuses locked accounts.
                "-p",
                "*",
                "-d",
                "/nonexistent",
                "-s",
                "/usr/sbin/nologin",
                &user,
            ]));
        }
        let jail = base.join("jail");
        std::fs::create_dir(&jail).unwrap();
        chmod(&jail, 0o711);
        let workspace = base.join("ws");
        std::fs::create_dir(&workspace).unwrap();
        std::fs::write(workspace.join("a.txt"), "A\n").unwrap();
        std::fs::write(workspace.join("gone.txt"), "to be deleted\n").unwrap();
        std::fs::create_dir(workspace.join("src")).unwrap();
        std::fs::write(workspace.join("src/keep.rs"), "fn main() {}\n").unwrap();
        std::os::unix::fs::symlink("/etc/hostname", workspace.join("leak")).unwrap();
        run(Command::new("chown").args(["-R", &user]).arg(&workspace));
        let host_key = base.join("host_ed25519");
        run(Command::new("/usr/bin/ssh-keygen")
            .args([
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                "awcp-test-host",
                "-f",
            ])
            .arg(&host_key));
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let principals_dir = base.join("principals");
        let config = SshfsDelegatorConfig {
            state_dir: base.join("state"),
            principals_dir: principals_dir.clone(),
            jail_root: jail.clone(),
            endpoint: SshEndpoint {
                host: "127.0.0.1".into(),
                port,
                user: user.clone(),
            },
            host_public_key: host_key.with_extension("pub"),
            helper_timeout: Duration::from_secs(10),
        };
        let principals_file = config.principals_file();
        let delegator = Arc::new(SshfsDelegator::new(config.clone()).unwrap());
        let cfg = sshd_config(&SshdConfigParams {
            user: user.clone(),
            ca_public_key: config.ca_public_key_path(),
            principals_dir,
            jail_root: jail.clone(),
            standalone: Some(("127.0.0.1".into(), port, host_key.clone())),
        });
        let cfg_path = base.join("sshd_config");
        std::fs::write(&cfg_path, cfg).unwrap();
        // sshd's privilege-separation directory.
        std::fs::create_dir_all("/run/sshd").unwrap();
        let mut child = Command::new("/usr/sbin/sshd")
            .args(["-D", "-e", "-f"])
            .arg(&cfg_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        let log2 = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("Server listening on") {
                    let _ = tx.send(());
                }
                log2.lock().unwrap().push(line);
            }
        });
        let mut me = Sshd {
            base: base.clone(),
            user,
            port,
            workspace,
            work_root: base.join("work"),
            key_dir: base.join("keys"),
            jail,
            principals_file,
            delegator,
            log,
            child,
            _dir: dir,
        };
        if rx.recv_timeout(Duration::from_secs(20)).is_err() {
            let log = me.log.lock().unwrap().join("\n");
            let _ = me.child.kill();
            panic!("sshd did not start:\n{log}");
        }
        std::fs::create_dir_all(&me.work_root).unwrap();
        me
    }

    /// An executor transport with its credentials under this fixture.
    pub fn executor(&self) -> SshfsExecutor {
        SshfsExecutor::new(SshfsExecutorConfig::new(&self.key_dir))
    }

    /// sshd's log so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// sshfs mounts under the work root.
    pub fn mounts_left(&self) -> Vec<String> {
        std::fs::read_to_string("/proc/self/mounts")
            .unwrap_or_default()
            .lines()
            .filter(|l| {
                let mp = l.split(' ').nth(1).unwrap_or("");
                Path::new(mp).starts_with(&self.base)
            })
            .map(str::to_owned)
            .collect()
    }

    /// Files in the executor's credential dir.
    pub fn key_files_left(&self) -> usize {
        std::fs::read_dir(&self.key_dir)
            .map(|r| r.count())
            .unwrap_or(0)
    }

    /// Non-empty lines of the principals file.
    pub fn principals(&self) -> Vec<String> {
        std::fs::read_to_string(&self.principals_file)
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Anything a failed test left mounted, deepest first.
        let mut left: Vec<String> = self
            .mounts_left()
            .iter()
            .filter_map(|l| l.split(' ').nth(1).map(str::to_owned))
            .collect();
        left.sort();
        for mp in left.iter().rev() {
            let _ = Command::new("/usr/bin/fusermount")
                .args(["-uz", mp])
                .status();
            let _ = Command::new("umount").args(["-l", mp]).status();
        }
        let _g = USERS.lock().unwrap_or_else(|p| p.into_inner());
        let _ = Command::new("/usr/sbin/userdel")
            .arg(&self.user)
            .stderr(Stdio::null())
            .status();
    }
}

/// Credential files written from a handle, for driving `ssh`/`sftp` directly.
pub struct ClientCreds {
    /// Private key.
    pub key: PathBuf,
    /// Certificate.
    pub cert: PathBuf,
    /// known_hosts with the pinned host key.
    pub known_hosts: PathBuf,
}

impl ClientCreds {
    /// Writes the handle's credential under `dir` (mode 0600).
    pub fn write(dir: &Path, h: &awcp_proto::SshfsHandle) -> ClientCreds {
        std::fs::create_dir_all(dir).unwrap();
        let c = ClientCreds {
            key: dir.join("id"),
            cert: dir.join("id-cert.pub"),
            known_hosts: dir.join("known_hosts"),
        };
        std::fs::write(&c.key, &h.credential.private_key).unwrap();
        chmod(&c.key, 0o600);
        std::fs::write(
            &c.cert,
            format!("{}\n", h.credential.certificate.as_deref().unwrap()),
        )
        .unwrap();
        std::fs::write(
            &c.known_hosts,
            format!(
                "[{}]:{} {}\n",
                h.endpoint.host,
                h.endpoint.port,
                h.host_key.as_deref().unwrap()
            ),
        )
        .unwrap();
        c
    }

    fn common(&self, port_flag: &str, port: u16) -> Vec<String> {
        vec![
            "-F".into(),
            "/dev/null".into(),
            "-i".into(),
            self.key.display().to_string(),
            "-o".into(),
            format!("CertificateFile={}", self.cert.display()),
            "-o".into(),
            format!("UserKnownHostsFile={}", self.known_hosts.display()),
            "-o".into(),
            "GlobalKnownHostsFile=/dev/null".into(),
            "-o".into(),
            "StrictHostKeyChecking=yes".into(),
            "-o".into(),
            "IdentitiesOnly=yes".into(),
            "-o".into(),
            "BatchMode=yes".into(),
            "-o".into(),
            "ConnectTimeout=10".into(),
            port_flag.into(),
            port.to_string(),
        ]
    }

    /// Runs `ssh` with extra arguments; returns (success, stdout, stderr).
    pub fn ssh(&self, fx: &Sshd, extra: &[&str]) -> (bool, String, String) {
        let out = Command::new("ssh")
            .args(self.common("-p", fx.port))
            .args(extra)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Runs an `sftp` batch; returns (success, stdout + stderr).
    pub fn sftp(&self, fx: &Sshd, batch: &str) -> (bool, String) {
        use std::io::Write;
        let mut child = Command::new("sftp")
            .args(self.common("-P", fx.port))
            .args(["-b", "-"])
            .arg(format!("{}@127.0.0.1", fx.user))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(batch.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }
}
