"""The RAG system: turns chunked, embedded and searched (its `SPEC`)."""

from __future__ import annotations

from memtrace_loop.memory_systems.rag.faults import FAULTS
from memtrace_loop.memory_systems.rag.system import RagKnobs, RagMemory
from memtrace_loop.memory_systems.spec import MemorySystemSpec, WalkPrior
from memtrace_loop.pipeline.backends.embeddings import Embedder
from memtrace_loop.pipeline.core.conventions import OpKind


def _build(knobs: RagKnobs, embedder: Embedder) -> RagMemory:
    return RagMemory(embedder, knobs)


SPEC: MemorySystemSpec[RagKnobs] = MemorySystemSpec(
    name="rag", knobs=RagKnobs, build=_build, stages=RagMemory.stages, faults=FAULTS, generous_knobs={"top_k": 1000},
    prior=WalkPrior(first_kinds=frozenset({OpKind.RETRIEVAL}), seed_retrieval=True),
)
