"""An acps-sdk 2.1.0 partner: the SDK's FastAPI router (add_aip_rpc_router) at /rpc, served
by uvicorn on 127.0.0.1 and a free port. Prints "LISTENING http://127.0.0.1:<port>/rpc" once
it accepts connections, then serves until killed.

Behaviour: start echoes the request as product "answer" and moves to awaiting-completion;
a request containing "ask" moves to awaiting-input with the question "which city?"; continue
(from awaiting-input) echoes the new input and moves to awaiting-completion. get, complete and
cancel are the SDK's DefaultHandlers."""

import asyncio
import socket
import sys

import uvicorn
from fastapi import FastAPI

from acps_sdk.aip.aip_base_model import Product, TaskState, TextDataItem
from acps_sdk.aip.aip_rpc_server import CommandHandlers, DefaultHandlers, TaskManager, add_aip_rpc_router


def text_of(command):
    return " ".join(d.text for d in command.dataItems or [] if getattr(d, "text", None))


async def on_start(command, task):
    if task:
        return await DefaultHandlers.start(command, task)
    TaskManager.create_task(command)
    TaskManager.update_task_status(command.taskId, TaskState.Working)
    text = text_of(command)
    if "ask" in text:
        return TaskManager.update_task_status(
            command.taskId, TaskState.AwaitingInput, [TextDataItem(text="which city?")])
    TaskManager.set_products(command.taskId, [Product(id="answer", dataItems=[TextDataItem(text=f"echo: {text}")])])
    return TaskManager.update_task_status(command.taskId, TaskState.AwaitingCompletion)


async def on_continue(command, task):
    if task.status.state != TaskState.AwaitingInput:
        return await DefaultHandlers.continue_(command, task)
    TaskManager.add_command_to_history(task.taskId, command)
    TaskManager.update_task_status(task.taskId, TaskState.Working)
    TaskManager.set_products(task.taskId, [Product(id="answer", dataItems=[TextDataItem(text=f"echo: {text_of(command)}")])])
    return TaskManager.update_task_status(task.taskId, TaskState.AwaitingCompletion)


app = FastAPI()
add_aip_rpc_router(app, "/rpc", CommandHandlers(on_start=on_start, on_continue=on_continue))


async def main():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            task.result()
            sys.exit(1)
        await asyncio.sleep(0.01)
    print(f"LISTENING http://127.0.0.1:{port}/rpc", flush=True)
    await task


if __name__ == "__main__":
    asyncio.run(main())
