"""Which release is running, as Taskcluster's services say it (Dockerflow): `/__version__` at the root and under
each service, `/__lbheartbeat__` and `/__heartbeat__`; the package's version is shared/__init__.py's."""

from __future__ import annotations

import subprocess

import httpx

from shared import __version__
from tests.conftest import PROJECT


def checkout_commit() -> str:
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=PROJECT, capture_output=True, text=True, check=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return commit + ("-dirty" if dirty else "")


def test_every_service_and_the_root_name_the_running_release(host):
    expected = {"version": __version__, "commit": checkout_commit(), "build": "local checkout"}
    for path in (
        "/__version__",
        "/api/queue/v1/__version__",
        "/api/object/v1/__version__",
        "/api/auth/v1/__version__",
        "/api/index/v1/__version__",
    ):
        answer = httpx.get(f"{host.root_url}{path}")
        assert answer.status_code == 200, path
        body = answer.json()
        assert set(body) == {"source", "version", "commit", "build"}, path
        assert {k: body[k] for k in expected} == expected, path


def test_the_load_balancer_and_health_heartbeats_answer(host):
    for path in ("/__lbheartbeat__", "/__heartbeat__", "/api/queue/v1/__lbheartbeat__", "/api/queue/v1/__heartbeat__"):
        answer = httpx.get(f"{host.root_url}{path}")
        assert answer.status_code == 200 and answer.json() == {}, path
