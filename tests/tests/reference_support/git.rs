//! The reference's git transport (`@awcp/transport-git` of the `dev` tree, docs/WIRE.md §3.4,
//! §11.3) for `reference_git.rs`: [`GIT_EXECUTOR_MJS`], a reference executor with
//! `GitExecutorTransport` ([`RefTree::start_git_executor`]), and [`GIT_DELEGATOR_MJS`], the
//! reference `DelegatorService` with `GitDelegatorTransport` ([`RefTree::run_git_delegator`]).
//! Both scripts are installed into the tree's `interop/` beside the others.
//!
//! Their git runs without the user's or system's configuration (`GIT_CONFIG_GLOBAL=/dev/null`,
//! `GIT_CONFIG_NOSYSTEM=1`) but with what the reference silently assumes of it
//! ([`REFERENCE_GIT_CONFIG`]): its delegator `git init`s a repository and pushes `main`, which
//! only exists where `init.defaultBranch` is `main`, and commits without setting an identity.

use std::path::Path;
use std::process::{Command, Output};

use super::{run_bounded, RefExecutor, RefTree, DELEGATOR_LIMIT};

/// The configuration the reference's git calls get (through `GIT_CONFIG_COUNT`): a default
/// branch `main` for its delegator's `git init` and an identity for its commit.
pub const REFERENCE_GIT_CONFIG: [(&str, &str); 3] = [
    ("init.defaultBranch", "main"),
    ("user.name", "Reference Delegator"),
    ("user.email", "delegator@reference.test"),
];

