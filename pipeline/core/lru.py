"""A map that keeps at most `max_entries` values, the least recently used dropped first.

`get` and `put` mark a key as used, `in` does not. Not thread-safe by itself; it counts nothing.

>>> lru = Lru[int](max_entries=2)
>>> lru.put("a", 1); lru.put("b", 2); lru.get("a"); lru.put("c", 3)  # "b" was used least recently
1
>>> sorted(lru.keys()), "b" in lru, len(lru)
(['a', 'c'], False, 2)
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import KeysView
from typing import Generic, TypeVar

V = TypeVar("V")


class Lru(Generic[V]):
    """See the module doc (`max_entries` 0: nothing is kept)."""

    def __init__(self, max_entries: int) -> None:
        if max_entries < 0:
            raise ValueError(f"max_entries must be at least 0 (0: keeps nothing), got {max_entries}")
        self.max_entries = max_entries
        self._values: OrderedDict[str, V] = OrderedDict()

    def get(self, key: str) -> V | None:
        """The value under `key` (now the most recently used), or None."""
        found = self._values.get(key)
        if found is not None:
            self._values.move_to_end(key)
        return found

    def put(self, key: str, value: V) -> None:
        """Store `value` under `key` as the most recently used; drop the least recently used beyond the bound."""
        self._values[key] = value
        self._values.move_to_end(key)
        while len(self._values) > self.max_entries:
            self._values.popitem(last=False)

    def copy(self) -> Lru[V]:
        copied = Lru[V](self.max_entries)
        copied._values = OrderedDict(self._values)
        return copied

    def keys(self) -> KeysView[str]:
        return self._values.keys()

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __len__(self) -> int:
        return len(self._values)
