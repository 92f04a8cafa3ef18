"""One lock per key, so work for a key runs at most once at a time (`KeyedLocks`).

Used by the memory cache, the reply store and the candidate screens; only the locking, no storage.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class KeyedLocks:
    """A lock per key, made on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_key: dict[str, threading.Lock] = {}

    @contextmanager
    def hold(self, key: str, forget: bool = False) -> Iterator[None]:
        with self._lock:
            lock = self._by_key.setdefault(key, threading.Lock())
        try:
            with lock:
                yield
        finally:
            if forget:
                with self._lock:
                    if self._by_key.get(key) is lock:
                        del self._by_key[key]

    def held_keys(self) -> tuple[str, ...]:
        """The keys whose lock is kept (for tests and debugging)."""
        with self._lock:
            return tuple(self._by_key)
