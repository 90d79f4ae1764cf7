"""Nothing about a client is told before the MAC is checked (shared/auth/authenticator.py, issue #83 N4): without
the key, whether the client exists, is disabled or expired, holds a scope a certificate names, or satisfies
`authorizedScopes`, every refusal reads `Unauthorized: Bad mac`; with the key, the refusals read as Taskcluster's.

Held over credentials drawn by Hypothesis: permanent or temporary (named or not, issued by a client holding the
scopes or not, expired, badly signed), with authorizedScopes the client holds or not, for a client that exists,
is disabled, has expired, or does not exist."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
from typing import Any

import mohawk
import taskcluster
from hypothesis import given, settings
from hypothesis import strategies as st

from shared import timeutil
from shared.auth.anonymous import EVERY_CALLER
from shared.auth.authenticator import Attempt, Authenticator
from shared.auth.clients import ClientStore
from shared.auth.hawk import AuthFailure
from shared.storage.memory import MemoryTables

URL = "https://queue.test/api/queue/v1/provisioners"


def header(client_id: str, key: str, ext: dict[str, Any] | None) -> str:
    text = base64.b64encode(json.dumps(ext).encode()).decode() if ext else None
    sender = mohawk.Sender(
        {"id": client_id, "key": key, "algorithm": "sha256"}, URL, "GET", content=b"", content_type="", ext=text
    )
    return str(sender.request_header)


async def outcome(auth: Authenticator[ClientStore], authorization: str) -> str:
    try:
        await auth.check(Attempt("GET", "/api/queue/v1/provisioners", "queue.test", 443, authorization))
    except AuthFailure as refused:
        return refused.message
    return "ok"


@settings(max_examples=150, deadline=None)
@given(
    state=st.sampled_from(["fine", "disabled", "expired", "absent"]),
    kind=st.sampled_from(["permanent", "temporary", "named", "expired-certificate", "forged-certificate"]),
    certificate_scope=st.sampled_from(["queue:status:*", "secrets:get:other"]),  # held, or not
    authorized=st.sampled_from([None, ["queue:status:a"], ["secrets:get:other"]]),
    right_key=st.booleans(),
)
def test_without_the_key_every_refusal_is_a_bad_mac(state, kind, certificate_scope, authorized, right_key):
    async def go() -> None:
        tables = MemoryTables()
        clients = ClientStore(
            tables, token_secret="s" * 30, root_client_id="root", root_access_token="r" * 30, cache_seconds=0
        )
        auth = Authenticator(clients, EVERY_CALLER)
        expires = timeutil.now() - dt.timedelta(minutes=1) if state == "expired" else None
        client = await clients.create("project/issuer", ["queue:status:*", "auth:create-client:named/*"])
        if expires is not None:
            client = await clients.update("project/issuer", scopes=list(client.scopes), description="", expires=expires)
        if state == "disabled":
            await clients.set_disabled("project/issuer", True)
        client_id, key, ext = "project/issuer", client.access_token, {}
        if state == "absent":
            await clients.delete("project/issuer")
        if kind != "permanent":
            start = taskcluster.fromNow("-2 hours" if kind == "expired-certificate" else "-1 minute")
            end = taskcluster.fromNow("-1 hour" if kind == "expired-certificate" else "1 hour")
            name = "named/temp" if kind == "named" else None
            temp = taskcluster.createTemporaryCredentials(
                "project/issuer", client.access_token, start, end, [certificate_scope], name=name
            )
            certificate = json.loads(temp["certificate"])
            if kind == "forged-certificate":
                certificate["signature"] = base64.b64encode(b"f" * 32).decode()
            client_id, key, ext = temp["clientId"], temp["accessToken"], {"certificate": certificate}
        if authorized is not None:
            ext["authorizedScopes"] = authorized
        said = await outcome(auth, header(client_id, key if right_key else "w" * 44, ext or None))
        if not right_key or state == "absent":
            assert said == "Unauthorized: Bad mac", (state, kind, said)
            return
        troubled = (
            state != "fine"
            or kind in ("expired-certificate", "forged-certificate")
            or (kind != "permanent" and certificate_scope == "secrets:get:other")
            or (authorized == ["secrets:get:other"])
            or (authorized is not None and kind != "permanent" and certificate_scope not in ("queue:status:*",))
        )
        assert (said == "ok") != troubled, (state, kind, certificate_scope, authorized, said)
        assert said == "ok" or said != "Unauthorized: Bad mac"  # the holder of the key is told what is wrong

    asyncio.run(go())
