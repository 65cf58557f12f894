//! Executors behind NAT (issue 51): the real `awcp-relay`, `awcp-executor --tunnel` and
//! `awcp delegate` binaries on 127.0.0.1. A delegation goes through the relay on both runtimes;
//! a wrong token is refused; a token cannot serve another executor's name; an executor comes
//! back after its relay restarts on the same port; one relay serves 100 executors; the
//! executor's own `--auth-token` holds through the relay. Faults mid-task are in
//! `tunnel_faults.rs`, TLS and client certificates in `tunnel_tls.rs`.

mod tunnel_support;

use std::time::{Duration, Instant};

use tunnel_support::*;

fn delegation_through_the_relay(runtime: &str) {
    let dir = tempfile::tempdir().unwrap();
    let reg = registry(dir.path(), &[("alice", "alice-token")]);
    let (_relay, addr) = relay(runtime, &reg, "127.0.0.1:0");
    let exdir = tempfile::tempdir().unwrap();
    let _ex = executor(runtime, exdir.path(), &addr, "alice-token");
    wait_served(&addr, "alice");
    // The relay refuses what it does not serve.
    assert_eq!(get(&addr, "/e/nobody/awcp/status").0, 404);
    assert_eq!(get(&addr, "/elsewhere").0, 404);
    delegation_is_applied(runtime, &addr, "alice");
}

#[test]
fn a_delegation_goes_through_the_relay_on_tokio() {
    delegation_through_the_relay("tokio");
}

#[test]
fn a_delegation_goes_through_the_relay_on_smol() {
    delegation_through_the_relay("smol");
}

/// An executor whose token the relay does not know stops (retrying cannot help) and exits 1;
/// a registered token serves its own name only, so a second executor cannot take the first's.
#[test]
fn a_wrong_token_is_refused_and_a_token_serves_its_own_name_only() {
    let dir = tempfile::tempdir().unwrap();
    let reg = registry(
        dir.path(),
        &[("alice", "alice-token"), ("bob", "bob-token")],
    );
    let (_relay, addr) = relay("tokio", &reg, "127.0.0.1:0");

    let wrong = tempfile::tempdir().unwrap();
    let mut ex = executor("tokio", wrong.path(), &addr, "not-a-registered-token");
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = ex.0.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "the executor kept running");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(1));

    let a = tempfile::tempdir().unwrap();
    let mut alice = executor("tokio", a.path(), &addr, "alice-token");
    wait_served(&addr, "alice");
    let b = tempfile::tempdir().unwrap();
    let _bob = executor("smol", b.path(), &addr, "bob-token");
    wait_served(&addr, "bob");
    // Bob's connection did not take alice's name: with alice gone, her URL is not served
    // (after the relay's offline grace: 503) while bob's still is.
    let _ = alice.0.kill();
    let _ = alice.0.wait();
    let (status, body) = get(&addr, "/e/alice/awcp/status");
    assert_eq!(status, 503, "{body}");
    assert_eq!(get(&addr, "/e/bob/awcp/status").0, 200);
}

/// The relay stops while no task runs and starts again on the same port: the executor
/// reconnects by itself and the next delegation succeeds.
#[test]
fn the_executor_reconnects_after_its_relay_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let reg = registry(dir.path(), &[("alice", "alice-token")]);
    let (first, addr) = relay("smol", &reg, "127.0.0.1:0");
    let exdir = tempfile::tempdir().unwrap();
    let _ex = executor("tokio", exdir.path(), &addr, "alice-token");
    wait_served(&addr, "alice");
    drop(first);
    let (_second, again) = relay("smol", &reg, &addr);
    assert_eq!(again, addr);
    wait_served(&addr, "alice");
    delegation_is_applied("smol", &addr, "alice");
}

