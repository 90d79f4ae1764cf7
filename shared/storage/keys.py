"""What a table store is given and gives back by way of keys: PartitionKeys and RowKeys made from any string
within Azure's rules and length, and the continuation tokens of pages (every store's the same form, so that a token
survives a change of store and may be kept in queue messages)."""

from __future__ import annotations

import base64
import binascii
import json

from shared import strict_json
from shared.errors import InvalidRequestArguments


class InvalidContinuation(InvalidRequestArguments):
    """continuationToken `{token}` is not one this queue gave: pass back the `continuationToken` of the previous
    page unchanged"""


MAX_KEY_LENGTH = 1024  # characters of a PartitionKey or RowKey


def encode_continuation(partition_key: str, row_key: str | None) -> str:
    """A page's continuation token: the keys of the next row (as Azure names it), base64url JSON. Every table
    store uses this form, so a token survives a change of store (they are also kept in queue messages)."""
    return base64.urlsafe_b64encode(
        json.dumps({"PartitionKey": partition_key, "RowKey": row_key}, separators=(",", ":")).encode()
    ).decode()


def decode_continuation(token: str) -> tuple[str, str | None]:
    """The next row's keys from a token of `encode_continuation`; InvalidContinuation (400) for anything else,
    since tokens come from clients."""
    try:
        keys = strict_json.loads(base64.urlsafe_b64decode(token.encode("ascii") + b"=" * (-len(token) % 4)))
        partition_key, row_key = keys["PartitionKey"], keys.get("RowKey")
    except (ValueError, TypeError, KeyError, UnicodeError, binascii.Error):
        raise InvalidContinuation(token=token[:100]) from None
    if not all(
        isinstance(k, str) and len(k) <= MAX_KEY_LENGTH and k.isprintable() for k in (partition_key, row_key or "")
    ):
        raise InvalidContinuation(token=token[:100])
    return partition_key, row_key


def chain_token(part: int, inner: str | None) -> str:
    """A continuation over several queries read one after another (accounts, salted partitions): the part it
    continues in, and that part's own token (None: from its start). A store's token is opaque (Azure's next keys
    are encoded), so the part is said, not inferred from it."""
    return base64.urlsafe_b64encode(json.dumps({"Part": part, "Inner": inner}, separators=(",", ":")).encode()).decode()


def read_chain_token(token: str, parts: int) -> tuple[int, str | None]:
    """(part, inner token) of a `chain_token` over `parts` parts; InvalidContinuation (400) for anything else."""
    try:
        value = strict_json.loads(base64.urlsafe_b64decode(token.encode("ascii") + b"=" * (-len(token) % 4)))
        part, inner = value["Part"], value["Inner"]
    except (ValueError, TypeError, KeyError, UnicodeError, binascii.Error):
        raise InvalidContinuation(token=token[:100]) from None
    if not (
        isinstance(part, int)
        and 0 <= part < parts
        and (inner is None or (isinstance(inner, str) and len(inner) <= 4 * MAX_KEY_LENGTH))
    ):
        raise InvalidContinuation(token=token[:100])
    return part, inner


_KEY_UNSAFE = {"/": "%2F", "\\": "%5C", "#": "%23", "?": "%3F", "%": "%25"}
MAX_KEY_UNITS = 512  # a PartitionKey or RowKey: 1 KiB of UTF-16 (Azure's limit; Azurite refuses past 512 units)


class KeyTooLong(InvalidRequestArguments):
    """{what} cannot be stored: it makes a key of {units} UTF-16 units once `/ \\ # ? %` are escaped (three
    characters each), and a key holds at most {limit}"""


def key_units(key: str) -> int:
    """A key's length as Azure counts it: UTF-16 code units."""
    return len(key.encode("utf-16-le")) // 2


def fitting_key(key: str, what: str) -> str:
    """`key`, or KeyTooLong (400) naming `what`: checked where a key is built from what a caller sent, before any
    storage call, so that no name a caller chooses becomes a storage error (a 500 the clients retry)."""
    units = key_units(key)
    if units > MAX_KEY_UNITS:
        raise KeyTooLong(what=what, units=units, limit=MAX_KEY_UNITS)
    return key


def encode_key(value: str) -> str:
    """A PartitionKey/RowKey for any string: Azure forbids `/ \\ # ?` and control characters in keys."""
    return "".join(_KEY_UNSAFE.get(c, c) if c >= " " and c != "\x7f" else f"%{ord(c):02X}" for c in value)


def unhashed_key(name: str) -> str:
    """`encode_key(name)` with a leading `~` encoded too: keys that start with `~` are left to hashes of names too
    long to be keys (artifacts, objects), so that no name can take the key of another."""
    key = encode_key(name)
    return "%7E" + key[1:] if key.startswith("~") else key


def decode_key(key: str) -> str:
    import urllib.parse

    return urllib.parse.unquote(key)
