"""Command line of the local host.

    python -m local_host run      Azurite (embedded, started for you) + the queue on 127.0.0.1:$QUEUE_PORT
                                  (`--worker <taskQueueId>`: and the reference worker beside it)
    python -m local_host serve    the queue only, against the storage in $QUEUE_STORAGE
    python -m local_host clients  manage clients (create, list, reset, disable, enable, delete)
    python -m local_host audit    check the invariants over every task (`--reconcile`: run a reconciler pass first)

Settings come from the environment, then `local.settings.json` (`Values`), as the Functions host reads them.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from local_host import azurite
from local_host.beside import start_jobs, start_worker, stop_worker
from local_host.data_dir import (
    AZURITE_KEY,
    check_data_format,
    data_dir_path,
    ensure_secrets,
    load_local_settings,
    running_storage,
)
from local_host.front_end import FrontEndLimits
from local_host.host import PROJECT, serve
from local_host.jobs import JobsBeside
from shared import logs, timing
from shared.connections import StorageConnection
from shared.errors import SettingsError
from shared.runtime import data_stores
from shared.settings import Settings, load_settings
from shared.settings.fitness import check_serving


def _banner(root_url: str, client_id: str, token: str, generated: bool) -> str:
    note = " (generated; kept in the data dir)" if generated else ""
    return "\n".join(
        [
            "",
            f"Taskcluster queue listening on {root_url}",
            f"  rootUrl:      {root_url}",
            f"  inspector:    {root_url}/inspector/  (task groups, tasks, logs and task queues in the browser)",
            f"  clientId:     {client_id}",
            f"  accessToken:  {token}{note}",
            "  for the taskcluster clients:",
            f"    export TASKCLUSTER_ROOT_URL={root_url}",
            f"    export TASKCLUSTER_CLIENT_ID={client_id}",
            f"    export TASKCLUSTER_ACCESS_TOKEN={token}",
            "Press Ctrl-C to stop.",
            "",
        ]
    )


def _binding_defaults() -> None:
    """App settings the function bindings name (`%QUEUE_EXPIRY_SCHEDULE%`) get the settings' defaults."""
    for name in ("expiry_schedule", "reconcile_schedule", "park_schedule"):
        os.environ.setdefault(f"QUEUE_{name.upper()}", str(Settings.model_fields[name].default))


def cmd_run(args: argparse.Namespace) -> int:
    data_dir = data_dir_path()
    check_data_format(data_dir)
    own_storage = StorageConnection.from_environ("QUEUE_STORAGE", os.environ) is None
    generated = ensure_secrets(data_dir, azurite_key=own_storage)
    embedded = None
    runtime = data_dir / "runtime.json"
    if own_storage:
        key = json.loads((data_dir / "secrets.json").read_text())[AZURITE_KEY]
        # Not on the host's port, which is free until the host binds it after Azurite has started.
        host_port = int(os.environ.get("QUEUE_PORT") or Settings.model_fields["port"].default)
        embedded = azurite.start(data_dir / "azurite", in_memory=args.in_memory, key=key, avoid=frozenset({host_port}))
        os.environ["QUEUE_STORAGE"] = embedded.connection_string
        pids = ", ".join(map(str, embedded.pids))
        print(
            f"Azurite (pids {pids}) on 127.0.0.1 ports blob {embedded.blob_port}, queue "
            f"{embedded.queue_port}, table {embedded.table_port}; data in {data_dir / 'azurite'}",
            flush=True,
        )
        # So `python -m local_host clients ...` finds the running storage.
        runtime.write_text(json.dumps({"QUEUE_STORAGE": embedded.connection_string, "pid": os.getpid()}))
        runtime.chmod(0o600)
    worker: subprocess.Popen[bytes] | None = None
    jobs: JobsBeside | None = None
    try:
        _binding_defaults()
        settings = check_serving(load_settings())
        logs.configure(settings.log_level)
        announce = _banner(settings.public_root_url, settings.root_client_id, settings.root_access_token, generated)
        start = functools.partial(
            start_worker,
            args.worker,
            root_url=settings.public_root_url,
            client_id=settings.root_client_id,
            token=settings.root_access_token,
            data_dir=data_dir,
        )
        if args.worker and args.scale == "jobs":
            jobs = start_jobs(args, settings, start)
        elif args.worker:
            worker = start(args.worker_capacity)
        # Ctrl-C stops the workers first, while the queue still takes their reports (their runs end worker-shutdown).
        before_stop = (
            functools.partial(asyncio.to_thread, jobs.stop)
            if jobs is not None
            else None
            if worker is None
            else functools.partial(asyncio.to_thread, stop_worker, worker)
        )
        asyncio.run(
            serve(
                args.app,
                Path(args.host_json),
                port=settings.port,
                announce=announce,
                before_stop=before_stop,
                bounds=http_bounds(settings),
                front_end=front_end_limits(settings),
            )
        )
    finally:
        if worker is not None:
            stop_worker(worker)
        if jobs is not None:
            jobs.stop()
        if embedded is not None:
            runtime.unlink(missing_ok=True)
            embedded.stop()
            print(f"Azurite (pids {', '.join(map(str, embedded.pids))}) stopped", flush=True)
    return 0


def http_bounds(settings: Settings) -> dict[str, Any]:
    """The HTTP server's bounds (local_host/http.py), from the settings."""
    return {
        "max_connections": settings.http_max_connections,
        "header_timeout": settings.http_header_timeout,
        "body_timeout": settings.http_body_timeout,
        "per_peer_share": settings.http_per_peer_share,
        "min_body_rate": settings.http_min_body_rate,
        "body_grace": settings.http_body_grace,
    }


