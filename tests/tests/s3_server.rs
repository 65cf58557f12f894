//! The test S3 server ([`awcp_tests::s3::S3Server`], s3s-fs on loopback) is a real check:
//! correctly signed requests work, and wrongly signed, unsigned, tampered and expired ones are
//! refused. Requests are made with curl (`--aws-sigv4`); presigned URLs with
//! [`S3Server::presign`].
//!
//! Skipped with a message where s3s-fs is not installed, unless `AWCP_REQUIRE_S3_TEST=1` (set by
//! `.ci/run`, which installs it) makes that a failure.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use awcp_tests::s3::{amz_date, hex, hmac_sha256, S3Server};
use sha2::{Digest as _, Sha256};

/// The SHA-256 of the empty payload (what a GET signs as its payload hash).
const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// How a request authenticates.
enum Auth<'a> {
    /// SigV4 header signature (curl `--aws-sigv4`) with this access key and secret key.
    Signed(&'a str, &'a str),
    /// No authentication at all.
    None,
}

/// Runs curl: `method` on `url` with `auth`, uploading `body` (from a file, so curl sends a
/// Content-Length) if given, with `x-amz-content-sha256: payload_hash` (the body's SHA-256 if
/// `None`) on signed requests. Returns the HTTP status and the response body.
fn curl(
    method: &str,
    url: &str,
    auth: Auth,
    body: Option<&[u8]>,
    payload_hash: Option<&str>,
) -> (u16, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new("curl");
    cmd.args([
        "-sS",
        "--max-time",
        "30",
        "-X",
        method,
        "-w",
        "%{http_code}",
        "-o",
        "-",
    ]);
    if let Auth::Signed(key, secret) = auth {
        let hash = match (payload_hash, body) {
            (Some(h), _) => h.to_owned(),
            (None, Some(b)) => hex(&Sha256::digest(b)),
            (None, None) => EMPTY_SHA256.to_owned(),
        };
        cmd.args([
            "--aws-sigv4",
            "aws:amz:us-east-1:s3",
            "--user",
            &format!("{key}:{secret}"),
        ])
        .args(["-H", &format!("x-amz-content-sha256: {hash}")]);
    }
    if let Some(b) = body {
        let file = dir.path().join("body");
        std::fs::write(&file, b).unwrap();
        cmd.arg("-T").arg(&file);
    }
    let out = cmd.arg(url).output().expect("curl runs");
    assert!(
        out.status.success(),
        "curl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut stdout = out.stdout;
    assert!(stdout.len() >= 3, "curl printed no status");
    let code = String::from_utf8(stdout.split_off(stdout.len() - 3)).unwrap();
    (code.parse().expect("an HTTP status"), stdout)
}

/// A signed PUT of `bytes` to `ENDPOINT/path` with the server's own credentials.
fn put(s3: &S3Server, path: &str, bytes: &[u8]) -> u16 {
    let url = format!("{}{path}", s3.endpoint);
    curl(
        "PUT",
        &url,
        Auth::Signed(&s3.access_key, &s3.secret_key),
        Some(bytes),
        None,
    )
    .0
}

/// Bytes of every value, so a round trip that loses or alters any byte shows.
fn sample_bytes() -> Vec<u8> {
    (0..200_000u32)
        .map(|i| (i % 251) as u8 ^ (i >> 8) as u8)
        .collect()
}

#[test]
fn signing_helpers_match_references() {
    // RFC 4231, test case 2.
    assert_eq!(
        hex(&hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    );
    assert_eq!(amz_date(UNIX_EPOCH), "19700101T000000Z");
    assert_eq!(
        amz_date(UNIX_EPOCH + Duration::from_secs(1_709_251_199)),
        "20240229T235959Z"
    );
    // RFC 4231, test case 6 (a key longer than a block is hashed first).
    assert_eq!(
        hex(&hmac_sha256(
            &[0xaa; 131],
            b"Test Using Larger Than Block-Size Key - Hash Key First"
        )),
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
    );
    // The library's own SHA-256 agrees with sha2 across the padding boundaries.
    let data = sample_bytes();
    for len in (0..300).chain([4095, 4096, 4097, data.len()]) {
        assert_eq!(
            awcp_tests::s3::sha256(&data[..len]),
            <[u8; 32]>::from(Sha256::digest(&data[..len])),
            "SHA-256 of {len} bytes"
        );
    }
}

#[test]
fn signed_put_then_get_round_trips() {
    if !awcp_tests::s3::require_or_skip("signed_put_then_get_round_trips") {
        return;
    }
    let s3 = S3Server::start();
    s3.create_bucket("round-trip");
    let bytes = sample_bytes();
    assert_eq!(put(&s3, "/round-trip/dir/obj.bin", &bytes), 200);
    assert_eq!(s3.object_keys("round-trip"), ["dir/obj.bin"]);
    let url = format!("{}/round-trip/dir/obj.bin", s3.endpoint);
    let (code, got) = curl(
        "GET",
        &url,
        Auth::Signed(&s3.access_key, &s3.secret_key),
        None,
        None,
    );
    assert_eq!(code, 200);
    assert!(got == bytes, "GET returned other bytes than were PUT");

    let del = curl(
        "DELETE",
        &url,
        Auth::Signed(&s3.access_key, &s3.secret_key),
        None,
        None,
    );
    assert_eq!(del.0, 204);
    assert!(s3.object_keys("round-trip").is_empty());
}

#[test]
fn wrong_secret_or_key_is_refused() {
    if !awcp_tests::s3::require_or_skip("wrong_secret_or_key_is_refused") {
        return;
    }
    let s3 = S3Server::start();
    s3.create_bucket("wrong-secret");
    let bytes = sample_bytes();
    assert_eq!(put(&s3, "/wrong-secret/kept", &bytes), 200);

    let url = format!("{}/wrong-secret/kept", s3.endpoint);
    let wrong = format!("{}x", s3.secret_key);
    let (code, body) = curl(
        "GET",
        &url,
        Auth::Signed(&s3.access_key, &wrong),
        None,
        None,
    );
    assert_eq!(code, 403, "{}", String::from_utf8_lossy(&body));
    assert!(String::from_utf8_lossy(&body).contains("SignatureDoesNotMatch"));
    let (code, _) = curl(
        "GET",
        &url,
        Auth::Signed("AKUNKNOWN", &s3.secret_key),
        None,
        None,
    );
    assert_eq!(code, 403);

    let put_url = format!("{}/wrong-secret/refused", s3.endpoint);
    let (code, _) = curl(
        "PUT",
        &put_url,
        Auth::Signed(&s3.access_key, &wrong),
        Some(&bytes),
        None,
    );
    assert_eq!(code, 403);
    assert_eq!(s3.object_keys("wrong-secret"), ["kept"]);
}

#[test]
fn unsigned_requests_are_refused() {
    if !awcp_tests::s3::require_or_skip("unsigned_requests_are_refused") {
        return;
    }
    let s3 = S3Server::start();
    s3.create_bucket("unsigned");
    let bytes = sample_bytes();
    assert_eq!(put(&s3, "/unsigned/kept", &bytes), 200);

    let (code, body) = curl(
        "GET",
        &format!("{}/unsigned/kept", s3.endpoint),
        Auth::None,
        None,
        None,
    );
    assert_eq!(code, 403);
    assert!(body != bytes);
    let url = format!("{}/unsigned/refused", s3.endpoint);
    assert_eq!(curl("PUT", &url, Auth::None, Some(&bytes), None).0, 403);
    assert_eq!(s3.object_keys("unsigned"), ["kept"]);
}

#[test]
fn payload_not_matching_its_signed_hash_is_not_stored() {
    if !awcp_tests::s3::require_or_skip("payload_not_matching_its_signed_hash_is_not_stored") {
        return;
    }
    let s3 = S3Server::start();
    s3.create_bucket("payload-hash");
    let url = format!("{}/payload-hash/obj", s3.endpoint);
    let auth = Auth::Signed(&s3.access_key, &s3.secret_key);
    // Signed correctly, but the signed hash is the empty payload's: s3s answers 500.
    let (code, _) = curl("PUT", &url, auth, Some(b"not empty"), Some(EMPTY_SHA256));
    assert!(
        !(200..300).contains(&code),
        "a mismatching payload was accepted ({code})"
    );
    assert!(s3.object_keys("payload-hash").is_empty());
}

#[test]
fn presigned_urls_are_checked() {
    if !awcp_tests::s3::require_or_skip("presigned_urls_are_checked") {
        return;
    }
    let s3 = S3Server::start();
    s3.create_bucket("presigned");
    let bytes = sample_bytes();
    assert_eq!(put(&s3, "/presigned/obj", &bytes), 200);
    assert_eq!(put(&s3, "/presigned/other", b"other"), 200);
    let now = SystemTime::now();

    let url = s3.presign("GET", "presigned", "obj", now, 300);
    let (code, got) = curl("GET", &url, Auth::None, None, None);
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&got));
    assert!(got == bytes, "the presigned GET returned other bytes");

    // One hex digit of the signature changed.
    let last = url.chars().last().unwrap();
    let tampered = format!(
        "{}{}",
        &url[..url.len() - 1],
        if last == '0' { '1' } else { '0' }
    );
    let (code, body) = curl("GET", &tampered, Auth::None, None, None);
    assert_eq!(code, 403);
    assert!(String::from_utf8_lossy(&body).contains("SignatureDoesNotMatch"));

    // The signature is for another object, or another lifetime.
    let other = url.replace("/presigned/obj?", "/presigned/other?");
    assert_eq!(curl("GET", &other, Auth::None, None, None).0, 403);
    let longer = url.replace("X-Amz-Expires=300", "X-Amz-Expires=3000");
    assert_eq!(curl("GET", &longer, Auth::None, None, None).0, 403);

    // Signed 10 s ago for 1 s: correctly signed, but expired.
    let expired = s3.presign("GET", "presigned", "obj", now - Duration::from_secs(10), 1);
    let (code, body) = curl("GET", &expired, Auth::None, None, None);
    assert_eq!(code, 403);
    assert!(String::from_utf8_lossy(&body).contains("expired"));

    // A presigned PUT stores; a tampered one does not.
    let put_url = s3.presign("PUT", "presigned", "uploaded", now, 300);
    assert_eq!(curl("PUT", &put_url, Auth::None, Some(b"up"), None).0, 200);
    let bad = put_url.replace("/presigned/uploaded?", "/presigned/sneaked?");
    assert_eq!(curl("PUT", &bad, Auth::None, Some(b"up"), None).0, 403);
    assert_eq!(s3.object_keys("presigned"), ["obj", "other", "uploaded"]);
}

#[test]
fn drop_kills_the_server_and_removes_its_data() {
    if !awcp_tests::s3::require_or_skip("drop_kills_the_server_and_removes_its_data") {
        return;
    }
    let s3 = S3Server::start();
    s3.create_bucket("dropped");
    assert_eq!(put(&s3, "/dropped/obj", b"x"), 200);
    let (pid, root, endpoint) = (s3.pid(), s3.root.clone(), s3.endpoint.clone());
    assert!(Path::new(&format!("/proc/{pid}")).exists());
    drop(s3);
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "s3s-fs {pid} outlived its guard"
    );
    assert!(!root.exists(), "{} was left", root.display());
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "5", &endpoint])
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "something still answers at {endpoint}"
    );
}
