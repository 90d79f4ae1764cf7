"""What the acceptance tier's tests share: tasks submitted and claimed through the official client, the reference
worker as a process, artifacts put through their signed URLs, the invariant audit. A test module imports from here,
never from another test module."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import httpx
import taskcluster
import taskcluster.download

from local_host import azurite as azurite_mod
from local_host.azurite import free_port
from shared import timeutil
from shared.maintenance.invariants import audit
from shared.runtime import build_queue
from shared.settings import load_settings
from tests.amqp import broker_reachable
from tests.conftest import (
    PROJECT,
    ROOT_ACCESS_TOKEN,
    ROOT_CLIENT_ID,
    azurite_env,
    sharding_settings,
    slugid,
    stop_process,
    stores_of,
    task_definition,
    wait_for,
)

PY = sys.executable

# Whether a test's hosts that ask for an event bus get one: a broker answers here (CI requires one).
BROKER = bool(broker_reachable() or os.environ.get("QUEUE_TEST_REQUIRE_BROKER"))

POLL_TASK_URLS = {
    "args": ["taskQueueId"],
    "method": "get",
    "name": "pollTaskUrls",
    "route": "/poll-task-url/<taskQueueId>",
    "stability": "experimental",
    "query": [],
}


WORKER = {"workerGroup": "wg-1", "workerId": "worker-1"}


def claimed(queue, **overrides):
    """A running task, and a client holding the credentials its claim gave (as a worker has)."""
    task_id = slugid()
    definition = task_definition(**overrides)
    queue.createTask(task_id, definition)
    [claim] = queue.claimWork(definition["taskQueueId"], {"tasks": 1, **WORKER})["tasks"]
    assert claim["status"]["taskId"] == task_id
    worker = taskcluster.Queue(
        {"rootUrl": queue.options["rootUrl"], "credentials": claim["credentials"], "maxRetries": 0}
    )
    return task_id, worker


def in_days(days=1):
    return timeutil.iso(timeutil.now() + dt.timedelta(days=days))


def azure_request(data, content_type="text/plain; charset=utf-8", **extra):
    return {
        "storageType": "azure",
        "expires": in_days(),
        "contentType": content_type,
        "contentLength": len(data),
        **extra,
    }


def put(created, data):
    """A single PUT to the putUrl with the headers the response names (what any HTTP client can do)."""
    return httpx.put(created["putUrl"], content=data, headers=created["headers"])


def anonymous(host):
    return taskcluster.Queue({"rootUrl": host.root_url, "maxRetries": 0})


def start_run(tmp_path, name, *extra, project=PROJECT):
    """`python -m local_host run` of the code in `project` on the data dir `tmp_path/name`."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUE_")}
    env.update(QUEUE_PORT=str(port), QUEUE_DATA_DIR=str(tmp_path / name), PYTHONUNBUFFERED="1")
    log = tmp_path / f"{name}.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "local_host", "--settings", "/nonexistent", "run", *extra],
            cwd=project,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    wait_for(lambda: "Press Ctrl-C to stop." in log.read_text() or process.poll() is not None, timeout=60)
    text = log.read_text()
    assert process.poll() is None, text
    return process, port, log


def audit_once(azurite: azurite_mod.Azurite, *, published: bool = True) -> list[str]:
    async def go() -> list[str]:
        env = azurite_env(azurite)
        settings = load_settings(
            storage=azurite.connection_string,
            root_access_token=ROOT_ACCESS_TOKEN,
            **sharding_settings(env),
            **({"event_bus": "amqp"} if published and BROKER else {}),
        )
        service = build_queue(settings, *stores_of(env, "sdk"))
        try:
            return [str(v) for v in (await audit(service.stores)).violations]
        finally:
            await service.close()

    return asyncio.run(go())


def run_audit(azurite: azurite_mod.Azurite, settle: float = 20, *, published: bool = True) -> list[str]:
    """The audit's violations once the queue has settled (resolutions and dispatches in flight are done), or
    those still there after `settle` seconds. `published`: whether the hosts had this module's event bus (where
    a broker runs); otherwise events are not expected to be dispatched."""
    violations: list[str] = []

    def clean() -> bool:
        violations[:] = audit_once(azurite, published=published)
        return not violations

    with contextlib.suppress(AssertionError):
        wait_for(clean, timeout=settle, interval=0.5)
    return violations


class WorkerProcess:
    def __init__(self, host, tq: str, tmp: Path, *extra: str) -> None:
        env = {
            **os.environ,
            "TASKCLUSTER_ROOT_URL": host.root_url,
            "TASKCLUSTER_CLIENT_ID": ROOT_CLIENT_ID,
            "TASKCLUSTER_ACCESS_TOKEN": ROOT_ACCESS_TOKEN,
            "PYTHONUNBUFFERED": "1",
        }
        self.log_path = tmp / f"worker-{tq.split('/')[1]}.log"
        self.work_dir = tmp / "tasks"
        with open(self.log_path, "wb") as out:
            self.process = subprocess.Popen(
                [
                    PY,
                    "-m",
                    "worker",
                    "--task-queue",
                    tq,
                    "--worker-group",
                    "wg",
                    "--worker-id",
                    "ref-1",
                    "--capacity",
                    "2",
                    "--work-dir",
                    str(self.work_dir),
                    *extra,
                ],
                cwd=PROJECT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int:
        return stop_process(self.process, 30)


def submit(queue, tq: str, payload: dict, **overrides) -> str:
    task_id = slugid()
    queue.createTask(task_id, task_definition(taskQueueId=tq, payload=payload, **overrides))
    return task_id


def admin(host, *args, credentials=None):
    import os
    import subprocess
    import sys

    from tests.conftest import PROJECT

    creds = credentials or {"clientId": ROOT_CLIENT_ID, "accessToken": ROOT_ACCESS_TOKEN}
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("TASKCLUSTER_")},
        "TASKCLUSTER_ROOT_URL": host.root_url,
        "TASKCLUSTER_CLIENT_ID": creds["clientId"],
        "TASKCLUSTER_ACCESS_TOKEN": creds["accessToken"],
    }
    return subprocess.run(
        [sys.executable, "-m", "queue_admin", *args], cwd=PROJECT, env=env, capture_output=True, text=True, timeout=60
    )


def poll_task_urls(client, task_queue):
    return client._makeApiCall(POLL_TASK_URLS, task_queue)
