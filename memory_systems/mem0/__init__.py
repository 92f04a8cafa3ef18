"""The Mem0-style system: facts extracted per turn, reconciled into a versioned store (its `SPEC`).

Its benchmark faults: the memory units the evidence turn added (first versions of `memory:<id>` variables
whose `turn` meta is the turn) are what a retrieval miss hides and what an injected UPDATE or DELETE
changes; an extraction drop; a wrong answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memtrace_loop.memory_systems.hiding import without_units
from memtrace_loop.memory_systems.mem0.schema import STAGES, Mem0Knobs
from memtrace_loop.memory_systems.spec import (
    WRONG_ANSWER,
    EditKind,
    FaultKind,
    FaultPlan,
    HideEvidenceFault,
    KnobWorld,
    MemorySystemSpec,
    Replay,
    ReplyFault,
    UnitChangeFault,
    WalkPrior,
)
from memtrace_loop.pipeline.core.conventions import Namespace, OpKind, memory_name

if TYPE_CHECKING:
    from memtrace_loop.memory_systems.base import MemorySystem
    from memtrace_loop.pipeline.backends.embeddings import Embedder
    from memtrace_loop.pipeline.core.graph import ExecutionGraph


def build(knobs: Mem0Knobs, embedder: Embedder) -> MemorySystem:
    from memtrace_loop.memory_systems.mem0.system import Mem0Memory  # DSPy: when a system is built

    return Mem0Memory(embedder, knobs)


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


SPEC: MemorySystemSpec[Mem0Knobs] = MemorySystemSpec(
    name="mem0",
    knobs=Mem0Knobs,
    build=build,
    stages=STAGES,
    faults=FAULTS,
    unit_namespaces=frozenset({Namespace.MEMORY}),
    op_kinds=frozenset({OpKind.EXTRACTION, OpKind.UPDATE, OpKind.RETRIEVAL, OpKind.RESPONSE}),
    replay=Replay.FULL,
    generous_knobs={"top_k": 1000},
    prior=WalkPrior(
        first_kinds=frozenset({OpKind.EXTRACTION}), then_kinds=frozenset({OpKind.UPDATE, OpKind.DELETION}),
        skip_stages=frozenset({"search_similar"}),
    ),
    knob_worlds=(
        KnobWorld("top_k=3", {"top_k": 3}),
        # `similar_k` is read by `search_similar`, which declares no replay knob: the world names its owner
        KnobWorld("similar_k=1", {"similar_k": 1}, {"similar_k": "search_similar"}),
    ),
)
