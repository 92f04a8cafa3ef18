"""Where the attribution benchmark's faults land in `memory_system=mem0ai` (its `SPEC.faults`).

Decision faults are reply edits under the ids mem0 shows; the extraction drop edits the facts reply; the
retrieval miss hides the evidence units from `memory.search`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memtrace_loop.memory_systems.mem0.faults import evidence_units
from memtrace_loop.memory_systems.mem0ai.schema import EXTRACTION, UPDATE
from memtrace_loop.memory_systems.spec import (
    WRONG_ANSWER,
    EditKind,
    FaultKind,
    FaultPlan,
    HideEvidenceFault,
    ReplyFault,
    UnitChangeFault,
)
from memtrace_loop.pipeline.core.graph import ExecutionGraph

if TYPE_CHECKING:
    from memtrace_loop.memory_systems.base import MemorySystem


def _hide(system: MemorySystem, graph: ExecutionGraph, turn_id: str) -> MemorySystem | None:
    from memtrace_loop.memory_systems.mem0ai.system import Mem0aiMemory  # mem0's adapter, when a fault is injected

    units = evidence_units(graph, turn_id)
    if not units or not isinstance(system, Mem0aiMemory):
        return None
    return system.without_units(frozenset(units))


FAULTS: tuple[FaultPlan, ...] = (
    ReplyFault(FaultKind.EXTRACTION_DROP, (EditKind.DROP_FACTS,), EXTRACTION, "ExtractionError"),
    UnitChangeFault(FaultKind.UPDATE_OVERWRITE, "UPDATE", "memory_update", "UpdateError", evidence_units,
                    EditKind.CHANGE_SHOWN_UNITS),
    UnitChangeFault(FaultKind.DELETION, "DELETE", "memory_delete", "DeletionError", evidence_units,
                    EditKind.CHANGE_SHOWN_UNITS),
    ReplyFault(FaultKind.DROPPED_ACTION, (EditKind.DROP_ACTION,), UPDATE, "UpdateError"),
    HideEvidenceFault(_hide),
    WRONG_ANSWER,
)
