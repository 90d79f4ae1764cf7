"""The Auth API's delegation endpoints: credentials for other systems, handed to callers whose scopes allow them.

websocktunnelToken is built (a JWT signed with QUEUE_WEBSOCKTUNNEL_SECRET, as Taskcluster's auth signs it). The
others delegate accounts this deployment does not hold (AWS S3, Azure tables and containers of other accounts,
GCP service accounts, Sentry projects, GitHub apps): each checks its scopes as Taskcluster's does, then answers
as Taskcluster's auth answers when nothing is configured for what was asked (404, or no accounts), with the
reason (docs/auth.md#what-the-auth-api-delegates).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import jwt

from shared import errors, timeutil
from shared.api.auth_v1.common import api
from shared.api.routing import Call
from shared.settings import get_settings

WEBSOCKTUNNEL_LIFETIME = dt.timedelta(hours=96)  # Taskcluster's
WEBSOCKTUNNEL_DRIFT = dt.timedelta(minutes=15)  # `nbf` this far back, for clocks behind ours (Taskcluster's)
WHY = " (this deployment delegates none: docs/auth.md#what-the-auth-api-delegates)"
MAX_REPO_PERMS = 10_000  # repository permissions one githubRepoToken request may ask for (each a scope to check)


class NotDelegated(errors.ResourceNotFound):
    """{what}"""


def _level_scopes(kind: str, resource: str) -> dict[str, Any]:
    """Taskcluster's scope expression of a read-only or read-write delegation of `resource`."""
    read_only, read_write = f"auth:{kind}:read-only:{resource}", f"auth:{kind}:read-write:{resource}"
    return {"if": "levelIsReadOnly", "then": {"AnyOf": [read_only, read_write]}, "else": read_write}


def _level(call: Call[Any]) -> bool:
    """Whether `level` asks for read-only access; 400 unless it is `read-only` or `read-write`."""
    level = call.params["level"]
    if level not in ("read-only", "read-write"):
        raise errors.InputError(
            "the 'level' URL parameter must be read-only or read-write; got {levelGiven}", levelGiven=level
        )
    return level == "read-only"


@api.route(
    "GET",
    "/aws/s3/<level>/<bucket>/<prefix>",
    name="awsS3Credentials",
    title="Get Temporary Read/Write Credentials S3",
    scopes=_level_scopes("aws-s3", "<bucket>/<prefix>"),
    query={"format": "^(aws-cli|iam-role-compat)$"},
)
async def aws_s3_credentials(call: Call[Any]) -> None:
    """Taskcluster hands out AWS STS credentials for the buckets it is configured with; this deployment holds no
    AWS account, so every bucket answers 404 once the scopes are checked."""
    await call.authorize(levelIsReadOnly=_level(call))
    raise NotDelegated(what=f"No credentials available for bucket {call.params['bucket']}{WHY}")


@api.route(
    "GET",
    "/azure/accounts",
    name="azureAccounts",
    title="List Accounts Managed by Auth",
    scopes="auth:azure-table:list-accounts",
    output="auth/azure-account-list-response",
)
async def azure_accounts(call: Call[Any]) -> dict[str, Any]:
    """The Azure accounts whose tables and containers the Auth API delegates: none here (the queue's own storage
    is never delegated)."""
    await call.authorize()
    return {"accounts": []}


def _no_account(account: str) -> NotDelegated:
    return NotDelegated(what=f"Account '{account}' not found, can't delegate access{WHY}")


@api.route(
    "GET",
    "/azure/<account>/tables",
    name="azureTables",
    title="List Tables in an Account Managed by Auth",
    scopes="auth:azure-table:list-tables:<account>",
    query={"continuationToken": "^.*$"},
)
async def azure_tables(call: Call[Any]) -> None:
    await call.authorize()
    raise _no_account(call.params["account"])


@api.route(
    "GET",
    "/azure/<account>/table/<table>/<level>",
    name="azureTableSAS",
    title="Get Shared-Access-Signature for Azure Table",
    scopes=_level_scopes("azure-table", "<account>/<table>"),
)
async def azure_table_sas(call: Call[Any]) -> None:
    await call.authorize(levelIsReadOnly=_level(call))
    raise _no_account(call.params["account"])


