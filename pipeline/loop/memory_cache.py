"""Reusing built memories: construction work that a candidate prompt set does not change is never redone.

A memory system's `memory_key(conversation)` names everything construction depends on (conversation,
construction prompts, construction knobs, embedder, model). The cache maps that key to the ingestion
graph (a snapshot that is copied, never mutated) and the memory state (read-only once built), and
counts hits and the LLM calls they saved. Thread-safe; `get_or_build` builds a missing memory once even
when several threads ask for it at the same time. It does not decide what the key contains.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.lru import Lru
from memtrace_loop.pipeline.core.single_flight import KeyedLocks


@dataclass(frozen=True)
class CachedMemory:
    graph: ExecutionGraph  # the ingestion graph; copy it before appending
    state: Any
    lm_calls: int  # LLM calls it took to build
    # the construction stages' LM calls as DSPy traced them (optimizers.base.ConstructionCall), so a
    # reuse can still show them to an optimizer that reflects on construction (GEPA)
    construction_calls: tuple[Any, ...] = ()


@dataclass(frozen=True)
class CacheStats:
    hits: int
    misses: int
    lm_calls_saved: int


class MemoryCache:
    def __init__(self, max_entries: int = 512) -> None:
        self._entries = Lru[CachedMemory](max_entries)
        self._lock = threading.Lock()
        self._hits = 0
        self._misses = 0
        self._saved = 0
        self._builds = KeyedLocks()

    def get(self, key: str, count_saved: bool = True) -> CachedMemory | None:
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                self._misses += 1
                return None
            self._hits += 1
            self._saved += found.lm_calls if count_saved else 0
            return found

    def put(self, key: str, memory: CachedMemory) -> None:
        with self._lock:
            self._entries.put(key, memory)

    def get_or_build(
        self, key: str, build: Callable[[], CachedMemory], count_saved: bool = True
    ) -> tuple[CachedMemory, bool]:
        """(the memory under `key`, reused?) — `build()` runs at most once per key at a time: a thread
        asking while another builds the same key waits and then reuses its memory. `count_saved=False`:
        a hit is counted, but not as saved calls (the caller counts what a reuse saved itself)."""
        with self._builds.hold(key):
            found = self.get(key, count_saved)
            if found is not None:
                return found, True
            built = build()
            self.put(key, built)
            return built, False

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(self._hits, self._misses, self._saved)
