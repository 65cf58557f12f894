//! The reference's WebSocket tunnel client (`WebSocketTunnelListener` of `@awcp/sdk`, the `dev`
//! tree; docs/WIRE.md §16, §18.1) for `reference_tunnel.rs`: [`TUNNEL_EXECUTOR_MJS`], a reference
//! executor served through a relay instead of an HTTP port ([`RefTree::start_tunnel_executor`]).
//! The script is installed into the tree's `interop/` beside the others, by this module (the
//! tree's own preparation does not know it).

use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use super::{install, Captured, RefTree};

/// A reference (`dev`) AWCP executor (`executorHandler` of `@awcp/sdk/server/express`,
/// `ArchiveExecutorTransport`, work directory `AWCP_REF_WORK_DIR`) whose only listener is a
/// `WebSocketTunnelListener` dialling `AWCP_REF_TUNNEL_URL` with the token
/// `AWCP_REF_TUNNEL_TOKEN` (the reference's default reconnect settings). No HTTP port is opened:
/// every request reaches it through the relay. Its agent writes `RESULT.txt` (`agent was
/// here`) and rewrites `a.txt` (`A by the agent`) in `<workPath>/<resource>` and returns
/// `{summary: "did: <description>", highlights}`.
///
/// Stdout:
/// - `PUBLIC_URL <url>` once the relay has answered `AUTH_OK` (the `publicUrl` the reference
///   got, from `getListenerInfos()`);
/// - `AUTH_FAILED <message>` when the listener's start failed (an `AUTH_ERROR`: the message is
///   the reference's `Tunnel auth failed: <reason>`; or a failed dial); the script then exits 2;
/// - `IN <json>` for every frame received from the relay (`HTTP_REQUEST` with `method`, `path`,
///   the header names and the body's length and JSON `type` instead of the body itself) and
///   `OUT <json>` for every frame sent (`HTTP_RESPONSE` with `status`, `headers` and the body's
///   length; `SSE_EVENT` with the event's `type`), through the listener's private
///   `handleMessage` and `send`;
/// - `AGENT <id> <task JSON>` per round run; the reference's own `[AWCP:…]` lines.
///
/// It exits when its standard input closes (the test process went away).
pub const TUNNEL_EXECUTOR_MJS: &str = r#"// awcp-rs interop harness (tests/tests/reference_support/tunnel.rs): a reference executor behind a relay.
import { executorHandler } from '@awcp/sdk/server/express';
import { WebSocketTunnelListener } from '@awcp/sdk';
import { ArchiveExecutorTransport } from '@awcp/transport-archive';
import { readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

const workDir = process.env.AWCP_REF_WORK_DIR;
const server = process.env.AWCP_REF_TUNNEL_URL;
const token = process.env.AWCP_REF_TUNNEL_TOKEN;
if (!workDir || !server || token === undefined) {
  console.error('AWCP_REF_WORK_DIR, AWCP_REF_TUNNEL_URL and AWCP_REF_TUNNEL_TOKEN are required');
  process.exit(64);
}

// The test process holds our stdin: when it goes away, so do we.
process.stdin.on('end', () => process.exit(0));
process.stdin.on('error', () => process.exit(0));
process.stdin.resume();

const bodyType = (body) => {
  try {
    const v = JSON.parse(body);
    return v && typeof v === 'object' && typeof v.type === 'string' ? v.type : '-';
  } catch {
    return '-';
  }
};
const summary = (msg) => {
  switch (msg?.type) {
    case 'HTTP_REQUEST':
      return {
        type: msg.type,
        requestId: msg.requestId,
        method: msg.method,
        path: msg.path,
        headerNames: Object.keys(msg.headers ?? {}),
        bodyLength: typeof msg.body === 'string' ? msg.body.length : null,
        bodyType: typeof msg.body === 'string' ? bodyType(msg.body) : null,
      };
    case 'HTTP_RESPONSE':
      return {
        type: msg.type,
        requestId: msg.requestId,
        status: msg.status,
        headers: msg.headers,
        bodyLength: typeof msg.body === 'string' ? msg.body.length : null,
      };
    case 'SSE_EVENT':
      return { type: msg.type, streamId: msg.streamId, event: bodyType(msg.data) };
    case 'AUTH':
      return { type: msg.type };
    default:
      return msg;
  }
};

const executor = {
  async execute({ delegationId, workPath, task, environment }) {
    console.log(`AGENT ${delegationId} ${JSON.stringify(task)}`);
    const res = environment.resources[0]?.name ?? 'workspace';
    const dir = join(workPath, res);
    await writeFile(join(dir, 'RESULT.txt'), 'agent was here\n');
    await writeFile(join(dir, 'a.txt'), 'A by the agent\n');
    return { summary: `did: ${task.description}`, highlights: (await readdir(dir)).sort() };
  },
};

const listener = new WebSocketTunnelListener({ server, token });
// Every frame both ways, through the listener's private methods.
const handle = listener.handleMessage.bind(listener);
listener.handleMessage = (msg, resolve, reject) => {
  console.log(`IN ${JSON.stringify(summary(msg))}`);
  return handle(msg, resolve, reject);
};
const send = listener.send.bind(listener);
listener.send = (msg) => {
  console.log(`OUT ${JSON.stringify(summary(msg))}`);
  return send(msg);
};

let awcp;
try {
  awcp = await executorHandler({
    executor,
    config: { workDir, transport: new ArchiveExecutorTransport(), listeners: [listener] },
  });
} catch (e) {
  console.log(`AUTH_FAILED ${e?.message ?? e}`);
  process.exit(2);
}
const info = awcp.getListenerInfos().find((i) => i.type === 'websocket-tunnel');
console.log(`PUBLIC_URL ${info?.publicUrl ?? '-'}`);
"#;

/// How long the script may take to print `PUBLIC_URL` or `AUTH_FAILED`.
const START_LIMIT: Duration = Duration::from_secs(30);

/// A running [`TUNNEL_EXECUTOR_MJS`], killed and reaped when dropped.
pub struct RefTunnelExecutor {
    child: Child,
    /// Held open: the script exits when it closes.
    _stdin: Option<ChildStdin>,
    out: Arc<Captured>,
    err: Arc<Captured>,
    _work: tempfile::TempDir,
}

/// How a [`TUNNEL_EXECUTOR_MJS`] start ended: the `publicUrl` of `AUTH_OK`, or the message of
/// `AUTH_FAILED`.
#[derive(Debug, PartialEq, Eq)]
pub enum TunnelStart {
    PublicUrl(String),
    AuthFailed(String),
}

/// The first `PUBLIC_URL` or `AUTH_FAILED` line of `text`.
fn start_line(text: &str) -> Option<TunnelStart> {
    text.lines().find_map(|l| {
        if let Some(u) = l.strip_prefix("PUBLIC_URL ") {
            Some(TunnelStart::PublicUrl(u.trim().to_owned()))
        } else {
            l.strip_prefix("AUTH_FAILED ")
                .map(|m| TunnelStart::AuthFailed(m.trim().to_owned()))
        }
    })
}

impl RefTree {
    /// Installs [`TUNNEL_EXECUTOR_MJS`] into `interop/`, starts it against `tunnel_url` with
    /// `token` (a work directory of its own) and waits until it reports how its start ended.
    pub fn start_tunnel_executor(
        &self,
        tunnel_url: &str,
        token: &str,
    ) -> (RefTunnelExecutor, TunnelStart) {
        let script = self.root.join("interop/tunnel-executor.mjs");
        install(&script, TUNNEL_EXECUTOR_MJS).unwrap_or_else(|e| panic!("installing: {e}"));
        let work = tempfile::tempdir().unwrap();
        let mut child = Command::new("node")
            .arg(&script)
            .env("AWCP_REF_WORK_DIR", work.path())
            .env("AWCP_REF_TUNNEL_URL", tunnel_url)
            .env("AWCP_REF_TUNNEL_TOKEN", token)
            .current_dir(self.root.join("interop"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("node starts");
        let stdin = child.stdin.take();
        let out = Captured::spawn(child.stdout.take().expect("piped stdout"));
        let err = Captured::spawn(child.stderr.take().expect("piped stderr"));
        let ex = RefTunnelExecutor {
            child,
            _stdin: stdin,
            out,
            err,
            _work: work,
        };
        let start = ex
            .out
            .wait_until(START_LIMIT, |t| start_line(t).is_some())
            .and_then(|t| start_line(&t));
        match start {
            Some(s) => (ex, s),
            None => panic!(
                "the reference tunnel executor printed neither PUBLIC_URL nor AUTH_FAILED\n{}",
                ex.show()
            ),
        }
    }
}

impl RefTunnelExecutor {
    /// Its stdout so far.
    pub fn log(&self) -> String {
        self.out.text()
    }

    /// Waits up to `limit` for it to exit (its stdout to end); its exit code, `None` if it is
    /// still running (or was killed by a signal).
    pub fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        self.out.wait_until(limit, |_| false);
        if !self.out.state.lock().unwrap().1 {
            return None;
        }
        self.child.wait().ok().and_then(|s| s.code())
    }

    /// Both its outputs, for failure messages.
    pub fn show(&self) -> String {
        format!(
            "--- reference tunnel executor stdout ---\n{}\n--- reference tunnel executor stderr ---\n{}",
            self.out.text(),
            self.err.text()
        )
    }
}

impl Drop for RefTunnelExecutor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The frames of one direction (`"IN"` or `"OUT"`) the script logged, parsed.
pub fn frames(log: &str, direction: &str) -> Vec<serde_json::Value> {
    let prefix = format!("{direction} ");
    log.lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .filter_map(|j| serde_json::from_str(j).ok())
        .collect()
}
