#!/usr/bin/env python3
"""Acceptance test of awcp-mcp with the official Python MCP SDK (`pip install mcp`).

Usage: test_mcp_client.py AWCP_MCP_BIN AWCP_EXECUTOR_BIN AWCP_BIN

Starts a local executor (`awcp-executor --listen 127.0.0.1:0` with a small shell agent that is
slow when the prompt says SLOW), then `awcp-mcp --peers <executor> --port 0` over stdio, and
checks: initialize + list tools (the delegate description carries the executor's card);
foreground delegate; background delegate + delegate_output(block=true); cancel of a running
delegation; staged snapshots -> list -> apply, and discard; a result that cannot be applied
(the workspace changed locally during the task) -> delegate and delegate_output report isError
and the snapshot stays pending with the reason; bad arguments -> tool errors while
the server stays alive; secret-looking files refused unless allow_sensitive; multi-round
delegations (delegate keep_open -> idle after round 1, its result applied; delegate_continue ->
round 2 applied in the same executor work directory; delegate_close -> completed), in-process,
over the foreground budget and with an external daemon in the background; delegate_recover,
also after a restart of the MCP server (in-process daemon: the executor is asked; external
`awcp daemon`: the daemon still has the delegation).
Exits non-zero on the first failure.
"""

import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jsonschema
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

AGENT = """#!/bin/sh
case "$AWCP_PROMPT" in
  *SLOW*) echo "sleeping a while"; sleep 300 ;;
  STEPS*) set -- $AWCP_PROMPT; echo "step one"
          while [ ! -e "$2" ]; do sleep 0.1; done
          echo "step two" ;;
  WAITFILE*) set -- $AWCP_PROMPT; while [ ! -e "$2" ]; do sleep 0.1; done ;;
  CONFLICT*) set -- $AWCP_PROMPT; echo "edited locally" > "$2" ;;
  ROUND*) echo "prompt=$AWCP_PROMPT" >> log.txt ;;
esac
echo "written by the agent" > AGENT_RESULT.txt
echo "wrote AGENT_RESULT.txt"
"""

EXECUTOR_NAME = "mcp-test-executor"


def log(msg):
    print(f"[mcp-test] {msg}", flush=True)


def field(obj, snake, camel):
    """A result attribute under the SDK's 2.x (snake_case) or 1.x (camelCase) name."""
    return getattr(obj, snake) if hasattr(obj, snake) else getattr(obj, camel)


def is_error(result):
    return bool(field(result, "is_error", "isError"))


def structured(result):
    return field(result, "structured_content", "structuredContent")


def text_of(result):
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


# Each tool's outputSchema (from list_tools): every successful result is validated against it.
SCHEMAS = {}


def expect_ok(name, result):
    if is_error(result):
        raise AssertionError(f"{name} failed: {text_of(result)}")
    tool = name.split("(")[0]
    if tool in SCHEMAS:
        jsonschema.validate(structured(result), SCHEMAS[tool])
        CHECKED.add(tool)
    return result


CHECKED = set()


def expect_error(name, result, *needles):
    text = text_of(result)
    if not is_error(result):
        raise AssertionError(f"{name} should be a tool error, got: {text}")
    for n in needles:
        if n.lower() not in text.lower():
            raise AssertionError(f"{name}: error text lacks {n!r}: {text}")
    log(f"{name}: tool error as expected: {text.strip()}")


