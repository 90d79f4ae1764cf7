"""JSON as Taskcluster defines it, read from and written for clients.

Python's `json` accepts more than JSON: `NaN`, `Infinity`, numbers that overflow to infinity, and lone surrogate
escapes (`"\\ud800"`), none of which can be written back out as UTF-8 JSON. A definition holding one could be
stored, and every later answer that includes it would fail. So input is refused unless it is JSON that can be
rendered again: finite numbers, valid Unicode, nesting at most MAX_DEPTH deep. Rendering, for what was stored
before these rules, never fails: a non-finite number is written `null` and a lone surrogate escaped, as
JavaScript's `JSON.stringify` (Taskcluster's) does.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

MAX_DEPTH = 100  # arrays and objects within each other; real task definitions nest a dozen deep at most
_SURROGATE = re.compile("[\ud800-\udfff]")


class JsonRefused(ValueError):
    """Why a text is not JSON this queue accepts (the message says what and where)."""


class NotJson(JsonRefused):
    """Not JSON at all (syntax, encoding)."""


def _no_constant(name: str) -> Any:
    raise JsonRefused(f"{name} is not a JSON number (numbers must be finite)")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonRefused(f"{text} is not a finite number")
    return value


def loads(raw: bytes | str) -> Any:
    """Parse `raw` (UTF-8 bytes, or text) as strict JSON. NotJson for bad syntax or encoding; JsonRefused for a
    value that is not finite, a string that is not valid Unicode, or nesting deeper than MAX_DEPTH."""
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8")  # strict: invalid UTF-8 and encoded surrogates are refused here
        except UnicodeDecodeError as exc:
            raise NotJson(f"the body is not UTF-8 (byte {exc.start}: {exc.reason})") from None
    else:
        text = raw
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        raise JsonRefused(f"values are nested more than {MAX_DEPTH} deep") from None
    except JsonRefused:
        raise
    except ValueError as exc:
        raise NotJson(str(exc)) from None
    # A surrogate can only come from a `\u` escape (the text itself is valid UTF-8).
    _check(value, surrogates_possible="\\u" in text)
    return value


def _check(value: Any, *, surrogates_possible: bool) -> None:
    stack: list[tuple[Any, int, str]] = [(value, 0, "")]
    while stack:
        node, depth, where = stack.pop()
        if isinstance(node, dict | list):
            if depth >= MAX_DEPTH:
                raise JsonRefused(f"values are nested more than {MAX_DEPTH} deep (at {where or 'the top'})")
            items = node.items() if isinstance(node, dict) else enumerate(node)
            for key, child in items:
                path = f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}"
                if surrogates_possible and isinstance(key, str) and _SURROGATE.search(key):
                    raise JsonRefused(
                        f"a key at {where or 'the top'} holds a lone surrogate (\\ud800-\\udfff): "
                        "strings must be valid Unicode"
                    )
                stack.append((child, depth + 1, path))
        elif surrogates_possible and isinstance(node, str) and _SURROGATE.search(node):
            raise JsonRefused(
                f"{where or 'the value'} holds a lone surrogate (\\ud800-\\udfff): strings must be valid Unicode"
            )


def dumps(value: Any) -> bytes:
    """`value` as compact UTF-8 JSON. Never fails on what `json` can represent: non-finite numbers become
    `null` and lone surrogates are escaped (only data stored before input was checked can hold either)."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")
    except (ValueError, UnicodeEncodeError):
        return json.dumps(_renderable(value), ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode()


def _renderable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _renderable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_renderable(v) for v in value]
    return value
