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

/// Whether a missing prerequisite fails the test instead of skipping it:
/// `AWCP_REQUIRE_SSHFS_TEST=1` (set by `.ci/run`, which installs sshd and sshfs).
pub fn required() -> bool {
    std::env::var("AWCP_REQUIRE_SSHFS_TEST").is_ok_and(|v| v == "1")
}

/// Skips the calling test with a clear message when a prerequisite is missing, or fails it
/// when the run requires these tests (see [`required`]).
#[macro_export]
macro_rules! require_sshfs {
    () => {
        if let Some(why) = sshfs_support::missing_prerequisite() {
            if sshfs_support::required() {
                panic!("sshfs tests need a real sshd and FUSE (AWCP_REQUIRE_SSHFS_TEST=1): {why}");
            }
            eprintln!(
                "SKIPPED: sshfs tests need a real sshd and FUSE: {why} \
                 (set AWCP_REQUIRE_SSHFS_TEST=1 to make this fatal)"
            );
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
    /// Its configuration (for more delegator transports or processes on the same jail).
    pub config: SshfsDelegatorConfig,
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
        let config = SshfsDelegatorConfig::new(
            base.join("state"),
            principals_dir.clone(),
            jail.clone(),
            SshEndpoint {
                host: "127.0.0.1".into(),
                port,
                user: user.clone(),
            },
            host_key.with_extension("pub"),
        );
        let principals_file = config.principals_file();
        let delegator = Arc::new(
            SshfsDelegator::new(config.clone()).unwrap_or_else(|e| panic!("delegator: {e}")),
        );
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
            config,
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

    /// Kills this fixture's sshd and every process below it (its sessions): the delegator's
    /// sshd is gone, every connection to it dead.
    pub fn kill_server(&mut self) {
        let root = self.child.id() as i32;
        let mut tree = vec![root];
        let mut i = 0;
        while i < tree.len() {
            let parent = tree[i];
            for pid in all_pids() {
                if ppid(pid) == Some(parent) && !tree.contains(&pid) {
                    tree.push(pid);
                }
            }
            i += 1;
        }
        for pid in tree.iter().rev() {
            let _ = Command::new("kill")
                .args(["-9", &pid.to_string()])
                .stderr(Stdio::null())
                .status();
        }
        let _ = self.child.wait();
    }

    /// A new workspace `name` under the fixture (owned by the login user) with `a.txt`.
    pub fn workspace(&self, name: &str) -> PathBuf {
        let ws = self.base.join(name);
        std::fs::create_dir(&ws).unwrap();
        std::fs::write(ws.join("a.txt"), format!("{name}\n")).unwrap();
        run(Command::new("chown").args(["-R", &self.user]).arg(&ws));
        ws
    }

    /// Writes the `--sshfs-config` JSON for this fixture to `path`.
    pub fn write_cli_config(&self, path: &Path) {
        let v = serde_json::json!({
            "host": "127.0.0.1",
            "port": self.port,
            "user": self.user,
            "jailRoot": self.jail,
            "principalsDir": self.config.principals_dir,
            "hostPublicKey": self.config.host_public_key,
            "caDir": self.config.state_dir,
        });
        std::fs::write(path, v.to_string()).unwrap();
    }

    /// `sshfs` processes (and anything else) whose command line mentions `dir`.
    pub fn processes_mentioning(dir: &Path) -> Vec<String> {
        let needle = dir.to_string_lossy().into_owned();
        all_pids()
            .into_iter()
            .filter(|&p| p != std::process::id() as i32)
            .filter_map(|p| {
                let c = std::fs::read(format!("/proc/{p}/cmdline")).ok()?;
                let c = String::from_utf8_lossy(&c).replace('\0', " ");
                c.contains(&needle).then(|| format!("{p}: {c}"))
            })
            .collect()
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

fn all_pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .map(|r| {
            r.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

fn ppid(pid: i32) -> Option<i32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s[s.rfind(')')? + 1..]
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
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

    /// Opens an SSH connection with no channel (`ssh -M -N`, a control master at `ctl`), as
    /// an executor holding the credential can, and waits until it is up.
    pub fn idle_master(&self, fx: &Sshd, ctl: &Path) -> Child {
        let mut child = Command::new("ssh")
            .args(self.common("-p", fx.port))
            .args(["-M", "-N", "-o", "ControlPersist=no", "-S"])
            .arg(ctl)
            .arg(format!("{}@127.0.0.1", fx.user))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let until = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let (up, _, _) = self.ssh(fx, &["-S", &ctl.display().to_string(), "-O", "check", "x"]);
            if up {
                return child;
            }
            if let Ok(Some(st)) = child.try_wait() {
                panic!("the idle connection ended at once: {st}\n{}", fx.log());
            }
            assert!(
                std::time::Instant::now() < until,
                "the idle connection never came up"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Runs an `sftp` batch over the control master at `ctl` only (never a new login);
    /// returns (success, stdout + stderr).
    pub fn sftp_over(&self, fx: &Sshd, ctl: &Path, batch: &str) -> (bool, String) {
        let master = [
            "-o".to_owned(),
            "ControlMaster=no".to_owned(),
            "-o".to_owned(),
            format!("ControlPath={}", ctl.display()),
            "-o".to_owned(),
            "PreferredAuthentications=none".to_owned(),
        ];
        self.sftp_with(fx, &master, batch)
    }

    /// Opens an SFTP session that stays open (see [`Sftp`]).
    pub fn session(&self, fx: &Sshd) -> Sftp {
        Sftp::open(self, fx)
    }

    /// Runs an `sftp` batch; returns (success, stdout + stderr).
    pub fn sftp(&self, fx: &Sshd, batch: &str) -> (bool, String) {
        self.sftp_with(fx, &[], batch)
    }

    /// Runs an `sftp` batch with `extra` options; returns (success, stdout + stderr).
    fn sftp_with(&self, fx: &Sshd, extra: &[String], batch: &str) -> (bool, String) {
        use std::io::Write;
        let mut child = Command::new("sftp")
            .args(self.common("-P", fx.port))
            .args(extra)
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

/// A minimal SFTP v3 client over `ssh -s sftp` that keeps its session and handles open, as an
/// executor holding the credential can: open files and directories during the lease, use the
/// handles after it. Every call fails with `Err` once the server ends the session.
pub struct Sftp {
    child: Child,
    stdin: std::process::ChildStdin,
    packets: std::sync::mpsc::Receiver<Option<Vec<u8>>>,
    next_id: u32,
}

/// `SSH_FXF_READ`, `SSH_FXF_WRITE`, `SSH_FXF_CREAT`, `SSH_FXF_TRUNC`.
pub const READ: u32 = 1;
/// See [`READ`].
pub const WRITE: u32 = 2;
/// See [`READ`].
pub const CREAT: u32 = 8;

fn put_u32(b: &mut Vec<u8>, v: u32) {
    b.extend_from_slice(&v.to_be_bytes());
}

fn put_str(b: &mut Vec<u8>, s: &[u8]) {
    put_u32(b, s.len() as u32);
    b.extend_from_slice(s);
}

fn get_u32(b: &[u8], at: &mut usize) -> Option<u32> {
    let v = u32::from_be_bytes(b.get(*at..*at + 4)?.try_into().ok()?);
    *at += 4;
    Some(v)
}

fn get_str<'a>(b: &'a [u8], at: &mut usize) -> Option<&'a [u8]> {
    let n = get_u32(b, at)? as usize;
    let s = b.get(*at..*at + n)?;
    *at += n;
    Some(s)
}

impl Sftp {
    fn open(c: &ClientCreds, fx: &Sshd) -> Sftp {
        use std::io::Read;
        let mut child = Command::new("ssh")
            .args(c.common("-p", fx.port))
            .args(["-s", &format!("{}@127.0.0.1", fx.user), "sftp"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let (tx, packets) = std::sync::mpsc::channel();
        std::thread::spawn(move || loop {
            let mut len = [0u8; 4];
            if stdout.read_exact(&mut len).is_err() {
                let _ = tx.send(None);
                return;
            }
            let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
            if stdout.read_exact(&mut body).is_err() {
                let _ = tx.send(None);
                return;
            }
            if tx.send(Some(body)).is_err() {
                return;
            }
        });
        let mut me = Sftp {
            child,
            stdin,
            packets,
            next_id: 1,
        };
        let mut init = vec![1u8];
        put_u32(&mut init, 3);
        me.send(&init).expect("sftp init");
        let v = me.recv().expect("sftp version");
        assert_eq!(v[0], 2, "SSH_FXP_VERSION expected");
        me
    }

    fn send(&mut self, body: &[u8]) -> Result<(), String> {
        use std::io::Write;
        let mut p = Vec::with_capacity(body.len() + 4);
        put_u32(&mut p, body.len() as u32);
        p.extend_from_slice(body);
        self.stdin
            .write_all(&p)
            .and_then(|_| self.stdin.flush())
            .map_err(|e| format!("session gone: {e}"))
    }

    fn recv(&mut self) -> Result<Vec<u8>, String> {
        match self.packets.recv_timeout(Duration::from_secs(30)) {
            Ok(Some(p)) => Ok(p),
            Ok(None) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                Err("session closed by the server".into())
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err("no answer in 30 s".into()),
        }
    }

    /// One request; returns the reply's type and payload after the id.
    fn call(&mut self, kind: u8, args: &[u8]) -> Result<(u8, Vec<u8>), String> {
        let id = self.next_id;
        self.next_id += 1;
        let mut b = vec![kind];
        put_u32(&mut b, id);
        b.extend_from_slice(args);
        self.send(&b)?;
        let r = self.recv()?;
        let mut at = 1;
        if get_u32(&r, &mut at) != Some(id) {
            return Err("reply to another request".into());
        }
        Ok((r[0], r[at..].to_vec()))
    }

    fn status(reply: (u8, Vec<u8>)) -> Result<Vec<u8>, String> {
        match reply {
            (101, p) => {
                let mut at = 0;
                let code = get_u32(&p, &mut at).unwrap_or(u32::MAX);
                let msg = get_str(&p, &mut at).unwrap_or_default();
                if code == 0 {
                    Ok(Vec::new())
                } else {
                    Err(format!("status {code}: {}", String::from_utf8_lossy(msg)))
                }
            }
            (_, p) => Ok(p),
        }
    }

    fn handle(reply: (u8, Vec<u8>)) -> Result<Vec<u8>, String> {
        let p = Self::status(reply)?;
        let mut at = 0;
        get_str(&p, &mut at)
            .map(<[u8]>::to_vec)
            .ok_or_else(|| "no handle".into())
    }

    /// `SSH_FXP_OPEN` with `pflags` ([`READ`] | [`WRITE`] …).
    pub fn open_file(&mut self, path: &str, pflags: u32) -> Result<Vec<u8>, String> {
        let mut a = Vec::new();
        put_str(&mut a, path.as_bytes());
        put_u32(&mut a, pflags);
        put_u32(&mut a, 0);
        let r = self.call(3, &a)?;
        Self::handle(r)
    }

    /// `SSH_FXP_OPENDIR`.
    pub fn open_dir(&mut self, path: &str) -> Result<Vec<u8>, String> {
        let mut a = Vec::new();
        put_str(&mut a, path.as_bytes());
        let r = self.call(11, &a)?;
        Self::handle(r)
    }

    /// `SSH_FXP_READ` of up to 4 KiB at `offset`.
    pub fn read(&mut self, handle: &[u8], offset: u64) -> Result<Vec<u8>, String> {
        let mut a = Vec::new();
        put_str(&mut a, handle);
        a.extend_from_slice(&offset.to_be_bytes());
        put_u32(&mut a, 4096);
        match self.call(5, &a)? {
            (103, p) => {
                let mut at = 0;
                Ok(get_str(&p, &mut at).unwrap_or_default().to_vec())
            }
            other => Self::status(other).and_then(|_| Err("no data".into())),
        }
    }

    /// `SSH_FXP_WRITE` at `offset`.
    pub fn write(&mut self, handle: &[u8], offset: u64, data: &[u8]) -> Result<(), String> {
        let mut a = Vec::new();
        put_str(&mut a, handle);
        a.extend_from_slice(&offset.to_be_bytes());
        put_str(&mut a, data);
        let r = self.call(6, &a)?;
        Self::status(r).map(|_| ())
    }

    /// `SSH_FXP_READDIR`: the names of the next batch.
    pub fn read_dir(&mut self, handle: &[u8]) -> Result<Vec<String>, String> {
        let mut a = Vec::new();
        put_str(&mut a, handle);
        match self.call(12, &a)? {
            (104, p) => {
                let mut at = 0;
                let n = get_u32(&p, &mut at).unwrap_or(0);
                let mut names = Vec::new();
                for _ in 0..n {
                    let name = get_str(&p, &mut at).unwrap_or_default();
                    names.push(String::from_utf8_lossy(name).into_owned());
                    let _long = get_str(&p, &mut at);
                    let flags = get_u32(&p, &mut at).unwrap_or(0);
                    // Skip the attributes this client asked nothing about.
                    if flags & 1 != 0 {
                        at += 8;
                    }
                    if flags & 2 != 0 {
                        at += 8;
                    }
                    if flags & 4 != 0 {
                        at += 4;
                    }
                    if flags & 8 != 0 {
                        at += 8;
                    }
                    if flags & 0x8000_0000 != 0 {
                        let count = get_u32(&p, &mut at).unwrap_or(0);
                        for _ in 0..2 * count {
                            let _ = get_str(&p, &mut at);
                        }
                    }
                }
                Ok(names)
            }
            other => Self::status(other).map(|_| Vec::new()),
        }
    }

    /// Waits (at most `timeout`) until the server ends the session; whether it did.
    pub fn ended_by_server(&mut self, timeout: Duration) -> bool {
        match self.packets.recv_timeout(timeout) {
            Ok(None) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => true,
            Ok(Some(_)) => false,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => false,
        }
    }
}

impl Drop for Sftp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
