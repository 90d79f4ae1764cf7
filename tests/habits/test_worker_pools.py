"""Worker pools as Container Apps jobs (issue #87): infra/'s templates, the entry `tc-queue-admin pools entry` prints,
the worker's container definition and the local model (local_host/jobs.py) agree with each other.

Bicep cannot be compiled here, and the Container Apps platform and KEDA cannot run here, so these read the templates
as text (as tests/habits/test_deploy.py does): the job reads only what an entry holds, every rule reads its queue
with the pool's identity (no key, no connection string), the identity may read its own secret and the queues'
lengths and nothing more, the container runs the worker with flags the worker takes, and the image holds what the
worker imports."""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from local_host.jobs import JobRule
from queue_admin.pools import DEFAULTS, pool_entry

pytestmark = pytest.mark.habits

PROJECT = Path(__file__).resolve().parents[2]
INFRA = PROJECT / "infra"
POOL_BICEP = INFRA / "app" / "worker-pool.bicep"
POOLS_BICEP = INFRA / "app" / "worker-pools.bicep"
CONTAINERFILE = PROJECT / "worker" / "Containerfile"
ROLES = {
    "19e7f393-937e-4f77-808e-94535e297925": "Storage Queue Data Reader",
    "4633458b-17de-408a-b874-0445c86b69e6": "Key Vault Secrets User",
}


def entry(**more: object) -> dict[str, object]:
    args = argparse.Namespace(
        name="builders",
        task_queue="proj/builder",
        worker_group="azure",
        image="example.azurecr.io/tc-queue-worker:1",
        max_executions=DEFAULTS["maxExecutions"],
        polling_interval=DEFAULTS["pollingInterval"],
        idle_exit=DEFAULTS["idleExit"],
        pending_shards=2,
        storage_shards=3,
        priorities="",
        **more,
    )
    return pool_entry(args)


def test_no_pool_by_default_and_then_no_environment():
    assert json.loads((INFRA / "worker-pools.json").read_text()) == []
    main = (INFRA / "main.bicep").read_text()
    assert "var workerPools = loadJsonContent('worker-pools.json')" in main
    assert "module pools 'app/worker-pools.bicep' = if (!empty(workerPools))" in main
    assert "module pool 'worker-pool.bicep' = [for p in pools:" in POOLS_BICEP.read_text()


def test_the_job_reads_exactly_what_an_entry_holds():
    """Every `pool.<key>` the template reads is a key of the entry the tool prints (or the optional registry),
    and every key the tool prints is read: a renamed key fails here, not in a deployment."""
    read = set(re.findall(r"\bpool\.\??(\w+)", POOL_BICEP.read_text()))
    printed = set(entry())
    assert read - {"registry"} == printed, (read, printed)
    rule_keys = set(re.findall(r"\brule\.(\w+)", POOL_BICEP.read_text()))
    assert rule_keys == set(entry()["rules"][0])  # type: ignore[index]


def test_every_scale_rule_reads_its_queue_with_the_pools_identity_and_no_key():
    text = POOL_BICEP.read_text()
    rules = text[text.index("rules: [for") : text.index("}]", text.index("rules: [for"))]
    assert "type: 'azure-queue'" in rules and "identity: identity.id" in rules
    assert "auth:" not in rules and "connection" not in rules.lower()
    assert "accountName: dataAccountNames[rule.account]" in rules and "queueName: rule.queueName" in rules
    # The local model's rule is the one declared: one execution per pending message, KEDA's default interval.
    assert f"queueLength: '{JobRule('p/t').queue_length}'" in rules
    assert JobRule("p/t").polling_interval == DEFAULTS["pollingInterval"]
    assert JobRule("p/t").max_executions == DEFAULTS["maxExecutions"]
    for path in (POOL_BICEP, POOLS_BICEP):
        body = path.read_text()
        assert "listKeys(" not in body and "AccountKey=" not in body and "sharedKey" not in body, path.name


def test_the_token_comes_from_key_vault_through_the_identity_and_nothing_else_is_a_secret():
    text = POOL_BICEP.read_text()
    secrets = text[text.index("secrets: [") : text.index("]", text.index("secrets: ["))]
    assert "keyVaultUrl: '${vault.properties.vaultUri}secrets/${secretName}'" in secrets
    assert "identity: identity.id" in secrets and "value:" not in secrets
    assert "{ name: 'TASKCLUSTER_ACCESS_TOKEN', secretRef: 'access-token' }" in text
    assert "var secretName = 'worker-pool-${pool.name}'" in text


