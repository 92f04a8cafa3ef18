"""The Mem0-style system: facts extracted per turn, reconciled into a versioned store (its `SPEC`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from memtrace_loop.memory_systems.mem0.faults import FAULTS
from memtrace_loop.memory_systems.mem0.schema import STAGES, Mem0Knobs
from memtrace_loop.memory_systems.spec import KnobWorld, MemorySystemSpec, Replay, WalkPrior
from memtrace_loop.pipeline.core.conventions import Namespace, OpKind

if TYPE_CHECKING:
    from memtrace_loop.memory_systems.base import MemorySystem
    from memtrace_loop.pipeline.backends.embeddings import Embedder


def build(knobs: Mem0Knobs, embedder: Embedder) -> MemorySystem:
    from memtrace_loop.memory_systems.mem0.system import Mem0Memory  # DSPy: when a system is built

    return Mem0Memory(embedder, knobs)


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
