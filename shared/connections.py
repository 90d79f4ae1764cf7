"""How the queue reaches a storage account or a Service Bus namespace: a connection string, or an identity.

Locally and in tests a connection string names the account and carries its key. Deployed, the function app has
no secret: it holds a user-assigned managed identity, and each connection is described the way Azure Functions
describes identity-based connections, so that the queue triggers and this code read the same app settings:

    QUEUE_STORAGE__tableServiceUri / __queueServiceUri / __blobServiceUri   (or __accountName for all three)
    QUEUE_STORAGE__credential = managedidentity
    QUEUE_STORAGE__clientId = <client id of the user-assigned identity>

One thing cannot be done with an identity: Azure Queue Storage has no user delegation SAS, so the signed polling
URLs of pollTaskUrls need the account key (`QUEUE_STORAGE_ACCOUNT_KEY`, a Key Vault reference when deployed).
Blob SAS (artifact upload and download URLs) are signed with a user delegation key instead.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Service = Literal["table", "queue", "blob"]
STORAGE_SCOPE = "https://storage.azure.com/.default"


def _lookup(environ: Mapping[str, str], name: str) -> str | None:
    """An app setting by name; Azure matches app setting names without regard to case, so do we."""
    value = environ.get(name)
    if value is None:
        lowered = name.lower()
        value = next((v for k, v in environ.items() if k.lower() == lowered), None)
    return value or None


@dataclass(frozen=True)
class StorageConnection:
    """A storage account: by connection string, or by service URIs and a managed identity."""

    connection_string: str | None = None
    table_uri: str | None = None
    queue_uri: str | None = None
    blob_uri: str | None = None
    client_id: str | None = None  # of a user-assigned identity; None: the system-assigned or developer identity
    account_key: str | None = None  # only to sign queue SAS when connecting by identity

    @classmethod
    def from_environ(
        cls, name: str, environ: Mapping[str, str], *, account_key: str | None = None
    ) -> StorageConnection | None:
        """The connection an app setting prefix describes (`<name>` or `<name>__...`); None if none does."""
        text = _lookup(environ, name) or _lookup(environ, f"{name}__connectionString")
        if text:
            return cls(connection_string=text)
        account = _lookup(environ, f"{name}__accountName")
        uris = {service: _lookup(environ, f"{name}__{service}ServiceUri") for service in ("table", "queue", "blob")}
        if account:
            for service in uris:
                uris[service] = uris[service] or f"https://{account}.{service}.core.windows.net"
        if not any(uris.values()):
            return None
        credential = _lookup(environ, f"{name}__credential")
        if credential and credential.lower() != "managedidentity":
            raise ValueError(f"{name}__credential must be `managedidentity` (got {credential!r})")
        return cls(
            table_uri=uris["table"],
            queue_uri=uris["queue"],
            blob_uri=uris["blob"],
            client_id=_lookup(environ, f"{name}__clientId"),
            account_key=account_key,
        )

    @property
    def uses_identity(self) -> bool:
        return self.connection_string is None

    def endpoint(self, service: Service) -> str:
        uri = {"table": self.table_uri, "queue": self.queue_uri, "blob": self.blob_uri}[service]
        if uri is None:
            raise ValueError(
                f"no {service} service URI configured (set <connection>__{service}ServiceUri or __accountName)"
            )
        return uri.rstrip("/")

    def account_name(self, service: Service) -> str:
        """The account's name, from the endpoint: `https://<account>.<service>...` or, for Azurite and other
        path-style endpoints on an IP address or localhost, `https://host:port/<account>`."""
        from urllib.parse import urlsplit

        parts = urlsplit(self.endpoint(service))
        host = parts.hostname or ""
        if host in ("localhost", "127.0.0.1") or host.replace(".", "").isdigit():
            return parts.path.strip("/").split("/")[0]
        return host.split(".")[0]

    def service_client(self, service_type: Any, service: Service, **kwargs: Any) -> Any:
        """An async SDK service client (TableServiceClient, QueueServiceClient, BlobServiceClient)."""
        if self.connection_string is not None:
            return service_type.from_connection_string(self.connection_string, **kwargs)
        return service_type(self.endpoint(service), credential=async_credential(self.client_id), **kwargs)


@functools.cache
def async_credential(client_id: str | None) -> Any:
    """The process's token credential (one per identity, so tokens are cached and shared): the user-assigned
    managed identity `client_id` where given, else DefaultAzureCredential (system identity, or a developer's
    `az login`)."""
    from azure.identity.aio import DefaultAzureCredential, ManagedIdentityCredential

    if client_id:
        return ManagedIdentityCredential(client_id=client_id)
    return DefaultAzureCredential()
