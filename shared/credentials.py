"""Taskcluster temporary credentials: the certificate, its signature and the derived access token.

The format is Taskcluster's (`createTemporaryCredentials` in the clients, `signaturevalidator.js` in auth), so
every Taskcluster client and worker accepts what we issue and the auth layer can verify it.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import json
import secrets
from collections.abc import Sequence

MAX_LIFETIME = dt.timedelta(days=31)


def _hmac(key: str, message: str) -> bytes:
    return hmac.new(key.encode(), message.encode(), hashlib.sha256).digest()


def url_signature(key: bytes, *parts: str | int) -> str:
    """What signs a URL the queue hands out for one thing until a time (its parts, one a line): unpadded base64url
    of an HMAC-SHA256."""
    message = "\n".join(str(part) for part in parts).encode()
    return base64.urlsafe_b64encode(hmac.new(key, message, hashlib.sha256).digest()).decode().rstrip("=")


def derive_access_token(issuer_access_token: str, seed: str) -> str:
    return base64.urlsafe_b64encode(_hmac(issuer_access_token, seed)).decode().rstrip("=")


def signature(
    issuer_access_token: str,
    *,
    client_id: str | None,
    issuer: str | None,
    seed: str,
    start: int | float,
    expiry: int | float,
    scopes: Sequence[str],
) -> str:
    lines = ["version:1"]
    if client_id is not None:
        lines += [f"clientId:{client_id}", f"issuer:{issuer}"]
    lines += [f"seed:{seed}", f"start:{start}", f"expiry:{expiry}", "scopes:", *scopes]
    return base64.b64encode(_hmac(issuer_access_token, "\n".join(lines))).decode()


def new_seed() -> str:
    """44 URL-safe characters, like Taskcluster's two concatenated slugids."""
    return secrets.token_urlsafe(33)


def issue(
    *,
    issuer: str,
    issuer_access_token: str,
    client_id: str,
    scopes: Sequence[str],
    start: dt.datetime,
    expiry: dt.datetime,
) -> dict[str, str]:
    """Named temporary credentials `{clientId, accessToken, certificate}` (certificate as a JSON string)."""
    if expiry - start > MAX_LIFETIME:
        raise ValueError("temporary credentials may last at most 31 days")
    seed = new_seed()
    start_ms, expiry_ms = round(start.timestamp() * 1000), round(expiry.timestamp() * 1000)
    cert = {
        "version": 1,
        "scopes": list(scopes),
        "start": start_ms,
        "expiry": expiry_ms,
        "seed": seed,
        "signature": signature(
            issuer_access_token,
            client_id=client_id,
            issuer=issuer,
            seed=seed,
            start=start_ms,
            expiry=expiry_ms,
            scopes=scopes,
        ),
        "issuer": issuer,
    }
    return {
        "clientId": client_id,
        "accessToken": derive_access_token(issuer_access_token, seed),
        "certificate": json.dumps(cert, separators=(",", ":")),
    }
