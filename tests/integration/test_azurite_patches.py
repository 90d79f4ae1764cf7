"""The Azurite that `make setup` installs carries local_host/azurite-patches (applied by patch-package), and the
queue patches keep Azurite's behaviour: a message past its time to live is removed, the others stay, and a
receive answers its own queue's messages only."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import pytest

from local_host import azurite as azurite_mod
from shared.storage.rest import RestQueues

QUEUE_STORE = Path("dist/src/queue/persistence/LokiQueueMetadataStore.js")


def test_the_installed_azurite_is_patched() -> None:
    if os.environ.get("QUEUE_AZURITE_BIN_DIR"):
        pytest.skip("an Azurite of one's own (QUEUE_AZURITE_BIN_DIR) is not the one `make setup` patches")
    main = Path(azurite_mod.find_binary("azurite-queue")).resolve()  # .../azurite/dist/src/queue/main.js
    package = main.parents[3]
    source = (package / QUEUE_STORE).read_text()
    unpatched = "Azurite's queue service is not patched: run `make setup` (local_host/azurite-patches/README.md)"
    assert "if (docs.length > 0) {\n            coll.remove(docs);" in source, unpatched
    assert "accountName: account,\n            queueName: queue," not in source, unpatched  # queue first


def test_expired_messages_are_still_removed(azurite: azurite_mod.Azurite) -> None:
    async def go() -> None:
        queues = RestQueues(azurite.connection_string)
        name, other = f"ttl-{uuid.uuid4().hex[:10]}", f"other-{uuid.uuid4().hex[:10]}"
        try:
            await queues.ensure_queues([name, other])
            await queues.put(other, b'{"n": "other"}', ttl=1)
            await queues.put(name, b'{"n": "short"}', ttl=1)
            await queues.put(name, b'{"n": "long"}', ttl=3600)
            # Before it expires, the short-lived one is there: the guard removes nothing that has not expired.
            assert sorted(m.json()["n"] for m in await queues.receive(name, 32, 1)) == ["long", "short"]
            await asyncio.sleep(2.2)  # visible again (1 s) and past its time to live (1 s)
            assert [m.json()["n"] for m in await queues.receive(name, 32, 30)] == ["long"]
            assert await queues.receive(other, 32, 30) == []  # expired in its own queue too
        finally:
            await queues.close()

    asyncio.run(go())
