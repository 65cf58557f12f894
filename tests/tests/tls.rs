//! Finding 3 of issue 12: TLS everywhere. A full delegation over HTTPS with client
//! certificates required on both servers (the executor, and the delegator's archive server
//! the executor fetches from), on tokio and smol, with the archive and the snapshot both
//! travelling by URL; the refusals that must happen (no client certificate, a server from
//! another CA, an expired certificate); and the same through the real binaries and their
//! flags.

#[allow(dead_code, unused_macros)]
mod conformance;
#[allow(dead_code)]
mod net_support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agent_rt::test_util::{CertFiles, TestPki};
use agent_rt::ClientTls;
use awcp_driver::{DelegatorHandle, DelegatorOptions, ExecutorHandle, ExecutorOptions};
use awcp_proto::engine::delegator::SnapshotStatus;
use awcp_proto::{DelegationState, ExecutorConfig};
use awcp_transports::{ArchiveDelegator, ArchiveDelegatorConfig, ArchiveExecutor};
use conformance::*;

/// An executor serving HTTPS on `localhost` (client certificates from `pki` required) that
/// fetches archives with `client`; returns its AWCP URL.
fn tls_executor<R: TestRuntime>(
    dir: &Path,
    pki: &TestPki,
    cert: &CertFiles,
    client: ClientTls,
) -> (ExecutorHandle, String) {
    let engine = ExecutorConfig {
        work_root: dir.join("work").to_string_lossy().into_owned(),
        ..ExecutorConfig::default()
    };
    let mut opts = ExecutorOptions::new(
        engine,
        Arc::new(ArchiveExecutor::default()),
        Arc::new(EditRunner),
    );
    opts.client_tls = client;
    let ex = ExecutorHandle::start(R::default(), opts);
    let (l, a) = bind();
    let server = R::serve_executor_with(
        l,
        ex.clone(),
        pki.server_options(cert, true),
        Box::pin(std::future::pending()),
    );
    R::default().spawn(Box::pin(async move {
        let _ = server.await;
    }));
    (ex, format!("https://localhost:{}/awcp", a.port()))
}

/// A delegator talking TLS with `client`, serving archive URLs over HTTPS (client
/// certificates from `pki` required).
fn tls_delegator<R: TestRuntime>(dir: &Path, pki: &TestPki, client: ClientTls) -> DelegatorHandle {
    let state = dir.join("state");
    let transport = ArchiveDelegator::new(ArchiveDelegatorConfig::new(state.join("exports")));
    let mut opts = DelegatorOptions::new(Arc::new(transport), state);
    opts.engine.sse_backoff = Duration::from_millis(50);
    let (l, a) = bind();
    opts.archive_base_url = Some(format!("https://localhost:{}", a.port()));
    opts.client_tls = client;
    let d = DelegatorHandle::start(R::default(), opts);
    let archives = pki.server("archives", &["localhost"]);
    R::default().spawn_archive_server_with(l, d.clone(), pki.server_options(&archives, true));
    d
}

pub async fn full_delegation_over_https_with_mtls<R: TestRuntime>() {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new(dir.path(), "awcp");
    let other = TestPki::new(dir.path(), "other");
    let exec_cert = pki.server("executor", &["localhost"]);
    let exec_client = pki.client_tls(Some(&pki.client("exec-client", "executor")));
    let (_ex, peer) = tls_executor::<R>(&dir.path().join("x"), &pki, &exec_cert, exec_client);
    let deleg_cert = pki.client("deleg-client", "delegator");

    // The happy path: INVITE/START/SSE/result over mTLS, the archive fetched by the executor
    // from the delegator's mTLS archive server, the snapshot fetched back over mTLS.
    let dg = tls_delegator::<R>(
        &dir.path().join("d1"),
        &pki,
        pki.client_tls(Some(&deleg_cert)),
    );
    let ws = workspace();
    let v = run_to_end::<R>(&dg, params::<R>(&peer, ws.path())).await;
    assert_eq!(v.state, DelegationState::Completed, "{v:?}");
    assert_eq!(v.snapshots[0].status, SnapshotStatus::Applied);
    assert_edited(ws.path());

    // Refusals, each ending the delegation with an error that says why.
    let refused = |client: ClientTls, sub: &'static str| {
        let d = dir.path().join(sub);
        let dg = tls_delegator::<R>(&d, &pki, client);
        let peer = peer.clone();
        async move {
            let ws = workspace();
            let before = tree(ws.path());
            let v = run_to_end::<R>(&dg, params::<R>(&peer, ws.path())).await;
            assert_eq!(v.state, DelegationState::Error, "{v:?}");
            assert_eq!(tree(ws.path()), before);
            v.error.unwrap().message
        }
    };
    // mTLS: a delegator without a client certificate.
    let m = refused(pki.client_tls(None), "d2").await;
    assert!(m.to_lowercase().contains("certificate"), "{m}");
    // A delegator that trusts another CA refuses the executor.
    let m = refused(other.client_tls(Some(&deleg_cert)), "d3").await;
    assert!(m.contains("UnknownIssuer"), "{m}");
    // An executor whose certificate has expired.
    let expired = pki.expired_server("expired", &["localhost"]);
    let (_ex2, peer2) =
        tls_executor::<R>(&dir.path().join("x2"), &pki, &expired, pki.client_tls(None));
    let dg = tls_delegator::<R>(
        &dir.path().join("d4"),
        &pki,
        pki.client_tls(Some(&deleg_cert)),
    );
    let ws = workspace();
    let v = run_to_end::<R>(&dg, params::<R>(&peer2, ws.path())).await;
    assert_eq!(v.state, DelegationState::Error, "{v:?}");
    let m = v.error.unwrap().message;
    assert!(m.contains("expired"), "{m}");
}

