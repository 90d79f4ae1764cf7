"""SAS without account keys (shared/storage/azure/common.py, shared/storage/azure/queues.py): user delegation keys
renewed before they end (and before a SAS would outlive them), asked once by callers that need one together; polling
URLs signed with them when no key is configured, and with the key when one is (Azurite's queue service issues no
delegation key: tests/acceptance/test_identity.py)."""

from __future__ import annotations

import asyncio
import datetime as dt
import urllib.parse

import pytest
from azure.storage.queue import UserDelegationKey

from shared.connections import StorageConnection
from shared.storage.azure.common import DelegationKeys, SigningKeyMissing
from shared.storage.azure.queues import QueueSigner
from tests.clock import Clock

START = dt.datetime(2026, 11, 25, 12, 0, tzinfo=dt.UTC)

IDENTITY = StorageConnection(
    table_uri="https://acct.table.core.windows.net",
    queue_uri="https://acct.queue.core.windows.net",
    blob_uri="https://acct.blob.core.windows.net",
    client_id="5f3c1b9e-id",
)


def delegation_key(start: dt.datetime, expiry: dt.datetime) -> UserDelegationKey:
    key = UserDelegationKey()
    key.signed_oid, key.signed_tid = "7d3b5e6a-oid", "72f988bf-tid"
    key.signed_start, key.signed_expiry = start.strftime("%Y-%m-%dT%H:%M:%SZ"), expiry.strftime("%Y-%m-%dT%H:%M:%SZ")
    key.signed_service, key.signed_version = "q", "2026-02-06"
    key.value = "c2VjcmV0LWtleS12YWx1ZS1vZi0zMi1ieXRlcy0xMjM0NTY3OA=="
    return key


async def test_keys_are_renewed_a_day_before_they_end_and_asked_once_by_callers_together():
    clock, asked = Clock(START), []

    async def fetch(start, expiry):
        asked.append((start, expiry))
        await asyncio.sleep(0.01)
        return delegation_key(start, expiry)

    keys = DelegationKeys(fetch, clock)

    async def scenario():
        first = await asyncio.gather(*(keys.key(clock.now + dt.timedelta(minutes=30)) for _ in range(10)))
        assert len(asked) == 1 and all(k is first[0] for k in first)
        clock.now += dt.timedelta(days=4, hours=23)  # the key ends in 25 hours: still kept
        assert await keys.key(clock.now + dt.timedelta(minutes=30)) is first[0] and len(asked) == 1
        # A SAS that would outlive the renewal margin gets a new key.
        await keys.key(clock.now + dt.timedelta(hours=2))
        assert len(asked) == 2
        clock.now += dt.timedelta(days=6)
        await keys.key(clock.now)
        assert len(asked) == 3 and asked[-1][1] - asked[-1][0] <= dt.timedelta(days=7)

    (await scenario())


async def test_a_failed_request_is_asked_again_by_the_next_caller():
    calls = []

    async def fetch(start, expiry):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("refused")
        return delegation_key(start, expiry)

    keys = DelegationKeys(fetch)
    with pytest.raises(RuntimeError):
        (await keys.key(dt.datetime.now(dt.UTC)))
    assert (await keys.key(dt.datetime.now(dt.UTC))).signed_oid == "7d3b5e6a-oid"


async def test_polling_urls_without_an_account_key_are_user_delegation_sas(monkeypatch):
    signer = QueueSigner(IDENTITY)
    assert signer.by_identity

    async def ask(start, expiry):
        return delegation_key(start, expiry)

    monkeypatch.setattr(signer, "_ask", ask)
    signer._keys = DelegationKeys(ask)
    expires = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=30)
    url = await signer.process_url("pending-abc-3", expires)
    base, query = url.split("?", 1)
    sas = dict(urllib.parse.parse_qsl(query))
    assert base == "https://acct.queue.core.windows.net/pending-abc-3"
    assert sas["sp"] == "p" and sas["skoid"] == "7d3b5e6a-oid" and sas["sktid"] == "72f988bf-tid"
    assert sas["sks"] == "q" and sas["skv"] == "2026-02-06" and sas["sig"]


async def test_polling_urls_with_an_account_key_are_signed_with_it():
    signer = QueueSigner(
        StorageConnection(
            queue_uri=IDENTITY.queue_uri, table_uri=IDENTITY.table_uri, client_id="x", account_key="a2V5LWtleS1rZXk="
        )
    )
    assert not signer.by_identity
    sas = dict(urllib.parse.parse_qsl((await signer.process_url("q1", dt.datetime.now(dt.UTC))).split("?")[1]))
    assert "skoid" not in sas and sas["sig"]


async def test_a_refused_delegation_key_is_a_clear_error(monkeypatch):
    from azure.core.exceptions import HttpResponseError

    signer = QueueSigner(IDENTITY)

    async def refused(start, expiry):
        raise HttpResponseError(message="Bad Request")

    signer._keys = DelegationKeys(refused)
    with pytest.raises(SigningKeyMissing, match="user delegation key") as caught:
        (await signer.process_url("q1", dt.datetime.now(dt.UTC)))
    assert "QUEUE_STORAGE_ACCOUNT_KEY" in caught.value.message
