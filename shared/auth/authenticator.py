"""Who made a request, as Taskcluster's auth service decides it (`signaturevalidator.js`), in process: the
credentials a Hawk header or bewit names are loaded (a client, or temporary credentials checked against their
issuer), narrowed by `authorizedScopes`, and given what every caller holds (`assume:anonymous`, the anonymous
role: shared/auth/anonymous.py), roles expanded; the MAC is then checked with them (shared/auth/hawk.py). The
queue's own routes and authenticateHawk, which Taskcluster's other services call for every request they receive,
both ask `check`, so both answer alike, in Taskcluster's words.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hmac
import secrets
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from mohawk.util import calculate_payload_hash

from shared import credentials, strict_json, timeutil
from shared.auth.clients import Client
from shared.auth.expansion import ExpansionTooLarge
from shared.auth.hawk import Attempt, AuthFailure, Key, check_bewit, check_header, has_bewit, refuse
from shared.auth.roles import RoleStore
from shared.scopes import ScopeSet, problems_of

MAX_CERTIFICATE_LIFETIME_MS = 31 * 24 * 3600 * 1000
ANONYMOUS_LIFETIME = dt.timedelta(minutes=15)  # how long authenticateHawk says an anonymous answer holds
NEVER = dt.datetime(3000, 1, 1, tzinfo=dt.UTC)  # the expiry of a client that never expires (Taskcluster's)
SCOPES_SHOWN = 100  # scopes a refusal of authorizedScopes lists of the credentials' own


class ClientLookup(Protocol):
    async def get(self, client_id: str) -> Client | None: ...


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


@dataclass(frozen=True)
class Authenticated:
    """authenticateHawk's answer: the caller, the scheme (`hawk` for a header or a bewit, `none` without
    credentials) and the payload hash the header carried, which the service that asked then checks."""

    caller: Caller
    scheme: str
    hash: str | None = None


@dataclass(frozen=True)
class Request:
    """The parts of an HTTP request that the queue's own authentication looks at."""

    method: str
    url: str  # scheme://host:port/path?query, as the client addressed it
    authorization: str | None
    content: bytes
    content_type: str


def _truthy(value: Any) -> bool:
    """JavaScript's truth, which decides whether Taskcluster looks at an ext field ([] and {} are true)."""
    return value not in (None, False, 0, "") if not isinstance(value, list | dict) else True


def _parse_ext(text: str) -> dict[str, Any]:
    """ext as Taskcluster reads it: base64 (either alphabet, padding optional, as Node decodes it) of JSON."""
    cleaned = text.replace("-", "+").replace("_", "/")
    try:
        ext = strict_json.loads(base64.b64decode(cleaned + "=" * (-len(cleaned) % 4)))
    except (ValueError, binascii.Error):  # strict_json's refusals are ValueErrors
        raise refuse("Failed to parse ext") from None
    return ext if isinstance(ext, dict) else {}


def _js_number(value: int | float) -> int | float:
    """A number as JavaScript writes it into a string: 1.5e12, not 1500000000000.0."""
    return int(value) if float(value).is_integer() else value


def _valid_scopes(value: Any, what: str) -> list[str]:
    if not isinstance(value, list):
        raise refuse(f"{what} must be an array")
    if problems_of(value, what):
        raise refuse(f"{what} must be an array of valid scopes")
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass
class _Loaded:
    """Credentials being loaded: the key a MAC is checked with, the scopes (not yet with `assume:anonymous`) and
    their expiry; and `refusal`, what is wrong with them, told only once the MAC proved the caller holds the key."""

    key: str
    scopes: tuple[str, ...]
    expires: dt.datetime
    refusal: AuthFailure | None = None


ClientsT = TypeVar("ClientsT", bound=ClientLookup)


