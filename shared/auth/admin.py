"""The `clients` command: create, list, reset, disable, enable and delete clients. New access tokens are
printed once and never stored (see shared/auth/clients.py)."""

from __future__ import annotations

import argparse
import json

from shared import errors, timeutil
from shared.auth.clients import Client, ClientStore
from shared.settings import Settings
from shared.storage.azure import AzureTables


def add_client_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    create = sub.add_parser("create", help="create a client and print its access token (once)")
    create.add_argument("client_id")
    create.add_argument(
        "--scope",
        action="append",
        default=[],
        dest="scopes",
        metavar="SCOPE",
        help="a scope the client holds (repeat for more)",
    )
    create.add_argument("--expires", help="expiry, an ISO 8601 date-time (default: never)")
    create.add_argument("--description", default="")
    sub.add_parser("list", help="list clients (without tokens)")
    for action, text in [
        ("reset", "give the client a new access token and print it (once)"),
        ("disable", "stop the client from authenticating"),
        ("enable", "undo disable"),
        ("delete", "delete the client"),
    ]:
        sub.add_parser(action, help=text).add_argument("client_id")
    parser.add_argument("--json", action="store_true", help="print JSON")


def _describe(client: Client, *, with_token: bool) -> dict[str, object]:
    out: dict[str, object] = {
        "clientId": client.client_id,
        "scopes": list(client.scopes),
        "expires": timeutil.iso(client.expires) if client.expires else None,
        "disabled": client.disabled,
        "description": client.description,
    }
    if with_token:
        out["accessToken"] = client.access_token
    return out


async def run_clients_command(settings: Settings, args: argparse.Namespace) -> int:
    tables = AzureTables(settings.storage_connection)
    store = ClientStore(
        tables,
        token_secret=settings.token_secret,
        root_client_id=settings.root_client_id,
        root_access_token=settings.root_access_token,
    )
    try:
        if args.action == "list":
            shown = [_describe(c, with_token=False) for c in await store.list()]
            if args.json:
                print(json.dumps(shown, indent=2))
            for c in [] if args.json else shown:
                state = " (disabled)" if c["disabled"] else ""
                print(f"{c['clientId']}{state}  expires {c['expires'] or 'never'}  scopes: {' '.join(c['scopes'])}")  # type: ignore[arg-type]
            return 0
        if args.action == "delete":
            if not await store.delete(args.client_id):
                print(f"no client {args.client_id}")
                return 1
            print(f"deleted {args.client_id}")
            return 0
        if args.action == "create":
            expires = timeutil.parse(args.expires) if args.expires else None
            client = await store.create(args.client_id, args.scopes, expires=expires, description=args.description)
        elif args.action == "reset":
            client = await store.reset(args.client_id)
        else:
            client = await store.set_disabled(args.client_id, args.action == "disable")
        shown_client = _describe(client, with_token=args.action in ("create", "reset"))
        if args.json:
            print(json.dumps(shown_client, indent=2))
        else:
            for key, value in shown_client.items():
                print(f"{key}: {value}")
            if "accessToken" in shown_client:
                print("The access token is shown this once; `reset` gives a new one.")
        return 0
    except errors.QueueError as exc:
        print(f"error: {exc.message}")
        return 1
    finally:
        await tables.close()
