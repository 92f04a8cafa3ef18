"""Copies of a store-backed memory system whose answer-time search hides some units (`without_units`).

The original is untouched. It does not choose which units to hide (each system's `SPEC` module does).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from memtrace_loop.pipeline.core.records import Question

if TYPE_CHECKING:
    from memtrace_loop.memory_systems.base import MemorySystem


class _FilteredStore:
    """A vector store whose search never returns the dropped units (it asks for more to keep k)."""

    def __init__(self, store: Any, dropped: frozenset[str]) -> None:
        self._store = store
        self._dropped = dropped

    def search(self, query: str, k: int, vector: Any = None) -> list[Any]:
        hits = self._store.search(query, k + len(self._dropped), vector)
        return [h for h in hits if h.unit.id not in self._dropped][:k]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def without_units(system: MemorySystem, unit_ids: frozenset[str]) -> MemorySystem:
    """A copy of a store-backed system whose answer-time search skips `unit_ids`."""
    patched = system.deepcopy()
    inner = type(system).answer

    def answer(question: Question, state: Any, tracer: Any) -> Any:
        filtered = dataclasses.replace(state, store=_FilteredStore(state.store, unit_ids))
        return inner(patched, question, filtered, tracer)

    object.__setattr__(patched, "answer", answer)
    return patched
