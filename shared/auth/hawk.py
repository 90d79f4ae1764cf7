"""The Hawk protocol as Taskcluster's auth service runs it (the `hawk` library, 9.x): the Authorization header and
bewits parsed, their MACs and timestamps checked, each refusal in that library's words.

Taskcluster's other services (hooks, secrets, worker-manager) relay authenticateHawk's message to their own
callers, so a refusal here reads exactly as Taskcluster's does ("Unauthorized: Bad mac", ...). Loading the
credentials a MAC is checked with is the authenticator's part (shared/auth/authenticator.py).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import math
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from mohawk.util import calculate_mac

from shared import errors

HAWK_SKEW_SECONDS = 15 * 60  # Taskcluster's allowed clock skew (signaturevalidator.js: `timestampSkewSec`)
MAX_MATCH_LENGTH = 4096  # the hawk library's `limits.maxMatchLength`: longer headers and bewit URLs are refused
HEADER_KEYS = frozenset({"id", "ts", "nonce", "hash", "ext", "mac", "app", "dlg"})

_SCHEME = re.compile(r"^(\w+)(?:\s+(.*))?$", re.ASCII)
_ATTRIBUTE = re.compile(r"(\w+)=\"([^\"\\]*)\"\s*(?:,\s*|$)", re.ASCII)
_VALUE = re.compile(r"^[ \w!#$%&'()*+,\-./:;<=>?@\[\]^`{|}~]+$", re.ASCII)
# The hawk library's bewit regex: the resource, the character before `bewit=`, the bewit, and what follows it.
BEWIT = re.compile(r"^(/.*)([?&])bewit=([^&$]*)(?:&(.+))?$")


class AuthFailure(errors.AuthenticationFailed):
    """{reason}"""


def refuse(reason: str) -> AuthFailure:
    return AuthFailure(reason=reason)


@dataclass(frozen=True)
class Attempt:
    """A request as the service that received it saw it, what authenticateHawk is asked about: the method, the
    resource (path and query, as sent), the Host header's name and the port, the Authorization header."""

    method: str
    resource: str
    host: str
    port: int
    authorization: str | None = None


@dataclass(frozen=True)
class Key:
    """What a MAC is checked with: the access token (or a temporary credential's derived token)."""

    client_id: str
    token: str


@dataclass(frozen=True)
class _MacInput:
    """The fields of Hawk's normalized string, under the names mohawk's `calculate_mac` reads."""

    credentials: dict[str, str]
    timestamp: str
    nonce: str
    method: str
    name: str
    host: str
    port: str
    ext: str | None = None
    app: str | None = None
    dlg: str | None = None


def parse_header(authorization: str) -> dict[str, str]:
    """The attributes of a Hawk Authorization header, checked as the hawk library checks them."""
    if len(authorization) > MAX_MATCH_LENGTH:
        raise refuse("Bad Request: Header length too long")
    parts = _SCHEME.match(authorization)
    if not parts:
        raise refuse("Bad Request: Invalid header syntax")
    if parts.group(1).lower() != "hawk":
        raise refuse("Unauthorized")
    text = parts.group(2)
    if not text:
        raise refuse("Bad Request: Invalid header syntax")
    attributes: dict[str, str] = {}
    problem = None

    def take(match: re.Match[str]) -> str:
        nonlocal problem
        key, value = match.group(1), match.group(2)
        if key not in HEADER_KEYS:
            problem = f"Unknown attribute: {key}"  # the last problem is told, as the hawk library does
        elif not _VALUE.match(value):
            problem = f"Bad attribute value: {key}"
        elif key in attributes:
            problem = f"Duplicate attribute: {key}"
        else:
            attributes[key] = value
        return ""

    if _ATTRIBUTE.sub(take, text) != "" or problem:
        raise refuse(f"Bad Request: {problem or 'Bad header format'}")
    if not all(attributes.get(k) for k in ("id", "ts", "nonce", "mac")):
        raise refuse("Bad Request: Missing attributes")
    return attributes


def _equal(ours: bytes, theirs: str) -> bool:
    return hmac.compare_digest(ours, theirs.encode("latin-1", "replace"))


