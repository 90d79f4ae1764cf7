"""A request body streamed to Blob Storage a block at a time: what the uploads that pass through the queue share
(an `s3` artifact's PUT, shared/operations/s3_uploads.py; an object's PUT from a client that sends chunked bodies,
shared/operations/object_uploads.py).

Each upload stages blocks of its own (ids unique to the request) and its caller commits only them, so two racing
uploads of one blob leave one of them whole. A process streams at most `QUEUE_ARTIFACT_UPLOAD_SLOTS` uploads at
once, each holding up to two blocks (one staged while the next is read); the others wait with their bodies unread
(the server stops reading a connection whose body is not consumed). One holder (a worker, all its runs together;
an object not an artifact's) takes at most a quarter of the slots (HOLDER_SHARE), so that one worker's uploads,
trickled or not, cannot keep every other worker's waiting; an upload still being read when its URL expires is cut
(`deadline`). Waiting is bounded too, since a waiting body is not read (so no pace bound sees it): a holder may
have at most LINE_PER_HOLDER uploads waiting beyond its share, each for at most timing.UPLOAD_WAIT; past either it
is answered 503 with `Retry-After` at once, holding nothing.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import datetime as dt
import hashlib
import hmac
import secrets
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass

from shared import errors, timeutil, timing
from shared.storage.base import BlobStore

BLOCK_BYTES = 4 * 1024 * 1024
HOLDER_SHARE = 0.25  # of the slots, one holder's uploads may take at once (at least one)
LINE_PER_HOLDER = 4  # a holder's uploads waiting for its share or a slot, beyond those it holds


class UploadsBusy(errors.ServiceUnavailable):
    """`{name}`: {why}; nothing was read. Retry shortly"""


class UploadTooLarge(errors.InputTooLarge):
    """`{name}`: the upload is {size} bytes; at most {limit} bytes are taken here ({why})"""


class UploadLengthInvalid(errors.InputError):
    """`{name}`: the upload's Content-Length `{value}` is not a number of bytes"""


class UploadDigestMismatch(errors.InputError):
    """`{name}`: the upload's Content-MD5 is {given}, but the data received has MD5 {received} (S3's BadDigest);
    nothing was stored"""


class UploadPastItsUrl(errors.InsufficientScopes):
    """`{name}`: the upload URL expired at {expired} while its body was still coming; nothing was stored. Ask for
    a fresh URL and upload again"""


class UploadTruncated(errors.InputError):
    """`{name}`: the upload declared Content-Length {declared} but sent {received} bytes; nothing was stored"""


@dataclass(frozen=True)
class Limit:
    """The most bytes an upload may hold, and why (named in the refusal)."""

    size: int
    why: str


@dataclass(frozen=True)
class Staged:
    """A body staged as uncommitted blocks: their ids in order, its size and MD5."""

    block_ids: list[str]
    size: int
    md5: bytes

    @property
    def etag(self) -> str:
        return f'"{self.md5.hex()}"'


