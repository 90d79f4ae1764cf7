"""Fixtures shared by every tier: an Azurite for the session, local host processes, the official client."""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import os
import secrets
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import taskcluster

from local_host import azurite as azurite_mod
from shared import timeutil, validation
from shared.domain.messages import Shards
from shared.runtime import data_stores
from shared.settings import load_settings
from shared.storage.base import QueueStore, TableStore

# The tiers' shared helpers assert too: their failures explained as a test's are.
pytest.register_assert_rewrite("tests.unit.helpers", "tests.acceptance.helpers")

PROJECT = Path(__file__).resolve().parent.parent
ROOT_CLIENT_ID = "root"
ROOT_ACCESS_TOKEN = secrets.token_urlsafe(33)
TOKEN_SECRET = secrets.token_urlsafe(33)


# QUEUE_TEST_STORAGE_FAULTS=0.05: every test host calls storage through a fault proxy (local_host/fault_proxy.py)
# that fails that fraction of its table and queue calls, each fault kind as likely: the suite must pass anyway.
STORAGE_FAULTS = float(os.environ.get("QUEUE_TEST_STORAGE_FAULTS") or 0)
_FAULT_PROXIES: dict[str, tuple[subprocess.Popen[bytes], str]] = {}
# QUEUE_TEST_SHARDS=3: the test Azurites serve that many accounts, and every host started on one of them runs
# sharded: its data over them (QUEUE_STORAGE_SHARDS), and as many check queues, pending queues and salted
# partitions (QUEUE_CHECK_SHARDS, QUEUE_PENDING_SHARDS). The suite must pass the same.
SHARDS = int(os.environ.get("QUEUE_TEST_SHARDS") or 1)
SHARDED: dict[str, azurite_mod.Azurite] = {}  # connection string of a test Azurite's first account -> it


def start_azurite(data_dir: Path, **options: Any) -> azurite_mod.Azurite:
    """An in-memory Azurite for tests, serving SHARDS accounts."""
    instance = azurite_mod.start(data_dir, in_memory=True, accounts=SHARDS, **options)
    SHARDED[instance.connection_string] = instance
    return instance


def sharding_env(storage: str, *, proxied: bool = True) -> dict[str, str]:
    """The settings that shard a host on `storage` over its Azurite's accounts (none when not sharding); the
    further accounts through the fault proxy when there is one, unless not `proxied`."""
    instance = SHARDED.get(storage)
    if SHARDS == 1 or instance is None:
        return {}
    via = through_fault_proxy if proxied else str
    return {
        "QUEUE_STORAGE_SHARDS": str(SHARDS),
        "QUEUE_CHECK_SHARDS": str(SHARDS),
        "QUEUE_PENDING_SHARDS": str(SHARDS),
        **{f"QUEUE_STORAGE_{n}": via(instance.account_connection_string(n)) for n in range(1, SHARDS)},
    }


def azurite_env(instance: azurite_mod.Azurite) -> dict[str, str]:
    """The storage settings of a host on this Azurite (sharded like the hosts), straight to it."""
    return {"QUEUE_STORAGE": instance.connection_string, **sharding_env(instance.connection_string, proxied=False)}


def sharding_settings(env: Mapping[str, str]) -> dict[str, int]:
    """Settings (load_settings' arguments) that split storage as a host with this environment does."""
    return {
        "storage_shards": int(env.get("QUEUE_STORAGE_SHARDS") or 1),
        "check_shards": int(env.get("QUEUE_CHECK_SHARDS") or 1),
        "pending_shards": int(env.get("QUEUE_PENDING_SHARDS") or 1),
    }


def through_fault_proxy(storage: str) -> str:
    """The connection string hosts use: `storage` itself, or a fault proxy's in front of it (one per storage)."""
    if not STORAGE_FAULTS or "TableEndpoint=" not in storage:
        return storage
    if storage not in _FAULT_PROXIES:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "local_host.fault_proxy",
                "--storage",
                storage,
                "--rate",
                str(STORAGE_FAULTS),
                "--delay",
                "0.3",
            ],
            cwd=PROJECT,
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        )
        assert process.stdout is not None
        line = process.stdout.readline().decode()
        if not line.startswith("CONNECTION "):
            stop_process(process, 5)
            raise RuntimeError(f"the fault proxy did not start: {line!r}")
        _FAULT_PROXIES[storage] = (process, line.split(" ", 1)[1].strip())
    return _FAULT_PROXIES[storage][1]


@pytest.fixture(scope="session", autouse=True)
def _stop_fault_proxies() -> Iterator[None]:
    yield
    for process, _ in _FAULT_PROXIES.values():
        stop_process(process, 5)


