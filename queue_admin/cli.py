"""`tc-queue-admin` (or `python -m queue_admin`): administer clients and roles of a queue through its Auth API
(`<rootUrl>/api/auth/v1/`), with credentials, as Taskcluster's own tools do: nothing here reads storage or
needs the token secret. Credentials come from the environment the official clients read
(TASKCLUSTER_ROOT_URL, TASKCLUSTER_CLIENT_ID, TASKCLUSTER_ACCESS_TOKEN, and TASKCLUSTER_CERTIFICATE for
temporary credentials).

    tc-queue-admin clients create project/ci --scope assume:project:ci --expires "1 year"
    tc-queue-admin roles create project:ci --scope "queue:create-task:*:ci/*" --description "CI tasks"
    tc-queue-admin scopes expand assume:project:ci
    tc-queue-admin pools create builders --task-queue proj/builder --worker-group azure --image REGISTRY/worker:TAG

Access tokens are printed once, when a client is created or reset. `pools` (queue_admin/pools.py): a worker pool
run as an event-driven Container Apps job, its entry of infra's workerPools parameter and its client.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

import taskcluster
from taskcluster.exceptions import TaskclusterFailure, TaskclusterRestFailure

from queue_admin.pools import PoolError, add_commands, client_id, pool_entry, pool_scopes, secret_name


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tc-queue-admin", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", action="store_true", help="print the API's answers as JSON")
    kinds = parser.add_subparsers(dest="kind", required=True)

    clients = kinds.add_parser("clients", help="list, show, create, update, reset, disable, enable, delete")
    actions = clients.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="every client (with --prefix, those whose id starts so)")
    listing.add_argument("--prefix", default="")
    for name in ("show", "reset", "disable", "enable", "delete"):
        actions.add_parser(
            name,
            help={"show": "a client and its expanded scopes", "reset": "a new access token (printed once)"}.get(
                name, f"{name} a client"
            ),
        ).add_argument("client_id")
    for name in ("create", "update"):
        one = actions.add_parser(
            name, help=f"{name} a client" + (" (its access token is printed once)" if name == "create" else "")
        )
        one.add_argument("client_id")
        one.add_argument(
            "--scope",
            action="append",
            default=[],
            dest="scopes",
            metavar="SCOPE",
            help="a scope it holds (repeat for more)",
        )
        one.add_argument(
            "--expires",
            default="1 year",
            help='when it stops working: "1 year", "30 days", or an ISO 8601 date-time (default: 1 year)',
        )
        one.add_argument("--description", default="")

    roles = kinds.add_parser("roles", help="list, show, create, update, delete")
    actions = roles.add_subparsers(dest="action", required=True)
    actions.add_parser("list", help="every role")
    for name in ("show", "delete"):
        actions.add_parser(name, help=f"{name} a role").add_argument("role_id")
    for name in ("create", "update"):
        one = actions.add_parser(name, help=f"{name} a role")
        one.add_argument("role_id")
        one.add_argument("--scope", action="append", default=[], dest="scopes", metavar="SCOPE")
        one.add_argument("--description", default="")

    scopes = kinds.add_parser("scopes", help="expand scopes through the roles; show your own")
    actions = scopes.add_subparsers(dest="action", required=True)
    actions.add_parser("expand", help="what these scopes expand to").add_argument("scopes", nargs="+")
    actions.add_parser("current", help="the scopes your credentials hold")
    add_commands(kinds)
    return parser


def _expires(text: str) -> str:
    try:
        return str(taskcluster.stringDate(taskcluster.fromNow(text)))
    except Exception:  # not a relative time: taken as a date-time, which the queue checks
        return text


def _call(auth: taskcluster.Auth, args: argparse.Namespace) -> Any:
    kind, action = args.kind, args.action
    if kind == "clients":
        if action == "list":
            return auth.listClients(query={"prefix": args.prefix} if args.prefix else {})
        simple: dict[str, Callable[[str], Any]] = {
            "show": auth.client,
            "reset": auth.resetAccessToken,
            "disable": auth.disableClient,
            "enable": auth.enableClient,
            "delete": auth.deleteClient,
        }
        if action in simple:
            return simple[action](args.client_id)
        body = {"scopes": args.scopes, "expires": _expires(args.expires), "description": args.description}
        return (auth.createClient if action == "create" else auth.updateClient)(args.client_id, body)
    if kind == "roles":
        if action == "list":
            return auth.listRoles()
        if action == "show":
            return auth.role(args.role_id)
        if action == "delete":
            return auth.deleteRole(args.role_id)
        body = {"scopes": args.scopes, "description": args.description}
        return (auth.createRole if action == "create" else auth.updateRole)(args.role_id, body)
    if action == "expand":
        return auth.expandScopes({"scopes": args.scopes})
    return auth.currentScopes()


def _show(answer: Any, args: argparse.Namespace) -> None:
    if args.json:
        print(json.dumps(answer, indent=2))
        return
    if answer is None:
        print(f"{args.action}: done")
        return
    items = answer.get("clients") if isinstance(answer, dict) and "clients" in answer else answer
    if isinstance(items, list):
        for item in items:
            name = item.get("clientId") or item.get("roleId")
            state = " (disabled)" if item.get("disabled") else ""
            print(f"{name}{state}  scopes: {' '.join(item['scopes']) or '(none)'}")
        return
    if set(answer) == {"scopes"}:
        print("\n".join(answer["scopes"]))
        return
    for key, value in answer.items():
        print(f"{key}: {' '.join(value) if isinstance(value, list) else value}")
    if "accessToken" in answer:
        print("The access token is shown this once; `clients reset` gives a new one.")


def _pool(auth: taskcluster.Auth | None, args: argparse.Namespace) -> int:
    """`pools entry` (no call) and `pools create`: the entry on stdout; the token once, or in --token-file."""
    try:
        entry = pool_entry(args)
    except PoolError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if auth is not None:
        body = {
            "scopes": pool_scopes(args.task_queue, args.worker_group, args.scopes),
            "expires": _expires(args.expires),
            "description": f"Workers of the pool {args.name} ({args.task_queue}), a Container Apps job",
        }
        token = auth.createClient(client_id(args.name), body)["accessToken"]
        secret = f"az keyvault secret set --vault-name $AZURE_KEY_VAULT_NAME --name {secret_name(args.name)}"
        if args.token_file:
            args.token_file.touch(mode=0o600, exist_ok=False)
            args.token_file.write_text(token)
            where = f"{client_id(args.name)}: its access token is in {args.token_file}"
            print(f"{where}; {secret} --file {args.token_file}", file=sys.stderr)
        else:
            print(f"{client_id(args.name)}: its access token, shown this once: {token}", file=sys.stderr)
            print(f"Put it in the Key Vault before the entry: {secret} --value <token>", file=sys.stderr)
    print(json.dumps(entry, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.kind == "pools" and args.action == "entry":
        return _pool(None, args)
    options = taskcluster.optionsFromEnvironment()
    if not options.get("rootUrl"):
        print("error: set TASKCLUSTER_ROOT_URL (and TASKCLUSTER_CLIENT_ID / TASKCLUSTER_ACCESS_TOKEN)", file=sys.stderr)
        return 2
    auth = taskcluster.Auth({**options, "maxRetries": 2})
    try:
        if args.kind == "pools":
            return _pool(auth, args)
        _show(_call(auth, args), args)
    except TaskclusterRestFailure as exc:
        print(f"error: {exc.status_code} {str(exc).split(chr(10) + chr(10) + '---')[0]}", file=sys.stderr)
        return 1
    except TaskclusterFailure as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
