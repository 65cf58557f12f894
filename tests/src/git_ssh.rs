//! A real git server over SSH for tests: a private `sshd` on 127.0.0.1 whose one login user
//! has `git-shell` as its shell (the way git hosts without a forge serve SSH), with two
//! authorized keys: the delegator's own and a deploy key the delegator hands to executors.
//! Its files are under `/run` (`StrictModes` refuses `/tmp`); the user, the process and the
//! files go when it is dropped.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// useradd/userdel lock /etc/passwd: one at a time within a test process.
static USERS: Mutex<()> = Mutex::new(());

/// Why an SSH git server cannot run here, if it cannot.
pub fn missing_prerequisite() -> Option<String> {
    for p in [
        "/usr/sbin/sshd",
        "/usr/bin/ssh",
        "/usr/bin/ssh-keygen",
        "/usr/sbin/useradd",
    ] {
        if !Path::new(p).exists() {
            return Some(format!("{p} is absent (apt-get install openssh-server)"));
        }
    }
    if git_shell().is_none() {
        return Some("git-shell is not installed beside git".into());
    }
    let uid = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Some("not root (the test creates a login user)".into());
    }
    None
}

/// Whether a missing prerequisite fails the test: `AWCP_REQUIRE_SSHFS_TEST=1` (set by
/// `.ci/run`, which installs sshd), as for the SSHFS tests.
pub fn required() -> bool {
    std::env::var("AWCP_REQUIRE_SSHFS_TEST").is_ok_and(|v| v == "1")
}

/// `git-shell`, on the search path or in git's own directory.
fn git_shell() -> Option<PathBuf> {
    let dirs = std::env::var("PATH").unwrap_or_default();
    let exec = Command::new("git")
        .arg("--exec-path")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    let found = dirs
        .split(':')
        .chain([exec.as_str()])
        .map(|d| Path::new(d).join("git-shell"))
        .find(|p| p.is_file());
    found
}

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

/// A new ed25519 key pair at `path` (and `path.pub`); the public key's line.
fn keygen(path: &Path, comment: &str) -> String {
    run(Command::new("/usr/bin/ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", comment, "-f"])
        .arg(path));
    std::fs::read_to_string(path.with_extension("pub"))
        .unwrap()
        .trim()
        .to_owned()
}

/// A running `sshd` serving git through `git-shell` (see the [module docs](self)).
pub struct GitSshd {
    /// Its directory (root-owned, under `/run`).
    pub base: PathBuf,
    /// The login user.
    pub user: String,
    /// sshd's port on 127.0.0.1.
    pub port: u16,
    /// The server's host public key (`<type> <base64> <comment>`).
    pub host_key: String,
    /// The delegator's own private key.
    pub delegator_key: PathBuf,
    /// `known_hosts` for the delegator's ssh: the host key for `[127.0.0.1]:<port>`.
    pub known_hosts: PathBuf,
    /// The deploy key for executors (private; its public half is authorized).
    pub executor_key: PathBuf,
    /// Another host's public key (for a test that pins the wrong one).
    pub other_host_key: String,
    log: Arc<Mutex<Vec<String>>>,
    child: Child,
}