#[test]
fn full_delegation_over_https_with_mtls_on_tokio() {
    <awcp_tokio::TokioRuntime as awcp_driver::Driver>::block_on(
        full_delegation_over_https_with_mtls::<awcp_tokio::TokioRuntime>(),
    );
}

#[test]
fn full_delegation_over_https_with_mtls_on_smol() {
    <awcp_smol::SmolRuntime as awcp_driver::Driver>::block_on(
        full_delegation_over_https_with_mtls::<awcp_smol::SmolRuntime>(),
    );
}

/// The binaries: `awcp-executor` (tokio) with --tls-cert/--tls-key/--client-ca and
/// --ca-file/--client-cert/--client-key, and `awcp delegate` (smol) serving its archive over
/// mTLS with the same flags.
#[test]
fn binaries_delegate_over_https_with_mtls() {
    use net_support::{args, Proc};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let pki = TestPki::new(d, "awcp");
    let ca = pki.ca_file();
    let exec = pki.server("executor", &["localhost"]);
    let archives = pki.server("archives", &["localhost", "127.0.0.1"]);
    let exec_client = pki.client("exec-client", "executor");
    let deleg_client = pki.client("deleg-client", "delegator");
    let executor = Proc::spawn(
        &example_binary("awcp-executor"),
        &args(&[
            &"--listen",
            &"127.0.0.1:0",
            &"--quiet",
            &"--work-root",
            &d.join("work").display(),
            &"--state-dir",
            &d.join("exec-state").display(),
            &"--tls-cert",
            &exec.cert.display(),
            &"--tls-key",
            &exec.key.display(),
            &"--client-ca",
            &ca.display(),
            &"--ca-file",
            &ca.display(),
            &"--client-cert",
            &exec_client.cert.display(),
            &"--client-key",
            &exec_client.key.display(),
        ]),
        "awcp-executor listening on ",
        None,
    );
    assert!(
        executor.url.starts_with("https://127.0.0.1:"),
        "{}",
        executor.url
    );
    let peer = executor.url.replace("127.0.0.1", "localhost");
    let ws = workspace();
    let out = std::process::Command::new(example_binary("awcp"))
        .args(args(&[
            &"delegate",
            &ws.path().display(),
            &"--peer",
            &peer,
            &"--prompt",
            &"list the files",
            &"--runtime",
            &"smol",
            &"--json",
            &"--quiet",
            &"--state-dir",
            &d.join("dstate").display(),
            &"--serve-archives",
            &"127.0.0.1:0",
            &"--tls-cert",
            &archives.cert.display(),
            &"--tls-key",
            &archives.key.display(),
            &"--client-ca",
            &ca.display(),
            &"--ca-file",
            &ca.display(),
            &"--client-cert",
            &deleg_client.cert.display(),
            &"--client-key",
            &deleg_client.key.display(),
        ]))
        .output()
        .expect("awcp runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["state"], "completed", "{v}");
    // The demo runner's notes came back over TLS and were applied.
    assert!(ws.path().join("AWCP_NOTES.md").exists());

    // The daemon over mTLS: the CLI with a client certificate is served, without one refused.
    let home = d.join("home");
    let daemon_cert = pki.server("daemon", &["localhost"]);
    let daemon = Proc::spawn(
        &example_binary("awcp"),
        &args(&[
            &"daemon",
            &"--listen",
            &"127.0.0.1:0",
            &"--quiet",
            &"--state-dir",
            &home.join("delegator").display(),
            &"--tls-cert",
            &daemon_cert.cert.display(),
            &"--tls-key",
            &daemon_cert.key.display(),
            &"--client-ca",
            &ca.display(),
        ]),
        "awcp daemon listening on ",
        None,
    );
    let daemon_url = daemon.url.replace("127.0.0.1", "localhost");
    assert!(daemon_url.starts_with("https://localhost:"), "{daemon_url}");
    let list = |cert: bool| {
        let mut a = args(&[
            &"list",
            &"--json",
            &"--daemon-url",
            &daemon_url,
            &"--ca-file",
            &ca.display(),
        ]);
        if cert {
            a.extend(args(&[
                &"--client-cert",
                &deleg_client.cert.display(),
                &"--client-key",
                &deleg_client.key.display(),
            ]));
        }
        std::process::Command::new(example_binary("awcp"))
            .args(a)
            .env("AWCP_HOME", &home)
            .output()
            .expect("awcp runs")
    };
    let ok = list(true);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let refused = list(false);
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr).to_lowercase();
    assert!(err.contains("certificate"), "{err}");
}
