"""A function app for testing the local host's trigger semantics. Every invocation is recorded as one JSON
line in $SAMPLE_RECORD (appends of one short line are atomic, so several processes can share the file)."""

from __future__ import annotations

import asyncio
import json
import os
import time

import azure.functions as func

app = func.FunctionApp()
_active = 0


def record(kind: str, **data: object) -> None:
    line = json.dumps({"kind": kind, "pid": os.getpid(), "time": time.time(), **data}) + "\n"
    fd = os.open(os.environ["SAMPLE_RECORD"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@app.queue_trigger(arg_name="msg", queue_name="%SAMPLE_PREFIX%-ok", connection="QUEUE_STORAGE")
async def succeeds(msg: func.QueueMessage) -> None:
    global _active
    _active += 1
    try:
        body = msg.get_json()
        await asyncio.sleep(body.get("sleep", 0))
        record("ok", body=body, dequeue=msg.dequeue_count, id=msg.id, active=_active)
    finally:
        _active -= 1


@app.queue_trigger(arg_name="msg", queue_name="%SAMPLE_PREFIX%-fail", connection="QUEUE_STORAGE")
def always_fails(msg: func.QueueMessage) -> None:
    record("fail", body=msg.get_json(), dequeue=msg.dequeue_count)
    raise RuntimeError("this function always fails")


@app.queue_trigger(arg_name="msg", queue_name="%SAMPLE_PREFIX%-flaky", connection="QUEUE_STORAGE")
async def fails_once(msg: func.QueueMessage) -> None:
    record("flaky", body=msg.get_json(), dequeue=msg.dequeue_count)
    if msg.dequeue_count < 2:
        raise RuntimeError("first attempt fails")


@app.timer_trigger(arg_name="timer", schedule="*/1 * * * * *")
def every_second(timer: func.TimerRequest) -> None:
    record("tick", past_due=timer.past_due)