@api.route(
    "GET",
    "/azure/<account>/containers",
    name="azureContainers",
    title="List containers in an Account Managed by Auth",
    scopes="auth:azure-container:list-containers:<account>",
    query={"continuationToken": "^.*$"},
)
async def azure_containers(call: Call[Any]) -> None:
    await call.authorize()
    raise _no_account(call.params["account"])


@api.route(
    "GET",
    "/azure/<account>/containers/<container>/<level>",
    name="azureContainerSAS",
    title="Get Shared-Access-Signature for Azure Container",
    scopes=_level_scopes("azure-container", "<account>/<container>"),
)
async def azure_container_sas(call: Call[Any]) -> None:
    await call.authorize(levelIsReadOnly=_level(call))
    raise _no_account(call.params["account"])


@api.route(
    "GET",
    "/gcp/credentials/<projectId>/<serviceAccount>",
    name="gcpCredentials",
    title="Get Temporary GCP Credentials",
    scopes="auth:gcp:access-token:<projectId>/<serviceAccount>",
)
async def gcp_credentials(call: Call[Any]) -> None:
    await call.authorize()
    raise NotDelegated(what=f"GCP credentials are not available{WHY}")


@api.route(
    "GET", "/sentry/<project>/dsn", name="sentryDSN", title="Get DSN for Sentry Project", scopes="auth:sentry:<project>"
)
async def sentry_dsn(call: Call[Any]) -> None:
    await call.authorize()
    raise NotDelegated(what=f"Sentry credentials not found{WHY}")


@api.route(
    "POST",
    "/github/<appName>/<owner>/repo-token",
    name="githubRepoToken",
    title="Get a GitHub repository token",
    scopes={
        "AllOf": [{"for": "repoPerm", "in": "repoPerms", "each": "auth:github-repo-token:<appName>/<owner>/<repoPerm>"}]
    },
    input="auth/github-repo-token-request",
)
async def github_repo_token(call: Call[Any]) -> None:
    """Taskcluster mints installation tokens of the GitHub apps it is configured with; none here."""
    repositories = [repo.lower() for repo in call.body["repositories"]]
    wanted = [f"{repo}:{name}:{level}" for name, level in call.body["permissions"].items() for repo in repositories]
    if len(wanted) > MAX_REPO_PERMS:
        raise errors.InputError("At most {limit} repository permissions at once", limit=MAX_REPO_PERMS)
    await call.authorize(owner=call.params["owner"].lower(), repoPerms=wanted)
    raise NotDelegated(what=f"Application with name `{call.params['appName']}` is not configured{WHY}")


@api.route(
    "GET",
    "/websocktunnel/<wstAudience>/<wstClient>",
    name="websocktunnelToken",
    title="Get a client token for the Websocktunnel service",
    scopes="auth:websocktunnel-token:<wstAudience>/<wstClient>",
    output="auth/websocktunnel-token-response",
)
async def websocktunnel_token(call: Call[Any]) -> dict[str, Any]:
    """A token a websocktunnel server with the same secret (QUEUE_WEBSOCKTUNNEL_SECRET) and audience accepts
    from `wstClient` for 96 hours: an HS256 JWT, as Taskcluster's auth signs it. 404 without the secret."""
    await call.authorize()
    secret = get_settings().websocktunnel_secret
    if not secret:
        raise NotDelegated(what="websocktunnel is not configured here: QUEUE_WEBSOCKTUNNEL_SECRET is not set")
    audience, client = call.params["wstAudience"], call.params["wstClient"]
    now = timeutil.now().replace(microsecond=0)
    expires = now + WEBSOCKTUNNEL_LIFETIME
    claims = {
        "tid": client,
        "aud": audience,
        "sub": call.caller.client_id,
        "iat": int(now.timestamp()),
        "exp": int(expires.timestamp()),
        "nbf": int((now - WEBSOCKTUNNEL_DRIFT).timestamp()),
        "iss": "taskcluster-auth",
    }
    token = jwt.encode(claims, secret, algorithm="HS256")
    return {"wstClient": client, "wstAudience": audience, "token": token, "expires": timeutil.iso(expires)}
