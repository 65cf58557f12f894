//! The TypeScript AWCP reference's `dev` branch (multi-round delegations: CONTINUE / CLOSE and
//! the SSE `round_done` event, docs/WIRE.md §17) and its `ps_dev` branch (the same plus the
//! delegator's idle timeout), built from a git mirror for the interop tests of
//! `reference_rounds.rs`.
//!
//! [`reference`] (of [`DEV`] or [`PS_DEV`]; [`reference_dev`], [`reference_ps_dev`]) builds a
//! branch once into `<target>/awcp-ref/<branch>` (`git archive <branch>`, `npm ci`, then `tsc`
//! of `@awcp/core`, `@awcp/transport-archive` and `@awcp/sdk`) under a lock file, so test
//! binaries running in parallel build it once between them; a marker file holding the commit
//! built and the packages built ([`BUILT_PACKAGES`]) says the tree is complete (a new commit of
//! the branch in the mirror, or a changed package list, rebuilds it). `@awcp/transport-storage`
//! and `@awcp/transport-git` are built too (after `@awcp/transport-archive`, which they use)
//! where the branch has them. Our scripts go into the tree's `interop/` directory (so that
//! `@awcp/*` resolve from its `node_modules`): [`EXECUTOR_MJS`], a reference executor with a
//! trivial agent, [`DELEGATOR_MJS`], the reference `DelegatorService` driving several rounds
//! (then a CLOSE, a cancel or a wait: its `AWCP_REF_MODE`), for the storage transport
//! (`reference_storage.rs`) [`STORAGE_EXECUTOR_MJS`] and [`STORAGE_DELEGATOR_MJS`], and for
//! the git transport (`reference_git.rs`) those of [`git`].
//!
//! The mirror is `$AWCP_REFERENCE_GIT` (default [`DEFAULT_MIRROR`]). Where it, `git`, `tar`,
//! `node` (≥ 18) or `npm` are missing, or the build fails (`npm ci` needs the npm registry),
//! the tests are skipped with a notice, unless `AWCP_REQUIRE_REFERENCE_TEST=1` (set by
//! `.ci/run` where the mirror and node are present), which turns that into a failure.

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Read};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

pub mod git;
pub mod tunnel;

/// Where the reference's bare git mirror is when `AWCP_REFERENCE_GIT` is not set.
pub const DEFAULT_MIRROR: &str = "/work/.mirror/SII-Holos+awcp/repo";

/// The branch with the multi-round extension as merged (PR #29).
pub const DEV: &str = "dev";

/// The branch adding the delegator's idle timeout (`delegation.idleTimeoutMs`) to it.
pub const PS_DEV: &str = "ps_dev";

/// Written into the built tree last; holds the commit built and [`BUILT_PACKAGES`]
/// ([`marker_text`]).
const MARKER: &str = ".awcp-rs-reference-built";

/// The workspaces `npm run build` builds after `npm ci`, in this order (a package a branch does
/// not have under `packages/<name without @awcp/>` is left out).
const BUILT_PACKAGES: [&str; 5] = [
    "@awcp/core",
    "@awcp/transport-archive",
    "@awcp/transport-storage",
    "@awcp/transport-git",
    "@awcp/sdk",
];

/// What [`MARKER`] holds once `commit` is built: the commit, then the packages built.
fn marker_text(commit: &str) -> String {
    format!("{commit}\nbuilt: {}\n", BUILT_PACKAGES.join(" "))
}

/// How long the executor may take to print `LISTENING <port>`.
const EXECUTOR_START_LIMIT: Duration = Duration::from_secs(30);

/// How long [`RefTree::run_delegator`] lets `delegator.mjs` run (the script gives up by
/// itself after 60 s; this only catches a script that hangs anyway).
const DELEGATOR_LIMIT: Duration = Duration::from_secs(90);

