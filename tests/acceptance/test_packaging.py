"""`pip install <project>[worker]` in a clean virtualenv gives the reference worker and the admin command, with
their runtime dependencies only, and they work against a running queue."""

from __future__ import annotations

import os
import shutil
import subprocess
import venv

import pytest

from shared import __version__
from tests.conftest import PROJECT, ROOT_ACCESS_TOKEN, ROOT_CLIENT_ID, slugid, task_definition, task_queue_id, wait_for

PACKAGES = ("shared", "worker", "queue_admin", "functions", "local_host")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A virtualenv with the project installed from a copy of its sources (the build writes beside them)."""
    root = tmp_path_factory.mktemp("package")
    source = root / "src"
    source.mkdir()
    shutil.copy(PROJECT / "pyproject.toml", source)
    for package in PACKAGES:
        shutil.copytree(PROJECT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    env_dir = root / "venv"
    venv.create(env_dir, with_pip=True)
    pip = subprocess.run(
        [env_dir / "bin" / "pip", "install", "--quiet", "--disable-pip-version-check", f"{source}[worker]"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert pip.returncode == 0, pip.stderr[-3000:]
    return env_dir / "bin"


def test_the_worker_extra_holds_the_worker_and_admin_command_and_only_what_they_need(installed):
    listed = subprocess.run(
        [installed / "pip", "list", "--format=freeze", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.lower()
    for needed in ("taskcluster==", "httpx==", "azure-storage-blob==", f"tc-azure-queue=={__version__}"):
        assert needed in listed  # the package's version is shared/__init__.py's, the one source
    for service_only in ("azure-functions", "starlette", "pydantic", "azure-data-tables", "aio-pika", "jsonschema"):
        assert f"{service_only}==" not in listed, service_only
    assert (installed / "tc-queue-worker").exists() and (installed / "tc-queue-admin").exists()


def test_the_installed_worker_runs_a_task_and_the_admin_command_reads_scopes(installed, host_factory, tmp_path):
    host = host_factory()
    tq = task_queue_id()
    queue = host.client()
    task_id = slugid()
    queue.createTask(task_id, task_definition(taskQueueId=tq, payload={"command": "echo from the package"}))
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("TASKCLUSTER_", "PYTHON", "VIRTUAL_ENV"))},
        "TASKCLUSTER_ROOT_URL": host.root_url,
        "TASKCLUSTER_CLIENT_ID": ROOT_CLIENT_ID,
        "TASKCLUSTER_ACCESS_TOKEN": ROOT_ACCESS_TOKEN,
    }
    # Run from outside the checkout, so only the installed package can be imported.
    worker = subprocess.run(
        [
            installed / "tc-queue-worker",
            "--task-queue",
            tq,
            "--worker-group",
            "pkg",
            "--worker-id",
            "pkg-1",
            "--max-tasks",
            "1",
            "--work-dir",
            str(tmp_path / "w"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert worker.returncode == 0, worker.stdout[-2000:] + worker.stderr[-2000:]
    wait_for(lambda: queue.status(task_id)["status"]["state"] == "completed", timeout=30)
    admin = subprocess.run(
        [installed / "tc-queue-admin", "scopes", "current"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert admin.returncode == 0 and admin.stdout.split() == ["*"], admin.stderr
    where = subprocess.run(
        [installed / "python", "-c", "import worker; print(worker.__file__)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert where.startswith(str(installed.parent))  # the installed copy, not the checkout
