"""The README's run command: `python -m local_host run` (what `make run` runs) on a fresh data dir."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import httpx

from local_host.azurite import free_port
from shared import __version__
from tests.acceptance.helpers import start_run
from tests.conftest import PROJECT, queue_client, slugid, task_definition, wait_for


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_two_runs_side_by_side_and_ctrl_c_stops_everything(tmp_path):
    runs = [start_run(tmp_path, "a"), start_run(tmp_path, "b")]
    try:
        banners = [log.read_text() for _, _, log in runs]
        for (_, port, _), banner in zip(runs, banners, strict=True):
            assert f"rootUrl:      http://127.0.0.1:{port}" in banner
            assert "accessToken:" in banner and "(generated" in banner
            assert httpx.get(f"http://127.0.0.1:{port}/api/queue/v1/ping").json()["alive"] is True
        tokens = [re.search(r"TASKCLUSTER_ACCESS_TOKEN=(\S+)", b).group(1) for b in banners]
        pids = [int(p) for b in banners for p in re.search(r"Azurite \(pids ([\d, ]+)\)", b).group(1).split(", ")]
        assert len(set(pids)) >= 2 and all(alive(p) for p in pids)  # each run has Azurite of its own
        # Each has its own storage: a task created on one is unknown to the other.
        task_id = slugid()
        client_a = queue_client(
            f"http://127.0.0.1:{runs[0][1]}", credentials={"clientId": "root", "accessToken": tokens[0]}
        )
        client_a.createTask(task_id, task_definition())
        assert httpx.get(f"http://127.0.0.1:{runs[1][1]}/api/queue/v1/task/{task_id}").status_code == 404
        for process, _, _ in runs:
            process.send_signal(signal.SIGINT)
        for process, _, _ in runs:
            assert process.wait(30) == 0
        time.sleep(0.2)
        assert not any(alive(p) for p in pids), "Azurite outlived make run"
        assert all("stopped" in log.read_text() for _, _, log in runs)
        # Started again on the same data dir: same credentials, and the task is still there.
        process, port, log = start_run(tmp_path, "a")
        runs = [(process, port, log)]
        assert "(generated" not in log.read_text() and tokens[0] in log.read_text()
        assert httpx.get(f"http://127.0.0.1:{port}/api/queue/v1/task/{task_id}").status_code == 200
    finally:
        for process, _, _ in runs:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
                process.wait(30)


def test_run_with_the_reference_worker_beside_the_queue(tmp_path):
    from tests.conftest import task_queue_id

    tq = task_queue_id()
    process, port, log = start_run(tmp_path, "w", "--worker", tq)
    try:
        banner = log.read_text()
        token = re.search(r"TASKCLUSTER_ACCESS_TOKEN=(\S+)", banner).group(1)
        worker_pid = int(re.search(r"reference worker \(pid (\d+)\)", banner).group(1))
        client = queue_client(f"http://127.0.0.1:{port}", credentials={"clientId": "root", "accessToken": token})
        task_id = slugid()
        client.createTask(task_id, task_definition(taskQueueId=tq, payload={"command": "echo from make run"}))
        wait_for(lambda: client.status(task_id)["status"]["state"] == "completed", timeout=30)
        # Ctrl-C with a task running: the worker is stopped first, while the queue still takes its report.
        running = slugid()
        client.createTask(running, task_definition(taskQueueId=tq, payload={"command": "sleep 120"}))
        wait_for(lambda: client.status(running)["status"]["state"] == "running", timeout=30)
        process.send_signal(signal.SIGINT)
        assert process.wait(60) == 0
        assert not alive(worker_pid), "the worker outlived make run"
        text = log.read_text()
        assert "reference worker" in text and "stopped" in text
        assert f"{running}/0  resolved exception/worker-shutdown" in text, text[-3000:]
        assert "could not report" not in text and "Traceback" not in text, text[-3000:]
        process, port, log = start_run(tmp_path, "w")  # the same data: the run was reported, not left claimed
        run = httpx.get(f"http://127.0.0.1:{port}/api/queue/v1/task/{running}/status").json()["status"]["runs"][0]
        assert (run["state"], run["reasonResolved"]) == ("exception", "worker-shutdown")
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            process.wait(30)


def test_run_gives_its_azurite_a_key_of_its_own_and_keeps_the_data_private(tmp_path):
    """Azurite's development key is public: with it any process on the machine could write the Clients table.
    `make run` generates a key, keeps it with the other secrets (owner-only), and Azurite's files are the
    owner's alone."""
    import json
    import stat

    from azure.core.exceptions import HttpResponseError
    from azure.data.tables import TableServiceClient

    from local_host.azurite import DEVELOPMENT_KEY

    process, port, _ = start_run(tmp_path, "k")
    try:
        data = tmp_path / "k"
        secrets = json.loads((data / "secrets.json").read_text())
        key = secrets["AZURITE_ACCOUNT_KEY"]
        assert key != DEVELOPMENT_KEY
        storage = json.loads((data / "runtime.json").read_text())["QUEUE_STORAGE"]
        assert f"AccountKey={key};" in storage
        assert stat.S_IMODE(data.stat().st_mode) == 0o700
        assert httpx.get(f"http://127.0.0.1:{port}/api/queue/v1/task/{slugid()}").status_code == 404  # tables made
        tables = TableServiceClient.from_connection_string(storage)
        assert "Tasks" in {t.name for t in tables.list_tables()}
        written = [data / "secrets.json", data / "runtime.json", *(data / "azurite").rglob("*")]
        assert len(written) > 5, written  # Azurite's files are there
        for path in written:
            assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, path
        public = TableServiceClient.from_connection_string(storage.replace(key, DEVELOPMENT_KEY))
        try:
            list(public.list_tables())
            raise AssertionError("the development key was accepted")
        except HttpResponseError as refused:
            assert refused.status_code == 403
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 0
    # The same key again on the next start (the data stays readable).
    process, port, _ = start_run(tmp_path, "k")
    try:
        assert json.loads((tmp_path / "k" / "secrets.json").read_text())["AZURITE_ACCOUNT_KEY"] == key
        assert httpx.get(f"http://127.0.0.1:{port}/api/queue/v1/ping").status_code == 200
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(30)


def test_a_data_dir_written_in_a_newer_form_is_refused_with_one_line(tmp_path):
    """A later release that changes what the data dir holds raises its format; this one then refuses the data dir
    rather than crash on it (and a data dir it can read is marked with its own)."""
    data = tmp_path / "newer"
    data.mkdir()
    (data / "format.json").write_text('{"dataFormat": 99, "writtenBy": "9.0.0"}')
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUE_")}
    env.update(QUEUE_PORT=str(free_port()), QUEUE_DATA_DIR=str(data))
    done = subprocess.run(
        [sys.executable, "-m", "local_host", "--settings", "/nonexistent", "run"],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stdout == "", done.stdout
    [line] = done.stderr.splitlines()
    assert line.startswith(f"error: The data dir {data} was written by tc-azure-queue 9.0.0 in data format 99; ")
    assert "reads format 1 and older" in line and "QUEUE_DATA_DIR" in line
    assert sorted(p.name for p in data.iterdir()) == ["format.json"]  # nothing started, nothing written


def test_a_data_dir_is_marked_with_the_form_this_release_writes(tmp_path):
    process, _, _ = start_run(tmp_path, "marked")
    try:
        marker = json.loads((tmp_path / "marked" / "format.json").read_text())
        assert marker == {"dataFormat": 1, "writtenBy": __version__}
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(30)