/// A reference (`dev`) AWCP executor like `EXECUTOR_MJS` (same request log, `LISTENING`,
/// stdin) with `GitExecutorTransport` of `@awcp/transport-git` (`tempDir` =
/// `AWCP_REF_TEMP_DIR`; `branchPrefix` = `AWCP_REF_BRANCH_PREFIX` where set, else the
/// transport's default `awcp/`). Setup clones the handle's `baseBranch` of `repoUrl` into the
/// work path and checks out `<prefix><id>`; the snapshot commits the work path and pushes that
/// branch. Its agent works in `<workPath>/<resource>` (the "Working directory" the reference's
/// own A2A executor adapter names for a single resource), or with `AWCP_REF_AGENT_AT_ROOT=1`
/// in `<workPath>` itself: it writes `git-agent.txt` (`prompt=<prompt>`), rewrites `a.txt`
/// (`A by the reference agent`), deletes `gone.txt` and returns `{summary: "did:
/// <description>", highlights}`.
///
/// Stdout, besides the lines of `EXECUTOR_MJS`: `FILES <id> <JSON array>` (what the agent
/// found in its directory, `.git` left out: what the clone checked out), `SETUP <id> ok` or `SETUP
/// <id> failed: <message>` (the clone, the checkout), `CAPTURE <id> <text>` (the snapshot text,
/// `{"branch","commitHash","baseCommit","changedFiles"}`) or `CAPTURE <id> failed: <message>`
/// (the commit or the push).
pub const GIT_EXECUTOR_MJS: &str = r#"// awcp-rs interop harness (tests/tests/reference_support/git.rs): a reference git executor.
import express from 'express';
import { executorHandler } from '@awcp/sdk/server/express';
import { GitExecutorTransport } from '@awcp/transport-git';
import { readdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

const workDir = process.env.AWCP_REF_WORK_DIR;
const tempDir = process.env.AWCP_REF_TEMP_DIR;
if (!workDir || !tempDir) {
  console.error('AWCP_REF_WORK_DIR and AWCP_REF_TEMP_DIR are required');
  process.exit(64);
}
const branchPrefix = process.env.AWCP_REF_BRANCH_PREFIX || undefined;
const agentAtRoot = process.env.AWCP_REF_AGENT_AT_ROOT === '1';

process.stdin.on('end', () => process.exit(0));
process.stdin.on('error', () => process.exit(0));
process.stdin.resume();

const transport = new GitExecutorTransport({ tempDir, ...(branchPrefix ? { branchPrefix } : {}) });
const oneLine = (e) => String(e?.message ?? e).replace(/\s+/g, ' ').trim();
const setup = transport.setup.bind(transport);
transport.setup = async (params) => {
  try {
    const r = await setup(params);
    console.log(`SETUP ${params.delegationId} ok`);
    return r;
  } catch (e) {
    console.log(`SETUP ${params.delegationId} failed: ${oneLine(e)}`);
    throw e;
  }
};
const capture = transport.captureSnapshot.bind(transport);
transport.captureSnapshot = async (params) => {
  try {
    const r = await capture(params);
    console.log(`CAPTURE ${params.delegationId} ${r?.snapshotBase64}`);
    return r;
  } catch (e) {
    console.log(`CAPTURE ${params.delegationId} failed: ${oneLine(e)}`);
    throw e;
  }
};

const executor = {
  async execute({ delegationId, workPath, task, environment }) {
    console.log(`AGENT ${delegationId} ${JSON.stringify(task)}`);
    const dir = agentAtRoot ? workPath : join(workPath, environment.resources[0]?.name ?? 'workspace');
    const files = (await readdir(dir)).filter((f) => f !== '.git').sort();
    console.log(`FILES ${delegationId} ${JSON.stringify(files)}`);
    await writeFile(join(dir, 'git-agent.txt'), `prompt=${task.prompt}\n`);
    await writeFile(join(dir, 'a.txt'), 'A by the reference agent\n');
    await rm(join(dir, 'gone.txt'), { force: true });
    return { summary: `did: ${task.description}`, highlights: (await readdir(dir)).sort() };
  },
};

const awcp = await executorHandler({ executor, config: { workDir, transport } });

const app = express();
app.use(
  '/awcp',
  express.json({ limit: '1gb' }),
  (req, res, next) => {
    const body = req.body && typeof req.body === 'object' ? req.body : {};
    const type = typeof body.type === 'string' ? body.type : '-';
    const id = typeof body.delegationId === 'string' ? body.delegationId : '-';
    console.log(`REQ ${req.method} ${req.originalUrl} type=${type} id=${id}`);
    res.on('finish', () => console.log(`RES ${res.statusCode} ${req.method} ${req.originalUrl} type=${type}`));
    next();
  },
  awcp.router,
);
const server = app.listen(0, '127.0.0.1', () => {
  console.log(`LISTENING ${server.address().port}`);
});
"#;

/// The reference `DelegatorService` (of the tree's branch) with `GitDelegatorTransport`
/// (`remoteUrl` = `REMOTE_URL`, `auth: {type: 'none'}`, `tempDir` under `STATE_DIR`),
/// snapshot mode `auto`, running one delegation of the directory `SRC` (resource
/// `workspace`, `rw`; task `{description: 'git', prompt: 'git round'}`) on an executor:
/// `node git-delegator.mjs PEER SRC STATE_DIR REMOTE_URL`. Its prepare copies the environment
/// into a fresh repository, commits it and force-pushes `main` to the remote; its apply
/// fetches and merges the branch the executor's snapshot names and copies the result over
/// `SRC`. A `round_done` (idle) is answered with a CLOSE; the script waits for `completed`.
///
/// Stdout: `HANDLE {json}` (the START handle `prepare` made) as it is made, then `RESULT
/// {json}`: `ok`, (with `ok: false`) `reason`, `id`, `state`, `result`, `error`, `snapshots`
/// (`id`, `status`), `errors` (the `onError` hook's), `events` (each SSE event handled:
/// `type`, `status`, `message`, `code`, and for a snapshot its `snapshotText`), `handle`,
/// `apply` (`null` if `applySnapshot` was never called, `applied`, or `failed: <message>` —
/// the service itself only logs a failure), `files` (the sorted names in `SRC` at the end).
/// Exit status 0 only with `ok: true`: the state `completed` without `onError` within 60 s
/// (`AWCP_REF_TIMEOUT_MS`). It exits when its standard input closes (no release: the remote
/// branch the reference deletes only once the retention has passed stays).
pub const GIT_DELEGATOR_MJS: &str = r#"// awcp-rs interop harness (tests/tests/reference_support/git.rs): the reference git delegator.
import { DelegatorService } from '@awcp/sdk';
import { GitDelegatorTransport } from '@awcp/transport-git';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';

const [peer, src, stateDir, remoteUrl] = process.argv.slice(2);
if (!peer || !src || !stateDir || !remoteUrl) {
  console.error('usage: node git-delegator.mjs PEER SRC STATE_DIR REMOTE_URL');
  process.exit(64);
}
const timeoutMs = Number.parseInt(process.env.AWCP_REF_TIMEOUT_MS ?? '60000', 10);

let svc;
let id;
let handle = null;
let apply = null;
const errors = [];
const events = [];

const files = () => {
  try {
    return readdirSync(src).sort();
  } catch {
    return null;
  }
};
const view = () => {
  const d = id && svc ? svc.getDelegation(id) : undefined;
  if (!d) return { id: id ?? null };
  return {
    id,
    state: d.state,
    result: d.result ?? null,
    error: d.error ?? null,
    snapshots: (d.snapshots ?? []).map((s) => ({ id: s.id, status: s.status })),
  };
};
const finish = (ok, reason) => {
  const line = { ok, ...(ok ? {} : { reason }), ...view(), errors, events, handle, apply, files: files() };
  console.log('RESULT ' + JSON.stringify(line));
  process.exit(ok ? 0 : 1);
};
const fail = (reason) => finish(false, reason);

setTimeout(() => fail(`timed out after ${timeoutMs} ms`), timeoutMs);
process.on('unhandledRejection', (e) => fail(`unhandled rejection: ${e?.message ?? e}`));
process.on('uncaughtException', (e) => fail(`uncaught exception: ${e?.message ?? e}`));
process.stdin.on('end', () => fail('standard input closed (the test went away)'));
process.stdin.on('error', () => fail('standard input failed'));
process.stdin.resume();

const transport = new GitDelegatorTransport({
  remoteUrl,
  auth: { type: 'none' },
  tempDir: join(stateDir, 'git'),
});
const prepare = transport.prepare.bind(transport);
transport.prepare = async (params) => {
  const h = await prepare(params);
  handle = h;
  console.log('HANDLE ' + JSON.stringify(h));
  return h;
};
const applySnapshot = transport.applySnapshot.bind(transport);
transport.applySnapshot = async (params) => {
  try {
    await applySnapshot(params);
    apply = 'applied';
  } catch (e) {
    apply = `failed: ${e?.message ?? e}`;
    throw e;
  }
};

svc = new DelegatorService({
  config: {
    baseDir: join(stateDir, 'base'),
    transport,
    delegation: { snapshot: { mode: 'auto' } },
    hooks: { onError: (_id, e) => errors.push(e?.message ?? String(e)) },
  },
});
if (typeof svc.handleTaskEvent === 'function') {
  const handleEvent = svc.handleTaskEvent.bind(svc);
  svc.handleTaskEvent = async (delegationId, event) => {
    const text = typeof event?.snapshotBase64 === 'string'
      ? (event.snapshotBase64.startsWith('{') ? event.snapshotBase64 : '(base64)')
      : undefined;
    events.push({
      type: event?.type ?? null,
      status: event?.status ?? null,
      message: event?.message ?? null,
      code: event?.code ?? null,
      ...(text === undefined ? {} : { snapshotText: text }),
    });
    return handleEvent(delegationId, event);
  };
}
await svc.initialize();

id = await svc.delegate({
  executorUrl: peer,
  environment: { resources: [{ name: 'workspace', type: 'fs', source: src, mode: 'rw' }] },
  task: { description: 'git', prompt: 'git round' },
});
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let closed = false;
for (;;) {
  const s = svc.getDelegation(id)?.state;
  if (s === 'error' || s === 'cancelled' || s === 'expired') fail(`the delegation entered state ${s}`);
  if (errors.length > 0) fail(`onError: ${errors.join('; ')}`);
  if (s === 'completed') break;
  if (s === 'idle' && !closed) {
    closed = true;
    await svc.close(id);
  }
  await sleep(20);
}
finish(true);
"#;

/// Gives `cmd` (a `node` script) an isolated git configuration plus
/// [`REFERENCE_GIT_CONFIG`].
fn reference_git_env(cmd: &mut Command) {
    cmd.env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_CONFIG_COUNT", REFERENCE_GIT_CONFIG.len().to_string());
    for (i, (k, v)) in REFERENCE_GIT_CONFIG.iter().enumerate() {
        cmd.env(format!("GIT_CONFIG_KEY_{i}"), k)
            .env(format!("GIT_CONFIG_VALUE_{i}"), v);
    }
}

impl RefTree {
    /// Starts [`GIT_EXECUTOR_MJS`] with a work directory and a transport temporary directory
    /// of its own and waits until it listens; `branch_prefix` is its transport's
    /// `branchPrefix` (`None`: the default, `awcp/`); with `agent_at_root`, its agent works in
    /// the work path itself instead of the resource's directory in it.
    pub fn start_git_executor(
        &self,
        branch_prefix: Option<&str>,
        agent_at_root: bool,
    ) -> RefExecutor {
        let dirs = tempfile::tempdir().unwrap();
        let (work, tmp) = (dirs.path().join("work"), dirs.path().join("tmp"));
        for d in [&work, &tmp] {
            std::fs::create_dir(d).unwrap();
        }
        let mut cmd = Command::new("node");
        cmd.arg(self.root.join("interop/git-executor.mjs"))
            .env("AWCP_REF_WORK_DIR", &work)
            .env("AWCP_REF_TEMP_DIR", &tmp)
            .env_remove("AWCP_REF_BRANCH_PREFIX")
            .env(
                "AWCP_REF_AGENT_AT_ROOT",
                if agent_at_root { "1" } else { "0" },
            );
        if let Some(p) = branch_prefix {
            cmd.env("AWCP_REF_BRANCH_PREFIX", p);
        }
        reference_git_env(&mut cmd);
        self.start_script(cmd, dirs)
    }

    /// Runs [`GIT_DELEGATOR_MJS`] against `peer_url` on the directory `src`, its transport
    /// pushing to `remote_url` (its state in a temporary directory), killing it if it runs
    /// over 90 s.
    pub fn run_git_delegator(&self, peer_url: &str, src: &Path, remote_url: &str) -> Output {
        let state = tempfile::tempdir().unwrap();
        let mut cmd = Command::new("node");
        cmd.arg(self.root.join("interop/git-delegator.mjs"))
            .arg(peer_url)
            .arg(src)
            .arg(state.path())
            .arg(remote_url)
            .current_dir(self.root.join("interop"));
        reference_git_env(&mut cmd);
        run_bounded(&mut cmd, DELEGATOR_LIMIT)
    }
}
