//! A real S3-compatible server for tests: [`s3s-fs`](https://crates.io/crates/s3s-fs) 0.14.1
//! (installed by `.ci/run` under `target/s3s-fs`), started on a free loopback port with random
//! credentials, so that requests are checked the way a real S3 checks them: SigV4 header
//! signatures, presigned URLs (signature and expiry) and the signed payload hash. Unsigned
//! requests are refused.
//!
//! s3s-fs keeps bucket `b`'s object `k` in the file `<root>/b/k` (keys with `/` become
//! subdirectories) and its own metadata in hidden files directly under `<root>`
//! (`.bucket-….object-….metadata.json`, `.bucket-….object-….internal.json`, `.tmp.*`,
//! `.upload-*`), never inside a bucket's directory. A bucket is a directory of `<root>`.

use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long [`S3Server::start`] waits for the server to listen.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// What s3s-fs logs (at `info`, on stdout) once it listens; the address follows.
const LISTENING: &str = "server is running at http://";

/// The s3s-fs binary: `$AWCP_S3S_FS` if set, else `<target>/s3s-fs/bin/s3s-fs` if it exists
/// (`<target>` is `$CARGO_TARGET_DIR`, or the workspace's `target`), else `s3s-fs` if it is on
/// `PATH`; `None` if none of them is there.
pub fn s3s_fs_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("AWCP_S3S_FS") {
        return Some(PathBuf::from(p));
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root");
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(t) => workspace.join(t),
        None => workspace.join("target"),
    };
    let installed = target.join("s3s-fs").join("bin").join("s3s-fs");
    if installed.is_file() {
        return Some(installed);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("s3s-fs"))
            .find(|p| p.is_file())
    })
}

/// Whether test `test` can run: `true` if [`s3s_fs_binary`] finds the binary. Without it the
/// test panics if `AWCP_REQUIRE_S3_TEST=1` (as CI sets), else prints a skip line and returns
/// `false`.
pub fn require_or_skip(test: &str) -> bool {
    if s3s_fs_binary().is_some() {
        return true;
    }
    let why = "s3s-fs is not installed (cargo install s3s-fs --version 0.14.1 --features binary \
               --locked --root target/s3s-fs, or set AWCP_S3S_FS)";
    if std::env::var("AWCP_REQUIRE_S3_TEST").as_deref() == Ok("1") {
        panic!("{test}: {why}, and AWCP_REQUIRE_S3_TEST=1");
    }
    eprintln!("skipping {test}: {why}");
    false
}

/// A running s3s-fs on `127.0.0.1` with its own data directory and random credentials. Dropping
/// it kills the server (SIGKILL, then waits for it) and removes its directory.
pub struct S3Server {
    /// The server's base URL, `http://127.0.0.1:PORT` (path-style: `ENDPOINT/bucket/key`).
    pub endpoint: String,
    /// The only access key the server accepts.
    pub access_key: String,
    /// The secret key of [`S3Server::access_key`].
    pub secret_key: String,
    /// The region to sign with (`us-east-1`; s3s-fs accepts any region in the credential scope).
    pub region: String,
    /// The server's data directory: one subdirectory per bucket (see the module's docs).
    pub root: PathBuf,
    /// The temporary directory holding `root` and the server's stderr (removed on drop).
    dir: PathBuf,
    child: Child,
}

impl S3Server {
    /// Starts s3s-fs on a free loopback port (it binds port 0 and logs the port it got) with
    /// a fresh data directory and random credentials, and returns once the port accepts
    /// connections. Panics if the binary is missing (call [`require_or_skip`] first) or if the
    /// server does not listen within 20 s.
    pub fn start() -> S3Server {
        let bin = s3s_fs_binary().expect("s3s-fs is installed (see require_or_skip)");
        let dir = unique_temp_dir();
        let root = dir.join("data");
        std::fs::create_dir_all(&root).expect("create the S3 data directory");
        let access_key = format!("AK{}", random_hex(8).to_uppercase());
        let secret_key = random_hex(20);
        let stderr_path = dir.join("stderr.log");
        let stderr = std::fs::File::create(&stderr_path).expect("create the server's stderr file");
        let mut child = Command::new(&bin)
            .args(["--host", "127.0.0.1", "--port", "0"])
            .args(["--access-key", &access_key, "--secret-key", &secret_key])
            .arg(&root)
            .env("RUST_LOG", "s3s_fs=info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| {
                let _ = std::fs::remove_dir_all(&dir);
                panic!("start {}: {e}", bin.display())
            });

