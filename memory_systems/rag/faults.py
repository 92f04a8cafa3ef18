"""Where the attribution benchmark's faults land in the RAG system (its `SPEC.faults`).

A chunk split (`max_chunk_tokens` below the evidence turn's size) and a retrieval miss (its chunks hidden).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from memtrace_loop.memory_systems.hiding import without_units
from memtrace_loop.memory_systems.spec import WRONG_ANSWER, FaultKind, FaultPlan, HideEvidenceFault, KnobFault
from memtrace_loop.pipeline.core.conventions import turn_name
from memtrace_loop.pipeline.core.graph import ExecutionGraph, Operation, variable_id
from memtrace_loop.pipeline.core.records import Conversation, Turn

if TYPE_CHECKING:
    from memtrace_loop.memory_systems.base import MemorySystem

CHUNK_STAGE = "chunk"


def _chunk_ops(graph: ExecutionGraph, turn_id: str) -> list[Operation]:
    turn_var = variable_id(turn_name(turn_id), 1)
    return [o for o in graph.operations() if o.stage == CHUNK_STAGE and turn_var in o.inputs]


def _split_limits(
    system: MemorySystem, graph: ExecutionGraph, conversation: Conversation, turn: Turn
) -> tuple[Mapping[str, Any], ...]:
    counter = getattr(system, "counter", None)
    if counter is None:
        return ()
    turn_tokens = counter.count(graph.variable(variable_id(turn_name(turn.id), 1)).value)
    limits = (max(16, math.ceil(turn_tokens * fraction) + 8) for fraction in (0.5, 0.34))
    return tuple({"max_chunk_tokens": limit} for limit in limits if limit < turn_tokens)


def _split_by(graph: ExecutionGraph, turn_id: str) -> Operation | None:
    ops = [
        o for o in _chunk_ops(graph, turn_id)
        if any(turn_id in graph.variable(v).meta.get("split_turns", ()) for v in o.outputs)
    ]
    return ops[0] if ops else None


def _hide(system: MemorySystem, graph: ExecutionGraph, turn_id: str) -> MemorySystem | None:
    turn_var = variable_id(turn_name(turn_id), 1)
    chunks = [o for o in graph.operations() if o.stage == CHUNK_STAGE]
    units = tuple(f"c{index}" for index, op in enumerate(chunks, start=1) if turn_var in op.inputs)
    return without_units(system, frozenset(units)) if units else None


FAULTS: tuple[FaultPlan, ...] = (
    KnobFault(FaultKind.CHUNK_SPLIT, _split_limits, _split_by, "ExtractionError"), HideEvidenceFault(_hide),
    WRONG_ANSWER,
)
