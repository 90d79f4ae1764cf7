"""Whether settings are fit to serve the queue, beyond what each field checks by itself: no setting still holding
an unresolved Key Vault reference, no placeholder or reused secret, a usable rootUrl. Unfit settings fail closed:
nothing is served, no trigger runs (docs/deploy.md).
"""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Mapping

from zxcvbn import zxcvbn

from shared.errors import SettingsError
from shared.settings import ENV_PREFIX, Settings

# What App Service hands an app in place of a setting whose reference it could not resolve (on a first start, while
# a just-granted role propagates; a vault or secret renamed): the reference itself, literally.
UNRESOLVED_REFERENCE = re.compile(r"\s*[\"']?\s*@Microsoft\.(KeyVault|AppConfiguration)\s*\(", re.IGNORECASE)
# A value a template or a person left for a secret: ${VAR}, $(VAR), <...>, {{...}}, __VAR__, "changeme" and kin,
# alone or repeated (`changeme-changeme-changeme` passes a length check), quoted or not.
_PLACEHOLDER_WORD = (
    r"(?:\$\{[^}]*\}|\$\([^)]*\)|<[^<>]*>|\{\{[^}]*\}\}|__[A-Za-z0-9_]+__|change[-_ ]?me|placeholder"
    r"|replace[-_ ]?me|fix[-_ ]?me|todo|dummy|secret|password|x{3,})"
)
PLACEHOLDER = re.compile(
    rf"\s*[\"']?\s*{_PLACEHOLDER_WORD}(?:[\s\-_.:,;/|+]+{_PLACEHOLDER_WORD})*\s*[\"']?\s*", re.IGNORECASE
)
# A secret's guessability, as zxcvbn (Dropbox's estimator) scores it: at least ENTROPY_FLOOR of log10(guesses) per
# character. Generated secrets (urlsafe base64, hex, UUIDs) score 0.87 to 1.0; repeated or sequential characters
# (24 `a`s, the alphabet) and phrases (`your-secret-goes-here-please`, 0.74) score less. Long values are scored
# on their first SCORED characters (zxcvbn refuses longer input: its time grows with the length).
ENTROPY_FLOOR = 0.8
SCORED = 72  # zxcvbn's own limit
SECRETS = ("root_access_token", "token_secret", "storage_account_key", "websocktunnel_secret")
# Settings read beside QUEUE_*: the Functions host's storage, and telemetry's.
WATCHED_SETTINGS = ("AzureWebJobsStorage", "APPLICATIONINSIGHTS_CONNECTION_STRING")


def unresolved_settings(environ: Mapping[str, str]) -> list[str]:
    """The app settings the queue reads that still hold an unresolved Key Vault (or App Configuration) reference."""
    return sorted(
        name
        for name, value in environ.items()
        if (name.upper().startswith(ENV_PREFIX) or name.split("__")[0] in WATCHED_SETTINGS)
        and UNRESOLVED_REFERENCE.match(value)
    )


def serving_problems(settings: Settings, environ: Mapping[str, str] | None = None) -> list[str]:
    """What makes settings unfit to serve the queue, beyond what each field checks by itself: a setting that still
    holds an unresolved Key Vault reference, a secret that is a placeholder, missing or reused, an unusable or
    missing rootUrl. Empty when none. Such settings fail closed: nothing is served, no trigger runs."""
    problems = [
        f"{name} holds an unresolved Key Vault reference, not its secret: App Service could not read it "
        "(the app's identity needs `Key Vault Secrets User` on the vault, granted minutes before; or the "
        "vault or secret name is wrong). It is retried on restart"
        for name in unresolved_settings(os.environ if environ is None else environ)
    ]
    for field in SECRETS:
        value = getattr(settings, field)
        if value is not None and (
            UNRESOLVED_REFERENCE.match(value) or PLACEHOLDER.fullmatch(value) or guessable(value)
        ):
            name = f"{ENV_PREFIX}{field.upper()}"
            if not any(p.startswith(name + " ") for p in problems):
                problems.append(
                    f"{name} holds a placeholder or a guessable value, not a secret (make one: "
                    "python -c 'import secrets; print(secrets.token_urlsafe(33))')"
                )
    if not settings.token_secret:
        problems.append("QUEUE_TOKEN_SECRET is required: the access tokens of stored clients are derived from it")
    elif settings.token_secret == settings.root_access_token:
        problems.append("QUEUE_TOKEN_SECRET must differ from QUEUE_ROOT_ACCESS_TOKEN")
    if settings.root_url is not None and not re.fullmatch(r"https?://[^/?#\s]+(/[^?#\s]*)?", settings.root_url):
        problems.append(f"QUEUE_ROOT_URL must be an http(s) URL without query or fragment, not {settings.root_url!r}")
    if settings.root_url is None and settings.storage_connection.uses_identity:
        problems.append(
            "QUEUE_ROOT_URL is required when storage is reached by identity (a deployment): the API answers name it"
        )
    if settings.clock_offset and not local_storage(settings):
        problems.append("QUEUE_CLOCK_OFFSET is for tests only (local storage): a deployment keeps the machine's clock")
    try:
        settings.storage_connections(environ)
    except ValueError as exc:
        problems.append(str(exc))
    return problems


def local_storage(settings: Settings) -> bool:
    """Whether the data account is this machine's (memory, or an Azurite whose every endpoint is on the loopback),
    not a deployment's."""
    text = settings.storage_connection.connection_string or ""
    parts = dict(item.split("=", 1) for item in text.split(";") if "=" in item)
    if text == "memory" or parts.get("UseDevelopmentStorage", "").lower() == "true":
        return True
    endpoints = [value for key, value in parts.items() if key.endswith("Endpoint")]
    return bool(endpoints) and all(
        urllib.parse.urlsplit(value).hostname in ("127.0.0.1", "localhost") for value in endpoints
    )


def guessable(secret: str) -> bool:
    """Whether a secret has less than ENTROPY_FLOOR of zxcvbn's log10(guesses) per character."""
    scored = secret[:SCORED]
    return bool(zxcvbn(scored)["guesses_log10"] < ENTROPY_FLOOR * len(scored))


def check_serving(settings: Settings) -> Settings:
    """`settings`, if fit to serve the queue (`serving_problems`); SettingsError naming every problem if not."""
    problems = serving_problems(settings)
    if problems:
        raise SettingsError(problems="; ".join(problems))
    return settings
