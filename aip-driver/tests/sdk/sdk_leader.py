"""The acps-sdk 2.1.0 leader (AipRpcClient) drives a partner at argv[1] (its rpc URL):
start -> awaiting-completion -> complete; start -> awaiting-input -> continue -> cancel; get
with histories; get of an unknown task (-32001). The partner under test echoes the request
as product "answer" and asks "which city?" when the request contains "ask".
Exits non-zero with a message on the first failed check."""

import asyncio
import sys
import time

from acps_sdk.aip.aip_rpc_client import AipRpcClient
from acps_sdk.aip.aip_base_model import TaskState

DEADLINE = 60.0


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)


def answer_text(task):
    for p in task.products or []:
        if p.id == "answer":
            return "".join(d.text for d in p.dataItems if getattr(d, "text", None))
    return None


async def until(client, task_id, session, state):
    """Polls with get (the only way an rpc client learns of the partner's progress)."""
    end = time.monotonic() + DEADLINE
    while True:
        t = await client.get_task(task_id, session)
        if t.status.state == state:
            return t
        check(time.monotonic() < end, f"{task_id} never reached {state.value} (last {t.status.state.value})")
        await asyncio.sleep(0.02)


async def main(url):
    client = AipRpcClient(url, "leader-py")
    try:
        r = await client.start_task("s-py", "hello partner", task_id="t-py-1")
        check(r.taskId == "t-py-1", f"start answers the task: {r}")
        check(r.senderRole == "partner", "senderRole partner")
        check(r.status.state in (TaskState.Accepted, TaskState.Working, TaskState.AwaitingCompletion),
              f"start state {r.status.state}")
        t = await until(client, "t-py-1", "s-py", TaskState.AwaitingCompletion)
        check(answer_text(t) == "echo: hello partner", f"product: {t.products}")
        t = await client.complete_task("t-py-1", "s-py")
        check(t.status.state == TaskState.Completed, f"complete -> {t.status.state}")

        await client.start_task("s-py", "ask me something", task_id="t-py-2")
        t = await until(client, "t-py-2", "s-py", TaskState.AwaitingInput)
        check(any(getattr(d, "text", None) == "which city?" for d in t.status.dataItems or []),
              f"the question: {t.status}")
        t = await client.continue_task("t-py-2", "s-py", "Rome")
        check(t.status.state in (TaskState.Working, TaskState.AwaitingCompletion), f"continue -> {t.status.state}")
        t = await until(client, "t-py-2", "s-py", TaskState.AwaitingCompletion)
        check(answer_text(t) == "echo: Rome", f"product after continue: {t.products}")
        states = [s.state for s in t.statusHistory or []]
        check(states == [TaskState.Accepted, TaskState.Working, TaskState.AwaitingInput,
                         TaskState.Working, TaskState.AwaitingCompletion], f"status history {states}")
        commands = [c.command.value for c in t.commandHistory or []]
        check(commands[:2] == ["start", "continue"], f"command history {commands}")
        t = await client.cancel_task("t-py-2", "s-py")
        check(t.status.state == TaskState.Canceled, f"cancel -> {t.status.state}")
        # cancel of an ended task answers it unchanged (not -32002), as the SDK's own partner does
        t = await client.cancel_task("t-py-1", "s-py")
        check(t.status.state == TaskState.Completed, f"cancel after complete -> {t.status.state}")

        try:
            await client.get_task("t-py-unknown", "s-py")
            check(False, "get of an unknown task must fail")
        except Exception as e:  # the SDK raises a plain Exception with the code in its text
            check("-32001" in str(e), f"unknown task error: {e}")
        print("sdk leader: all checks passed")
    finally:
        await client.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