class Authenticator(Generic[ClientsT]):
    """Authentication over a store of clients (the Clients table's, or testAuthenticate's made-up one)."""

    def __init__(
        self,
        clients: ClientsT,
        anonymous_scopes: Sequence[str],
        *,
        certificate_skew_seconds: float = 300,
        roles: RoleStore | None = None,
    ) -> None:
        self.clients = clients
        self.roles = roles
        self.anonymous_scopes = tuple(anonymous_scopes)
        self.certificate_skew_ms = certificate_skew_seconds * 1000

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
            raise refuse(f"the scopes of {whose} cannot be used: {exc.message}") from None

    async def _with_anonymous(self, scopes: Sequence[str], whose: str) -> ScopeSet:
        return await self._held(tuple(dict.fromkeys((*scopes, *self.anonymous_scopes))), whose)

    # --- what authenticateHawk answers ---------------------------------------------------------------------

    async def check(self, attempt: Attempt) -> Authenticated:
        """Authenticate a request as a service saw it; AuthFailure (Taskcluster's message) if it cannot be."""
        now = timeutil.now()
        found: dict[str, _Loaded | str] = {}

        async def load(client_id: str, ext: str | None) -> Key:
            loaded = await self._load(client_id, ext, now)
            found.update(loaded=loaded, client_id=client_id)
            return Key(client_id, loaded.key)

        if attempt.authorization:
            attributes = await check_header(attempt, now.timestamp(), load)
            scheme, payload_hash = "hawk", attributes.get("hash")
        elif has_bewit(attempt.resource):
            await check_bewit(attempt, now.timestamp(), load)
            scheme, payload_hash = "hawk", None
        else:
            held = await self._held(self.anonymous_scopes, "anonymous callers")
            return Authenticated(Caller(None, held, now + ANONYMOUS_LIFETIME), "none")
        loaded, client_id = found["loaded"], found["client_id"]
        assert isinstance(loaded, _Loaded) and isinstance(client_id, str)
        if loaded.refusal is not None:  # the MAC was right: the caller holds the key, and may know what is wrong
            raise loaded.refusal
        held = await self._with_anonymous(loaded.scopes, f"`{client_id}`")
        return Authenticated(Caller(client_id, held, loaded.expires), scheme, payload_hash)

    @staticmethod
    def _usable(client: Client, client_id: str, now: dt.datetime) -> None:
        if client.disabled:
            raise refuse(f"Client with clientId '{client_id}' is disabled")
        if client.expires is not None and client.expires < now:
            raise refuse(f"Client with clientId: '{client_id}' has expired")

    async def _load(self, credential_name: str, ext_text: str | None, now: dt.datetime) -> _Loaded:
        """Taskcluster's `loadCredentials`: the issuing client, then what ext's certificate and authorizedScopes
        make of it. What the caller sent is checked for its form at once; what its checks would say about a
        client (whether it exists, is usable, holds a scope) is told only after the MAC (`_Loaded.refusal`), so
        that nobody without the key learns anything of a client: an unknown one is checked against a key nobody
        holds, and is a bad MAC like any wrong key."""
        ext = _parse_ext(ext_text) if ext_text else {}
        certificate = _certificate_of(ext)
        issuer_id = _issuer_of(credential_name, certificate)
        cert_scopes = _certificate_fields(certificate) if _truthy(certificate) else None
        authorized = _authorized_of(ext)
        client = await self.clients.get(issuer_id)
        if client is None:
            return _Loaded(secrets.token_urlsafe(32), (), now, refuse("Unauthorized: Bad mac"))
        loaded = _Loaded(client.access_token, client.scopes, client.expires or NEVER)
        mac_key = (
            loaded.key if cert_scopes is None else credentials.derive_access_token(loaded.key, certificate["seed"])
        )
        try:
            self._usable(client, issuer_id, now)
            if cert_scopes is not None:
                issuer_held = await self._held(client.scopes, f"issuer `{issuer_id}`")
                loaded = self._certified(credential_name, issuer_id, issuer_held, loaded, certificate, now)
            if authorized is not None:
                loaded = await self._authorized(loaded, authorized, credential_name)
        except AuthFailure as refusal:
            return _Loaded(mac_key, (), now, refusal)
        return loaded

    def _certified(
        self, name: str, issuer_id: str, issuer_held: ScopeSet, issuer: _Loaded, cert: Any, now: dt.datetime
    ) -> _Loaded:
        """Temporary credentials: the certificate checked in the order and words of Taskcluster's auth."""
        scopes = _certificate_fields(cert)
        now_ms = now.timestamp() * 1000
        if cert["start"] > now_ms + self.certificate_skew_ms:
            raise refuse("ext.certificate.start > now")
        if cert["expiry"] < now_ms - self.certificate_skew_ms:
            raise refuse("ext.certificate.expiry < now")
        if cert["expiry"] - cert["start"] > MAX_CERTIFICATE_LIFETIME_MS:
            raise refuse("ext.certificate cannot last longer than 31 days!")
        if issuer_id != name:
            create = f"auth:create-client:{name}"
            if not issuer_held.satisfies_scope(create):
                raise refuse(f"ext.certificate issuer `{issuer_id}` doesn't have `{create}` for supplied clientId.")
        elif "clientId" in cert:
            raise refuse("ext.certificate.clientId must only be used with ext.certificate.issuer")
        if not issuer_held.satisfies_all(scopes):
            raise refuse(
                f"ext.certificate issuer `{issuer_id}` doesn't satisfy all certificate scopes "
                f"{', '.join(scopes)}.  The temporary credentials were not generated correctly."
            )
        named = _truthy(cert.get("issuer"))
        expected = credentials.signature(
            issuer.key,
            client_id=name if named else None,
            issuer=issuer_id if named else None,
            seed=cert["seed"],
            start=_js_number(cert["start"]),
            expiry=_js_number(cert["expiry"]),
            scopes=scopes,
        )
        given = cert.get("signature")
        if not isinstance(given, str) or not hmac.compare_digest(given.encode(), expected.encode()):
            suffix = ", or wrong clientId provided" if named else ""
            raise refuse(f"ext.certificate.signature is not valid{suffix}")
        expires = min(issuer.expires, dt.datetime.fromtimestamp(cert["expiry"] / 1000, dt.UTC))
        return _Loaded(credentials.derive_access_token(issuer.key, cert["seed"]), tuple(scopes), expires)

    async def _authorized(self, loaded: _Loaded, wanted: list[str], name: str) -> _Loaded:
        """`authorizedScopes` narrow what the credentials (with the anonymous scopes) hold, never widen it."""
        held = await self._with_anonymous(loaded.scopes, f"`{name}`")
        if not held.satisfies_all(wanted):
            shown = list(held.scopes[:SCOPES_SHOWN]) + (["..."] if len(held.scopes) > SCOPES_SHOWN else [])
            raise refuse(
                "\n".join(
                    [
                        "Supplied credentials do not satisfy authorizedScopes; credentials have scopes:",
                        "",
                        "```",
                        *shown,
                        "```",
                        "",
                        "authorizedScopes are:",
                        "",
                        "```",
                        *wanted[:SCOPES_SHOWN],
                        "```",
                    ]
                )
            )
        return _Loaded(loaded.key, tuple(wanted), loaded.expires)

    # --- the queue's own requests ---------------------------------------------------------------------------

    async def authenticate(self, request: Request) -> Caller:
        """The caller of one of the queue's own requests: `check`, then the payload hash the header carries
        against the body (as Taskcluster's API library does after authenticateHawk)."""
        attempt = _attempt_of(request)
        if attempt.authorization and has_bewit(attempt.resource):
            raise refuse(
                "Cannot use two authentication schemes at once this request has both bewit in querystring and "
                "'authorization' header"
            )
        if not attempt.authorization and not has_bewit(attempt.resource):
            return Caller(None, await self._held(self.anonymous_scopes, "anonymous callers"))
        found = await self.check(attempt)
        if found.hash is not None:
            computed = calculate_payload_hash(request.content, "sha256", request.content_type)
            computed = computed.decode() if isinstance(computed, bytes) else computed
            if not hmac.compare_digest(computed.encode(), found.hash.encode("latin-1", "replace")):
                raise refuse(
                    f"Invalid payload hash: {found.hash}\nComputed payload hash: {computed}\n"
                    "This happens when your request carries a signed hash of the payload and the hash doesn't "
                    "match the hash we've computed on the server-side."
                )
        return found.caller