@contextlib.contextmanager
def azurite_of_its_own(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[azurite_mod.Azurite]:
    """An in-memory Azurite, stopped on leaving: the session's, or a module's that must not share it."""
    instance = start_azurite(tmp_path_factory.mktemp(name))
    try:
        yield instance
    finally:
        instance.stop()


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[azurite_mod.Azurite]:
    with azurite_of_its_own(tmp_path_factory, "azurite") as instance:
        yield instance


def stop_process(process: subprocess.Popen[bytes], wait: float) -> int:
    """SIGTERM, then SIGKILL if it has not exited within `wait` seconds; its exit code."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(wait)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
    return process.returncode


@dataclass
class HostProcess:
    process: subprocess.Popen[bytes]
    root_url: str
    log_path: Path
    env: dict[str, str]

    def stop(self) -> None:
        stop_process(self.process, 15)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def client(self, **options: Any) -> taskcluster.Queue:
        return queue_client(self.root_url, **options)

    def rss_mb(self, field: str = "VmRSS") -> float:
        """The host process's resident memory (`VmHWM`: its peak since `reset_peak_rss`), in MiB."""
        with open(f"/proc/{self.process.pid}/status") as status:
            for line in status:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) / 1024
        raise AssertionError(f"no {field} line")

    def reset_peak_rss(self) -> None:
        """Start the host's peak resident memory (`VmHWM`) again from what it holds now (Linux's clear_refs)."""
        Path(f"/proc/{self.process.pid}/clear_refs").write_text("5")


def queue_client(root_url: str, **options: Any) -> taskcluster.Queue:
    return taskcluster.Queue(
        {
            "rootUrl": root_url,
            "credentials": {"clientId": ROOT_CLIENT_ID, "accessToken": ROOT_ACCESS_TOKEN},
            "maxRetries": 0,
            **options,
        }
    )


def shards_of(env: Mapping[str, str]) -> Shards:
    """How a host with this environment splits its queues and hot partitions."""
    return Shards(int(env.get("QUEUE_CHECK_SHARDS") or 1), int(env.get("QUEUE_PENDING_SHARDS") or 1))


def stores_of(env: Mapping[str, str], client: str = "rest") -> tuple[TableStore, QueueStore]:
    """The table and queue stores a host with this environment uses: over as many accounts as it shards its
    data (`QUEUE_STORAGE_SHARDS`); the caller closes them."""
    settings = load_settings(storage=env["QUEUE_STORAGE"], root_access_token="x" * 30, **sharding_settings(env))
    return data_stores(settings, client, env)


