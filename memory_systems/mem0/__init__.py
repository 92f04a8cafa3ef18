"""The Mem0-style system: facts extracted per turn, reconciled into a versioned store (its `SPEC`)."""

from __future__ import annotations

from memtrace_loop.memory_systems.mem0.faults import FAULTS
from memtrace_loop.memory_systems.mem0.system import Mem0Knobs, Mem0Memory
from memtrace_loop.memory_systems.spec import MemorySystemSpec, WalkPrior
from memtrace_loop.pipeline.backends.embeddings import Embedder
from memtrace_loop.pipeline.core.conventions import OpKind


def _build(knobs: Mem0Knobs, embedder: Embedder) -> Mem0Memory:
    return Mem0Memory(embedder, knobs)


SPEC: MemorySystemSpec[Mem0Knobs] = MemorySystemSpec(
    name="mem0",
    knobs=Mem0Knobs,
    build=_build,
    stages=Mem0Memory.stages,
    faults=FAULTS,
    generous_knobs={"top_k": 1000},
    prior=WalkPrior(
        first_kinds=frozenset({OpKind.EXTRACTION}), then_kinds=frozenset({OpKind.UPDATE, OpKind.DELETION}),
        skip_stages=frozenset({"search_similar"}),
    ),
)
