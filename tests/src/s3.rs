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
//!
//! Presigned URLs (SigV4 query-string auth, as a delegator hands them to an executor) come from
//! [`S3Server::presign`]; [`S3Server::put_object`] stores an object through one. The signing
//! needs SHA-256 and HMAC-SHA256, implemented here ([`sha256`], [`hmac_sha256`]) since this
//! crate's library depends on no hash crate.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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

impl S3Server {
    /// A SigV4 presigned URL for `method` (`GET`, `PUT`, `DELETE`…) on object `key` of
    /// `bucket`: query-string auth signed with the server's own credentials, only the `host`
    /// header signed and the payload `UNSIGNED-PAYLOAD` (so any body may be PUT), signed at `at`
    /// and valid for `expires_secs` seconds from then. `at` in the past and a short lifetime
    /// make a correctly signed URL that the server refuses as expired (HTTP 403). The URL is
    /// path-style, `ENDPOINT/bucket/key?X-Amz-…&X-Amz-Signature=…` (the signature comes last).
    /// Panics if `key` has characters that would need percent-encoding (allowed: ASCII letters,
    /// digits, `-`, `.`, `_`, `~` and `/`).
    pub fn presign(
        &self,
        method: &str,
        bucket: &str,
        key: &str,
        at: SystemTime,
        expires_secs: u64,
    ) -> String {
        self.presign_with_secret(&self.secret_key, method, bucket, key, at, expires_secs)
    }

    /// [`S3Server::presign`], but signed with `secret_key` instead of the server's secret (with
    /// the server's access key): a URL the server refuses with `SignatureDoesNotMatch` (HTTP
    /// 403) when `secret_key` is not [`S3Server::secret_key`].
    pub fn presign_with_secret(
        &self,
        secret_key: &str,
        method: &str,
        bucket: &str,
        key: &str,
        at: SystemTime,
        expires_secs: u64,
    ) -> String {
        assert!(
            key.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._~/".contains(&b)),
            "object key {key:?} would need percent-encoding"
        );
        let path = format!("/{bucket}/{key}");
        let host = self
            .endpoint
            .strip_prefix("http://")
            .expect("an http endpoint");
        let date = amz_date(at);
        let scope = format!("{}/{}/s3/aws4_request", &date[..8], self.region);
        // Already in canonical (sorted, encoded) order.
        let query = format!(
            "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential={}%2F{}&X-Amz-Date={date}\
             &X-Amz-Expires={expires_secs}&X-Amz-SignedHeaders=host",
            self.access_key,
            scope.replace('/', "%2F")
        );
        let canonical = format!("{method}\n{path}\n{query}\nhost:{host}\n\nhost\nUNSIGNED-PAYLOAD");
        let to_sign = format!(
            "AWS4-HMAC-SHA256\n{date}\n{scope}\n{}",
            hex(&sha256(canonical.as_bytes()))
        );
        let mut signing_key = hmac_sha256(
            format!("AWS4{secret_key}").as_bytes(),
            &date.as_bytes()[..8],
        );
        for part in [self.region.as_str(), "s3", "aws4_request"] {
            signing_key = hmac_sha256(&signing_key, part.as_bytes());
        }
        let signature = hex(&hmac_sha256(&signing_key, to_sign.as_bytes()));
        format!(
            "{}{path}?{query}&X-Amz-Signature={signature}",
            self.endpoint
        )
    }

    /// Stores `bytes` as object `key` of `bucket` (which must exist, see
    /// [`S3Server::create_bucket`]) with a PUT to a URL presigned now by
    /// [`S3Server::presign`], over a plain TCP connection. Panics unless the server answers
    /// 200.
    pub fn put_object(&self, bucket: &str, key: &str, bytes: &[u8]) {
        let url = self.presign("PUT", bucket, key, SystemTime::now(), 300);
        let (status, body) = http_request("PUT", &url, bytes);
        assert_eq!(
            status,
            200,
            "PUT {bucket}/{key}: {}",
            String::from_utf8_lossy(&body)
        );
    }
}

/// One HTTP/1.1 request (`Connection: close`) of `method` on the `http://` URL `url` with
/// `body` (with its Content-Length): the response's status and body (the raw bytes after the
/// head; s3s answers a PUT with a Content-Length body, never chunked).
fn http_request(method: &str, url: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let rest = url.strip_prefix("http://").expect("an http URL");
    let (host, target) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let mut c = TcpStream::connect(host).unwrap_or_else(|e| panic!("connect {host}: {e}"));
    c.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("set a read timeout");
    write!(
        c,
        "{method} {target} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .and_then(|()| c.write_all(body))
    .unwrap_or_else(|e| panic!("send {method} to {host}: {e}"));
    let mut response = Vec::new();
    c.read_to_end(&mut response)
        .unwrap_or_else(|e| panic!("read the answer to {method} from {host}: {e}"));
    let head_end = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP head in {:?}", String::from_utf8_lossy(&response)));
    let head = String::from_utf8_lossy(&response[..head_end]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status in {head:?}"));
    (status, response[head_end + 4..].to_vec())
}

/// `YYYYMMDDTHHMMSSZ` of `t` (UTC): the form of SigV4's `X-Amz-Date`. Panics before 1970.
pub fn amz_date(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).expect("after 1970").as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Days since 1970-01-01 to a civil date (H. Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// HMAC-SHA256 (RFC 2104) of `msg` with `key`.
pub fn hmac_sha256(key: &[u8], msg: &[u8]) -> [u8; 32] {
    let mut k = [0u8; 64];
    if key.len() > 64 {
        k[..32].copy_from_slice(&sha256(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let mut inner = k.map(|b| b ^ 0x36).to_vec();
    inner.extend_from_slice(msg);
    let mut outer = k.map(|b| b ^ 0x5c).to_vec();
    outer.extend_from_slice(&sha256(&inner));
    sha256(&outer)
}

/// SHA-256 (FIPS 180-4) of `data`: a plain implementation, for signing test requests (not
/// fast, not constant-time).
pub fn sha256(data: &[u8]) -> [u8; 32] {
    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2,
    ];
    let mut h: [u32; 8] = [
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
        0x5be0cd19,
    ];
    let mut msg = data.to_vec();
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&(data.len() as u64).wrapping_mul(8).to_be_bytes());
    for block in msg.chunks_exact(64) {
        let mut w = [0u32; 64];
        for (wi, word) in w.iter_mut().zip(block.chunks_exact(4)) {
            *wi = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16]
                .wrapping_add(s0)
                .wrapping_add(w[i - 7])
                .wrapping_add(s1);
        }
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut hh] = h;
        for (k, wi) in K.iter().zip(w) {
            let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
            let ch = (e & f) ^ (!e & g);
            let t1 = hh
                .wrapping_add(s1)
                .wrapping_add(ch)
                .wrapping_add(*k)
                .wrapping_add(wi);
            let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
            let maj = (a & b) ^ (a & c) ^ (b & c);
            let t2 = s0.wrapping_add(maj);
            hh = g;
            g = f;
            f = e;
            e = d.wrapping_add(t1);
            d = c;
            c = b;
            b = a;
            a = t1.wrapping_add(t2);
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e, f, g, hh]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 32];
    for (o, x) in out.chunks_exact_mut(4).zip(h) {
        o.copy_from_slice(&x.to_be_bytes());
    }
    out
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
