"""The acps-sdk 2.1.0 group leader (GroupLeaderMqClient) continuing a task on the real
`aip-partner --group` binary (issue 48.5: the task stuck in `working` after a continue).

Usage: sdk_group_continue.py AMQP_PORT LEADER_AIC GROUP_ID PARTNER_AIC PARTNER_RPC_URL

The partner's agent echoes "{task} says: {last input}". The sequence: invite by RPC; start
"hello" (awaiting-completion, "says: hello"); continue "more" (awaiting-completion again,
"says: more"); complete (completed); the task accepted once; dissolve. Prints progress and
"DONE" last; exits non-zero with the reason on any mismatch or after 60 s.
"""

import asyncio
import sys

from acps_sdk.aip import ACSObject, GroupLeaderMqClient, GroupMgmtResult, TaskResult


def say(*a):
    print(*a, flush=True)


def text_of(result: TaskResult) -> str:
    out = []
    for p in result.products or []:
        for d in p.dataItems:
            t = getattr(d, "text", None)
            if t:
                out.append(t)
    return "".join(out)


async def main() -> None:
    port, leader_aic, group_id, partner_aic, rpc_url = sys.argv[1:6]
    leader = GroupLeaderMqClient(
        leader_aic,
        rabbitmq_host="127.0.0.1",
        rabbitmq_port=int(port),
        rabbitmq_vhost="/",
        rabbitmq_user="guest",
        rabbitmq_password="guest",
    )
    await leader.connect()
    await leader.create_group(group_id)
    inbox: asyncio.Queue = asyncio.Queue()

    async def on_message(m) -> None:
        await inbox.put(m)

    leader.set_message_handler(on_message)
    await leader.start_consuming()
    seen: list = []

    async def wait(what: str, pred):
        while True:
            for x in seen:
                if pred(x):
                    return x
            m = await inbox.get()
            if getattr(m, "senderId", None) == leader_aic:
                continue
            if isinstance(m, TaskResult):
                say("result", m.taskId, m.status.state.value, repr(text_of(m)))
            elif isinstance(m, GroupMgmtResult):
                say("status", "connected" if m.status.connected else "not-connected")
            seen.append(m)

    def result(state: str, text=None):
        return (
            lambda x: isinstance(x, TaskResult)
            and x.senderId == partner_aic
            and x.taskId == "t-c"
            and x.status.state.value == state
            and (text is None or text in text_of(x))
        )

    await leader.invite_partner(ACSObject(aic=partner_aic), rpc_url, timeout=20)
    await wait(
        "connected",
        lambda x: isinstance(x, GroupMgmtResult) and x.senderId == partner_aic
        and x.status.connected,
    )
    say("joined")
    await leader.start_task("s-1", "hello", task_id="t-c", mentions=[partner_aic])
    await wait("first answer", result("awaiting-completion", "t-c says: hello"))
    say("answered")
    await leader.continue_task("t-c", "s-1", "more", mentions=[partner_aic])
    await wait("continued answer", result("awaiting-completion", "t-c says: more"))
    say("continued")
    await leader.complete_task("t-c", "s-1", mentions=[partner_aic])
    await wait("completed", result("completed"))
    accepted = [x for x in seen if isinstance(x, TaskResult) and x.status.state.value == "accepted"]
    assert len(accepted) == 1, f"accepted {len(accepted)} times"
    await leader.dissolve_group()
    say("DONE")


if __name__ == "__main__":
    try:
        asyncio.run(asyncio.wait_for(main(), 60))
    except BaseException as e:  # noqa: BLE001
        say("FAILED", type(e).__name__, e)
        sys.exit(1)