def _mac(kind: str, key: Key, attempt: Attempt, resource: str, fields: dict[str, str]) -> bytes:
    given = _MacInput(
        credentials={"id": key.client_id, "key": key.token, "algorithm": "sha256"},
        timestamp=fields["ts"],
        nonce=fields.get("nonce", ""),
        method=attempt.method.upper(),
        name=resource,
        host=attempt.host,
        port=str(attempt.port),
        ext=fields.get("ext"),
        app=fields.get("app"),
        dlg=fields.get("dlg"),
    )
    mac: bytes = calculate_mac(kind, given, fields.get("hash"))
    return mac


def _stale(ts: str, now: float) -> bool:
    try:
        return math.fabs(float(ts) - now) > HAWK_SKEW_SECONDS
    except ValueError:
        return True


LoadKey = Callable[[str, str | None], Awaitable[Key]]


async def check_header(attempt: Attempt, now: float, load: LoadKey) -> dict[str, str]:
    """The header's attributes if its MAC is right and its timestamp fresh; `load(id, ext)` gives the key (and
    refuses unusable credentials first, as the hawk library asks for credentials before it checks the MAC)."""
    attributes = parse_header(attempt.authorization or "")
    key = await load(attributes["id"], attributes.get("ext"))
    if not _equal(_mac("header", key, attempt, attempt.resource, attributes), attributes["mac"]):
        raise refuse("Unauthorized: Bad mac")
    if _stale(attributes["ts"], now):
        raise refuse("Unauthorized: Stale timestamp")
    return attributes


@dataclass(frozen=True)
class Bewit:
    client_id: str
    expires: str
    mac: str
    ext: str
    resource: str  # the resource without the bewit, as it was signed


def parse_bewit(attempt: Attempt) -> Bewit:
    """The bewit of a signed URL, checked as the hawk library checks it."""
    if len(attempt.resource) > MAX_MATCH_LENGTH:
        raise refuse("Bad Request: Resource path exceeds max length")
    found = BEWIT.match(attempt.resource)
    if not found:
        raise refuse("Unauthorized")
    if not found.group(3):
        raise refuse("Unauthorized: Empty bewit")
    if attempt.method.upper() not in ("GET", "HEAD"):
        raise refuse("Unauthorized: Invalid method")
    if attempt.authorization:
        raise refuse("Bad Request: Multiple authentications")
    encoded = found.group(3)
    try:
        if not re.fullmatch(r"[\w-]*", encoded, re.ASCII):
            raise ValueError(encoded)
        text = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode("latin-1")
    except (ValueError, binascii.Error):
        raise refuse("Bad Request: Invalid bewit encoding") from None
    parts = text.split("\\")
    if len(parts) != 4:
        raise refuse("Bad Request: Invalid bewit structure")
    if not (parts[0] and parts[1] and parts[2]):
        raise refuse("Bad Request: Missing bewit attributes")
    resource = found.group(1) + (found.group(2) + found.group(4) if found.group(4) else "")
    return Bewit(parts[0], parts[1], parts[2], parts[3], resource)


async def check_bewit(attempt: Attempt, now: float, load: LoadKey) -> Bewit:
    """The bewit if its MAC is right and it has not expired."""
    bewit = parse_bewit(attempt)
    key = await load(bewit.client_id, bewit.ext or None)
    fields = {"ts": bewit.expires, "nonce": "", "ext": bewit.ext}
    signed = Attempt("GET", bewit.resource, attempt.host, attempt.port)  # a bewit signs GET, also for HEAD
    if not _equal(_mac("bewit", key, signed, bewit.resource, fields), bewit.mac):
        raise refuse("Unauthorized: Bad mac")
    try:
        expired = int(bewit.expires) <= now
    except ValueError:
        expired = True
    if expired:
        raise refuse("Unauthorized: Access expired")
    return bewit


def has_bewit(resource: str) -> bool:
    """Whether authenticateHawk takes the request as signed by a bewit (Taskcluster's test: a `bewit=` in the
    query of a path)."""
    return re.match(r"^/.*[?&]bewit=", resource) is not None
