//! A real git server for tests: `git daemon` (the `git://` protocol, fetch and push) on a
//! listener of 127.0.0.1 port 0 bound here, one `git daemon --inetd` per connection, so no
//! port is guessed and every process it started is gone when it is dropped.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// `git daemon` serving the repositories under a directory (see the [module docs](self)).
pub struct GitDaemon {
    /// `git://127.0.0.1:<port>/`: a repository `r.git` under the base is `<url>r.git`.
    pub url: String,
    /// The directory served.
    pub base: PathBuf,
    port: u16,
    stop: Arc<AtomicBool>,
    children: Arc<Mutex<Vec<Child>>>,
    accept: Option<JoinHandle<()>>,
}

impl GitDaemon {
    /// Serves `base` (fetch and push, no authentication).
    pub fn start(base: &Path) -> GitDaemon {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = listener.local_addr().expect("bound").port();
        let stop = Arc::new(AtomicBool::new(false));
        let children: Arc<Mutex<Vec<Child>>> = Arc::default();
        let (s2, c2, b2) = (stop.clone(), children.clone(), base.to_path_buf());
        let accept = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (Ok(input), output) = (conn.try_clone(), conn) else {
                    continue;
                };
                let child = Command::new("git")
                    .env("GIT_CONFIG_GLOBAL", "/dev/null")
                    .env("GIT_CONFIG_NOSYSTEM", "1")
                    .args(["daemon", "--inetd", "--export-all", "--enable=receive-pack"])
                    .arg(format!("--base-path={}", b2.display()))
                    .arg(&b2)
                    .stdin(Stdio::from(std::os::fd::OwnedFd::from(input)))
                    .stdout(Stdio::from(std::os::fd::OwnedFd::from(output)))
                    .stderr(Stdio::null())
                    .spawn();
                if let Ok(c) = child {
                    let mut all = c2.lock().unwrap();
                    // Reap the ones that ended.
                    all.retain_mut(|c| c.try_wait().ok().flatten().is_none());
                    all.push(c);
                }
            }
        });
        GitDaemon {
            url: format!("git://127.0.0.1:{port}/"),
            base: base.to_path_buf(),
            port,
            stop,
            children,
            accept: Some(accept),
        }
    }

    /// Creates the bare repository `name` under the base (see [`seed_repository`]); its URL.
    pub fn repository(&self, name: &str) -> String {
        seed_repository(&self.base, name);
        format!("{}{name}", self.url)
    }

    /// `git for-each-ref` of the repository `name`: every ref and its commit.
    pub fn refs(&self, name: &str) -> String {
        refs(&self.base.join(name))
    }
}

impl Drop for GitDaemon {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        for mut c in self.children.lock().unwrap().drain(..) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Creates the bare repository `base/name` with one commit on `main` and one on `feature`.
pub fn seed_repository(base: &Path, name: &str) -> PathBuf {
    let repo = base.join(name);
    git(base, &["init", "-q", "--bare", "-b", "main", name]);
    let scratch = base.join(format!("{name}.seed"));
    git(base, &["init", "-q", "-b", "main", &format!("{name}.seed")]);
    std::fs::write(scratch.join("README"), "the remote's own file\n").unwrap();
    git(&scratch, &["add", "README"]);
    git(&scratch, &["commit", "-q", "-m", "main"]);
    git(&scratch, &["branch", "feature"]);
    git(
        &scratch,
        &["push", "-q", repo.to_str().unwrap(), "main", "feature"],
    );
    std::fs::remove_dir_all(&scratch).unwrap();
    repo
}

/// `git for-each-ref` of the repository `repo`: every ref and its commit.
pub fn refs(repo: &Path) -> String {
    git(repo, &["for-each-ref", "--format=%(refname) %(objectname)"])
}

/// Runs git in `dir` (no user or system configuration, a fixed identity); its output.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.org"])
        .args(args)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}
