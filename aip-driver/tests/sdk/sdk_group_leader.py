"""The acps-sdk 2.1.0 group leader (GroupLeaderMqClient) driving two of our partners.

Usage: sdk_group_leader.py AMQP_PORT LEADER_AIC GROUP_ID RPC_AIC RPC_URL INBOX_AIC

RPC_AIC is invited with the `group` JSON-RPC method at RPC_URL, INBOX_AIC through its
inbox (`inbox.topic`, key `inbox_{AIC}`). Both are our partners, which answer a start
with accepted -> working -> awaiting-completion and the product "echo {aic}: {text}".

The sequence: both join (the SDK checks our RPC reply shape; both announce
connected:true); a start to "all" (both answer); a start mentioning only INBOX_AIC (only it
answers); complete to RPC_AIC; get-status to all; mute and unmute INBOX_AIC; leave-group
to RPC_AIC (it announces connected:false); dissolve (the SDK's `disband`). Prints progress
lines and "DONE" last; exits non-zero (with the reason) on any mismatch or after 60 s.
"""

import asyncio
import sys

from acps_sdk.aip import (
    ACSObject,
    GroupLeaderMqClient,
    GroupMgmtResult,
    TaskResult,
)


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
    port, leader_aic, group_id, rpc_aic, rpc_url, inbox_aic = sys.argv[1:7]
    leader = GroupLeaderMqClient(
        leader_aic,
        rabbitmq_host="127.0.0.1",
        rabbitmq_port=int(port),
        rabbitmq_vhost="/",
        rabbitmq_user="guest",
        rabbitmq_password="guest",
    )
    await leader.connect()
    gid = await leader.create_group(group_id)
    assert gid == group_id, gid
    inbox: asyncio.Queue = asyncio.Queue()

    async def on_message(m) -> None:
        await inbox.put(m)

    leader.set_message_handler(on_message)
    await leader.start_consuming()

    # Every result seen, so a later wait can check an earlier fact.
    results: list = []
    statuses: list = []

    async def wait(what: str, pred) -> None:
        while True:
            for x in results + statuses:
                if pred(x):
                    return
            m = await inbox.get()
            if isinstance(m, TaskResult):
                if m.senderId == leader_aic:
                    continue
                say("result", m.senderId, m.taskId, m.status.state.value, text_of(m))
                results.append(m)
            elif isinstance(m, GroupMgmtResult):
                if m.senderId == leader_aic:
                    continue
                say(
                    "status",
                    m.senderId,
                    "connected" if m.status.connected else "not-connected",
                    "muted" if m.status.muted else "unmuted",
                    m.sessionId,
                )
                statuses.append(m)

    def is_result(aic: str, task: str, state: str):
        return (
            lambda x: isinstance(x, TaskResult)
            and x.senderId == aic
            and x.taskId == task
            and x.status.state.value == state
        )

    def is_status(aic: str, connected: bool, muted: bool, session=None):
        return (
            lambda x: isinstance(x, GroupMgmtResult)
            and x.senderId == aic
            and x.status.connected == connected
            and x.status.muted == muted
            and (session is None or x.sessionId == session)
        )

    # The RPC route: the SDK validates our reply (its RabbitMQResponse).
    info = await leader.invite_partner(ACSObject(aic=rpc_aic), rpc_url, timeout=20)
    assert info.queue_name == f"group_{leader_aic}_{group_id}_{rpc_aic}", info.queue_name
    say("rpc-joined", rpc_aic, info.queue_name)
    # The inbox route.
    inv = await leader.invite_via_inbox(
        ACSObject(aic=inbox_aic), partner_inbox=f"inbox_{inbox_aic}"
    )
    say("inbox-invited", inbox_aic, inv.invitationToken)
    for aic in (rpc_aic, inbox_aic):
        await wait(f"{aic} connected", is_status(aic, True, False))
    say("both-connected")

    await leader.start_task("s-1", "hello", task_id="t-all", mentions="all")
    for aic in (rpc_aic, inbox_aic):
        await wait(f"{aic} t-all", is_result(aic, "t-all", "awaiting-completion"))
        got = [
            text_of(x)
            for x in results
            if x.senderId == aic and x.taskId == "t-all" and x.products
        ]
        assert got == [f"echo {aic}: hello"], got

    await leader.start_task("s-1", "only you", task_id="t-one", mentions=[inbox_aic])
    await wait("t-one", is_result(inbox_aic, "t-one", "awaiting-completion"))

    await leader.complete_task("t-all", "s-1", mentions=[rpc_aic])
    await wait("complete", is_result(rpc_aic, "t-all", "completed"))

    cmd = await leader.get_partner_status(session_id="s-status")
    for aic in (rpc_aic, inbox_aic):
        await wait(f"{aic} status", is_status(aic, True, False, "s-status"))

    await leader.mute_partner(inbox_aic, session_id="s-mute")
    await wait("muted", is_status(inbox_aic, True, True, "s-mute"))
    await leader.unmute_partner(inbox_aic, session_id="s-unmute")
    await wait("unmuted", is_status(inbox_aic, True, False, "s-unmute"))

    # Nothing from RPC_AIC about t-one (it was not mentioned), and no task started twice.
    stray = [x.taskId for x in results if x.senderId == rpc_aic and x.taskId == "t-one"]
    assert not stray, stray
    for aic in (rpc_aic, inbox_aic):
        accepted = [
            x.taskId
            for x in results
            if x.senderId == aic and x.status.state.value == "accepted"
        ]
        assert len(accepted) == len(set(accepted)), (aic, accepted)

    await leader.request_partner_leave(rpc_aic, session_id="s-leave")
    await wait("left", is_status(rpc_aic, False, False, "s-leave"))
    say("rpc-left", rpc_aic)

    await leader.dissolve_group()
    say("DONE", cmd.id)


if __name__ == "__main__":
    try:
        asyncio.run(asyncio.wait_for(main(), 60))
    except BaseException as e:  # noqa: BLE001
        say("FAILED", type(e).__name__, e)
        sys.exit(1)
