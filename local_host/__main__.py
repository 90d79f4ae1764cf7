"""Command line of the local host.

    python -m local_host run      Azurite (embedded, started for you) + the queue on 127.0.0.1:$QUEUE_PORT
    python -m local_host serve    the queue only, against the storage in $QUEUE_STORAGE

Settings come from the environment, then `local.settings.json` (`Values`), as the Functions host reads them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import sys
from pathlib import Path

from local_host import azurite
from local_host.host import PROJECT, serve
from shared import logs
from shared.errors import SettingsError
from shared.settings import load_settings


def load_local_settings(path: Path) -> None:
    """Put `Values` of local.settings.json into the environment; variables already set win."""
    if not path.exists():
        return
    values = json.loads(path.read_text()).get("Values", {})
    for name, value in values.items():
        os.environ.setdefault(name, str(value))


def _root_credentials(data_dir: Path) -> bool:
    """Make sure the root client has an access token; generate one (kept with the data) if none is set.
    True when it was generated now."""
    if os.environ.get("QUEUE_ROOT_ACCESS_TOKEN"):
        return False
    stored = data_dir / "root-credentials.json"
    if stored.exists():
        os.environ["QUEUE_ROOT_ACCESS_TOKEN"] = json.loads(stored.read_text())["accessToken"]
        return False
    token = secrets.token_urlsafe(33)
    data_dir.mkdir(parents=True, exist_ok=True)
    stored.write_text(json.dumps({"accessToken": token}))
    stored.chmod(0o600)
    os.environ["QUEUE_ROOT_ACCESS_TOKEN"] = token
    return True


def _banner(root_url: str, client_id: str, token: str, generated: bool) -> str:
    note = " (generated; kept in the data dir)" if generated else ""
    return "\n".join([
        "",
        f"Taskcluster queue listening on {root_url}",
        f"  rootUrl:      {root_url}",
        f"  clientId:     {client_id}",
        f"  accessToken:  {token}{note}",
        "  for the taskcluster clients:",
        f"    export TASKCLUSTER_ROOT_URL={root_url}",
        f"    export TASKCLUSTER_CLIENT_ID={client_id}",
        f"    export TASKCLUSTER_ACCESS_TOKEN={token}",
        "Press Ctrl-C to stop.",
        "",
    ])


def cmd_run(args: argparse.Namespace) -> int:
    data_dir = Path(os.environ.get("QUEUE_DATA_DIR") or PROJECT / ".data")
    if not data_dir.is_absolute():
        data_dir = PROJECT / data_dir
    generated = _root_credentials(data_dir)
    embedded = None
    if not os.environ.get("QUEUE_STORAGE"):
        embedded = azurite.start(data_dir / "azurite", in_memory=args.in_memory)
        os.environ["QUEUE_STORAGE"] = embedded.connection_string
        print(f"Azurite (pid {embedded.pid}) on 127.0.0.1 ports blob {embedded.blob_port}, queue "
              f"{embedded.queue_port}, table {embedded.table_port}; data in {data_dir / 'azurite'}", flush=True)
    try:
        settings = load_settings()
        logs.configure(settings.log_level)
        announce = _banner(settings.public_root_url, settings.root_client_id, settings.root_access_token,
                           generated)
        asyncio.run(serve(args.app, Path(args.host_json), port=settings.port, announce=announce))
    finally:
        if embedded is not None:
            embedded.stop()
            print(f"Azurite (pid {embedded.pid}) stopped", flush=True)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    settings = load_settings()
    logs.configure(settings.log_level)
    port = None if args.no_http else settings.port
    announce = f"local host ready on {settings.public_root_url}" if port else "local host ready (triggers only)"
    asyncio.run(serve(args.app, Path(args.host_json), port=port, announce=announce))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m local_host", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settings", default=str(PROJECT / "local.settings.json"),
                        help="local.settings.json to read (default: the project's)")
    parser.add_argument("--app", default="function_app:app", help="module:attribute of the function app")
    parser.add_argument("--host-json", default=str(PROJECT / "host.json"))
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="start Azurite and the queue")
    run.add_argument("--in-memory", action="store_true", help="keep Azurite's data in memory only")
    run.set_defaults(func=cmd_run)
    srv = sub.add_parser("serve", help="run the host against $QUEUE_STORAGE")
    srv.add_argument("--no-http", action="store_true", help="run the triggers only")
    srv.set_defaults(func=cmd_serve)
    args = parser.parse_args(argv)
    load_local_settings(Path(args.settings))
    try:
        return int(args.func(args))
    except SettingsError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
