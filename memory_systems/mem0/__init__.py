"""The Mem0-style system: facts extracted per turn, reconciled into a versioned store (its `SPEC`)."""

from __future__ import annotations

from memtrace_loop.memory_systems.mem0.faults import FAULTS
from memtrace_loop.memory_systems.mem0.system import Mem0Knobs, Mem0Memory
from memtrace_loop.memory_systems.spec import KnobWorld, MemorySystemSpec, Replay, WalkPrior
from memtrace_loop.pipeline.core.conventions import Namespace, OpKind

SPEC: MemorySystemSpec[Mem0Knobs] = MemorySystemSpec(
    name="mem0",
    knobs=Mem0Knobs,
    build=lambda knobs, embedder: Mem0Memory(embedder, knobs),
    stages=Mem0Memory.stages,
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
