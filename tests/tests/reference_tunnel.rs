//! The TypeScript reference's tunnel client against our relay (docs/WIRE.md §18.1): a reference
//! `dev` executor whose only listener is `WebSocketTunnelListener` (`@awcp/sdk`) dials the real
//! `awcp-relay` on 127.0.0.1, and the real `awcp delegate` delegates to it at
//! `<relay>/e/<name>/awcp`. This proves that
//!
//! - our relay speaks the reference's frame set to a client that negotiates nothing: the
//!   reference authenticates with its bare `AUTH`, is told `publicUrl`
//!   `<relay public url>/e/alice/awcp` in `AUTH_OK`, and serves the whole delegation through
//!   the relay: INVITE, START and CLOSE as `HTTP_REQUEST` `POST /` answered by `HTTP_RESPONSE`,
//!   the event stream as `SSE_OPEN` of `/tasks/<id>/events` and its `SSE_EVENT`s (`status`,
//!   `snapshot` with the inline result archive, `round_done`), then `SSE_CLOSE` when our
//!   delegator leaves the stream; our delegator completes and applies the agent's files (on
//!   the tokio relay);
//! - a token the relay does not know gets `AUTH_ERROR` (`invalid token`), which the reference
//!   turns into a failed start (`Tunnel auth failed: invalid token`) (on the smol relay).
//!
//! Skipped with a notice where the reference cannot be built (unless
//! `AWCP_REQUIRE_REFERENCE_TEST=1`). Everything binds 127.0.0.1; every process is killed when
//! its test ends (the node script also exits when its stdin, held by the test, closes).

#[allow(dead_code)] // Not every helper is used by every test file including it.
mod reference_support;
mod tunnel_support;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use awcp_tests::bins::{self, show, KillOnDrop};
use awcp_tests::relay::{self, registry};
use reference_support::tunnel::{frames, RefTunnelExecutor, TunnelStart};
use reference_support::{json_line, reference_dev, run_bounded};
use serde_json::Value;
use tunnel_support::workspace;

/// The longest `awcp delegate` may run.
const CLI_LIMIT: Duration = Duration::from_secs(90);

/// How long the reference script may take to exit after a failed start.
const EXIT_LIMIT: Duration = Duration::from_secs(20);

/// `awcp-relay --runtime RUNTIME` on 127.0.0.1, port 0, with `executors`; its child and its
/// public URL (`http://127.0.0.1:<port>`).
fn relay(runtime: &str, executors: &Path) -> (KillOnDrop, String) {
    relay::spawn(relay::command(executors, "127.0.0.1:0").args(["--runtime", runtime]))
}