impl GitSshd {
    /// Creates the user, keys and files, starts sshd; returns once it listens.
    pub fn start() -> GitSshd {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let tag = format!("{:x}{n}", std::process::id());
        let base = PathBuf::from(format!("/run/awcp-gitssh-{tag}"));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir(&base).unwrap();
        chmod(&base, 0o755);
        let user = format!("awcpg{tag}");
        let shell = git_shell().expect("git-shell");
        {
            let _g = USERS.lock().unwrap_or_else(|p| p.into_inner());
            run(Command::new("/usr/sbin/useradd")
                .args(["-r", "-M", "-p", "*", "-d", "/nonexistent", "-s"])
                .arg(&shell)
                .arg(&user));
        }
        let host_key = keygen(&base.join("host_ed25519"), "awcp-test-git-host");
        let other_host_key = keygen(&base.join("other_host_ed25519"), "another-host");
        let keys = base.join("keys");
        std::fs::create_dir(&keys).unwrap();
        chmod(&keys, 0o700);
        let delegator_key = keys.join("delegator");
        let executor_key = keys.join("deploy");
        let authorized = format!(
            "restrict {}\nrestrict {}\n",
            keygen(&delegator_key, "delegator"),
            keygen(&executor_key, "deploy-key")
        );
        let authorized_keys = base.join("authorized_keys");
        std::fs::write(&authorized_keys, authorized).unwrap();
        chmod(&authorized_keys, 0o644);
        let repos = base.join("repos");
        std::fs::create_dir(&repos).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let known_hosts = keys.join("known_hosts");
        std::fs::write(&known_hosts, format!("[127.0.0.1]:{port} {host_key}\n")).unwrap();
        let config = format!(
            "ListenAddress 127.0.0.1\nPort {port}\nHostKey {}\nPidFile none\nUsePAM no\n\
             PasswordAuthentication no\nKbdInteractiveAuthentication no\n\
             AuthenticationMethods publickey\nAuthorizedKeysFile {}\nAllowUsers {user}\n\
             StrictModes yes\nDisableForwarding yes\nPermitTTY no\nPermitUserRC no\n\
             LogLevel VERBOSE\n",
            base.join("host_ed25519").display(),
            authorized_keys.display(),
        );
        let config_path = base.join("sshd_config");
        std::fs::write(&config_path, config).unwrap();
        // sshd's privilege-separation directory.
        std::fs::create_dir_all("/run/sshd").unwrap();
        let mut child = Command::new("/usr/sbin/sshd")
            .args(["-D", "-e", "-f"])
            .arg(&config_path)
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
        let me = GitSshd {
            base,
            user,
            port,
            host_key,
            delegator_key,
            known_hosts,
            executor_key,
            other_host_key,
            log,
            child,
        };
        if rx.recv_timeout(Duration::from_secs(20)).is_err() {
            panic!("sshd did not start:\n{}", me.log());
        }
        me
    }

    /// Creates the repository `name` (see [`super::git::seed_repository`]), owned by the
    /// login user; its `ssh://` URL.
    pub fn repository(&self, name: &str) -> String {
        let repos = self.base.join("repos");
        let repo = super::git::seed_repository(&repos, name);
        run(Command::new("chown").args(["-R", &self.user]).arg(&repo));
        format!(
            "ssh://{}@127.0.0.1:{}{}",
            self.user,
            self.port,
            repo.display()
        )
    }

    /// The repository `name` on disk.
    pub fn path(&self, name: &str) -> PathBuf {
        self.base.join("repos").join(name)
    }

    /// Every ref of the repository `name` and its commit.
    pub fn refs(&self, name: &str) -> String {
        // The repository is the login user's: root reads it as a safe directory.
        super::git::git(
            &self.path(name),
            &[
                "-c",
                "safe.directory=*",
                "for-each-ref",
                "--format=%(refname) %(objectname)",
            ],
        )
    }

    /// `GIT_SSH_COMMAND` for the delegator's own pushes: its key, the host key checked.
    pub fn delegator_ssh_command(&self) -> String {
        format!(
            "ssh -i {} -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=yes \
             -o UserKnownHostsFile={}",
            self.delegator_key.display(),
            self.known_hosts.display()
        )
    }

    /// The fingerprint (`SHA256:…`) of the public key at `private.pub`.
    pub fn fingerprint(private: &Path) -> String {
        let out = Command::new("/usr/bin/ssh-keygen")
            .arg("-lf")
            .arg(private.with_extension("pub"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .to_owned()
    }

    /// sshd's log so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }
}

impl Drop for GitSshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _g = USERS.lock().unwrap_or_else(|p| p.into_inner());
        let _ = Command::new("/usr/sbin/userdel")
            .arg(&self.user)
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.base);
    }
}
