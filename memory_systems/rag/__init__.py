"""The RAG system: turns chunked, embedded and searched (its `SPEC`).

Its benchmark faults: a chunk split (`max_chunk_tokens` below the evidence turn's size), a retrieval miss
(the evidence's chunks hidden) and a wrong answer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from memtrace_loop.memory_systems.hiding import without_units
from memtrace_loop.memory_systems.rag.schema import CHUNK_STAGE, STAGES, RagKnobs
from memtrace_loop.memory_systems.spec import (
    WRONG_ANSWER,
    FaultKind,
    FaultPlan,
    HideEvidenceFault,
    KnobFault,
    KnobWorld,
    MemorySystemSpec,
    Replay,
    WalkPrior,
)
from memtrace_loop.pipeline.core.conventions import Namespace, OpKind, turn_name
from memtrace_loop.pipeline.core.graph import variable_id

if TYPE_CHECKING:
    from memtrace_loop.memory_systems.base import MemorySystem
    from memtrace_loop.pipeline.backends.embeddings import Embedder
    from memtrace_loop.pipeline.core.graph import ExecutionGraph, Operation
    from memtrace_loop.pipeline.core.records import Conversation, Turn


def build(knobs: RagKnobs, embedder: Embedder) -> MemorySystem:
    from memtrace_loop.memory_systems.rag.system import RagMemory  # DSPy: when a system is built

    return RagMemory(embedder, knobs)


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


SPEC: MemorySystemSpec[RagKnobs] = MemorySystemSpec(
    name="rag",
    knobs=RagKnobs,
    build=build,
    stages=STAGES,
    faults=FAULTS,
    unit_namespaces=frozenset({Namespace.CHUNK}),
    op_kinds=frozenset({OpKind.EXTRACTION, OpKind.RETRIEVAL, OpKind.RESPONSE}),
    replay=Replay.FULL,
    generous_knobs={"top_k": 1000},
    prior=WalkPrior(first_kinds=frozenset({OpKind.RETRIEVAL}), seed_retrieval=True),
    knob_worlds=(KnobWorld("top_k=1", {"top_k": 1}), KnobWorld("24-token chunks", {"max_chunk_tokens": 24})),
)