def _certificate_of(ext: dict[str, Any]) -> Any:
    certificate = ext.get("certificate")
    if isinstance(certificate, str):  # some clients send the certificate as JSON text
        try:
            return strict_json.loads(certificate)
        except ValueError:
            raise refuse("ext.certificate must be a JSON object") from None
    return certificate


def _issuer_of(credential_name: str, certificate: Any) -> str:
    """Who issued the credentials: the certificate's named issuer, else the clientId the request names."""
    if not (isinstance(certificate, dict) and _truthy(certificate.get("issuer"))):
        return credential_name
    issuer_id = certificate["issuer"]
    if not isinstance(issuer_id, str):
        raise refuse("ext.certificate.issuer must be a string")
    if issuer_id == credential_name:
        raise refuse("ext.certificate.issuer must differ from the supplied clientId")
    return issuer_id


def _authorized_of(ext: dict[str, Any]) -> list[str] | None:
    """ext's `authorizedScopes`, checked for form; None when there are none (Taskcluster's truth)."""
    if not _truthy(ext.get("authorizedScopes")):
        return None
    return _valid_scopes(ext["authorizedScopes"], "ext.authorizedScopes")


def _certificate_fields(cert: Any) -> list[str]:
    """The certificate's scopes, once its fields have the types Taskcluster requires."""
    if not isinstance(cert, dict):
        raise refuse("ext.certificate must be a JSON object")
    if cert.get("version") != 1:
        raise refuse("ext.certificate.version must be 1")
    if not isinstance(cert.get("seed"), str):
        raise refuse("ext.certificate.seed must be a string")
    if len(cert["seed"]) != 44:
        raise refuse("ext.certificate.seed must be 44 characters")
    if not _is_number(cert.get("start")):
        raise refuse("ext.certificate.start must be a number")
    if not _is_number(cert.get("expiry")):
        raise refuse("ext.certificate.expiry must be a number")
    return _valid_scopes(cert.get("scopes"), "ext.certificate.scopes")


def _attempt_of(request: Request) -> Attempt:
    parts = urllib.parse.urlsplit(request.url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:  # a Host header with a port that is no port
        raise refuse("Bad Request: Invalid Host header") from None
    resource = parts.path + (f"?{parts.query}" if parts.query else "")
    return Attempt(request.method, resource, parts.hostname or "", port, request.authorization)


__all__ = ["Attempt", "AuthFailure", "Authenticated", "Authenticator", "Caller", "Request"]
