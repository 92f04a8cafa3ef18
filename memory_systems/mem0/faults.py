"""Where the attribution benchmark's faults land in the Mem0-style system (its `SPEC.faults`).

The memory units the evidence turn added (first versions of `memory:<id>` variables whose `turn` meta
is the turn) are what a retrieval miss hides and what an injected UPDATE or DELETE changes. It does
not inject anything itself (`experiments.lab.benchmark.injection` does).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memtrace_loop.memory_systems.hiding import without_units
from memtrace_loop.memory_systems.spec import (
    WRONG_ANSWER,
    EditKind,
    FaultKind,
    FaultPlan,
    HideEvidenceFault,
    ReplyFault,
    UnitChangeFault,
)
from memtrace_loop.pipeline.core.conventions import memory_name
from memtrace_loop.pipeline.core.graph import ExecutionGraph

if TYPE_CHECKING:
    from memtrace_loop.memory_systems.base import MemorySystem


def evidence_units(graph: ExecutionGraph, turn_id: str) -> tuple[str, ...]:
    """Mem0 unit ids whose first version the evidence turn added."""
    prefix = memory_name("")
    return tuple(
        var.name[len(prefix):] for var in graph.variables()
        if var.name.startswith(prefix) and var.version == 1 and var.meta.get("turn") == turn_id
    )


def _hide(system: MemorySystem, graph: ExecutionGraph, turn_id: str) -> MemorySystem | None:
    units = evidence_units(graph, turn_id)
    return without_units(system, frozenset(units)) if units else None


FAULTS: tuple[FaultPlan, ...] = (
    ReplyFault(FaultKind.EXTRACTION_DROP, (EditKind.DROP_FACTS,), "extract", "ExtractionError"),
    UnitChangeFault(FaultKind.UPDATE_OVERWRITE, "UPDATE", "memory_update", "UpdateError", evidence_units),
    UnitChangeFault(FaultKind.DELETION, "DELETE", "memory_delete", "DeletionError", evidence_units),
    HideEvidenceFault(_hide), WRONG_ANSWER,
)