def base_env(storage: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUE_")}
    env.update(
        {
            "QUEUE_STORAGE": storage,
            "QUEUE_ROOT_CLIENT_ID": ROOT_CLIENT_ID,
            "QUEUE_ROOT_ACCESS_TOKEN": ROOT_ACCESS_TOKEN,
            "QUEUE_TOKEN_SECRET": TOKEN_SECRET,
            "QUEUE_VALIDATE_RESPONSES": "true",
            "QUEUE_LOG_LEVEL": "INFO",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


STARTED_HOSTS: list[HostProcess] = []


def all_host_logs() -> str:
    """Every test host's log: the hosts share Azurite's queues, so any of them may run a given trigger."""
    return "\n".join(host.log() for host in STARTED_HOSTS if host.log_path.exists())


def start_host(
    storage: str,
    log_dir: Path,
    *,
    http: bool = True,
    app: str = "function_app:app",
    host_json: Path | None = None,
    extra_args: list[str] | None = None,
    extra_env: dict[str, str] | None = None,
    project: Path = PROJECT,
    **settings: Any,
) -> HostProcess:
    """Start `python -m local_host serve` (a separate process, as in production) and wait until it serves.
    `project`: the code it runs (another release's, unpacked elsewhere; its own folder comes first on its path)."""
    sharded = sharding_env(storage)
    storage = through_fault_proxy(storage)
    port = azurite_mod.free_port()
    env = base_env(storage)
    env["QUEUE_PORT"] = str(port)
    env["QUEUE_ROOT_URL"] = f"http://127.0.0.1:{port}"  # as `make run` names it: the answers never take the Host
    env.update(sharded)
    env.update({f"QUEUE_{k.upper()}": str(v) for k, v in settings.items()})
    if STORAGE_FAULTS:
        # Messages that a receive with a lost answer hid come back after a lease: within the tests' waits.
        env["QUEUE_LOCAL_HOST_MESSAGE_LEASE"] = "4"
    env.update(extra_env or {})
    log_path = log_dir / f"host-{port}.log"
    args = [sys.executable, "-m", "local_host", "--settings", "/nonexistent", "--app", app]
    if host_json is not None:
        args += ["--host-json", str(host_json)]
    args += ["serve", *(extra_args or [])]
    if not http:
        args.append("--no-http")
    with open(log_path, "wb") as out:
        process = subprocess.Popen(
            args, cwd=project, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    host = HostProcess(process, f"http://127.0.0.1:{port}", log_path, env)
    STARTED_HOSTS.append(host)
    give_up = time.monotonic() + 30
    while time.monotonic() < give_up:
        if process.poll() is not None:
            raise RuntimeError(f"local host exited with {process.returncode}:\n{host.log()}")
        if "local host ready" in host.log():
            if not http:
                return host
            try:
                if httpx.get(f"{host.root_url}/api/queue/v1/ping", timeout=1).status_code == 200:
                    return host
            except httpx.HTTPError:
                pass
        time.sleep(0.1)
    host.stop()
    raise RuntimeError(f"local host did not start:\n{host.log()}")


@contextlib.contextmanager
def hosts_stopped_after(azurite: azurite_mod.Azurite, log_dir: Path) -> Iterator[Callable[..., HostProcess]]:
    """A factory of hosts (on the session's Azurite unless told otherwise), each stopped on leaving."""
    started: list[HostProcess] = []

    def factory(**kwargs: Any) -> HostProcess:
        kwargs.setdefault("storage", azurite.connection_string)
        host = start_host(log_dir=log_dir, **kwargs)
        started.append(host)
        return host

    try:
        yield factory
    finally:
        for host in started:
            host.stop()


@contextlib.contextmanager
def deployment_of_its_own(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[Callable[..., HostProcess]]:
    """A factory of hosts on an Azurite of their own: a deployment whose roles (the anonymous one among them) no
    other test's hosts share."""
    with contextlib.ExitStack() as stack:
        instance = stack.enter_context(azurite_of_its_own(tmp_path_factory, f"azurite-{name}"))
        yield stack.enter_context(hosts_stopped_after(instance, tmp_path_factory.mktemp(f"hosts-{name}")))


@pytest.fixture(scope="module")
def host_factory(
    azurite: azurite_mod.Azurite, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., HostProcess]]:
    """Hosts for one module, stopped when it ends: a host left running polls its queues for the rest of the
    session (twenty of them kept a core and Azurite's queue service busy, and the later tests' timings slipped),
    and one whose module's own Azurite has stopped retries against nothing."""
    with hosts_stopped_after(azurite, tmp_path_factory.mktemp("hosts")) as factory:
        yield factory


@pytest.fixture(scope="session")
def _session_hosts(
    azurite: azurite_mod.Azurite, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., HostProcess]]:
    with hosts_stopped_after(azurite, tmp_path_factory.mktemp("session-hosts")) as factory:
        yield factory


@pytest.fixture(scope="session")
def queue_host(_session_hosts: Callable[..., HostProcess]) -> HostProcess:
    """The default host, shared by the session: production timings, except a short claimWork long-poll."""
    return _session_hosts(claim_work_wait=2, claim_work_poll_interval=0.2)


@pytest.fixture(scope="session")
def fast_host(_session_hosts: Callable[..., HostProcess]) -> HostProcess:
    """A host with 1-second claims and no deadline delay, for expiry tests (shared by the session)."""
    return _session_hosts(claim_timeout=1, deadline_delay=0, claim_work_wait=2, claim_work_poll_interval=0.2)


@pytest.fixture
def queue(queue_host: HostProcess) -> taskcluster.Queue:
    return queue_host.client()


def slugid() -> str:
    return timeutil.slugid()


def task_queue_id() -> str:
    """A task queue of its own for one test, so tests never claim each other's work."""
    return f"test-prov/wt-{uuid.uuid4().hex[:20]}"


def task_definition(**overrides: Any) -> dict[str, Any]:
    now = timeutil.now()
    definition: dict[str, Any] = {
        "taskQueueId": task_queue_id(),
        "created": timeutil.iso(now),
        "deadline": timeutil.iso(now + dt.timedelta(hours=1)),
        "payload": {"command": ["echo", "hello"]},
        "metadata": {
            "name": "test task",
            "description": "a task made by the test suite",
            "owner": "tests@example.com",
            "source": "https://example.com/tests",
        },
    }
    definition.update(overrides)
    return {k: v for k, v in definition.items() if v is not None}


def schema_defaults(definition: dict[str, Any]) -> dict[str, Any]:
    """What createTask's schema fills in before the service sees a body, for the fields `definition` leaves out (a
    definition given straight to the operations, not through the API): the API's own filling
    (shared/validation.py), so that the two cannot differ."""
    body = copy.deepcopy(definition)
    validation.errors_of("create-task-request", body, fill_defaults=True)
    return {k: v for k, v in body.items() if k not in definition}


def wait_for(predicate: Callable[[], Any], timeout: float = 15, interval: float = 0.1) -> Any:
    """Poll until `predicate()` is truthy; return its value or fail after `timeout` seconds."""
    give_up = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > give_up:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(interval)


def expect_error(status: int, code: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
    """Call the official client and check it failed with this status and Taskcluster error code."""
    from taskcluster.exceptions import TaskclusterAuthFailure, TaskclusterRestFailure

    # The client raises TaskclusterAuthFailure for 401 and 403, TaskclusterRestFailure for other errors.
    with pytest.raises((TaskclusterRestFailure, TaskclusterAuthFailure)) as failure:
        call(*args, **kwargs)
    body = failure.value.body
    assert failure.value.status_code == status, body
    assert body["code"] == code, body
    assert set(body) == {"code", "message", "requestInfo"}, body
    assert set(body["requestInfo"]) == {"method", "params", "payload", "time"}, body
    return body
