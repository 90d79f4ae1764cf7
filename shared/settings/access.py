"""Who may do what: the root client, stored clients' token secret, the anonymous scopes, how long a process
trusts what it read of clients and roles, and the keys derived from the root token."""

from __future__ import annotations

import hashlib
import hmac

from pydantic import BaseModel, Field, field_validator

from shared.scopes import parse_scopes

# What the role `anonymous` starts with (every caller assumes it: shared/auth/anonymous.py), by default: read
# tasks, statuses and public artifacts (the reads that were public in the Azure-era Taskcluster).
DEFAULT_ANONYMOUS_SCOPES = (
    "queue:get-task:*",
    "queue:status:*",
    "queue:list-task-group:*",
    "queue:list-dependent-tasks:*",
    "queue:get-artifact:public/*",
    "queue:list-artifacts:*",
    "index:find-task:*",
    "index:list-namespaces:*",
    "index:list-tasks:*",  # the Index's reads, as Taskcluster's
)


class AccessSettings(BaseModel):
    root_client_id: str = Field(default="root", min_length=1, description="Client id of the root client.")
    root_access_token: str = Field(
        min_length=22,
        description="Access token of the root client; it also signs the temporary credentials given to workers.",
    )
    token_secret: str | None = Field(
        default=None,
        min_length=22,
        description="Secret from which the access tokens of stored clients are derived (none are stored).",
    )
    anonymous_scopes: str = Field(
        default=" ".join(DEFAULT_ANONYMOUS_SCOPES),
        description="The scopes the role `anonymous` (which every caller, with credentials or without, assumes) "
        "is created with at the deployment's first start, if absent; read then only, the role is changed with the "
        "Auth API afterwards: a JSON list, or scopes separated by spaces or commas.",
    )
    audit_retention_days: float = Field(
        default=30,
        gt=0,
        description="Days the Auth API keeps its audit history (who changed which client or role), as Taskcluster's "
        "`AUDIT_RETENTION_DAYS`.",
    )
    client_cache_seconds: float = Field(
        default=10,
        ge=0,
        description="Seconds a process trusts a client it read: a reset, disable or delete takes effect within this.",
    )
    certificate_skew: float = Field(
        default=300,
        ge=0,
        description="Seconds of clock skew allowed on "
        "temporary credentials' start and expiry (Taskcluster: 5 minutes).",
    )

    websocktunnel_secret: str | None = Field(
        default=None,
        min_length=22,
        description="Secret the websocktunnel server shares with the Auth API's websocktunnelToken, which signs "
        "its tokens with it (HS256); unset, websocktunnelToken answers 404.",
    )

    @field_validator("anonymous_scopes")
    @classmethod
    def _valid_scopes(cls, value: str) -> str:
        parse_scopes(value)
        return value

    @property
    def anonymous_scope_list(self) -> list[str]:
        return parse_scopes(self.anonymous_scopes)

    @property
    def hint_key(self) -> bytes:
        """The key that signs pending hints (derived from the root access token: nothing more to configure)."""
        return hmac.new(self.root_access_token.encode(), b"pending-hint-signing-key", hashlib.sha256).digest()

    @property
    def upload_key(self) -> bytes:
        """The key that signs the queue's `s3` upload URLs (derived from the root access token, as hint_key)."""
        return hmac.new(self.root_access_token.encode(), b"s3-upload-signing-key", hashlib.sha256).digest()