        // The address comes in the server's log; the thread keeps reading it (so the pipe
        // never fills) until the server exits.
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.split_once(LISTENING).map(|(_, r)| r) {
                    let addr = rest.split_whitespace().next().unwrap_or("").to_owned();
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(addr);
                    }
                }
            }
        });

        let deadline = Instant::now() + START_TIMEOUT;
        let failed = |child: &mut Child, why: String| -> ! {
            let _ = child.kill();
            let _ = child.wait();
            let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
            let _ = std::fs::remove_dir_all(&dir);
            panic!("s3s-fs did not start: {why}; its stderr:\n{stderr}");
        };
        let addr: SocketAddr = loop {
            match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(addr) => match addr.parse() {
                    Ok(a) => break a,
                    Err(_) => failed(&mut child, format!("it announced {addr:?}")),
                },
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    failed(&mut child, "its output ended before it listened".into())
                }
            }
            if let Ok(Some(status)) = child.try_wait() {
                failed(&mut child, format!("it exited with {status}"));
            }
            if Instant::now() > deadline {
                failed(&mut child, format!("no address within {START_TIMEOUT:?}"));
            }
        };
        // It logs after binding; make sure the port takes connections all the same.
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            if Instant::now() > deadline {
                failed(&mut child, format!("{addr} refuses connections"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        S3Server {
            endpoint: format!("http://{addr}"),
            access_key,
            secret_key,
            region: "us-east-1".into(),
            root,
            dir,
            child,
        }
    }

    /// The server process's id (to check that drop ended it).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Creates bucket `name`: s3s-fs's buckets are the directories of [`S3Server::root`] (its
    /// CreateBucket makes the same directory). Panics if it cannot, or if `name` is not a name
    /// s3s-fs accepts (3 to 63 of `a-z`, `0-9`, `.`, `-`; it answers `InvalidBucketName` to
    /// others).
    pub fn create_bucket(&self, name: &str) {
        assert!(
            (3..=63).contains(&name.len())
                && name.bytes().all(|b| b.is_ascii_lowercase()
                    || b.is_ascii_digit()
                    || b == b'.'
                    || b == b'-'),
            "invalid S3 bucket name {name:?}"
        );
        std::fs::create_dir(self.root.join(name))
            .unwrap_or_else(|e| panic!("create bucket {name}: {e}"));
    }

    /// The keys of the objects stored in `bucket` now, sorted (the bucket directory's files,
    /// with `/` between path components). s3s-fs keeps its metadata outside bucket
    /// directories, so nothing needs skipping; empty directories (left by deleted `a/b` keys,
    /// or `dir/` objects) are not listed. Panics if the bucket does not exist.
    pub fn object_keys(&self, bucket: &str) -> Vec<String> {
        fn walk(dir: &Path, prefix: &str, keys: &mut Vec<String>) {
            let entries =
                std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display()));
            for entry in entries {
                let entry = entry.expect("directory entry");
                let name = entry.file_name().to_string_lossy().into_owned();
                let key = format!("{prefix}{name}");
                if entry.file_type().expect("file type").is_dir() {
                    walk(&entry.path(), &format!("{key}/"), keys);
                } else {
                    keys.push(key);
                }
            }
        }
        let mut keys = Vec::new();
        walk(&self.root.join(bucket), "", &mut keys);
        keys.sort();
        keys
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A new, empty directory under the system's temporary directory.
fn unique_temp_dir() -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    loop {
        let dir = std::env::temp_dir().join(format!(
            "awcp-s3-{}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed),
            random_hex(4)
        ));
        match std::fs::create_dir(&dir) {
            Ok(()) => return dir,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => panic!("create {}: {e}", dir.display()),
        }
    }
}

/// `n` random bytes as lowercase hex: from `/dev/urandom`, else from the clock-seeded
/// [`crate::rng::Rng`].
fn random_hex(n: usize) -> String {
    let mut buf = vec![0u8; n];
    let urandom = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut buf));
    if urandom.is_err() {
        crate::rng::Rng::from_clock().fill(&mut buf);
    }
    buf.iter().map(|b| format!("{b:02x}")).collect()
}
