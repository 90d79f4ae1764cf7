"""Mozilla's scriptworker (PyPI), unchanged, against this queue on Azurite: the Python worker that runs Firefox's
signing, beetmover and balrog tasks. It claims with claimWork, reclaims, runs its task script, gzips text and JSON
and says so only in the PUT's own `Content-Encoding`, signs a chain-of-trust file over the artifacts' hashes,
uploads every artifact as `s3` (accepting only a 200 or 204), and reports completed or failed. Chain-of-trust
verification is off (it needs Mozilla's repositories); signing is on, with a key made here.

What is checked is what a downstream task (or a release engineer) would: every artifact downloaded through the
official client is byte for byte what the task wrote, and the chain of trust's sha256 of each matches it."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import taskcluster
import taskcluster.download
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.acceptance.conftest import QUICK_CLAIMS, assert_memory_flat, streamed_sha256
from tests.conftest import ROOT_ACCESS_TOKEN, ROOT_CLIENT_ID, slugid, stop_process, task_queue_id

SCRIPTWORKER = Path(sys.executable).parent / "scriptworker"
CLAIM_TIMEOUT = 4  # seconds: a task that runs longer completes only if scriptworker reclaims it

# The task script: writes the artifacts the payload names (text, JSON, a gzip tarball and a binary larger than one
# staged block), sleeps, and exits with the payload's code.
TASK_SCRIPT = r"""
import json, os, sys, time
work, artifacts = sys.argv[1], sys.argv[2]
task = json.load(open(os.path.join(work, "task.json")))
payload = task["payload"]
print("task script running", task["metadata"]["name"], flush=True)
for name, spec in payload["artifacts"].items():
    path = os.path.join(artifacts, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as out:
        if "random" in spec:  # large: written a few MiB at a time
            for _ in range(0, spec["random"], 4 << 20):
                out.write(os.urandom(4 << 20))
            continue
        out.write(spec["text"].encode() * spec.get("repeat", 1) if "text" in spec else bytes(
            (i * 31 + spec["seed"]) % 251 for i in range(spec["size"])))
time.sleep(payload.get("sleep", 0))
print("error: the build failed" if payload["exit"] else "done", flush=True)
sys.exit(payload["exit"])
"""


def artifact_bytes(spec: dict) -> bytes:
    if "text" in spec:
        return spec["text"].encode() * spec.get("repeat", 1)
    return bytes((i * 31 + spec["seed"]) % 251 for i in range(spec["size"]))


@pytest.fixture(scope="module")
def host(host_factory):
    return host_factory(claim_timeout=CLAIM_TIMEOUT, **QUICK_CLAIMS)


@pytest.fixture(scope="module")
def signing_key(tmp_path_factory) -> tuple[Path, Ed25519PrivateKey]:
    key = Ed25519PrivateKey.generate()
    raw = key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption())
    path = tmp_path_factory.mktemp("cot") / "ed25519.key"
    path.write_text(base64.b64encode(raw).decode())
    return path, key


@pytest.fixture(scope="module")
def scriptworker(host, signing_key, tmp_path_factory) -> Iterator[tuple[str, Path]]:
    """A scriptworker process on a task queue of its own; its task queue id and log."""
    base = tmp_path_factory.mktemp("scriptworker")
    provisioner, worker_type = task_queue_id().split("/")
    script = base / "task_script.py"
    script.write_text(TASK_SCRIPT)
    config = {
        "taskcluster_root_url": host.root_url,
        "provisioner_id": provisioner,
        "worker_type": worker_type,
        "worker_group": "sw-group",
        "worker_id": "sw-1",
        "credentials": {"clientId": ROOT_CLIENT_ID, "accessToken": ROOT_ACCESS_TOKEN},
        "work_dir": str(base / "work"),
        "log_dir": str(base / "logs"),
        "artifact_dir": str(base / "artifacts"),
        "task_log_dir": str(base / "artifacts" / "public" / "logs"),
        "task_script": [sys.executable, str(script), str(base / "work"), str(base / "artifacts")],
        "poll_interval": 1,
        "reclaim_interval": 1,
        "task_max_timeout": 120,
        "artifact_upload_timeout": 60,
        "sign_chain_of_trust": True,
        "verify_chain_of_trust": False,
        "ed25519_private_key_path": str(signing_key[0]),
        "cot_job_type": "signing",
    }
    path = base / "scriptworker.yaml"
    path.write_text(yaml.safe_dump(config))
    log = base / "scriptworker.out"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [str(SCRIPTWORKER), str(path)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    try:
        yield f"{provisioner}/{worker_type}", log
    finally:
        stop_process(process, 15)


def create(queue: taskcluster.Queue, task_queue: str, payload: dict) -> str:
    now = dt.datetime.now(dt.UTC)
    task_id = slugid()
    queue.createTask(
        task_id,
        {
            "taskQueueId": task_queue,
            "created": now.isoformat(),
            "deadline": (now + dt.timedelta(minutes=10)).isoformat(),
            "expires": (now + dt.timedelta(days=2)).isoformat(),
            "payload": payload,
            "metadata": {
                "name": f"scriptworker {task_id}",
                "description": "-",
                "owner": "releng@example.com",
                "source": "https://example.com/scriptworker",
            },
        },
    )
    return task_id


def resolved(queue: taskcluster.Queue, task_id: str, log: Path, wait: float = 90) -> dict:
    give_up = time.monotonic() + wait
    while time.monotonic() < give_up:
        status = queue.status(task_id)["status"]
        if status["state"] not in ("pending", "running", "unscheduled"):
            return status
        time.sleep(0.5)
    raise AssertionError(f"task {task_id} not resolved; scriptworker said:\n{log.read_text()[-4000:]}")


def download(host, task_id: str, name: str) -> bytes:
    anonymous = taskcluster.Queue({"rootUrl": host.root_url, "maxRetries": 0})
    buf, _ = taskcluster.download.downloadArtifactToBuf(taskId=task_id, runId=0, name=name, queueService=anonymous)
    return bytes(buf)


ARTIFACTS = {
    "public/build/notes.txt": {"text": "release notes line\n", "repeat": 2000},  # gzipped by scriptworker
    "public/build/manifest.json": {"text": '{"files": ["target.tar.gz"], "signed": true}'},  # gzipped
    "public/build/target.tar.gz": {"seed": 7, "size": 300_000},  # sent as it is
    "public/build/target.bin": {"seed": 11, "size": 9 * 1024 * 1024 + 3},  # three staged blocks
}


def test_scriptworker_runs_reclaims_uploads_and_signs_a_task_completed(host, scriptworker, signing_key):
    task_queue, log = scriptworker
    queue = host.client()
    task_id = create(queue, task_queue, {"exit": 0, "sleep": CLAIM_TIMEOUT + 3, "artifacts": ARTIFACTS})
    status = resolved(queue, task_id, log)
    # One run, completed, although it ran longer than a claim lasts: scriptworker's reclaims kept it.
    assert [(r["state"], r.get("reasonResolved")) for r in status["runs"]] == [("completed", "completed")], (
        log.read_text()[-4000:]
    )
    for name, spec in ARTIFACTS.items():
        assert download(host, task_id, name) == artifact_bytes(spec), name
    names = {a["name"]: a for a in queue.listArtifacts(task_id, "0")["artifacts"]}
    assert {"public/logs/live_backing.log", "public/chain-of-trust.json", "public/chain-of-trust.json.sig"} <= set(
        names
    )
    assert all(a["storageType"] == "s3" for a in names.values())
    backing = download(host, task_id, "public/logs/live_backing.log").decode()
    assert "task script running" in backing and "done" in backing  # text, not gzip bytes
    # The chain of trust, as a verifier reads it: its signature is the worker's, its hashes those of the data.
    cot_bytes = download(host, task_id, "public/chain-of-trust.json")
    signing_key[1].public_key().verify(download(host, task_id, "public/chain-of-trust.json.sig"), cot_bytes)
    cot = json.loads(cot_bytes)
    assert cot["taskId"] == task_id and cot["runId"] == 0
    for name, spec in ARTIFACTS.items():
        assert cot["artifacts"][name]["sha256"] == hashlib.sha256(artifact_bytes(spec)).hexdigest(), name


def test_scriptworker_reports_a_failed_task_with_its_log(host, scriptworker):
    task_queue, log = scriptworker
    queue = host.client()
    task_id = create(queue, task_queue, {"exit": 1, "artifacts": {"public/build/partial.txt": {"text": "half\n"}}})
    status = resolved(queue, task_id, log)
    assert [(r["state"], r.get("reasonResolved")) for r in status["runs"]] == [("failed", "failed")]
    assert "error: the build failed" in download(host, task_id, "public/logs/live_backing.log").decode()
    assert download(host, task_id, "public/build/partial.txt") == b"half\n"


# The evidence is a gigabyte (QUEUE_TEST_BIG_ARTIFACT_MIB=1024); make test uploads 64 MiB.
BIG_MIB = int(os.environ.get("QUEUE_TEST_BIG_ARTIFACT_MIB", "64"))


def test_scriptworker_uploads_a_large_artifact_with_the_hosts_memory_flat(host, scriptworker):
    """scriptworker PUTs an s3 artifact whole; it passes through the HTTP function in chunks (HTTP streams): the
    host's peak memory grows by a few staged blocks, not by the artifact, and the bytes are the ones its chain of
    trust hashed."""
    task_queue, log = scriptworker
    queue = host.client()
    host.reset_peak_rss()
    before = host.rss_mb()
    artifacts = {"public/build/big.bin": {"random": BIG_MIB << 20}}
    task_id = create(queue, task_queue, {"exit": 0, "artifacts": artifacts})
    status = resolved(queue, task_id, log, wait=90 + BIG_MIB / 4)
    assert [(r["state"], r.get("reasonResolved")) for r in status["runs"]] == [("completed", "completed")], (
        log.read_text()[-4000:]
    )
    assert_memory_flat(host, before, BIG_MIB)
    cot = json.loads(download(host, task_id, "public/chain-of-trust.json"))
    assert cot["artifacts"]["public/build/big.bin"]["sha256"] == streamed_sha256(host, task_id, "public/build/big.bin")