class BlockStaging:
    def __init__(
        self,
        blobs: Callable[[], BlobStore],
        container: str,
        slots: int,
        clock: Callable[[], dt.datetime] = timeutil.now,
    ) -> None:
        self._blobs, self.container, self.clock = blobs, container, clock
        self.wait_seconds = timing.UPLOAD_WAIT
        self._slots = asyncio.Semaphore(slots)
        self.per_holder = max(1, int(slots * HOLDER_SHARE))
        # holder -> its uploads staging or waiting; an entry lives while one does (bounded by the connections)
        self._holders: dict[str, asyncio.Semaphore] = {}
        self._waiting: dict[str, int] = {}

    @staticmethod
    def declared_length(name: str, headers: Mapping[str, str], limit: Limit) -> int | None:
        """The body's Content-Length (None: chunked, bounded while it is read); over the limit, refused at once."""
        value = headers.get("content-length")
        if value is None:
            return None
        if not value.isdigit():
            raise UploadLengthInvalid(name=name, value=value[:200])
        if int(value) > limit.size:
            raise UploadTooLarge(name=name, size=value, limit=limit.size, why=limit.why)
        return int(value)

    async def stage(
        self,
        name: str,
        blob: str,
        body: AsyncIterator[bytes],
        limit: Limit,
        headers: Mapping[str, str],
        *,
        holder: str,
        deadline: dt.datetime,
    ) -> Staged:
        """Stage the body as blocks of `blob`, once a slot is free and `holder` has fewer than its share; checked
        against its declared length and Content-MD5, and cut at `deadline` (its URL's expiry). Nothing is
        committed: the caller commits `block_ids` (or leaves them to be discarded)."""
        declared = self.declared_length(name, headers, limit)
        async with self._turn(name, holder):
            staged = await self._stage(name, blob, _until(body, name, deadline, self.clock), limit)
        if declared is not None and staged.size != declared:
            raise UploadTruncated(name=name, declared=declared, received=staged.size)
        _check_md5(name, headers.get("content-md5"), staged.md5)
        return staged

    @contextlib.asynccontextmanager
    async def _turn(self, name: str, holder: str) -> AsyncIterator[None]:
        """The holder's share and a slot, waited for at most `wait_seconds`, behind at most LINE_PER_HOLDER others
        of the holder's; UploadsBusy (503) otherwise."""
        present = self._waiting.get(holder, 0)  # its uploads staging or waiting
        if present >= self.per_holder + LINE_PER_HOLDER:
            raise UploadsBusy(
                name=name, why=f"{present} uploads of the same worker are under way or waiting", retry_after=5
            )
        share = self._holders.setdefault(holder, asyncio.Semaphore(self.per_holder))
        self._waiting[holder] = present + 1
        held: list[asyncio.Semaphore] = []
        try:
            try:
                async with asyncio.timeout(self.wait_seconds):
                    for semaphore in (share, self._slots):
                        await semaphore.acquire()
                        held.append(semaphore)
            except TimeoutError:
                raise UploadsBusy(name=name, why="no upload slot came free in time", retry_after=5) from None
            yield
        finally:
            for semaphore in reversed(held):
                semaphore.release()
            self._waiting[holder] -= 1
            if not self._waiting[holder]:
                del self._waiting[holder], self._holders[holder]

    async def _stage(self, name: str, blob: str, body: AsyncIterator[bytes], limit: Limit) -> Staged:
        prefix = secrets.token_hex(8)
        block_ids: list[str] = []
        md5, size, buffer = hashlib.md5(usedforsecurity=False), 0, bytearray()
        staging: asyncio.Task[None] | None = None

        async def flush() -> None:
            nonlocal staging, buffer
            if staging is not None:
                await staging
            block_ids.append(f"{prefix}-{len(block_ids):06d}")
            staging = asyncio.create_task(self._blobs().stage_block(self.container, blob, block_ids[-1], bytes(buffer)))
            buffer = bytearray()

        try:
            async for chunk in body:
                size += len(chunk)
                if size > limit.size:
                    raise UploadTooLarge(name=name, size=f"more than {limit.size}", limit=limit.size, why=limit.why)
                md5.update(chunk)
                buffer += chunk
                if len(buffer) >= BLOCK_BYTES:
                    await flush()
            if buffer:
                await flush()
            if staging is not None:
                await staging
        except BaseException:
            if staging is not None and not staging.done():
                staging.cancel()
            raise
        return Staged(block_ids, size, md5.digest())


async def _until(
    body: AsyncIterator[bytes], name: str, deadline: dt.datetime, clock: Callable[[], dt.datetime]
) -> AsyncIterator[bytes]:
    """The body's chunks, until `deadline`: a chunk read after it ends the upload (UploadPastItsUrl)."""
    async for chunk in body:
        if clock() > deadline:
            raise UploadPastItsUrl(name=name, expired=timeutil.iso(deadline))
        yield chunk


def url_refusal(expected: str, given: str, expires: int, now: dt.datetime) -> str | None:
    """Why a signed upload URL does not allow its upload (its signature, then its expiry), or None."""
    if not hmac.compare_digest(expected, given):
        return "its signature does not match"
    if expires < now.timestamp():
        return f"it expired at {timeutil.iso(dt.datetime.fromtimestamp(expires, dt.UTC))}"
    return None


def _check_md5(name: str, given: str | None, md5: bytes) -> None:
    if given is None:
        return
    try:
        matches = base64.b64decode(given, validate=True) == md5
    except binascii.Error:
        matches = False
    if not matches:
        raise UploadDigestMismatch(name=name, given=given[:60], received=base64.b64encode(md5).decode())
