"""The RAG system: turns chunked, embedded and searched (its `SPEC`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from memtrace_loop.memory_systems.rag.faults import FAULTS
from memtrace_loop.memory_systems.rag.schema import STAGES, RagKnobs
from memtrace_loop.memory_systems.spec import KnobWorld, MemorySystemSpec, Replay, WalkPrior
from memtrace_loop.pipeline.core.conventions import Namespace, OpKind

if TYPE_CHECKING:
    from memtrace_loop.memory_systems.base import MemorySystem
    from memtrace_loop.pipeline.backends.embeddings import Embedder


def build(knobs: RagKnobs, embedder: Embedder) -> MemorySystem:
    from memtrace_loop.memory_systems.rag.system import RagMemory  # DSPy: when a system is built

    return RagMemory(embedder, knobs)


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
