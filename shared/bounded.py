"""A least-recently-used map bounded in entries and in bytes: what every cache, memo and per-key table of a process
is kept in, so that no sequence of requests, however many distinct keys it names, grows a process's memory past
a known figure (docs/security.md lists each bound).

The bytes are an estimate the owner gives (`weigh`): the characters of the strings it keeps, say. An entry that
alone weighs more than the whole bound is not kept at all.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

ENTRY_OVERHEAD = 200  # bytes a kept entry costs besides what it holds (the map's node, the tuple, the key object)


class Bounded(Generic[K, V]):
    """An LRU map of at most `max_entries` entries and `max_bytes` estimated bytes (`weigh(key, value)` each,
    plus ENTRY_OVERHEAD); putting an entry evicts the least recently used ones beyond either bound."""

    def __init__(
        self,
        max_entries: int,
        *,
        max_bytes: int | None = None,
        weigh: Callable[[K, V], int] | None = None,
        on_evict: Callable[[K, V], None] | None = None,
    ) -> None:
        if max_entries < 0:
            raise ValueError("max_entries must be at least 0")
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self._weigh = weigh
        self._on_evict = on_evict
        self._items: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __iter__(self) -> Iterator[K]:
        return iter(list(self._items))

    def get(self, key: K) -> V | None:
        """The value (None when absent), made the most recently used."""
        found = self._items.get(key)
        if found is None:
            return None
        self._items.move_to_end(key)
        return found[0]

    def peek(self, key: K) -> V | None:
        """The value (None when absent), its place unchanged."""
        found = self._items.get(key)
        return None if found is None else found[0]

    def put(self, key: K, value: V) -> None:
        """Keep `value` as the most recently used; evict beyond the bounds (the new entry too, when it alone
        exceeds `max_bytes`)."""
        weight = ENTRY_OVERHEAD + (self._weigh(key, value) if self._weigh is not None else 0)
        self.pop(key)
        if self.max_entries == 0 or (self.max_bytes is not None and weight > self.max_bytes):
            return
        self._items[key] = (value, weight)
        self.bytes += weight
        while len(self._items) > self.max_entries or (self.max_bytes is not None and self.bytes > self.max_bytes):
            self._evict_oldest()

    def pop(self, key: K) -> V | None:
        found = self._items.pop(key, None)
        if found is None:
            return None
        self.bytes -= found[1]
        return found[0]

    def oldest(self) -> K | None:
        return next(iter(self._items), None)

    def items(self) -> list[tuple[K, V]]:
        return [(key, value) for key, (value, _) in self._items.items()]

    def values(self) -> list[V]:
        return [value for value, _ in self._items.values()]

    def clear(self) -> None:
        self._items.clear()
        self.bytes = 0

    def _evict_oldest(self) -> None:
        key, (value, weight) = self._items.popitem(last=False)
        self.bytes -= weight
        if self._on_evict is not None:
            self._on_evict(key, value)


def text_weight(*parts: object) -> int:
    """Bytes of the strings among `parts` (and of strings in tuples, lists and dicts among them), as an estimate:
    a character of ASCII text costs a byte, plus Python's ~50 bytes per string object."""
    total = 0
    stack = list(parts)
    while stack:
        part = stack.pop()
        if isinstance(part, str | bytes):
            total += len(part) + 50
        elif isinstance(part, dict):
            stack.extend(part.keys())
            stack.extend(part.values())
        elif isinstance(part, tuple | list | set | frozenset):
            stack.extend(part)
        else:
            total += 32
    return total