def test_the_pools_identity_reads_its_own_queues_and_secret_and_nothing_else():
    text = POOL_BICEP.read_text()
    assignments = re.findall(
        r"resource (\w+) 'Microsoft\.Authorization/roleAssignments@[^']+' = [^\n]*\n(.*?)\n}", text, re.S
    )
    scopes = {name: re.search(r"scope: (\S+)", body)[1] for name, body in assignments}  # type: ignore[index]
    assert scopes == {"tokenAccess": "token", "queueRead": "pending[i]"}, scopes  # a secret, each queue: no account
    assert "resource pending 'Microsoft.Storage/storageAccounts/queueServices/queues@" in text
    assert (
        "[for rule in pool.rules:" in text
        and "name: '${dataAccountNames[rule.account]}/default/${rule.queueName}'" in text
    )
    used = set(re.findall(r"roles\.(\w+)\)", text))
    declared = dict(re.findall(r"^\s+(\w+): '([0-9a-f-]{36})'$", text, re.M))
    assert used == set(declared) and {ROLES[declared[role]] for role in used} == set(ROLES.values())
    assert "Microsoft.Authorization/roleDefinitions@" not in text


def test_the_container_runs_the_worker_with_flags_the_worker_takes():
    text = POOL_BICEP.read_text()
    args = re.findall(r"'(--[a-z-]+)'", text[text.index("args: [") : text.index("]", text.index("args: ["))])
    assert args == ["--task-queue", "--worker-group", "--claim-work", "--idle-exit"]
    sample = ["--task-queue", "p/t", "--worker-group", "g", "--claim-work", "--idle-exit", "60", "--help"]
    shown = subprocess.run([sys.executable, "-m", "worker", *sample], cwd=PROJECT, capture_output=True, text=True)
    assert shown.returncode == 0 and all(flag in shown.stdout for flag in args), shown.stderr
    for name in ("TASKCLUSTER_ROOT_URL", "TASKCLUSTER_CLIENT_ID", "TASKCLUSTER_ACCESS_TOKEN"):
        assert f"name: '{name}'" in text and name in (PROJECT / "worker" / "__main__.py").read_text()


def test_the_image_holds_what_the_worker_imports(tmp_path):
    """The files the Containerfile copies are enough to import every module of the worker (in a folder with
    nothing else), and worker/requirements.txt pins each third-party distribution it imports as the project
    pins it."""
    text = CONTAINERFILE.read_text()
    copied = [
        line.split()[1:-1] for line in text.splitlines() if line.startswith("COPY ") and "requirements" not in line
    ]
    for sources in copied:
        for pattern in sources:
            for source in PROJECT.glob(pattern):
                target = tmp_path / source.relative_to(PROJECT)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(source.read_bytes())
    modules = sorted(f"worker.{p.stem}" for p in (PROJECT / "worker").glob("*.py") if p.stem != "__init__")
    # The project is installed in the environment too: every first-party module must come from the copies.
    check = (
        f"import sys, os; sys.path.insert(0, os.getcwd()); import {', '.join(modules)}; "
        "print([m.__file__ for n, m in sys.modules.items() if n.split('.')[0] in ('shared', 'worker')])"
    )
    imported = subprocess.run([sys.executable, "-I", "-c", check], cwd=tmp_path, capture_output=True, text=True)
    assert imported.returncode == 0, imported.stderr
    files = ast.literal_eval(imported.stdout)
    assert files and all(Path(f).is_relative_to(tmp_path) for f in files), files
    pins = dict(
        line.split("==") for line in (PROJECT / "worker" / "requirements.txt").read_text().splitlines() if "==" in line
    )
    project = (PROJECT / "requirements.txt").read_text() + (PROJECT / "requirements-dev.txt").read_text()
    for name, version in pins.items():
        assert re.search(rf"^{re.escape(name)}=={re.escape(version)}\b", project, re.M), name
    third_party = set()
    for path in (PROJECT / "worker").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                third_party |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                third_party.add(node.module.split(".")[0])
    third_party -= set(sys.stdlib_module_names) | {"worker", "shared"}
    distributions = {"taskcluster": "taskcluster", "httpx": "httpx", "azure": "azure-storage-blob"}
    assert third_party <= set(distributions), third_party
    assert {distributions[name] for name in third_party} == set(pins)