/// The relay's tunnel endpoint for a public URL `http://host:port`.
fn tunnel_url(public: &str) -> String {
    format!("ws://{}/tunnel", public.trim_start_matches("http://"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| format!("<{}: {e}>", path.display()))
}

/// `awcp --quiet --json delegate WS --peer PEER …`, killed after [`CLI_LIMIT`].
fn delegate(ws: &Path, peer: &str, state: &Path) -> Output {
    let bin = bins::path("awcp");
    run_bounded(
        Command::new(bin)
            .args(["--quiet", "--json", "delegate"])
            .arg(ws)
            .args(["--peer", peer, "--prompt", "edit", "--runtime", "tokio"])
            .arg("--state-dir")
            .arg(state),
        CLI_LIMIT,
    )
}

/// The `HTTP_REQUEST` frames the reference received whose body was a message of type `ty`.
fn requests_of(ex: &RefTunnelExecutor, ty: &str) -> Vec<Value> {
    frames(&ex.log(), "IN")
        .into_iter()
        .filter(|f| f["type"] == "HTTP_REQUEST" && f["bodyType"] == ty)
        .collect()
}

#[test]
fn a_reference_tunnel_executor_serves_our_delegator_through_our_relay() {
    let Some(tree) = reference_dev() else {
        return;
    };
    bins::path("awcp");
    let dir = tempfile::tempdir().unwrap();
    let reg = registry(dir.path(), &[("alice", "alice-token")]);
    let (_relay, public) = relay("tokio", &reg);
    let (ex, start) = tree.start_tunnel_executor(&tunnel_url(&public), "alice-token");
    let peer = format!("{public}/e/alice/awcp");
    assert_eq!(start, TunnelStart::PublicUrl(peer.clone()), "{}", ex.show());

    let ws = workspace();
    let state = tempfile::tempdir().unwrap();
    let o = delegate(ws.path(), &peer, state.path());
    let what = format!("{}\n{}", show(&o), ex.show());
    assert_eq!(o.status.code(), Some(0), "{what}");
    let view = json_line(&o, "").unwrap_or_else(|| panic!("no JSON printed\n{what}"));
    assert_eq!(view["state"], "completed", "{view}\n{what}");
    assert_eq!(
        read(&ws.path().join("RESULT.txt")),
        "agent was here\n",
        "{what}"
    );
    assert_eq!(read(&ws.path().join("a.txt")), "A by the agent\n", "{what}");
    assert_eq!(read(&ws.path().join("b.txt")), "B\n", "{what}");

    // It all went through the reference's tunnel frames: the messages came as `HTTP_REQUEST`
    // `POST /` (the relay strips `/e/alice/awcp`), the reference answered each 200, and the
    // events came back on an `SSE_OPEN` stream of `/tasks/<id>/events`.
    for ty in ["INVITE", "START", "CLOSE"] {
        let reqs = requests_of(&ex, ty);
        assert_eq!(reqs.len(), 1, "{ty}\n{what}");
        assert_eq!(reqs[0]["method"], "POST", "{what}");
        assert_eq!(reqs[0]["path"], "/", "{what}");
    }
    let outs = frames(&ex.log(), "OUT");
    let statuses: Vec<&Value> = outs
        .iter()
        .filter(|f| f["type"] == "HTTP_RESPONSE")
        .map(|f| &f["status"])
        .collect();
    assert_eq!(statuses, [200, 200, 200], "{what}");
    let ins = frames(&ex.log(), "IN");
    let stream = ins
        .iter()
        .find(|f| f["type"] == "SSE_OPEN")
        .unwrap_or_else(|| panic!("no SSE_OPEN\n{what}"));
    let id = view["id"].as_str().unwrap();
    assert_eq!(stream["path"], format!("/tasks/{id}/events"), "{what}");
    let events: Vec<&Value> = outs
        .iter()
        .filter(|f| f["type"] == "SSE_EVENT" && f["streamId"] == stream["streamId"])
        .map(|f| &f["event"])
        .collect();
    assert_eq!(events, ["status", "snapshot", "round_done"], "{what}");
    // Our delegator went away from the stream after `round_done` (then sent CLOSE): the
    // relay told the reference so.
    assert!(
        ins.iter()
            .any(|f| f["type"] == "SSE_CLOSE" && f["streamId"] == stream["streamId"]),
        "{what}"
    );
}

#[test]
fn a_wrong_token_gets_auth_error_from_our_relay() {
    let Some(tree) = reference_dev() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let reg = registry(dir.path(), &[("alice", "alice-token")]);
    let (_relay, public) = relay("smol", &reg);
    let (mut ex, start) = tree.start_tunnel_executor(&tunnel_url(&public), "not-alice-token");
    assert_eq!(
        start,
        TunnelStart::AuthFailed("Tunnel auth failed: invalid token".into()),
        "{}",
        ex.show()
    );
    let ins = frames(&ex.log(), "IN");
    assert_eq!(
        ins.first()
            .map(|f| (f["type"].clone(), f["reason"].clone())),
        Some(("AUTH_ERROR".into(), "invalid token".into())),
        "{}",
        ex.show()
    );
    assert!(!ins.iter().any(|f| f["type"] == "AUTH_OK"), "{}", ex.show());
    assert_eq!(ex.wait_exit(EXIT_LIMIT), Some(2), "{}", ex.show());
}
