"""Times as Taskcluster writes them: UTC, millisecond precision, `Z` (JavaScript's `Date.toJSON()`)."""

from __future__ import annotations

import base64
import datetime as dt
import math
import uuid

UTC = dt.UTC
_offset = dt.timedelta(0)


def now() -> dt.datetime:
    """This process's clock: the machine's, plus the offset tests and the fault campaign set (`set_offset`)."""
    return dt.datetime.now(UTC) + _offset


def set_offset(seconds: float) -> None:
    """Run this process's clock `seconds` ahead of the machine's (behind when negative): QUEUE_CLOCK_OFFSET, so
    that claims, deadlines, leases and parked checks are judged by clocks that disagree (bench.soak --skew)."""
    global _offset
    _offset = dt.timedelta(seconds=seconds)


def to_ms(value: dt.datetime) -> dt.datetime:
    """`value` cut to whole milliseconds: the precision times are written with (`iso`), so that a time kept in
    memory equals the same time read back."""
    return value.replace(microsecond=value.microsecond - value.microsecond % 1000)


def parse(value: str) -> dt.datetime:
    """Parse an RFC 3339 date-time (already checked by the schema) into an aware UTC datetime. ValueError (or
    OverflowError, for an offset that takes it past year 1 or 9999) when it is not one."""
    if len(value) == 24 and value[23] == "Z" and value[10] == "T":  # as `iso` writes them: the common case
        return dt.datetime.fromisoformat(value)  # Python 3.11 reads `Z` as UTC
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    parsed = dt.datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def ceil_seconds(delta: dt.timedelta) -> int:
    """Whole seconds, rounded up, never negative (queue visibility is in whole seconds)."""
    return max(0, math.ceil(delta.total_seconds()))


def iso(value: dt.datetime) -> str:
    """`2026-11-22T12:00:00.000Z`: sortable as text, and what the official clients produce."""
    if value.tzinfo is not UTC:
        value = value.astimezone(UTC)
    # Field by field (the year as four digits: strftime's %Y writes year 999 as `999`, which no longer sorts or
    # parses as a date); about three times faster than strftime, and called for every time written.
    return (
        f"{value.year:04d}-{value.month:02d}-{value.day:02d}T{value.hour:02d}:{value.minute:02d}:"
        f"{value.second:02d}.{value.microsecond // 1000:03d}Z"
    )


def normalize(value: str) -> str:
    return iso(parse(value))


def js_seconds(value: dt.datetime) -> str:
    """`Date.getTime() / 1000` as JavaScript prints it: no `.0` for whole seconds."""
    millis = round(value.timestamp() * 1000)
    whole, frac = divmod(millis, 1000)
    return str(whole) if frac == 0 else f"{whole}.{frac:03d}".rstrip("0")


def slugid() -> str:
    """A v4 slugid as Taskcluster's `slugid.nice()` makes it (first bit clear: it never starts with `-`)."""
    raw = bytearray(uuid.uuid4().bytes)
    raw[0] &= 0x7F
    return base64.urlsafe_b64encode(bytes(raw)).decode()[:22]