/// A reference (`dev`) AWCP executor (express, `executorHandler` of `@awcp/sdk/server/express`
/// mounted at `/awcp`, `ArchiveExecutorTransport`) on 127.0.0.1, port 0. Its agent appends
/// `prompt=<prompt>` to `<workPath>/<resource>/log.txt`, writes
/// `<workPath>/<resource>/round-<description>.txt` (the description with every character but
/// `[A-Za-z0-9._-]` made `_`) and returns `{summary: "did: <description>", highlights}`.
///
/// Stdout: `LISTENING <port>` once it listens; `REQ <method> <url> type=<type> id=<id>` for
/// every request under `/awcp` as it arrives (`type`/`id` of a JSON body, `-` otherwise) and
/// `RES <status> <method> <url> type=<type>` once its response is sent (for the SSE stream:
/// when the stream ends); `AGENT <id> <task JSON>` per round run. The JSON body is parsed by
/// `express.json` ahead of the reference router, whose own `json()` then leaves it alone
/// (body-parser skips a parsed body); the limit is raised from body-parser's 100 kB so inline
/// archives of any test size get through. The reference's own `[AWCP:…]` log lines are on
/// stdout too. It exits when its standard input closes (the test process went away).
pub const EXECUTOR_MJS: &str = r#"// awcp-rs interop harness (tests/tests/reference_support): a reference `dev` executor.
import express from 'express';
import { executorHandler } from '@awcp/sdk/server/express';
import { ArchiveExecutorTransport } from '@awcp/transport-archive';
import { appendFile, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

const workDir = process.env.AWCP_REF_WORK_DIR;
if (!workDir) {
  console.error('AWCP_REF_WORK_DIR is required');
  process.exit(64);
}
const delayMs = Number.parseInt(process.env.AWCP_REF_AGENT_DELAY_MS ?? '100', 10);
const safe = (s) => String(s).replace(/[^A-Za-z0-9._-]/g, '_');

// The test process holds our stdin: when it goes away, so do we.
process.stdin.on('end', () => process.exit(0));
process.stdin.on('error', () => process.exit(0));
process.stdin.resume();

const executor = {
  async execute({ delegationId, workPath, task, environment }) {
    console.log(`AGENT ${delegationId} ${JSON.stringify(task)}`);
    // A prompt starting with `slow` runs for a minute (a round to cancel while it runs).
    const ms = String(task.prompt).startsWith('slow') ? 60000 : delayMs;
    await new Promise((r) => setTimeout(r, ms));
    const res = environment.resources[0]?.name ?? 'workspace';
    const dir = join(workPath, res);
    await appendFile(join(dir, 'log.txt'), `prompt=${task.prompt}\n`);
    await writeFile(join(dir, `round-${safe(task.description)}.txt`), `${task.prompt}\n`);
    return { summary: `did: ${task.description}`, highlights: (await readdir(dir)).sort() };
  },
};

const awcp = await executorHandler({
  executor,
  config: { workDir, transport: new ArchiveExecutorTransport() },
});

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

/// The reference `DelegatorService` (`ArchiveDelegatorTransport`, snapshot mode `auto`; of the
/// tree's branch, `dev` or `ps_dev`) driving a multi-round delegation on an executor:
/// `node delegator.mjs PEER SRC ROUNDS STATE_DIR`. Round 1 is INVITE…START with prompt
/// `round 1` (description `r1`); each later round is a CONTINUE with prompt `round <n>`
/// (description `r<n>`), sent once `getDelegation(id).state` is `idle`. What follows the last
/// round depends on `AWCP_REF_MODE`:
///
/// - unset or `rounds`: CLOSE, and the state must be `completed` (a refused CLOSE fails);
/// - `cancel-round-2` (`ROUNDS` must be 1): after round 1, a CONTINUE with prompt
///   `slow round 2` (description `r2`); once the executor has sent a `status` event whose
///   `message` is [`SLOW_AGENT_STARTED`] (the agent's first progress line: it has started),
///   `svc.cancel(id)`; the state must then be `cancelled` and the executor must have accepted
///   the cancel POST (`cancelOutcome`);
/// - `wait-idle`: nothing is sent; the script waits until the state leaves `idle` (the
///   executor ends the session, or a `ps_dev` delegator's own idle timeout closes it) and
///   reports whatever state and error it came to (the test judges them).
///
/// `AWCP_REF_IDLE_TIMEOUT_MS`, where set, becomes `delegation.idleTimeoutMs` (`ps_dev`: the
/// delegator CLOSEs a session idle that long; `dev` ignores it).
///
/// Stdout: `ROUND {json}` after each round (`round`, `state`, `summary`, the source's
/// `log.txt`), then `RESULT {json}`: `ok`, `mode`, `id`, `state`, `currentRound`, `rounds`,
/// `snapshots`, `result`, `error`, `errors` (the `onError` hook's), `log` (the source's
/// `log.txt`), `closeOutcome` / `cancelOutcome` (`accepted`, or why the executor refused the
/// CLOSE / cancel POST, which the reference itself only logs; `null` if not sent or if its
/// executor client could not be wrapped), `events` (every SSE event the service handled:
/// `type`, `status`, `message`, `code`, `round`), and with `ok: false` also `reason`. Exit
/// status 0 only with `ok: true`: an unexpected state `error`, `cancelled` or `expired`, an
/// `onError` call (outside `wait-idle`), a session that ends before the last round, a refused
/// CLOSE or 60 s (`AWCP_REF_TIMEOUT_MS`) without finishing make it 1. It exits when its
/// standard input closes.
pub const DELEGATOR_MJS: &str = r#"// awcp-rs interop harness (tests/tests/reference_support): the reference delegator, N rounds.
import { DelegatorService } from '@awcp/sdk';
import { ArchiveDelegatorTransport } from '@awcp/transport-archive';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

const [peer, src, roundsArg, stateDir] = process.argv.slice(2);
const rounds = Number.parseInt(roundsArg ?? '', 10);
if (!peer || !src || !stateDir || !(rounds >= 1)) {
  console.error('usage: node delegator.mjs PEER SRC ROUNDS STATE_DIR');
  process.exit(64);
}
const timeoutMs = Number.parseInt(process.env.AWCP_REF_TIMEOUT_MS ?? '60000', 10);
const mode = process.env.AWCP_REF_MODE || 'rounds';
if (!['rounds', 'cancel-round-2', 'wait-idle'].includes(mode) || (mode === 'cancel-round-2' && rounds !== 1)) {
  console.error(`bad AWCP_REF_MODE ${mode} (with ROUNDS ${rounds})`);
  process.exit(64);
}
const idleTimeoutMs = process.env.AWCP_REF_IDLE_TIMEOUT_MS
  ? Number.parseInt(process.env.AWCP_REF_IDLE_TIMEOUT_MS, 10)
  : undefined;
const SLOW_AGENT_STARTED = 'slow agent started';

let svc;
let id;
let closeOutcome = null;
let cancelOutcome = null;
const errors = [];
const events = [];

const readLog = () => {
  try {
    return readFileSync(join(src, 'log.txt'), 'utf8');
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
    currentRound: d.currentRound,
    rounds: (d.rounds ?? []).map((r) => ({
      number: r.number,
      prompt: r.task?.prompt ?? null,
      summary: r.result?.summary ?? null,
    })),
    snapshots: (d.snapshots ?? []).map((s) => ({ id: s.id, status: s.status })),
    result: d.result ?? null,
    error: d.error ?? null,
  };
};
const finish = (ok, reason) => {
  const line = {
    ok,
    ...(ok ? {} : { reason }),
    mode,
    ...view(),
    errors,
    log: readLog(),
    closeOutcome,
    cancelOutcome,
    events,
  };
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

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
// Until the round has ended: `idle` (round_done) or `completed` (done).
const settle = async () => {
  for (;;) {
    const s = svc.getDelegation(id)?.state;
    if (s === 'error' || s === 'cancelled' || s === 'expired') fail(`the delegation entered state ${s}`);
    if (errors.length > 0) fail(`onError: ${errors.join('; ')}`);
    if (s === 'idle' || s === 'completed') return s;
    await sleep(20);
  }
};
// Records what `POST`-ing through `method` of the executor client came to in `set(outcome)`
// (the reference only logs a refused CLOSE or cancel and goes on).
const record = (client, method, set) => {
  if (!client || typeof client[method] !== 'function') return;
  const orig = client[method].bind(client);
  client[method] = async (...args) => {
    try {
      const r = await orig(...args);
      set('accepted');
      return r;
    } catch (e) {
      set(`refused: ${e?.message ?? e}`);
      throw e;
    }
  };
};

svc = new DelegatorService({
  config: {
    baseDir: join(stateDir, 'base'),
    transport: new ArchiveDelegatorTransport({ tempDir: join(stateDir, 'tmp') }),
    delegation: { snapshot: { mode: 'auto' }, ...(idleTimeoutMs === undefined ? {} : { idleTimeoutMs }) },
    hooks: { onError: (_id, e) => errors.push(e?.message ?? String(e)) },
  },
});
const client = svc.executorClient;
record(client, 'sendClose', (o) => (closeOutcome = o));
record(client, 'sendCancel', (o) => (cancelOutcome = o));
// Every SSE event the service handles (its private `handleTaskEvent`), without the archives.
if (typeof svc.handleTaskEvent === 'function') {
  const handle = svc.handleTaskEvent.bind(svc);
  svc.handleTaskEvent = async (delegationId, event) => {
    events.push({
      type: event?.type ?? null,
      status: event?.status ?? null,
      message: event?.message ?? null,
      code: event?.code ?? null,
      round: event?.round ?? null,
    });
    return handle(delegationId, event);
  };
}
await svc.initialize();

id = await svc.delegate({
  executorUrl: peer,
  environment: { resources: [{ name: 'workspace', type: 'fs', source: src, mode: 'rw' }] },
  task: { description: 'r1', prompt: 'round 1' },
});
for (let n = 1; n <= rounds; n++) {
  if (n > 1) {
    await svc.continue({ delegationId: id, task: { description: `r${n}`, prompt: `round ${n}` } });
  }
  const state = await settle();
  const d = svc.getDelegation(id);
  console.log('ROUND ' + JSON.stringify({ round: n, state, currentRound: d.currentRound, summary: d.result?.summary ?? null, log: readLog() }));
  if (state !== 'idle') fail(`the session ended (state ${state}) after round ${n} of ${rounds}: no round_done`);
}

if (mode === 'wait-idle') {
  for (;;) {
    const d = svc.getDelegation(id);
    // (An `error` state is reported once its error is recorded too.)
    if (d.state !== 'idle' && (d.state !== 'error' || d.error)) break;
    await sleep(20);
  }
  // A `ps_dev` delegator's own idle close moves the state to `completed` before its CLOSE is
  // answered (`close()` transitions, then awaits `sendClose`): wait for that answer too (the
  // script's time limit bounds the wait).
  while (
    client && idleTimeoutMs !== undefined && closeOutcome === null &&
    svc.getDelegation(id).state === 'completed'
  ) {
    await sleep(20);
  }
  finish(true);
}

if (mode === 'cancel-round-2') {
  const seen = events.length;
  await svc.continue({ delegationId: id, task: { description: 'r2', prompt: 'slow round 2' } });
  for (;;) {
    const s = svc.getDelegation(id)?.state;
    if (s !== 'running') fail(`state ${s} while round 2 should run`);
    if (events.slice(seen).some((e) => e.type === 'status' && e.message === SLOW_AGENT_STARTED)) break;
    await sleep(20);
  }
  await svc.cancel(id);
  const s = svc.getDelegation(id)?.state;
  if (s !== 'cancelled') fail(`state ${s} after cancel`);
  if (client && cancelOutcome !== 'accepted') fail(`the cancel was not accepted: ${cancelOutcome}`);
  finish(true);
}

await svc.close(id);
for (;;) {
  const s = svc.getDelegation(id)?.state;
  if (s === 'completed') break;
  if (s !== 'idle') fail(`state ${s} after close`);
  await sleep(20);
}
if (errors.length > 0) fail(`onError: ${errors.join('; ')}`);
if (client && closeOutcome !== 'accepted') fail(`CLOSE was not accepted: ${closeOutcome}`);
// (No svc.shutdown(): it forgets the delegations RESULT reports; exiting ends everything.)
finish(true);
"#;

/// A reference (`dev`) AWCP executor like [`EXECUTOR_MJS`] (same request log, `LISTENING`,
/// stdin) but with `StorageExecutorTransport` of `@awcp/transport-storage` (its temporary
/// directory `AWCP_REF_TEMP_DIR`: the transport deletes every `*.zip` there when it starts, so
/// it must not be shared). Its agent writes `<workPath>/<resource>/storage-agent.txt`
/// (`prompt=<prompt>`) and returns `{summary: "did: <description>", highlights}`.
///
/// Stdout, besides the lines of [`EXECUTOR_MJS`]: `FILES <id> <JSON array>` (what the agent
/// found in its resource directory, i.e. what the transport's setup extracted), `SETUP <id>
/// ok` or `SETUP <id> failed: <message>` (the download, checksum check and extraction),
/// `CAPTURE <id> <text>` (the snapshot text the transport returned: `{"resultUrl": …}` with the
/// URL's query cut off, or `(inline)`) or `CAPTURE <id> failed: <message>` (the result PUT).
pub const STORAGE_EXECUTOR_MJS: &str = r#"// awcp-rs interop harness (tests/tests/reference_support): a reference storage executor.
import express from 'express';
import { executorHandler } from '@awcp/sdk/server/express';
import { StorageExecutorTransport } from '@awcp/transport-storage';
import { readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

const workDir = process.env.AWCP_REF_WORK_DIR;
const tempDir = process.env.AWCP_REF_TEMP_DIR;
if (!workDir || !tempDir) {
  console.error('AWCP_REF_WORK_DIR and AWCP_REF_TEMP_DIR are required');
  process.exit(64);
}

process.stdin.on('end', () => process.exit(0));
process.stdin.on('error', () => process.exit(0));
process.stdin.resume();

const transport = new StorageExecutorTransport({ tempDir });
const setup = transport.setup.bind(transport);
transport.setup = async (params) => {
  try {
    const r = await setup(params);
    console.log(`SETUP ${params.delegationId} ok`);
    return r;
  } catch (e) {
    console.log(`SETUP ${params.delegationId} failed: ${e?.message ?? e}`);
    throw e;
  }
};
const capture = transport.captureSnapshot.bind(transport);
transport.captureSnapshot = async (params) => {
  try {
    const r = await capture(params);
    let text = '(inline)';
    if (typeof r?.snapshotBase64 === 'string' && r.snapshotBase64.startsWith('{')) {
      const v = JSON.parse(r.snapshotBase64);
      if (typeof v.resultUrl === 'string') v.resultUrl = v.resultUrl.split('?')[0];
      text = JSON.stringify(v);
    }
    console.log(`CAPTURE ${params.delegationId} ${text}`);
    return r;
  } catch (e) {
    console.log(`CAPTURE ${params.delegationId} failed: ${e?.message ?? e}`);
    throw e;
  }
};

const executor = {
  async execute({ delegationId, workPath, task, environment }) {
    console.log(`AGENT ${delegationId} ${JSON.stringify(task)}`);
    const res = environment.resources[0]?.name ?? 'workspace';
    const dir = join(workPath, res);
    console.log(`FILES ${delegationId} ${JSON.stringify((await readdir(dir)).sort())}`);
    await writeFile(join(dir, 'storage-agent.txt'), `prompt=${task.prompt}\n`);
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

/// The reference `DelegatorService` (of the tree's branch) with `StorageDelegatorTransport` and
/// its `local` provider (`{type: 'local', localDir: LOCAL_DIR, endpoint: ENDPOINT}`), snapshot
/// mode `auto`, running one delegation of the directory `SRC` (resource `workspace`, `rw`;
/// task `{description: 'storage', prompt: 'storage round'}`) on an executor:
/// `node storage-delegator.mjs PEER SRC STATE_DIR LOCAL_DIR ENDPOINT`. The provider writes the
/// workspace ZIP to `LOCAL_DIR/workspaces/<id>.zip` and hands out
/// `ENDPOINT/workspaces/<id>.zip` and `ENDPOINT/workspaces/<id>-result.zip`, which something
/// else (the test) must serve (GET and PUT) from `LOCAL_DIR`. A `round_done` (idle) is
/// answered with a CLOSE; the script waits for `completed`.
///
/// Stdout: `HANDLE {json}` (the START handle `prepare` made) as it is made, then `RESULT
/// {json}`: `ok`, (with `ok: false`) `reason`, `id`, `state`, `result`, `error`, `snapshots`
/// (`id`, `status`), `errors` (the `onError` hook's), `events` (each SSE event handled:
/// `type`, `status`, `message`, `code`, and for a snapshot its `snapshotText`: the
/// `snapshotBase64` text where it starts with `{`, else `(base64)`), `handle`, `apply` (what
/// the transport's `applySnapshot` came to: `null` if never called, `applied`, or `failed:
/// <message>` — the service itself only logs a failure and marks the snapshot applied all the
/// same), `files` (the sorted names in `SRC` at the end). Exit status 0 only with `ok: true`:
/// the state `completed` without `onError` within 60 s (`AWCP_REF_TIMEOUT_MS`). It exits when
/// its standard input closes.
pub const STORAGE_DELEGATOR_MJS: &str = r#"// awcp-rs interop harness (tests/tests/reference_support): the reference storage delegator.
import { DelegatorService } from '@awcp/sdk';
import { StorageDelegatorTransport } from '@awcp/transport-storage';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';

const [peer, src, stateDir, localDir, endpoint] = process.argv.slice(2);
if (!peer || !src || !stateDir || !localDir || !endpoint) {
  console.error('usage: node storage-delegator.mjs PEER SRC STATE_DIR LOCAL_DIR ENDPOINT');
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

const transport = new StorageDelegatorTransport({
  provider: { type: 'local', localDir, endpoint },
  tempDir: join(stateDir, 'tmp'),
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
  const handle = svc.handleTaskEvent.bind(svc);
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
    return handle(delegationId, event);
  };
}
await svc.initialize();

id = await svc.delegate({
  executorUrl: peer,
  environment: { resources: [{ name: 'workspace', type: 'fs', source: src, mode: 'rw' }] },
  task: { description: 'storage', prompt: 'storage round' },
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

/// The progress line (`status` event `message`) the `cancel-round-2` mode of
/// [`DELEGATOR_MJS`] waits for before it cancels: what the test's agent prints once started.
pub const SLOW_AGENT_STARTED: &str = "slow agent started";

/// Whether a missing reference (or a failed build of it) fails the tests instead of skipping
/// them.
pub fn required() -> bool {
    std::env::var("AWCP_REQUIRE_REFERENCE_TEST").is_ok_and(|v| v == "1")
}

/// The reference's git mirror: `$AWCP_REFERENCE_GIT` or [`DEFAULT_MIRROR`].
pub fn mirror() -> PathBuf {
    std::env::var_os("AWCP_REFERENCE_GIT")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_MIRROR))
}

/// A built tree of one branch.
#[derive(Clone, Debug)]
pub struct RefTree {
    root: PathBuf,
}

/// The reference `dev` tree ([`reference`] of [`DEV`]).
pub fn reference_dev() -> Option<RefTree> {
    reference(DEV)
}

/// The reference `ps_dev` tree ([`reference`] of [`PS_DEV`]).
pub fn reference_ps_dev() -> Option<RefTree> {
    reference(PS_DEV)
}

/// A branch's tree once prepared: its root, or why it cannot be had.
type Built = OnceLock<Result<PathBuf, String>>;

/// The reference tree of `branch` (in `<target>/awcp-ref/<branch>`), built on first use (once
/// per test process and branch; once between processes thanks to the lock file and the
/// marker). `None` after a `SKIPPED` notice where it cannot be had; a panic instead with
/// `AWCP_REQUIRE_REFERENCE_TEST=1`.
pub fn reference(branch: &'static str) -> Option<RefTree> {
    static TREES: Mutex<Vec<(&'static str, Arc<Built>)>> = Mutex::new(Vec::new());
    let cell = {
        let mut trees = TREES.lock().unwrap_or_else(|e| e.into_inner());
        match trees.iter().find(|(b, _)| *b == branch) {
            Some((_, cell)) => Arc::clone(cell),
            None => {
                let cell = Arc::new(OnceLock::new());
                trees.push((branch, Arc::clone(&cell)));
                cell
            }
        }
    };
    match cell.get_or_init(|| prepare(branch)) {
        Ok(root) => Some(RefTree { root: root.clone() }),
        Err(why) => {
            if required() {
                panic!("the reference interop tests cannot run ({branch}): {why}");
            }
            eprintln!(
                "SKIPPED reference interop test ({branch}): {why} (set AWCP_REQUIRE_REFERENCE_TEST=1 to make this fatal)"
            );
            None
        }
    }
}

/// `target/` of this build (the test binary is `target/<profile>/deps/<test>`; this is
/// `$CARGO_TARGET_DIR` where that is set).
fn target_dir() -> PathBuf {
    awcp_tests::bins::profile_dir()
        .parent()
        .expect("target dir")
        .to_path_buf()
}

/// Runs `cmd`, returning its trimmed stdout, or why it failed.
fn run(cmd: &mut Command, what: &str) -> Result<String, String> {
    match cmd.stdin(Stdio::null()).output() {
        Ok(o) if o.status.success() => Ok(String::from_utf8_lossy(&o.stdout).trim().to_owned()),
        Ok(o) => Err(format!("{what} failed ({}):\n{}", o.status, tail(&o))),
        Err(e) => Err(format!("{what}: cannot run it: {e}")),
    }
}

/// The last lines of a failed command's output.
fn tail(o: &Output) -> String {
    let mut all = String::from_utf8_lossy(&o.stdout).into_owned();
    all.push_str(&String::from_utf8_lossy(&o.stderr));
    let lines: Vec<&str> = all.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// Checks the prerequisites, then builds (or reuses) the tree and installs our scripts.
fn prepare(branch: &str) -> Result<PathBuf, String> {
    let mirror = mirror();
    if !mirror.is_dir() {
        return Err(format!(
            "no reference git mirror at {} (set AWCP_REFERENCE_GIT)",
            mirror.display()
        ));
    }
    let node = run(Command::new("node").arg("--version"), "node --version")?;
    let major: u32 = node
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    if major < 18 {
        return Err(format!("node {node} is older than 18"));
    }
    run(Command::new("npm").arg("--version"), "npm --version")?;
    run(Command::new("tar").arg("--version"), "tar --version")?;
    let commit = run(
        Command::new("git").arg("--git-dir").arg(&mirror).args([
            "rev-parse",
            "--verify",
            &format!("{branch}^{{commit}}"),
        ]),
        &format!("git rev-parse {branch} in {}", mirror.display()),
    )?;

    let base = target_dir().join("awcp-ref");
    std::fs::create_dir_all(&base).map_err(|e| format!("{}: {e}", base.display()))?;
    let dir = base.join(branch);
    let _lock = lock(&base.join(format!("{branch}.lock")))?;
    let built = std::fs::read_to_string(dir.join(MARKER)).unwrap_or_default();
    if built != marker_text(&commit) {
        eprintln!(
            "building the reference's {branch} branch ({commit}) into {} (npm ci, tsc; a minute or two)",
            dir.display()
        );
        build(&mirror, &commit, &dir)?;
    }
    let interop = dir.join("interop");
    std::fs::create_dir_all(&interop).map_err(|e| format!("{}: {e}", interop.display()))?;
    install(&interop.join("executor.mjs"), EXECUTOR_MJS)?;
    install(&interop.join("delegator.mjs"), DELEGATOR_MJS)?;
    install(&interop.join("storage-executor.mjs"), STORAGE_EXECUTOR_MJS)?;
    install(
        &interop.join("storage-delegator.mjs"),
        STORAGE_DELEGATOR_MJS,
    )?;
    install(&interop.join("git-executor.mjs"), git::GIT_EXECUTOR_MJS)?;
    install(&interop.join("git-delegator.mjs"), git::GIT_DELEGATOR_MJS)?;
    Ok(dir)
}

/// An exclusive `flock` on `path`, held until the file is dropped (or the process dies).
fn lock(path: &Path) -> Result<std::fs::File, String> {
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    loop {
        // SAFETY: `flock` on a descriptor `f` owns and keeps open for the call.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } == 0 {
            return Ok(f);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(format!("locking {}: {e}", path.display()));
        }
    }
}

/// `git archive <commit> | tar -x -C dir`, `npm ci`, the builds of [`BUILT_PACKAGES`], the
/// marker.
fn build(mirror: &Path, commit: &str, dir: &Path) -> Result<(), String> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|e| format!("removing {}: {e}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut git = Command::new("git")
        .arg("--git-dir")
        .arg(mirror)
        .args(["archive", commit])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("git archive: {e}"))?;
    let archive = git.stdout.take().expect("piped stdout");
    let tar = Command::new("tar")
        .arg("-x")
        .arg("-C")
        .arg(dir)
        .stdin(archive)
        .output()
        .map_err(|e| format!("tar: {e}"));
    let git = git
        .wait_with_output()
        .map_err(|e| format!("git archive: {e}"))?;
    if !git.status.success() {
        return Err(format!("git archive {commit} failed:\n{}", tail(&git)));
    }
    let tar = tar?;
    if !tar.status.success() {
        return Err(format!("tar -x failed:\n{}", tail(&tar)));
    }
    let mut steps: Vec<Vec<&str>> = vec![vec!["ci", "--no-audit", "--no-fund"]];
    for package in BUILT_PACKAGES {
        let name = package.trim_start_matches("@awcp/");
        if dir
            .join("packages")
            .join(name)
            .join("package.json")
            .is_file()
        {
            steps.push(vec!["run", "build", "-w", package]);
        }
    }
    for args in steps {
        run(
            Command::new("npm")
                .args(&args)
                .current_dir(dir)
                .env("npm_config_update_notifier", "false"),
            &format!("npm {} (in {})", args.join(" "), dir.display()),
        )?;
    }
    std::fs::write(dir.join(MARKER), marker_text(commit))
        .map_err(|e| format!("writing the marker: {e}"))
}

/// Writes `text` to `path` unless it already holds it (through a rename, so a script being
/// read by a running node never changes under it).
fn install(path: &Path, text: &str) -> Result<(), String> {
    if std::fs::read_to_string(path).is_ok_and(|t| t == text) {
        return Ok(());
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, text).map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Output of a child read on a thread as it comes: the text so far, whether it has ended,
/// and a condition variable signalled on every line.
#[derive(Default)]
struct Captured {
    state: Mutex<(String, bool)>,
    cv: Condvar,
}

impl Captured {
    /// Reads `from` line by line into a new [`Captured`] on a thread.
    fn spawn(from: impl Read + Send + 'static) -> Arc<Captured> {
        let c = Arc::new(Captured::default());
        let c2 = Arc::clone(&c);
        std::thread::spawn(move || {
            let mut r = BufReader::new(from);
            let mut line = Vec::new();
            loop {
                line.clear();
                let n = r.read_until(b'\n', &mut line).unwrap_or(0);
                let mut s = c2.state.lock().unwrap();
                if n == 0 {
                    s.1 = true;
                    c2.cv.notify_all();
                    return;
                }
                s.0.push_str(&String::from_utf8_lossy(&line));
                c2.cv.notify_all();
            }
        });
        c
    }

    fn text(&self) -> String {
        self.state.lock().unwrap().0.clone()
    }

    /// Waits until `pred` holds for the text (then returns it), the output ends, or `limit`
    /// passes (then `None`).
    fn wait_until(&self, limit: Duration, pred: impl Fn(&str) -> bool) -> Option<String> {
        let deadline = Instant::now() + limit;
        let mut s = self.state.lock().unwrap();
        loop {
            if pred(&s.0) {
                return Some(s.0.clone());
            }
            let now = Instant::now();
            if s.1 || now >= deadline {
                return None;
            }
            s = self.cv.wait_timeout(s, deadline - now).unwrap().0;
        }
    }
}

impl RefTree {
    /// The tree's root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Starts [`EXECUTOR_MJS`] with a work directory of its own and waits until it listens.
    pub fn start_executor(&self) -> RefExecutor {
        let work = tempfile::tempdir().unwrap();
        let mut cmd = Command::new("node");
        cmd.arg(self.root.join("interop/executor.mjs"))
            .env("AWCP_REF_WORK_DIR", work.path());
        self.start_script(cmd, work)
    }

    /// Starts [`STORAGE_EXECUTOR_MJS`] with a work directory and a transport temporary
    /// directory of its own (`work` and `tmp` of one temporary directory) and waits until it
    /// listens.
    pub fn start_storage_executor(&self) -> RefExecutor {
        let dirs = tempfile::tempdir().unwrap();
        let (work, tmp) = (dirs.path().join("work"), dirs.path().join("tmp"));
        for d in [&work, &tmp] {
            std::fs::create_dir(d).unwrap();
        }
        let mut cmd = Command::new("node");
        cmd.arg(self.root.join("interop/storage-executor.mjs"))
            .env("AWCP_REF_WORK_DIR", &work)
            .env("AWCP_REF_TEMP_DIR", &tmp);
        self.start_script(cmd, dirs)
    }

    /// Runs `cmd` (a `node` executor script) in `interop/`, owning the temporary directory
    /// `work`, and waits until it prints `LISTENING <port>`.
    fn start_script(&self, mut cmd: Command, work: tempfile::TempDir) -> RefExecutor {
        let mut child = cmd
            .current_dir(self.root.join("interop"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("node starts");
        let stdin = child.stdin.take();
        let out = Captured::spawn(child.stdout.take().expect("piped stdout"));
        let err = Captured::spawn(child.stderr.take().expect("piped stderr"));
        let mut ex = RefExecutor {
            child,
            _stdin: stdin,
            port: 0,
            out,
            err,
            _work: work,
        };
        let port = ex
            .out
            .wait_until(EXECUTOR_START_LIMIT, |t| listening_port(t).is_some())
            .and_then(|t| listening_port(&t));
        match port {
            Some(p) => ex.port = p,
            None => panic!(
                "the reference executor did not print LISTENING <port>\n{}",
                ex.show()
            ),
        }
        ex
    }

    /// Runs [`DELEGATOR_MJS`] against `peer_url` on the directory `src` for `rounds` rounds
    /// (its state in a temporary directory), killing it if it runs over 90 s.
    pub fn run_delegator(&self, peer_url: &str, src: &Path, rounds: u32) -> Output {
        self.run_delegator_with(peer_url, src, rounds, &[])
    }

    /// [`RefTree::run_delegator`] with environment variables `env` set for the script (its
    /// `AWCP_REF_MODE`, `AWCP_REF_IDLE_TIMEOUT_MS`, `AWCP_REF_TIMEOUT_MS`).
    pub fn run_delegator_with(
        &self,
        peer_url: &str,
        src: &Path,
        rounds: u32,
        env: &[(&str, &str)],
    ) -> Output {
        let state = tempfile::tempdir().unwrap();
        let mut cmd = Command::new("node");
        cmd.arg(self.root.join("interop/delegator.mjs"))
            .arg(peer_url)
            .arg(src)
            .arg(rounds.to_string())
            .arg(state.path())
            .current_dir(self.root.join("interop"))
            .env_remove("AWCP_REF_MODE")
            .env_remove("AWCP_REF_IDLE_TIMEOUT_MS");
        for (k, v) in env {
            cmd.env(k, v);
        }
        run_bounded(&mut cmd, DELEGATOR_LIMIT)
    }

    /// Runs [`STORAGE_DELEGATOR_MJS`] against `peer_url` on the directory `src`, its `local`
    /// provider writing under `local_dir` and naming URLs under `endpoint` (its state in a
    /// temporary directory), killing it if it runs over 90 s.
    pub fn run_storage_delegator(
        &self,
        peer_url: &str,
        src: &Path,
        local_dir: &Path,
        endpoint: &str,
    ) -> Output {
        let state = tempfile::tempdir().unwrap();
        let mut cmd = Command::new("node");
        cmd.arg(self.root.join("interop/storage-delegator.mjs"))
            .arg(peer_url)
            .arg(src)
            .arg(state.path())
            .arg(local_dir)
            .arg(endpoint)
            .current_dir(self.root.join("interop"));
        run_bounded(&mut cmd, DELEGATOR_LIMIT)
    }
}

/// The port of the first `LISTENING <port>` line.
fn listening_port(text: &str) -> Option<u16> {
    text.lines()
        .find_map(|l| l.strip_prefix("LISTENING "))
        .and_then(|p| p.trim().parse().ok())
}

/// A running [`EXECUTOR_MJS`] or [`STORAGE_EXECUTOR_MJS`], killed and reaped when dropped.
pub struct RefExecutor {
    child: Child,
    /// Held open: the script exits when it closes.
    _stdin: Option<ChildStdin>,
    port: u16,
    out: Arc<Captured>,
    err: Arc<Captured>,
    _work: tempfile::TempDir,
}

impl RefExecutor {
    /// Its AWCP URL, `http://127.0.0.1:<port>/awcp`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/awcp", self.port)
    }

    /// Its stdout so far.
    pub fn log(&self) -> String {
        self.out.text()
    }

    /// Its stderr so far.
    pub fn stderr(&self) -> String {
        self.err.text()
    }

    /// Waits up to `limit` for its stdout to satisfy `pred`; whether it did.
    pub fn wait_for_log(&self, limit: Duration, pred: impl Fn(&str) -> bool) -> bool {
        self.out.wait_until(limit, pred).is_some()
    }

    /// Both its outputs, for failure messages.
    pub fn show(&self) -> String {
        format!(
            "--- reference executor stdout ---\n{}\n--- reference executor stderr ---\n{}",
            self.log(),
            self.stderr()
        )
    }
}

impl Drop for RefExecutor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The requests [`EXECUTOR_MJS`] logged that carried a message of type `ty`, and the statuses
/// it answered them with (in order).
pub fn answers_to(log: &str, ty: &str) -> (usize, Vec<u16>) {
    let suffix = format!(" type={ty}");
    let needle = format!(" type={ty} ");
    let received = log
        .lines()
        .filter(|l| l.starts_with("REQ POST ") && l.contains(&needle))
        .count();
    let statuses = log
        .lines()
        .filter(|l| l.starts_with("RES ") && l.contains(" POST ") && l.ends_with(&suffix))
        .filter_map(|l| l.split(' ').nth(1).and_then(|s| s.parse().ok()))
        .collect();
    (received, statuses)
}

/// Runs `cmd` (stdin a pipe held open until it exits, outputs captured) to completion, or
/// kills it once `limit` has passed; the output then says so at the end of stderr, and its
/// status is not a success.
pub fn run_bounded(cmd: &mut Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?} starts: {e}"));
    // Held open until it has exited (the scripts exit when it closes); dropped for others.
    let stdin = child.stdin.take();
    let out = Captured::spawn(child.stdout.take().expect("piped stdout"));
    let err = Captured::spawn(child.stderr.take().expect("piped stderr"));
    let deadline = Instant::now() + limit;
    let mut killed = false;
    let status = loop {
        match child.try_wait().expect("try_wait") {
            Some(status) => break status,
            None if Instant::now() >= deadline => {
                let _ = child.kill();
                killed = true;
                break child.wait().expect("wait");
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    drop(stdin);
    // The pipes end with the process (a grandchild holding them is given a moment).
    let wait_end = |c: &Captured| {
        c.wait_until(Duration::from_secs(5), |_| false);
        c.text()
    };
    let stdout = wait_end(&out);
    let mut stderr = wait_end(&err);
    if killed {
        stderr.push_str(&format!(
            "\n[killed by the test after {} s]\n",
            limit.as_secs()
        ));
    }
    Output {
        status,
        stdout: stdout.into_bytes(),
        stderr: stderr.into_bytes(),
    }
}

/// The JSON of the last stdout line of `o` starting with `prefix` (`""`: the last line that
/// parses as JSON).
pub fn json_line(o: &Output, prefix: &str) -> Option<serde_json::Value> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .rev()
        .filter_map(|l| l.trim().strip_prefix(prefix))
        .find_map(|l| serde_json::from_str(l.trim()).ok())
}
