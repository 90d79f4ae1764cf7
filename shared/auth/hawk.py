"""Authentication as Taskcluster does it: Hawk (header or bewit), temporary credentials, authorizedScopes.

What Taskcluster's auth service does in `signaturevalidator.js`, done in process: the request's MAC is checked
with the client's access token (or, for temporary credentials, the token derived from the issuer's token and the
certificate's seed); the certificate is checked field by field; `authorizedScopes` may only narrow. The result
is the caller's client id, scopes and expiry. Every caller, authenticated or not, also holds the anonymous
scopes (settings).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hmac
import logging
import pprint
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import mohawk
import mohawk.base
import mohawk.exc
import mohawk.util
from mohawk.base import Resource
from mohawk.util import calculate_mac, parse_authorization_header

from shared import credentials, errors, strict_json, timeutil
from shared.auth.clients import Client, ClientStore
from shared.auth.expansion import ExpansionTooLarge
from shared.auth.roles import RoleStore
from shared.scopes import ScopeSet, problems_of

_mohawk_log = logging.getLogger("mohawk")


class _DebugOnlyPprint:
    """mohawk formats its debug messages before it logs them (`pprint.pformat` of every parsed header, URL and
    payload hash: about 3 % of the host's CPU under load), also when its debug log is off. Its modules get this
    `pprint` instead, which formats only when that log is on."""

    @staticmethod
    def pformat(value: object, *args: Any, **kwargs: Any) -> str:
        return pprint.pformat(value, *args, **kwargs) if _mohawk_log.isEnabledFor(logging.DEBUG) else "(not logged)"


mohawk.util.pprint = mohawk.base.pprint = _DebugOnlyPprint

HAWK_SKEW_SECONDS = 15 * 60
MAX_CERTIFICATE_LIFETIME_MS = 31 * 24 * 3600 * 1000
MAX_ID_SHOWN = 100  # characters of a clientId an error message repeats


@dataclass(frozen=True)
class Caller:
    """Who made a request, as far as scopes go: its scopes, expanded and normalized."""

    client_id: str | None  # None: anonymous
    held: ScopeSet
    expires: dt.datetime | None = None

    @property
    def scopes(self) -> tuple[str, ...]:
        return self.held.scopes

    def satisfies(self, expr: Any) -> bool:
        return self.held.satisfies(expr)


class AuthFailure(errors.AuthenticationFailed):
    """Authentication failed: {reason}"""


@dataclass(frozen=True)
class Request:
    """The parts of an HTTP request that authentication looks at."""

    method: str
    url: str  # scheme://host:port/path?query, as the client addressed it
    authorization: str | None
    content: bytes
    content_type: str


def _decode_ext(ext: str | None) -> dict[str, Any]:
    if not ext:
        return {}
    try:
        padded = ext.replace("-", "+").replace("_", "/")
        decoded = strict_json.loads(base64.b64decode(padded + "=" * (-len(padded) % 4)))
    except (ValueError, binascii.Error) as exc:  # strict_json's refusals are ValueErrors
        raise AuthFailure(reason=f"ext is not base64 JSON: {exc}") from None
    if not isinstance(decoded, dict):
        raise AuthFailure(reason="ext must be a JSON object")
    return decoded


def _check_scopes_list(value: Any, what: str) -> list[str]:
    if not isinstance(value, list):
        raise AuthFailure(reason=f"{what} must be a list of scope strings")
    problems = problems_of(value, what)
    if problems:
        raise AuthFailure(reason="; ".join(problems))
    return value


def _shown(client_id: str) -> str:
    return client_id if len(client_id) <= MAX_ID_SHOWN else client_id[:MAX_ID_SHOWN] + "..."


class Authenticator:
    def __init__(
        self,
        clients: ClientStore,
        anonymous_scopes: Sequence[str],
        *,
        certificate_skew_seconds: float = 300,
        roles: RoleStore | None = None,
    ) -> None:
        self.clients = clients
        self.roles = roles
        self.anonymous_scopes = tuple(anonymous_scopes)
        self.certificate_skew = dt.timedelta(seconds=certificate_skew_seconds)

    def anonymous(self) -> Caller:
        return Caller(None, ScopeSet(self.anonymous_scopes))

    async def expand(self, scopes: Sequence[str]) -> ScopeSet:
        """The scopes with what the roles they assume give (shared/auth/roles.py), normalized; as they are
        without roles. ExpansionTooLarge (400) beyond the bounds of an expansion."""
        if self.roles is None:
            return ScopeSet(scopes)
        return await self.roles.expand(tuple(scopes))

    async def _held(self, scopes: Sequence[str], whose: str) -> ScopeSet:
        """`expand` for authentication: an expansion past its bounds refuses the credentials (401)."""
        try:
            return await self.expand(scopes)
        except ExpansionTooLarge as exc:
            raise AuthFailure(reason=f"the scopes of {whose} cannot be used: {exc.message}") from None

    async def authenticate(self, request: Request) -> Caller:
        if request.authorization:
            if not request.authorization.startswith("Hawk "):
                raise AuthFailure(reason="only Hawk authorization is supported")
            return await self._hawk_header(request)
        bewit = _bewit_of(request.url)
        if bewit is not None:
            return await self._bewit(request, bewit)
        return Caller(None, await self._held(self.anonymous_scopes, "anonymous callers"))

    async def _client(self, client_id: str, now: dt.datetime) -> Client:
        client = await self.clients.get(client_id)
        if client is None:
            raise AuthFailure(reason=f"unknown clientId `{_shown(client_id)}`")
        problem = client.usable(now)
        if problem:
            raise AuthFailure(reason=problem)
        return client

    async def _key_and_scopes(
        self, client_id: str, ext: Mapping[str, Any], now: dt.datetime
    ) -> tuple[str, tuple[str, ...], dt.datetime | None]:
        """The MAC key, scopes and expiry of the credentials named by `client_id` and `ext`."""
        certificate = ext.get("certificate")
        if certificate is None:
            client = await self._client(client_id, now)
            return client.access_token, client.scopes, client.expires  # expanded once, in _caller
        if isinstance(certificate, str):
            try:
                certificate = strict_json.loads(certificate)
            except ValueError:
                raise AuthFailure(reason="certificate is not JSON") from None
        if not isinstance(certificate, dict):
            raise AuthFailure(reason="certificate must be a JSON object")
        return await self._temporary(client_id, certificate, now)

    async def _temporary(
        self, client_id: str, cert: dict[str, Any], now: dt.datetime
    ) -> tuple[str, tuple[str, ...], dt.datetime | None]:
        """Check a temporary-credentials certificate in the order Taskcluster's auth service does."""
        if cert.get("version") != 1:
            raise AuthFailure(reason="certificate version must be 1")
        seed = cert.get("seed")
        if not isinstance(seed, str) or len(seed) != 44:
            raise AuthFailure(reason="certificate seed must be a 44-character string")
        start, expiry = cert.get("start"), cert.get("expiry")
        if not isinstance(start, int | float) or not isinstance(expiry, int | float):
            raise AuthFailure(reason="certificate start and expiry must be numbers")
        scopes = _check_scopes_list(cert.get("scopes"), "certificate scopes")
        now_ms = now.timestamp() * 1000
        skew_ms = self.certificate_skew.total_seconds() * 1000
        if start > now_ms + skew_ms:
            raise AuthFailure(reason="certificate is not valid yet (start is in the future)")
        if expiry < now_ms - skew_ms:
            raise AuthFailure(reason="certificate has expired")
        if expiry - start > MAX_CERTIFICATE_LIFETIME_MS:
            raise AuthFailure(reason="certificate may last at most 31 days")
        issuer_id = cert.get("issuer")
        if issuer_id is not None:
            # Named temporary credentials: the header's id is the new clientId, the issuer signed it.
            if not isinstance(issuer_id, str) or issuer_id == client_id:
                raise AuthFailure(reason="certificate issuer must be another client")
            named: str | None = client_id
        else:
            issuer_id, named = client_id, None
        issuer = await self._client(issuer_id, now)
        issuer_scopes = await self._held(issuer.scopes, f"issuer `{_shown(issuer_id)}`")
        if named is not None and not issuer_scopes.satisfies_scope(f"auth:create-client:{named}"):
            raise AuthFailure(reason=f"issuer `{_shown(issuer_id)}` may not create client `{_shown(named)}`")
        if not issuer_scopes.satisfies_all(scopes):
            raise AuthFailure(reason=f"issuer `{_shown(issuer_id)}` does not have every scope of the certificate")
        expected = credentials.signature(
            issuer.access_token,
            client_id=named,
            issuer=issuer_id if named else None,
            seed=seed,
            start=int(start),
            expiry=int(expiry),
            scopes=scopes,
        )
        if not hmac.compare_digest(expected, str(cert.get("signature", ""))):
            raise AuthFailure(reason="certificate signature is invalid")
        cert_expiry = dt.datetime.fromtimestamp(expiry / 1000, dt.UTC)
        expires = min(cert_expiry, issuer.expires) if issuer.expires else cert_expiry
        return credentials.derive_access_token(issuer.access_token, seed), tuple(scopes), expires

    async def _caller(
        self, client_id: str, scopes: tuple[str, ...], expires: dt.datetime | None, ext: Mapping[str, Any]
    ) -> Caller:
        """Every client also holds the anonymous scopes, as in Taskcluster; `authorizedScopes`, which that
        set must satisfy, then replaces it: narrowing, never widening. Roles are expanded in both."""
        held = await self._held(tuple(dict.fromkeys(scopes + self.anonymous_scopes)), f"`{_shown(client_id)}`")
        if "authorizedScopes" not in ext:
            return Caller(client_id, held, expires)
        authorized = _check_scopes_list(ext["authorizedScopes"], "authorizedScopes")
        if not held.satisfies_all(authorized):
            raise AuthFailure(reason="authorizedScopes must be satisfied by the credentials' own scopes")
        return Caller(client_id, await self._held(tuple(authorized), "authorizedScopes"), expires)

    async def _hawk_header(self, request: Request) -> Caller:
        now = timeutil.now()
        try:
            parsed = parse_authorization_header(request.authorization)
        except (mohawk.exc.HawkFail, ValueError) as exc:
            raise AuthFailure(reason=f"malformed Hawk header: {exc}") from None
        client_id = parsed.get("id", "")
        ext = _decode_ext(parsed.get("ext"))
        key, scopes, expires = await self._key_and_scopes(client_id, ext, now)
        try:
            mohawk.Receiver(
                lambda _id: {"id": client_id, "key": key, "algorithm": "sha256"},
                request.authorization,
                request.url,
                request.method,
                content=request.content,
                content_type=request.content_type,
                accept_untrusted_content=True,  # the payload hash is checked when the client sends one
                timestamp_skew_in_seconds=HAWK_SKEW_SECONDS,
            )
        except mohawk.exc.HawkFail as exc:
            raise AuthFailure(reason=_hawk_failure(exc)) from None
        except (ValueError, TypeError, UnicodeError):  # an unusable Host header or URL, a non-numeric ts...
            raise AuthFailure(
                reason="the request cannot be checked: its Host header, URL or Hawk fields are malformed"
            ) from None
        return await self._caller(client_id, scopes, expires, ext)

    async def _bewit(self, request: Request, bewit: str) -> Caller:
        if request.method not in ("GET", "HEAD"):
            raise AuthFailure(reason="a bewit (signed URL) is only valid for GET requests")
        now = timeutil.now()
        try:
            raw = base64.urlsafe_b64decode(bewit + "=" * (-len(bewit) % 4)).decode("ascii")
        except (ValueError, binascii.Error):
            raise AuthFailure(reason="malformed bewit") from None
        parts = raw.split("\\")
        if len(parts) != 4 or not parts[1].isdigit():
            raise AuthFailure(reason="malformed bewit")
        client_id, expiration, mac, ext_text = parts
        if int(expiration) < now.timestamp():
            raise AuthFailure(reason="the signed URL has expired")
        ext = _decode_ext(ext_text)
        key, scopes, expires = await self._key_and_scopes(client_id, ext, now)
        resource = Resource(
            url=_strip_bewit(request.url),
            method="GET",
            credentials={"id": client_id, "key": key, "algorithm": "sha256"},
            timestamp=expiration,
            nonce="",
            ext=ext_text or None,
        )
        expected = calculate_mac("bewit", resource, None)
        if not hmac.compare_digest(expected.decode("ascii") if isinstance(expected, bytes) else expected, mac):
            raise AuthFailure(reason="bewit MAC mismatch")
        return await self._caller(client_id, scopes, expires, ext)


def _hawk_failure(exc: mohawk.exc.HawkFail) -> str:
    """Why Hawk refused, in words that reveal nothing secret (mohawk's own MacMismatch message includes the
    MAC the server expected, which would let the sender replay the request with it)."""
    if isinstance(exc, mohawk.exc.MacMismatch):
        return "the request's MAC does not match: wrong accessToken, or the request was altered in transit"
    if isinstance(exc, mohawk.exc.MisComputedContentHash):
        return "the payload hash does not match the request body"
    if isinstance(exc, mohawk.exc.TokenExpired):
        return "the request's timestamp is more than 15 minutes away from the server's clock"
    return f"invalid Hawk authorization ({type(exc).__name__})"


def _bewit_of(url: str) -> str | None:
    query = urllib.parse.urlsplit(url).query
    for name, value in urllib.parse.parse_qsl(query, keep_blank_values=True):
        if name == "bewit":
            return value
    return None


def _strip_bewit(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    kept = "&".join(p for p in parts.query.split("&") if p and not p.startswith("bewit="))
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, kept, parts.fragment))