def start_executor(exe, tmp, name="executor", extra=()):
    agent = tmp / "agent.sh"
    agent.write_text(AGENT)
    agent.chmod(0o755)
    proc = subprocess.Popen(
        [
            exe,
            "--listen", "127.0.0.1:0",
            "--work-root", str(tmp / f"{name}-work"),
            "--state-dir", str(tmp / f"{name}-state"),
            "--agent-cmd", f"sh {agent}",
            "--name", EXECUTOR_NAME,
            "--quiet",
            *extra,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline().strip()
    if "http://" not in line:
        proc.kill()
        raise AssertionError(f"executor did not print its URL: {line!r}")
    url = line[line.index("http://"):]
    log(f"executor at {url}")
    return proc, url


def make_workspace(tmp, name):
    d = tmp / name
    (d / "src").mkdir(parents=True)
    (d / "README.md").write_text("# sample\n")
    (d / "src" / "main.py").write_text("print('hi')\n")
    return d


@contextlib.asynccontextmanager
async def open_session(mcp_bin, args, env=None):
    params = StdioServerParameters(
        command=mcp_bin, args=args, env={**os.environ, "RUST_LOG": "info", **(env or {})})
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            log(f"initialized: {field(init, 'server_info', 'serverInfo').name} {' '.join(args)}")
            yield session


async def run(mcp_bin, peer, tmp):
    # A second peer nobody listens on: reported in the description, not fatal.
    dead = "http://127.0.0.1:9"
    args = ["--peers", f"{peer},{dead}", "--port", "0", "--state-dir", str(tmp / "delegator")]
    async with open_session(mcp_bin, args) as session:
        # 1. Tools, with the executor's card in delegate's description.
        tools = {t.name: t for t in (await session.list_tools()).tools}
        want = {
            "delegate", "delegate_output", "delegate_cancel", "delegate_snapshots",
            "delegate_apply_snapshot", "delegate_discard_snapshot", "delegate_recover",
            "delegate_list", "delegate_continue", "delegate_close",
        }
        assert want <= set(tools), f"missing tools: {want - set(tools)}"
        desc = tools["delegate"].description
        assert EXECUTOR_NAME in desc, f"card name not in delegate description:\n{desc}"
        assert "Workspace task" in desc, f"card skills not in delegate description:\n{desc}"
        assert peer in desc, desc
        assert f"(unreachable) {dead}/awcp" in desc, f"unreachable peer not reported:\n{desc}"
        for p in ("description", "prompt", "workspace_dir", "peer_url", "cwd", "ttl_seconds",
                  "access_mode", "background", "snapshot_mode", "transport", "allow_sensitive",
                  "keep_open"):
            assert p in field(tools["delegate"], "input_schema", "inputSchema")["properties"], p
        # The multi-round tools, with the reference `dev` branch's argument names.
        for name, params, required in (
                ("delegate_continue", {"delegation_id", "prompt", "description", "background"},
                 ["delegation_id", "prompt"]),
                ("delegate_close", {"delegation_id"}, ["delegation_id"])):
            schema = field(tools[name], "input_schema", "inputSchema")
            assert set(schema["properties"]) == params, (name, schema)
            assert schema["required"] == required, (name, schema)
            assert all(p.get("description") for p in schema["properties"].values()), schema
            assert "keep_open" in tools[name].description, tools[name].description
        keep_open = field(tools["delegate"], "input_schema", "inputSchema")["properties"]["keep_open"]
        assert keep_open["type"] == "boolean" and "idle" in keep_open["description"], keep_open
        log(f"list_tools: {len(tools)} tools, delegate description carries the executor card and "
            "the unreachable peer; delegate_continue and delegate_close with their schemas")

        # 1b. test_tool_annotations_and_output_schemas: hints as the tools behave, and an
        #     outputSchema that every successful structuredContent below is validated against.
        hints = {
            "delegate": (False, True), "delegate_output": (True, None),
            "delegate_cancel": (False, True), "delegate_snapshots": (True, None),
            "delegate_apply_snapshot": (False, True), "delegate_discard_snapshot": (False, True),
            "delegate_recover": (True, None),
            "delegate_continue": (False, True), "delegate_close": (False, True),
        }
        for name, (ro, destructive) in hints.items():
            t = tools[name]
            ann = t.annotations
            assert ann is not None, f"{name} has no annotations"
            assert field(ann, "read_only_hint", "readOnlyHint") is ro, (name, ann)
            if destructive is not None:
                assert field(ann, "destructive_hint", "destructiveHint") is destructive, (name, ann)
            out = field(t, "output_schema", "outputSchema")
            assert out and out.get("type") == "object", f"{name} has no outputSchema"
            jsonschema.Draft202012Validator.check_schema(out)
            SCHEMAS[name] = out
        assert field(tools["delegate_discard_snapshot"].annotations, "idempotent_hint",
                     "idempotentHint") is True

        # 2. Foreground delegate (relative workspace_dir resolved against cwd).
        ws = make_workspace(tmp, "ws-fg")
        r = expect_ok("delegate(fg)", await session.call_tool("delegate", {
            "description": "add a file", "prompt": "write AGENT_RESULT.txt",
            "workspace_dir": "ws-fg", "cwd": str(tmp), "peer_url": peer,
        }))
        text = text_of(r)
        assert "completed" in text and "wrote AGENT_RESULT.txt" in text, text
        # The text names the files the apply changed (issue 48.8).
        assert "Changed (1 file)" in text and "/AGENT_RESULT.txt" in text, text
        assert structured(r) and structured(r)["state"] == "completed", structured(r)
        assert (ws / "AGENT_RESULT.txt").exists(), "auto snapshot not applied to the workspace"
        log("delegate(background=false): completed, summary returned, result applied")

        # 2b. test_foreground_progress: the executor's lines reach the client as
        #     notifications/progress while the call runs (the agent waits for the test to see
        #     "step one" before it goes on), and delegate_output shows the latest progress line.
        ws = make_workspace(tmp, "ws-steps")
        go = tmp / "steps-go"
        seen = []

        async def on_progress(progress, total, message):
            seen.append(message or "")
            if message and "step one" in message:
                go.touch()

        r = expect_ok("delegate(fg, progress)", await session.call_tool("delegate", {
            "description": "steps", "prompt": f"STEPS {go}", "workspace_dir": str(ws),
            "peer_url": peer,
        }, progress_callback=on_progress))
        assert structured(r)["state"] == "completed", text_of(r)
        assert any("step one" in m for m in seen), f"no progress with the executor's line: {seen}"
        did = structured(r)["id"]
        r = expect_ok("delegate_output(latest progress)", await session.call_tool(
            "delegate_output", {"delegation_id": did}))
        assert "Latest progress: executor: " in text_of(r), text_of(r)
        assert structured(r)["latestProgress"]["message"], structured(r)
        log(f"test_foreground_progress: {len(seen)} progress notifications ({seen[:3]}...), "
            f"delegate_output shows the latest line")

        # 3. Background delegate, then delegate_output block=true.
        ws = make_workspace(tmp, "ws-bg")
        r = expect_ok("delegate(bg)", await session.call_tool("delegate", {
            "description": "bg", "prompt": "write AGENT_RESULT.txt",
            "workspace_dir": str(ws), "peer_url": peer, "background": True,
        }))
        did = structured(r)["delegationId"]
        assert did in text_of(r) and "delegate_output" in text_of(r), text_of(r)
        assert "do NOT survive" in text_of(r), text_of(r)
        assert structured(r)["survivesServerExit"] is False, structured(r)
        r = expect_ok("delegate_output", await session.call_tool("delegate_output", {
            "delegation_id": did, "block": True, "timeout": 120,
        }))
        assert structured(r)["state"] == "completed", text_of(r)
        assert "wrote AGENT_RESULT.txt" in text_of(r), text_of(r)
        log(f"delegate(background=true) + delegate_output(block=true): {did} completed")

        # 4. Cancel a running delegation.
        ws = make_workspace(tmp, "ws-slow")
        r = expect_ok("delegate(slow)", await session.call_tool("delegate", {
            "description": "slow", "prompt": "SLOW task",
            "workspace_dir": str(ws), "peer_url": peer, "background": True,
        }))
        slow = structured(r)["delegationId"]
        r = expect_ok("delegate_output(running)", await session.call_tool(
            "delegate_output", {"delegation_id": slow}))
        assert structured(r)["state"] in ("started", "running"), text_of(r)
        # The end of a blocking wait is a result that says "still running", not an error
        # (issue 48.2): the model calls delegate_output again.
        r = expect_ok("delegate_output(still running)", await session.call_tool(
            "delegate_output", {"delegation_id": slow, "block": True, "timeout": 1}))
        assert structured(r)["stillRunning"] is True, structured(r)
        assert "still running" in text_of(r), text_of(r)
        r = expect_ok("delegate_cancel", await session.call_tool(
            "delegate_cancel", {"delegation_id": slow}))
        r = expect_ok("delegate_output(cancelled)", await session.call_tool(
            "delegate_output", {"delegation_id": slow, "block": True, "timeout": 60}))
        assert structured(r)["state"] == "cancelled", text_of(r)
        assert not (ws / "AGENT_RESULT.txt").exists()
        log(f"delegate_cancel: {slow} cancelled")

        # 5. Staged snapshot -> list -> apply; and discard.
        for action in ("apply", "discard"):
            ws = make_workspace(tmp, f"ws-staged-{action}")
            r = expect_ok("delegate(staged)", await session.call_tool("delegate", {
                "description": "staged", "prompt": "write AGENT_RESULT.txt",
                "workspace_dir": str(ws), "peer_url": peer, "snapshot_mode": "staged",
            }))
            did = structured(r)["id"]
            assert "pending" in text_of(r), text_of(r)
            assert not (ws / "AGENT_RESULT.txt").exists(), "staged result applied too early"
            r = expect_ok("delegate_snapshots", await session.call_tool(
                "delegate_snapshots", {"delegation_id": did}))
            snaps = structured(r)["snapshots"]
            assert len(snaps) == 1 and snaps[0]["status"] == "pending", snaps
            sid = snaps[0]["id"]
            assert sid in text_of(r)
            # Review before apply: a pending snapshot comes with what applying it would do.
            assert "A workspace/AGENT_RESULT.txt" in text_of(r), text_of(r)
            files = snaps[0]["preview"]["files"]
            assert [f["path"] for f in files] == ["workspace/AGENT_RESULT.txt"], files
            assert files[0]["change"] == "added" and files[0]["diff"].startswith("--- /dev/null"), files
            assert not (ws / "AGENT_RESULT.txt").exists(), "a preview wrote to the workspace"
            tool = f"delegate_{action}_snapshot"
            expect_ok(tool, await session.call_tool(
                tool, {"delegation_id": did, "snapshot_id": sid}))
            r = expect_ok("delegate_snapshots", await session.call_tool(
                "delegate_snapshots", {"delegation_id": did}))
            status = structured(r)["snapshots"][0]["status"]
            if action == "apply":
                assert status == "applied", status
                assert (ws / "AGENT_RESULT.txt").exists(), "applied snapshot missing"
            else:
                assert status == "discarded", status
                assert not (ws / "AGENT_RESULT.txt").exists(), "discarded snapshot applied"
            log(f"staged snapshot {sid}: listed and {action} done")

        # 5b. A result that cannot be applied: the user wrote AGENT_RESULT.txt locally while the
        #     task ran (the agent does it on the prompt's behalf). Never reported as success.
        ws = make_workspace(tmp, "ws-conflict")
        local = ws / "AGENT_RESULT.txt"
        r = await session.call_tool("delegate", {
            "description": "conflict", "prompt": f"CONFLICT {local}",
            "workspace_dir": str(ws), "peer_url": peer,
        })
        expect_error("delegate(not applied)", r, "NOT applied", "delegate_apply_snapshot")
        st = structured(r)
        assert st and st["outcome"]["status"] == "not_applied", st
        snap = st["snapshots"][0]
        assert snap["status"] == "pending" and "AGENT_RESULT.txt" in snap["error"]["message"], snap
        assert local.read_text() == "edited locally\n", "the local edit was overwritten"
        expect_error("delegate_output(not applied)", await session.call_tool(
            "delegate_output", {"delegation_id": st["id"]}), "NOT applied")
        r = expect_ok("delegate_snapshots(not applied)", await session.call_tool(
            "delegate_snapshots", {"delegation_id": st["id"]}))
        assert "could not be applied: TRANSPORT_ERROR: the result conflicts" in text_of(r), \
            text_of(r)
        conflicts = structured(r)["snapshots"][0]["preview"]["conflicts"]
        assert conflicts == ["workspace/AGENT_RESULT.txt"], conflicts
        assert "conflict" in text_of(r) and local.read_text() == "edited locally\n", text_of(r)
        expect_ok("delegate_discard_snapshot(not applied)", await session.call_tool(
            "delegate_discard_snapshot", {"delegation_id": st["id"], "snapshot_id": snap["id"]}))
        log("result not applied: isError from delegate and delegate_output, snapshot kept pending")

        # 5c. test_rounds: keep_open -> idle after round 1 with its result applied;
        #     delegate_output says the round is over; delegate_continue -> round 2 in the same
        #     executor work directory, applied; delegate_close -> completed.
        ws = make_workspace(tmp, "ws-rounds")
        r = expect_ok("delegate(keep_open)", await session.call_tool("delegate", {
            "description": "round one", "prompt": "ROUND one", "workspace_dir": str(ws),
            "peer_url": peer, "keep_open": True}))
        st = structured(r)
        did = st["id"]
        assert st["state"] == "idle" and st["round"] == 1 and st["stillRunning"] is False, st
        assert [x["status"] for x in st["snapshots"]] == ["applied"], st["snapshots"]
        assert (ws / "log.txt").read_text() == "prompt=ROUND one\n", "round 1 not applied"
        assert "Round 1 has ended" in text_of(r), text_of(r)
        assert "delegate_continue" in text_of(r) and "delegate_close" in text_of(r), text_of(r)
        assert "Still running" not in text_of(r), text_of(r)
        for block in (False, True):
            r = expect_ok(f"delegate_output(idle, block={block})", await session.call_tool(
                "delegate_output", {"delegation_id": did, "block": block, "timeout": 30}))
            st = structured(r)
            assert st["state"] == "idle" and st["stillRunning"] is False, st
            assert "delegate_continue" in text_of(r), text_of(r)
        seen = []

        async def on_round_progress(progress, total, message):
            seen.append(message or "")

        r = expect_ok("delegate_continue", await session.call_tool("delegate_continue", {
            "delegation_id": did, "description": "round two", "prompt": "ROUND two"},
            progress_callback=on_round_progress))
        st = structured(r)
        assert st["state"] == "idle" and st["round"] == 2 and st["stillRunning"] is False, st
        assert [x["status"] for x in st["snapshots"]] == ["applied", "applied"], st["snapshots"]
        assert (ws / "log.txt").read_text() == "prompt=ROUND one\nprompt=ROUND two\n", \
            "round 2 not applied, or not run in the same work directory"
        assert "Round 2 has ended" in text_of(r) and "workspace/log.txt" in text_of(r), text_of(r)
        assert any("round 2" in m for m in seen), seen
        expect_error("delegate_continue(blank prompt)", await session.call_tool(
            "delegate_continue", {"delegation_id": did, "prompt": " "}), "prompt")
        r = expect_ok("delegate_close", await session.call_tool(
            "delegate_close", {"delegation_id": did}))
        st = structured(r)
        assert st["state"] == "completed" and st["ended"] is True, st
        assert st["outcome"]["status"] == "completed", st
        expect_error("delegate_continue(closed)", await session.call_tool(
            "delegate_continue", {"delegation_id": did, "prompt": "ROUND three"}), "idle")
        expect_error("delegate_close(closed)", await session.call_tool(
            "delegate_close", {"delegation_id": did}), "idle")
        assert (ws / "log.txt").read_text() == "prompt=ROUND one\nprompt=ROUND two\n"
        log(f"test_rounds: {did} idle after round 1 (applied), round 2 applied "
            f"({len(seen)} progress notifications), closed -> completed")

        # 6. Bad arguments: tool errors with clear messages; the server stays alive.
        expect_error("delegate(no prompt)", await session.call_tool("delegate", {
            "description": "x", "workspace_dir": str(tmp), "peer_url": peer}), "prompt")
        expect_error("delegate(missing dir)", await session.call_tool("delegate", {
            "description": "x", "prompt": "y", "workspace_dir": str(tmp / "nope"),
            "peer_url": peer}), "does not exist")
        # Secret-looking files: refused with the list, lent only with allow_sensitive.
        ws = make_workspace(tmp, "ws-secret")
        (ws / ".env").write_text("API_KEY=not-for-the-executor\n")
        expect_error("delegate(.env)", await session.call_tool("delegate", {
            "description": "x", "prompt": "write AGENT_RESULT.txt", "workspace_dir": str(ws),
            "peer_url": peer}), "SENSITIVE_FILES", ".env", "allow_sensitive")
        r = expect_ok("delegate(.env, allow_sensitive)", await session.call_tool("delegate", {
            "description": "x", "prompt": "write AGENT_RESULT.txt", "workspace_dir": str(ws),
            "peer_url": peer, "allow_sensitive": True}))
        assert structured(r)["state"] == "completed", text_of(r)
        log("delegate: secret-looking files refused, lent with allow_sensitive")
        expect_error("delegate_output(unknown id)", await session.call_tool(
            "delegate_output", {"delegation_id": "dlg_doesnotexist"}), "unknown delegation")
        expect_error("delegate_cancel(nothing)", await session.call_tool(
            "delegate_cancel", {}), "delegation_id")
        expect_error("delegate_apply_snapshot(unknown)", await session.call_tool(
            "delegate_apply_snapshot", {"delegation_id": "dlg_doesnotexist",
                                        "snapshot_id": "snap_x"}))

        # 7. Recover: known to the daemon, and unknown everywhere.
        r = expect_ok("delegate_recover", await session.call_tool(
            "delegate_recover", {"delegation_id": slow, "peer_url": peer}))
        assert structured(r)["source"] == "daemon", structured(r)
        expect_error("delegate_recover(unknown)", await session.call_tool(
            "delegate_recover", {"delegation_id": "dlg_doesnotexist", "peer_url": peer}),
            "neither the daemon nor the executor")

        # delegate_list names the delegations of this session (issue 48.3).
        r = expect_ok("delegate_list", await session.call_tool("delegate_list", {}))
        listed = structured(r)["delegations"]
        assert listed and all(d["id"] in text_of(r) for d in listed), text_of(r)
        log(f"delegate_list: {len(listed)} delegations listed")

        # Still alive after the errors.
        tools = (await session.list_tools()).tools
        assert len(tools) >= 7
        log("server alive after tool errors")
        assert CHECKED == set(SCHEMAS), f"results not validated: {set(SCHEMAS) - CHECKED}"
        log(f"test_tool_annotations_and_output_schemas: results of {sorted(CHECKED)} match "
            "their outputSchema")


async def foreground_budget(mcp_bin, peer, tmp):
    """test_foreground_budget: a foreground delegate that outlasts the budget returns in time
    with the id and state running, telling the model to use delegate_output."""
    args = ["--peers", peer, "--foreground-budget", "2"]
    async with open_session(mcp_bin, args) as s:
        tools = {t.name: t for t in (await s.list_tools()).tools}
        assert "after 2 seconds" in tools["delegate"].description, tools["delegate"].description
        ws = make_workspace(tmp, "ws-budget")
        r = expect_ok("delegate(fg, over budget)", await s.call_tool("delegate", {
            "description": "slow", "prompt": "SLOW task", "workspace_dir": str(ws),
            "peer_url": peer}))
        st = structured(r)
        assert st["stillRunning"] is True and st["state"] in ("started", "running"), st
        assert "delegate_output" in text_of(r) and st["delegationId"] in text_of(r), text_of(r)
        expect_ok("delegate_cancel(over budget)", await s.call_tool(
            "delegate_cancel", {"delegation_id": st["delegationId"]}))
        r = expect_ok("delegate_output(cancelled)", await s.call_tool(
            "delegate_output", {"delegation_id": st["delegationId"], "block": True,
                                "timeout": 60}))
        assert structured(r)["state"] == "cancelled", text_of(r)
        # A round that outlasts the budget: delegate_continue hands the id back in time too.
        assert "after 2 seconds" in tools["delegate_continue"].description
        ws = make_workspace(tmp, "ws-budget-rounds")
        r = expect_ok("delegate(keep_open, budget)", await s.call_tool("delegate", {
            "description": "round one", "prompt": "ROUND one", "workspace_dir": str(ws),
            "peer_url": peer, "keep_open": True}))
        st = structured(r)
        did = st.get("id") or st["delegationId"]
        # Round 1 is quick, but on a loaded machine it may outlast the 2 s budget too.
        while st.get("stillRunning"):
            st = structured(expect_ok("delegate_output(round 1)", await s.call_tool(
                "delegate_output", {"delegation_id": did, "block": True, "timeout": 60})))
        assert st["state"] == "idle", st
        r = expect_ok("delegate_continue(over budget)", await s.call_tool("delegate_continue", {
            "delegation_id": did, "description": "slow", "prompt": "SLOW round"}))
        st = structured(r)
        assert st["stillRunning"] is True and st["state"] == "running", st
        assert st["round"] == 2 and st["delegationId"] == did, st
        assert "Round 2 of delegation" in text_of(r) and "delegate_output" in text_of(r), \
            text_of(r)
        expect_ok("delegate_cancel(round over budget)", await s.call_tool(
            "delegate_cancel", {"delegation_id": did}))
        r = expect_ok("delegate_output(round cancelled)", await s.call_tool(
            "delegate_output", {"delegation_id": did, "block": True, "timeout": 60}))
        assert structured(r)["state"] == "cancelled", text_of(r)
    log("test_foreground_budget: delegate and delegate_continue returned with the id before "
        "the budget ran out")


async def own_daemons(mcp_bin, peer, tmp):
    """test_servers_own_their_daemons: two servers side by side with default flags (and a
    shared AWCP_HOME); the first quits while the second's delegation runs, which still
    completes."""
    env = {"AWCP_HOME": str(tmp / "awcp-home")}
    args = ["--peers", peer]
    first_up = asyncio.Event()
    first_quit = asyncio.Event()

    async def first():
        async with open_session(mcp_bin, args, env) as s:
            await s.list_tools()
            first_up.set()
            await first_quit.wait()

    task = asyncio.create_task(first())
    await first_up.wait()
    async with open_session(mcp_bin, args, env) as s:
        ws = make_workspace(tmp, "ws-side-by-side")
        go = tmp / "side-by-side-go"
        r = expect_ok("delegate(second server)", await s.call_tool("delegate", {
            "description": "wait", "prompt": f"WAITFILE {go}", "workspace_dir": str(ws),
            "peer_url": peer, "background": True}))
        did = structured(r)["delegationId"]
        first_quit.set()
        await task
        go.touch()
        r = expect_ok("delegate_output(after the first server quit)", await s.call_tool(
            "delegate_output", {"delegation_id": did, "block": True, "timeout": 120}))
        assert structured(r)["state"] == "completed", text_of(r)
        assert (ws / "AGENT_RESULT.txt").exists(), "result not applied"
    log("test_servers_own_their_daemons: the second server's delegation completed after the "
        "first quit")


async def protected_executor(mcp_bin, base, tmp):
    """test_recover_with_auth_and_lease: an executor that wants a token and grants at most
    600 s. The peer is given as its base URL (normalised to …/awcp); auth_credential without
    auth_type is refused; a shortened lease is reported; delegate_recover from a fresh server
    asks the executor with the credential, and without it says why (no dangling colon)."""
    args = ["--peers", base]
    auth = {"auth_type": "bearer", "auth_credential": "s3cret-token"}
    go = tmp / "protected-go"
    async with open_session(mcp_bin, args) as s:
        ws = make_workspace(tmp, "ws-protected")
        expect_error("delegate(credential without type)", await s.call_tool("delegate", {
            "description": "x", "prompt": "y", "workspace_dir": str(ws), "peer_url": base,
            "auth_credential": "s3cret-token"}), "auth_type")
        r = expect_ok("delegate(base URL, auth, ttl 3600)", await s.call_tool("delegate", {
            "description": "x", "prompt": "write AGENT_RESULT.txt", "workspace_dir": str(ws),
            "peer_url": base, "ttl_seconds": 3600, **auth}))
        st = structured(r)
        assert st["state"] == "completed", text_of(r)
        assert st["executorUrl"] == base + "/awcp", st["executorUrl"]
        assert "Lease shortened by the executor: 3600 s requested, at most 600 s" in text_of(r), \
            text_of(r)
        ws = make_workspace(tmp, "ws-protected-bg")
        r = expect_ok("delegate(bg, protected)", await s.call_tool("delegate", {
            "description": "wait", "prompt": f"WAITFILE {go}", "workspace_dir": str(ws),
            "peer_url": base, "background": True, **auth}))
        did = structured(r)["delegationId"]
    # A new server (its own fresh daemon) does not know the delegation: the executor is asked.
    async with open_session(mcp_bin, args) as s:
        r = await s.call_tool("delegate_recover", {"delegation_id": did, "peer_url": base})
        expect_error("delegate_recover(no credential)", r, "401", "AUTH_FAILED", "auth_type")
        assert not text_of(r).rstrip().endswith(":"), text_of(r)
        r = expect_ok("delegate_recover(credential)", await s.call_tool(
            "delegate_recover", {"delegation_id": did, "peer_url": base, **auth}))
        st = structured(r)
        assert st["source"] == "executor" and st["state"] == "running", st
    go.touch()
    log("test_recover_with_auth_and_lease: base URL normalised, credential checks, shortened "
        "lease reported, recover with auth")


async def restarts(mcp_bin, awcp_bin, peer, tmp):
    slow = {"description": "slow", "prompt": "SLOW task", "peer_url": peer, "background": True}

    # In-process daemon: its journal (same state dir) survives the server; the next server's
    # daemon restores the delegation and reconnects to the executor, so recover re-attaches.
    args = ["--peers", peer, "--port", "0", "--state-dir", str(tmp / "delegator-restart")]
    async with open_session(mcp_bin, args) as s:
        ws = make_workspace(tmp, "ws-restart")
        r = expect_ok("delegate(slow)", await s.call_tool(
            "delegate", {**slow, "workspace_dir": str(ws)}))
        did = structured(r)["delegationId"]
    async with open_session(mcp_bin, args) as s:
        r = expect_ok("delegate_recover(after restart)", await s.call_tool(
            "delegate_recover", {"delegation_id": did, "peer_url": peer}))
        st = structured(r)
        assert st["source"] == "daemon", st
        assert st["delegation"]["state"] in ("started", "running"), st
        expect_ok("delegate_cancel(restored)", await s.call_tool(
            "delegate_cancel", {"delegation_id": did}))
        r = expect_ok("delegate_output(restored)", await s.call_tool(
            "delegate_output", {"delegation_id": did, "block": True, "timeout": 60}))
        assert structured(r)["state"] == "cancelled", text_of(r)
        log(f"delegate_recover after an MCP server restart (in-process daemon): {did} "
            f"restored from the journal, re-attached, then cancelled")

    # External daemon: it survives the MCP server's restart; recover re-attaches fully.
    daemon = subprocess.Popen(
        [awcp_bin, "--quiet", "daemon", "--listen", "127.0.0.1:0",
         "--state-dir", str(tmp / "daemon")],
        stdout=subprocess.PIPE, text=True)
    try:
        line = daemon.stdout.readline().strip()
        assert "http://" in line, f"daemon did not print its URL: {line!r}"
        durl = line[line.index("http://"):]
        # The daemon's token is read from its state directory.
        args = ["--daemon-url", durl, "--peers", peer, "--state-dir", str(tmp / "daemon")]
        async with open_session(mcp_bin, args) as s:
            ws = make_workspace(tmp, "ws-external")
            r = expect_ok("delegate(slow, external daemon)", await s.call_tool(
                "delegate", {**slow, "workspace_dir": str(ws)}))
            did = structured(r)["delegationId"]
            assert "survive this MCP server exiting" in text_of(r), text_of(r)
            assert structured(r)["survivesServerExit"] is True, structured(r)
        async with open_session(mcp_bin, args) as s:
            r = expect_ok("delegate_recover(external daemon)", await s.call_tool(
                "delegate_recover", {"delegation_id": did}))
            st = structured(r)
            assert st["source"] == "daemon", st
            assert st["delegation"]["state"] in ("started", "running"), st
            # A shared daemon's record carries the executor's latest line: delegate_output
            # shows it (the in-process progress hub is not there).
            deadline = time.monotonic() + 30
            while True:
                r = expect_ok("delegate_output(external daemon, running)", await s.call_tool(
                    "delegate_output", {"delegation_id": did}))
                latest = structured(r).get("latestProgress")
                if latest or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.2)
            assert latest and latest["message"] == "sleeping a while", structured(r)
            assert "Latest progress: executor: sleeping a while" in text_of(r), text_of(r)
            expect_ok("delegate_cancel", await s.call_tool(
                "delegate_cancel", {"all": True}))
            r = expect_ok("delegate_output", await s.call_tool(
                "delegate_output", {"delegation_id": did, "block": True, "timeout": 60}))
            assert structured(r)["state"] == "cancelled", text_of(r)
            log(f"delegate_recover after an MCP server restart (external daemon {durl}): "
                f"re-attached to {did}, then cancelled it")

            # Rounds through the external daemon, in the background: delegate_output waits
            # for each round (state idle), not for the delegation's end.
            ws = make_workspace(tmp, "ws-external-rounds")
            r = expect_ok("delegate(keep_open, background, external daemon)", await s.call_tool(
                "delegate", {"description": "round one", "prompt": "ROUND one",
                             "workspace_dir": str(ws), "peer_url": peer, "keep_open": True,
                             "background": True}))
            did = structured(r)["delegationId"]
            assert structured(r)["keepOpen"] is True, structured(r)
            r = expect_ok("delegate_output(round 1, external daemon)", await s.call_tool(
                "delegate_output", {"delegation_id": did, "block": True, "timeout": 60}))
            st = structured(r)
            assert st["state"] == "idle" and st["round"] == 1 and st["stillRunning"] is False, st
            r = expect_ok("delegate_continue(background, external daemon)", await s.call_tool(
                "delegate_continue", {"delegation_id": did, "description": "round two",
                                      "prompt": "ROUND two", "background": True}))
            assert structured(r)["round"] == 2 and structured(r)["background"] is True, \
                structured(r)
            r = expect_ok("delegate_output(round 2, external daemon)", await s.call_tool(
                "delegate_output", {"delegation_id": did, "block": True, "timeout": 60}))
            st = structured(r)
            assert st["state"] == "idle" and st["round"] == 2, st
            assert (ws / "log.txt").read_text() == "prompt=ROUND one\nprompt=ROUND two\n"
            r = expect_ok("delegate_close(external daemon)", await s.call_tool(
                "delegate_close", {"delegation_id": did}))
            assert structured(r)["state"] == "completed", text_of(r)
            log(f"rounds through the external daemon: {did} round 1 and 2 applied, closed")
    finally:
        daemon.terminate()
        daemon.wait(timeout=10)


def stop(proc):
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


def main():
    mcp_bin, exe, awcp_bin = sys.argv[1], sys.argv[2], sys.argv[3]
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="awcp-mcp-test-") as t:
        tmp = Path(t).resolve()
        proc, url = start_executor(exe, tmp)
        try:
            asyncio.run(asyncio.wait_for(run(mcp_bin, url, tmp), timeout=300))
            asyncio.run(asyncio.wait_for(foreground_budget(mcp_bin, url, tmp), timeout=120))
            asyncio.run(asyncio.wait_for(own_daemons(mcp_bin, url, tmp), timeout=120))
            proc2, url2 = start_executor(exe, tmp, "protected", [
                "--auth-token", "s3cret-token", "--max-ttl", "600"])
            try:
                base = url2[: -len("/awcp")]
                asyncio.run(asyncio.wait_for(protected_executor(mcp_bin, base, tmp), timeout=120))
            finally:
                stop(proc2)
            asyncio.run(asyncio.wait_for(restarts(mcp_bin, awcp_bin, url, tmp), timeout=300))
        finally:
            stop(proc)
    log(f"all MCP acceptance checks passed in {time.monotonic() - start:.1f}s")


if __name__ == "__main__":
    main()
