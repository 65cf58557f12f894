"""Two acps-sdk 2.1.0 group partners (GroupPartnerMqClient) for our leader.

Usage: sdk_group_partner.py AMQP_PORT RPC_AIC INBOX_AIC

RPC_AIC joins through the `group` JSON-RPC method: its FastAPI route `/group/rpc` is served
by uvicorn on a free loopback port, printed as "LISTENING <url>". INBOX_AIC consumes its
inbox (`inbox_{AIC}` on `inbox.topic`) and joins from the invitation there; "INBOX ready"
is printed once it consumes. Each partner answers a start it is mentioned in with
accepted -> working -> awaiting-completion and the product "echo {aic}: {text}", and a
complete with completed. Every command and management command seen is printed
("command AIC KIND TASK mentioned|not-mentioned", "mgmt AIC KIND"); "LEFT AIC" when a
partner has left its group. When both have left: "DONE" and exit 0.

SDK defect worked around here: after a `disband`/`leave-group` the SDK partner publishes
connected:false and then cleans up (cancel consumer, delete queue, close channel and
connection) before it calls its disconnect handler; that cleanup can hang (seen: in the
queue delete; mostly for the partner whose connection also carries its inbox consumer, once
for the RPC-joined one after leave-group), as can `close()`. So a partner that was told to leave and has not called the handler 10 s later is
reported as "HUNG AIC STATE" (its SDK state, `leaving`) and counted as gone; `close()` gets
5 s; and the process ends with os._exit so a hung SDK task cannot keep it alive.
"""

import asyncio
import os
import socket
import sys

import uvicorn
from fastapi import FastAPI, Request

from acps_sdk.aip import (
    GroupPartnerMqClient,
    Product,
    RabbitMQRequest,
    TaskCommandType,
    TextDataItem,
)


def say(*a):
    print(*a, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def main() -> None:
    port, rpc_aic, inbox_aic = sys.argv[1], sys.argv[2], sys.argv[3]
    left: asyncio.Queue = asyncio.Queue()
    told: set = set()
    clients = {}
    for aic in (rpc_aic, inbox_aic):
        c = GroupPartnerMqClient(
            aic,
            rabbitmq_host="127.0.0.1",
            rabbitmq_port=int(port),
            rabbitmq_vhost="/",
            rabbitmq_user="guest",
            rabbitmq_password="guest",
        )
        clients[aic] = c

        def make(aic: str, c: GroupPartnerMqClient):
            async def on_command(cmd, mentioned: bool) -> None:
                text = "".join(
                    getattr(d, "text", "") or "" for d in (cmd.dataItems or [])
                )
                say(
                    "command",
                    aic,
                    cmd.command.value,
                    cmd.taskId,
                    "mentioned" if mentioned else "not-mentioned",
                )
                if not mentioned:
                    return
                if cmd.command == TaskCommandType.Start:
                    await c.accept_task(cmd.taskId, cmd.sessionId)
                    await c.start_working(cmd.taskId, cmd.sessionId)
                    await c.submit_for_completion(
                        cmd.taskId,
                        cmd.sessionId,
                        [
                            Product(
                                id="product-1",
                                name="answer",
                                dataItems=[TextDataItem(text=f"echo {aic}: {text}")],
                            )
                        ],
                    )
                elif cmd.command == TaskCommandType.Complete:
                    await c.complete_task(cmd.taskId, cmd.sessionId)

            async def on_mgmt(cmd) -> None:
                say("mgmt", aic, cmd.command.value)
                if cmd.command.value in ("disband", "leave-group") and cmd.must_respond(aic):
                    told.add(aic)

            async def on_left(_client, group_id: str) -> None:
                say("LEFT", aic, group_id)
                await left.put(aic)

            return on_command, on_mgmt, on_left

        on_command, on_mgmt, on_left = make(aic, c)
        c.set_command_handler(on_command)
        c.set_mgmt_command_handler(on_mgmt)
        c.set_disconnect_handler(on_left)

    app = FastAPI()

    @app.post("/group/rpc")
    async def group_rpc(request: Request):
        req = RabbitMQRequest.model_validate(await request.json())
        resp = await clients[rpc_aic].join_group(req)
        return resp.model_dump(exclude_none=True)

    http_port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=http_port, log_level="warning")
    )
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.02)
    say(f"LISTENING http://127.0.0.1:{http_port}/group/rpc")

    ib = clients[inbox_aic]

    async def on_invitation(inv) -> None:
        ok = await ib.join_group_from_invitation(inv)
        say("inbox-join", inbox_aic, "ok" if ok else "refused")

    await ib.start_inbox_consuming(on_invitation)
    say("INBOX ready")

    gone = set()
    told_at = {}
    loop = asyncio.get_running_loop()
    while len(gone) < 2:
        try:
            gone.add(await asyncio.wait_for(left.get(), 0.5))
        except asyncio.TimeoutError:
            pass
        for aic in told - gone:
            told_at.setdefault(aic, loop.time())
            if loop.time() - told_at[aic] > 10:
                say("HUNG", aic, clients[aic].state.value)
                gone.add(aic)
    for c in clients.values():
        try:
            await asyncio.wait_for(c.close(), 5)
        except (asyncio.TimeoutError, Exception):  # noqa: BLE001
            say("close hung or failed (SDK defect), abandoned")
    server.should_exit = True
    await asyncio.wait_for(serving, 5)
    say("DONE")


if __name__ == "__main__":
    code = 0
    try:
        asyncio.run(asyncio.wait_for(main(), 90))
    except BaseException as e:  # noqa: BLE001
        say("FAILED", type(e).__name__, e)
        code = 1
    sys.stdout.flush()
    os._exit(code)