/// A workspace of a few MiB (incompressible) travels inline in START through the relay and
/// comes back in the result: both bodies are streamed under the tunnel's flow control.
#[test]
fn a_workspace_of_a_few_mib_goes_through_the_relay() {
    let dir = tempfile::tempdir().unwrap();
    let reg = registry(dir.path(), &[("alice", "alice-token")]);
    let (_relay, addr) = relay("tokio", &reg, "127.0.0.1:0");
    let exdir = tempfile::tempdir().unwrap();
    let _ex = executor("smol", exdir.path(), &addr, "alice-token");
    wait_served(&addr, "alice");
    let ws = workspace();
    awcp_tests::mem::write_noise(&ws.path().join("big.bin"), 3 << 20, 0x9e37_79b9_7f4a_7c15);
    let big = std::fs::read(ws.path().join("big.bin")).unwrap();
    let state = tempfile::tempdir().unwrap();
    let o = delegate(
        "tokio",
        ws.path(),
        &format!("http://{addr}/e/alice/awcp"),
        state.path(),
    );
    assert_applied(&o, ws.path());
    assert!(std::fs::read(ws.path().join("big.bin")).unwrap() == big);
}

/// One relay, 100 executors (half on each runtime), each with its own name and token, and a
/// delegation to each through the relay, eight at a time: every one is applied, so no request
/// reached another executor or was lost.
#[test]
fn one_relay_serves_100_executors_with_a_delegation_to_each() {
    use sha2::{Digest, Sha256};
    const N: usize = 100;
    let dir = tempfile::tempdir().unwrap();
    let names: Vec<String> = (0..N).map(|i| format!("ex{i:03}")).collect();
    let mut text = String::new();
    for name in &names {
        let digest = Sha256::digest(format!("{name}-token").as_bytes());
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        text.push_str(&format!("{name} {hex}\n"));
    }
    let reg = dir.path().join("executors.txt");
    std::fs::write(&reg, text).unwrap();
    let (_relay, addr) = relay("tokio", &reg, "127.0.0.1:0");
    let mut executors = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let exdir = dir.path().join(name);
        std::fs::create_dir(&exdir).unwrap();
        // Each agent signs its work with its executor's name.
        let agent = format!("{AGENT}echo {name} > WHO.txt\n");
        let runtime = if i % 2 == 0 { "tokio" } else { "smol" };
        executors.push(executor_with(
            runtime,
            &exdir,
            &format!("ws://{addr}/tunnel"),
            &format!("{name}-token"),
            &agent,
        ));
    }
    for name in &names {
        wait_served(&addr, name);
    }
    let next = std::sync::Mutex::new(names.iter());
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| loop {
                let Some(name) = next.lock().unwrap().next() else {
                    return;
                };
                let ws = delegation_is_applied("tokio", &addr, name);
                assert_eq!(
                    std::fs::read_to_string(ws.path().join("WHO.txt")).unwrap(),
                    format!("{name}\n")
                );
            });
        }
    });
}

/// The relay is not the delegators' authentication: an executor with `--auth-token-file`
/// behind it refuses a delegator without its token (`AUTH_FAILED`, the workspace untouched)
/// and serves one with it, the credential passing through the relay.
#[test]
fn the_executors_own_auth_holds_through_the_relay() {
    let dir = tempfile::tempdir().unwrap();
    let reg = registry(dir.path(), &[("alice", "alice-token")]);
    let (_relay, addr) = relay("tokio", &reg, "127.0.0.1:0");
    let exdir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("delegators.token");
    std::fs::write(&secret, "delegators-secret\n").unwrap();
    let _ex = executor_with_args(
        "smol",
        exdir.path(),
        &format!("ws://{addr}/tunnel"),
        "alice-token",
        AGENT,
        &["--auth-token-file", secret.to_str().unwrap()],
    );
    // Served once the executor itself answers: its status, too, wants the token (401 is
    // taken as served).
    awcp_tests::relay::wait_served_with("alice", |path| match get(&addr, path) {
        (401, body) => (200, body),
        other => other,
    });
    let peer = format!("http://{addr}/e/alice/awcp");

    let ws = workspace();
    let state = tempfile::tempdir().unwrap();
    let o = delegate("tokio", ws.path(), &peer, state.path());
    assert_ne!(o.status.code(), Some(0), "{}", awcp_tests::bins::show(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["error"]["code"], "AUTH_FAILED", "{v}");
    assert!(!ws.path().join("RESULT.txt").exists());

    let ws = workspace();
    let state = tempfile::tempdir().unwrap();
    let token = secret.to_str().unwrap();
    let o = delegate_with(
        "tokio",
        ws.path(),
        &peer,
        state.path(),
        &["--token-file", token],
    );
    assert_applied(&o, ws.path());
}
