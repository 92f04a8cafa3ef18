"""The EverMemOS-style system: episodes with events, searched by BM25 and embeddings (its `SPEC`).

Its benchmark faults: an extraction drop (both writers lose the fact; the truth is `write_events`), a
retrieval miss (the episodes holding the evidence turn skipped) and a wrong answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memtrace_loop.memory_systems.evermemos.schema import STAGES, EverMemOSKnobs
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
    WalkPrior,
)
from memtrace_loop.pipeline.core.conventions import Namespace, OpKind

if TYPE_CHECKING:
    from memtrace_loop.memory_systems.base import MemorySystem
    from memtrace_loop.pipeline.backends.embeddings import Embedder
    from memtrace_loop.pipeline.core.graph import ExecutionGraph


def build(knobs: EverMemOSKnobs, embedder: Embedder) -> MemorySystem:
    from memtrace_loop.memory_systems.evermemos.system import EverMemOSMemory  # DSPy: when a system is built

    return EverMemOSMemory(embedder, knobs)


def _hide(system: MemorySystem, graph: ExecutionGraph, turn_id: str) -> MemorySystem:
    """A copy of the system whose answer-time search skips the episodes holding `turn_id`."""
    patched = system.deepcopy()
    inner = type(system).search

    def search(query: str, state: Any) -> list[list[int]]:
        dropped = {i for i, e in enumerate(state.episodes) if turn_id in e.turn_ids}
        return [[i for i in ranking if i not in dropped] for ranking in inner(patched, query, state)]

    object.__setattr__(patched, "search", search)
    return patched


FAULTS: tuple[FaultPlan, ...] = (
    ReplyFault(FaultKind.EXTRACTION_DROP, (EditKind.DROP_EVENTS, EditKind.DROP_NARRATIVE), "write_events",
               "ExtractionError"),
    HideEvidenceFault(_hide),
    WRONG_ANSWER,
)


SPEC: MemorySystemSpec[EverMemOSKnobs] = MemorySystemSpec(
    name="evermemos",
    knobs=EverMemOSKnobs,
    build=build,
    stages=STAGES,
    faults=FAULTS,
    unit_namespaces=frozenset({Namespace.EPISODE, Namespace.EVENT}),
    op_kinds=frozenset({OpKind.EXTRACTION, OpKind.RETRIEVAL, OpKind.RESPONSE, OpKind.OTHER}),
    replay=Replay.FULL,
    generous_knobs={"top_k": 1000},
    prior=WalkPrior(
        first_stages=frozenset({"detect_boundary", "write_episode", "write_events"}),
        skip_stages=frozenset({"check_sufficiency", "expand_queries"}),  # they steer the search, carry nothing
    ),
    knob_worlds=(
        KnobWorld("top_k=1", {"top_k": 1}),
        KnobWorld("top_k=1 no multi-query", {"top_k": 1, "multi_query": False}),  # multi_query: held, no owner
    ),
)