def front_end_limits(settings: Settings) -> FrontEndLimits:
    """What Azure's front end enforces on a request (local_host/front_end.py), from the settings."""
    return FrontEndLimits(settings.http_request_body_limit, settings.http_answer_within)


def cmd_serve(args: argparse.Namespace) -> int:
    _binding_defaults()
    settings = check_serving(load_settings())
    logs.configure(settings.log_level)
    port = None if args.no_http else settings.port
    announce = f"local host ready on {settings.public_root_url}" if port else "local host ready (triggers only)"
    asyncio.run(
        serve(
            args.app,
            Path(args.host_json),
            port=port,
            announce=announce,
            bounds=http_bounds(settings),
            front_end=front_end_limits(settings),
        )
    )
    return 0


def cmd_clients(args: argparse.Namespace) -> int:
    """Manage clients in the Clients table of the queue's storage (the running `make run`'s by default)."""
    if not running_storage():
        return 2
    from shared.auth.admin import run_clients_command

    return asyncio.run(run_clients_command(load_settings(), args))


def cmd_audit(args: argparse.Namespace) -> int:
    """Check the invariants over every task of the queue's storage (the running `make run`'s by default)."""
    if not running_storage():
        return 2
    logs.configure("WARNING")
    from shared.maintenance.invariants import run_audit_command
    from shared.runtime import build_queue

    settings = load_settings()
    queue = build_queue(settings, *data_stores(settings, "sdk"))
    return asyncio.run(run_audit_command(queue.stores, queue.reconciler if args.reconcile else None))


def cmd_return_checks(args: argparse.Namespace) -> int:
    """Put the checks waiting in the triggered queues back in the parking queues, visible when due, and the dispatch
    requests parked while the bus refused back in `event-dispatch`: the last step of a rollback to 0.2.0, which reads
    only those (docs/deploy.md#releases-upgrades-and-rollbacks)."""
    if not running_storage():
        return 2
    logs.configure("WARNING")
    from shared.runtime import build_queue

    settings = load_settings()
    queue = build_queue(settings, *data_stores(settings, "sdk"))

    async def go() -> tuple[int, int]:
        try:
            checks = await queue.stores.check_queues.return_due()
            within = settings.event_retry_max_delay + timing.MOVE_VISIBILITY
            return checks, await queue.stores.events.parked.return_all(within)
        finally:
            await queue.close()

    checks, requests = asyncio.run(go())
    print(f"returned {checks} checks to the parking queues (claim-expiry, task-deadlines)")
    print(f"returned {requests} parked dispatch requests to event-dispatch")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m local_host", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--settings",
        default=str(PROJECT / "local.settings.json"),
        help="local.settings.json to read (default: the project's)",
    )
    parser.add_argument("--app", default="function_app:app", help="module:attribute of the function app")
    parser.add_argument("--host-json", default=str(PROJECT / "host.json"))
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="start Azurite and the queue")
    run.add_argument("--in-memory", action="store_true", help="keep Azurite's data in memory only")
    run.add_argument("--worker", metavar="TASK_QUEUE_ID", help="also run the reference worker on this task queue")
    run.add_argument("--worker-capacity", type=int, default=2, help="tasks the worker runs at once (default 2)")
    run.add_argument(
        "--scale",
        choices=("process", "jobs"),
        default="process",
        help="`jobs`: run the worker pool as a scaled job would (local_host/jobs.py): no worker while nothing is "
        "pending, executions started for the pending work, each exiting when idle (default: one worker process)",
    )
    run.add_argument(
        "--max-executions",
        type=int,
        default=4,
        help="with --scale jobs: executions at once (4 here; infra/'s default is 10)",
    )
    run.add_argument(
        "--polling-interval", type=float, default=30.0, help="with --scale jobs: seconds between readings (30, KEDA's)"
    )
    run.add_argument("--idle-exit", type=float, default=30.0, help="with --scale jobs: an execution's idle time (30)")
    run.set_defaults(func=cmd_run)
    srv = sub.add_parser("serve", help="run the host against $QUEUE_STORAGE")
    srv.add_argument("--no-http", action="store_true", help="run the triggers only")
    srv.set_defaults(func=cmd_serve)
    clients = sub.add_parser("clients", help="create, list, reset, disable, enable or delete clients")
    from shared.auth.admin import add_client_arguments

    add_client_arguments(clients)
    clients.set_defaults(func=cmd_clients)
    check = sub.add_parser("audit", help="check the invariants over every task (exit 1 on a violation)")
    check.add_argument("--reconcile", action="store_true", help="run one reconciler pass first")
    check.set_defaults(func=cmd_audit)
    back = sub.add_parser(
        "return-checks",
        help="after a rollback to 0.2.0: move the checks of claim-expiry-due and task-deadlines-due back to the "
        "queues it reads",
    )
    back.set_defaults(func=cmd_return_checks)
    args = parser.parse_args(argv)
    if args.command == "run" and (args.max_executions < 1 or args.polling_interval <= 0 or args.idle_exit <= 0):
        parser.error("--max-executions must be at least 1, --polling-interval and --idle-exit more than 0")
    load_local_settings(Path(args.settings))
    try:
        return int(args.func(args))
    except SettingsError as exc:
        print(f"error: {' '.join(exc.message.split())}", file=sys.stderr)  # one line
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
