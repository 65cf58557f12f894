// Acceptance test of awcp-mcp with the official TypeScript MCP SDK (@modelcontextprotocol/sdk,
// the client the MCP Inspector and many agents are built on). Unlike the Python SDK, its
// Client validates every result's structuredContent against the tool's outputSchema and
// throws "Structured content does not match the tool's output schema" instead of returning a
// result that breaks it, so the model would never see the message.
//
// Usage: node ts_client.mjs AWCP_MCP_BIN AWCP_EXECUTOR_BIN   (NODE_PATH: the SDK's node_modules)
//
// Starts an executor, then awcp-mcp over stdio; checks the tools list, a successful
// foreground delegate (its structured result validated by the SDK), a multi-round delegation
// (delegate keep_open -> idle, delegate_continue -> round 2 applied, delegate_close ->
// completed), and that every failing call (blank prompt, missing workspace, an unreachable
// peer, an unknown delegation, missing arguments, a closed delegation continued) comes back as
// a tool error whose text says what went wrong. Exits non-zero on the first failure.

import { spawn } from "node:child_process";
import { mkdtempSync, mkdirSync, writeFileSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";

const sdk = process.env.AWCP_MCP_TS_SDK;
const { Client } = await import(`${sdk}/dist/esm/client/index.js`);
const { StdioClientTransport } = await import(`${sdk}/dist/esm/client/stdio.js`);

const [mcpBin, executorBin] = process.argv.slice(2);
const log = (m) => console.log(`[mcp-ts] ${m}`);
// Children to kill before any exit: an orphan holding the test's output pipe would keep the
// Rust test waiting for the end of it forever.
const children = [];
process.on("exit", () => children.forEach((c) => c.kill("SIGKILL")));
const fail = (m) => {
  console.error(`[mcp-ts] FAILED: ${m}`);
  for (const c of children) c.kill("SIGKILL");
  process.exit(1);
};

const tmp = mkdtempSync(join(tmpdir(), "awcp-mcp-ts-"));
// Removed on every exit (after the children are killed: the handlers run in order).
process.on("exit", () => rmSync(tmp, { recursive: true, force: true }));
writeFileSync(
  join(tmp, "agent.sh"),
  '#!/bin/sh\ncase "$AWCP_PROMPT" in slow*) sleep 90; echo "slept 90 s";;\n' +
    '  round*) echo "prompt=$AWCP_PROMPT" >> log.txt;; esac\n' +
    'echo "written by the agent" > AGENT_RESULT.txt\necho "wrote AGENT_RESULT.txt"\n',
);
const executor = spawn(
  executorBin,
  [
    "--listen", "127.0.0.1:0",
    "--work-root", join(tmp, "work"),
    "--state-dir", join(tmp, "exec-state"),
    "--agent-cmd", `sh ${join(tmp, "agent.sh")}`,
    "--quiet",
  ],
  { stdio: ["ignore", "pipe", "ignore"] },
);
children.push(executor);
const peer = await new Promise((resolve, reject) => {
  const lines = createInterface({ input: executor.stdout });
  lines.once("line", (l) => {
    const prefix = "awcp-executor listening on ";
    l.startsWith(prefix) ? resolve(l.slice(prefix.length).trim()) : reject(new Error(l));
  });
  executor.once("exit", (c) => reject(new Error(`executor exited with ${c}`)));
});
log(`executor at ${peer}`);
const dead = "http://127.0.0.1:9/awcp";

const transport = new StdioClientTransport({
  command: mcpBin,
  args: ["--peers", `${peer},${dead}`, "--port", "0", "--state-dir", join(tmp, "delegator")],
  env: { ...process.env, RUST_LOG: "warn" },
  stderr: "ignore",
});
const client = new Client({ name: "awcp-mcp-ts-test", version: "1.0.0" });
try {
  await client.connect(transport);
  const { tools } = await client.listTools(); // caches each tool's output validator
  const names = tools.map((t) => t.name);
  for (const want of ["delegate", "delegate_output", "delegate_cancel", "delegate_snapshots",
                      "delegate_list", "delegate_continue", "delegate_close"]) {
    if (!names.includes(want)) fail(`tool ${want} missing: ${names}`);
  }
  // The multi-round tools: the reference `dev` branch's argument names, a record as result.
  const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
  for (const [name, props, required] of [
    ["delegate_continue", ["background", "delegation_id", "description", "prompt"],
      ["delegation_id", "prompt"]],
    ["delegate_close", ["delegation_id"], ["delegation_id"]],
  ]) {
    const t = byName[name];
    const got = Object.keys(t.inputSchema.properties).sort();
    if (JSON.stringify(got) !== JSON.stringify(props)) fail(`${name} takes ${got}`);
    if (JSON.stringify(t.inputSchema.required) !== JSON.stringify(required)) {
      fail(`${name} requires ${t.inputSchema.required}`);
    }
    if (!t.outputSchema?.properties?.round) fail(`${name}'s outputSchema has no round`);
    if (t.annotations?.readOnlyHint !== false) fail(`${name} is not marked as writing`);
  }
  if (byName.delegate.inputSchema.properties.keep_open?.type !== "boolean") {
    fail("delegate has no boolean keep_open");
  }
  for (const t of tools) {
    for (const [p, s] of Object.entries(t.inputSchema.properties ?? {})) {
      if (!s.description) fail(`${t.name}.${p} has no description`);
    }
  }
  // Only transports this server can use are offered (issue 48.3: storage and git were
  // offered and then failed with "not available").
  const offered = tools.find((t) => t.name === "delegate").inputSchema.properties.transport.enum;
  if (JSON.stringify(offered) !== JSON.stringify(["archive"])) {
    fail(`the in-process daemon offers transports ${offered}`);
  }
  log(`tools: ${names.join(", ")} (every parameter described)`);

  const call = async (label, name, args) => {
    try {
      return await client.callTool({ name, arguments: args });
    } catch (e) {
      fail(`${label}: the SDK client refused the result: ${e.message}`);
    }
  };
  const text = (r) => r.content.filter((c) => c.type === "text").map((c) => c.text).join("\n");

  // Success: the structured result passed the SDK's schema check (callTool did not throw).
  const ws = join(tmp, "ws");
  mkdirSync(ws);
  writeFileSync(join(ws, "README.md"), "# lent\n");
  const ok = await call("delegate(fg)", "delegate", {
    description: "add a file", prompt: "write AGENT_RESULT.txt",
    workspace_dir: ws, peer_url: peer,
  });
  if (ok.isError) fail(`delegate(fg) failed: ${text(ok)}`);
  if (ok.structuredContent?.state !== "completed") fail(`not completed: ${text(ok)}`);
  if (!text(ok).includes("Changed (1 file)") || !text(ok).includes("/AGENT_RESULT.txt")) {
    fail(`the text does not name the changed file: ${text(ok)}`);
  }
  if (readFileSync(join(ws, "AGENT_RESULT.txt"), "utf8") !== "written by the agent\n") {
    fail("the result was not applied");
  }
  log("delegate: completed, structured result valid against its outputSchema");

  // A 90 s task with the client's default request timeout (60 s): the foreground delegate
  // hands the id back in time, and delegate_output(block=true) waits within its budget with
  // progress notifications, saying "still running" rather than timing out, until it ends
  // (issue 48.2: it waited 60 s by default, exactly the client's timeout, and timed out).
  const slowWs = join(tmp, "ws-slow");
  mkdirSync(slowWs);
  writeFileSync(join(slowWs, "README.md"), "# slow\n");
  const started = Date.now();
  const fg = await call("delegate(slow)", "delegate", {
    description: "a slow task", prompt: "slow: take 90 s", workspace_dir: slowWs, peer_url: peer,
  });
  if (fg.isError || fg.structuredContent?.stillRunning !== true) {
    fail(`a 90 s foreground delegate should hand its id back: ${text(fg)}`);
  }
  const slowId = fg.structuredContent.delegationId;
  let progress = 0;
  let calls = 0;
  let last;
  for (;;) {
    calls += 1;
    try {
      last = await client.callTool(
        { name: "delegate_output", arguments: { delegation_id: slowId, block: true } },
        undefined,
        { onprogress: () => { progress += 1; } },
      );
    } catch (e) {
      fail(`delegate_output(block) call ${calls} failed in the client: ${e.message}`);
    }
    if (last.isError) fail(`delegate_output(block): ${text(last)}`);
    // A wait whose budget ran out says "still running", also in the moment between the
    // executor's end (state completed) and the result's apply: only an ended record is over.
    if (last.structuredContent?.stillRunning === true) {
      if (calls > 10) fail("the slow task never ended");
      continue;
    }
    if (last.structuredContent?.state === "completed") break;
    fail(`neither over nor running: ${text(last)}`);
  }
  if (progress < 1) fail("no progress notification while waiting");
  if (readFileSync(join(slowWs, "AGENT_RESULT.txt"), "utf8") !== "written by the agent\n") {
    fail("the slow task's result was not applied");
  }
  log(`slow task: completed after ${Math.round((Date.now() - started) / 1000)} s, ` +
      `${calls} delegate_output call(s), ${progress} progress notification(s), no client timeout`);

  // delegate_list names every delegation of this run, the slow one among them.
  const listed = await call("delegate_list", "delegate_list", {});
  if (listed.isError) fail(`delegate_list: ${text(listed)}`);
  const ids = listed.structuredContent.delegations.map((d) => d.id);
  if (ids.length !== 2 || !ids.includes(slowId) || !text(listed).includes(slowId)) {
    fail(`delegate_list does not list this run's two delegations: ${text(listed)}`);
  }
  log(`delegate_list: ${ids.length} delegations, ${listed.structuredContent.activeDelegations} running`);

  // Rounds: keep_open -> idle after round 1 (applied); delegate_output says the round is
  // over; delegate_continue -> round 2 in the same executor work directory (applied);
  // delegate_close -> completed. Every result passes the SDK's outputSchema check.
  const roundsWs = join(tmp, "ws-rounds");
  mkdirSync(roundsWs);
  writeFileSync(join(roundsWs, "README.md"), "# rounds\n");
  const logOf = () => readFileSync(join(roundsWs, "log.txt"), "utf8");
  const r1 = await call("delegate(keep_open)", "delegate", {
    description: "round one", prompt: "round one", workspace_dir: roundsWs, peer_url: peer,
    keep_open: true,
  });
  const rid = r1.structuredContent?.id;
  if (r1.isError || r1.structuredContent?.state !== "idle" || r1.structuredContent.round !== 1) {
    fail(`delegate(keep_open) should leave round 1 idle: ${text(r1)}`);
  }
  if (r1.structuredContent.stillRunning !== false) fail(`idle is not over: ${text(r1)}`);
  if (logOf() !== "prompt=round one\n") fail(`round 1 not applied: ${logOf()}`);
  const idle = await call("delegate_output(idle)", "delegate_output",
    { delegation_id: rid, block: true, timeout: 30 });
  if (idle.isError || idle.structuredContent?.stillRunning !== false ||
      !text(idle).includes("delegate_continue")) {
    fail(`delegate_output on an idle delegation: ${text(idle)}`);
  }
  let roundProgress = 0;
  let r2;
  try {
    r2 = await client.callTool(
      { name: "delegate_continue",
        arguments: { delegation_id: rid, description: "round two", prompt: "round two" } },
      undefined,
      { onprogress: () => { roundProgress += 1; } },
    );
  } catch (e) {
    fail(`delegate_continue: the SDK client refused the result: ${e.message}`);
  }
  const s2 = r2.structuredContent;
  if (r2.isError || s2?.state !== "idle" || s2.round !== 2) {
    fail(`delegate_continue should end idle in round 2: ${text(r2)}`);
  }
  if (s2.snapshots.map((x) => x.status).join() !== "applied,applied") {
    fail(`each round's result should be applied: ${JSON.stringify(s2.snapshots)}`);
  }
  if (logOf() !== "prompt=round one\nprompt=round two\n") fail(`round 2 not applied: ${logOf()}`);
  if (roundProgress < 1) fail("no progress notification from delegate_continue");
  const closed = await call("delegate_close", "delegate_close", { delegation_id: rid });
  if (closed.isError || closed.structuredContent?.state !== "completed") {
    fail(`delegate_close should complete the delegation: ${text(closed)}`);
  }
  log(`rounds: ${rid} idle after round 1, round 2 applied (${roundProgress} progress ` +
      "notification(s)), closed -> completed");

  // Failures: tool errors the model can read, on every path.
  const cases = [
    ["delegate(blank prompt)", "delegate",
      { description: "x", prompt: "  ", workspace_dir: ws, peer_url: peer }, "prompt"],
    ["delegate(missing dir)", "delegate",
      { description: "x", prompt: "y", workspace_dir: join(tmp, "nope"), peer_url: peer },
      "does not exist"],
    ["delegate(peer down)", "delegate",
      { description: "x", prompt: "y", workspace_dir: ws, peer_url: dead }, "127.0.0.1:9"],
    ["delegate_output(unknown id)", "delegate_output",
      { delegation_id: "dlg_doesnotexist" }, "unknown delegation"],
    ["delegate_cancel(no id)", "delegate_cancel", {}, "delegation_id"],
    ["delegate_snapshots(unknown id)", "delegate_snapshots",
      { delegation_id: "dlg_doesnotexist" }, "dlg_doesnotexist"],
    ["delegate_continue(closed)", "delegate_continue",
      { delegation_id: rid, prompt: "round three" }, "idle"],
    ["delegate_continue(no prompt)", "delegate_continue", { delegation_id: rid }, "prompt"],
    ["delegate_close(closed)", "delegate_close", { delegation_id: rid }, "idle"],
    ["delegate_close(unknown id)", "delegate_close",
      { delegation_id: "dlg_doesnotexist" }, "unknown delegation"],
  ];
  for (const [label, name, args, needle] of cases) {
    const r = await call(label, name, args);
    if (!r.isError) fail(`${label} should be a tool error: ${text(r)}`);
    if (!text(r).toLowerCase().includes(needle.toLowerCase())) {
      fail(`${label}: the error text lacks ${JSON.stringify(needle)}: ${text(r)}`);
    }
    log(`${label}: tool error as expected: ${text(r).split("\n")[0]}`);
  }
  await client.close();
} finally {
  executor.kill("SIGKILL");
}
log("ok");
process.exit(0);
