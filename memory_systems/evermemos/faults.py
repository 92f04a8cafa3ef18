"""Where the attribution benchmark's faults land in the EverMemOS-style system (its `SPEC.faults`).

An extraction drop (both writers lose the fact; the truth is `write_events`) and a retrieval miss.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memtrace_loop.memory_systems.spec import (
    WRONG_ANSWER,
    EditKind,
    FaultKind,
    FaultPlan,
    HideEvidenceFault,
    ReplyFault,
)
from memtrace_loop.pipeline.core.graph import ExecutionGraph

if TYPE_CHECKING:
    from memtrace_loop.memory_systems.base import MemorySystem


def without_episodes(system: MemorySystem, turn_id: str) -> MemorySystem:
    """A copy of the system whose answer-time search skips the episodes holding `turn_id`."""
    patched = system.deepcopy()
    inner = type(system).search

    def search(query: str, state: Any) -> list[list[int]]:
        dropped = {i for i, e in enumerate(state.episodes) if turn_id in e.turn_ids}
        return [[i for i in ranking if i not in dropped] for ranking in inner(patched, query, state)]

    object.__setattr__(patched, "search", search)
    return patched


def _hide(system: MemorySystem, graph: ExecutionGraph, turn_id: str) -> MemorySystem | None:
    return without_episodes(system, turn_id)


FAULTS: tuple[FaultPlan, ...] = (
    ReplyFault(FaultKind.EXTRACTION_DROP, (EditKind.DROP_EVENTS, EditKind.DROP_NARRATIVE), "write_events",
               "ExtractionError"),
    HideEvidenceFault(_hide),
    WRONG_ANSWER,
)
