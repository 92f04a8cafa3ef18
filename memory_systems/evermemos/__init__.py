"""The EverMemOS-style system: episodes with events, searched by BM25 and embeddings (its `SPEC`)."""

from __future__ import annotations

from memtrace_loop.memory_systems.evermemos.faults import FAULTS
from memtrace_loop.memory_systems.evermemos.system import EverMemOSKnobs, EverMemOSMemory
from memtrace_loop.memory_systems.spec import MemorySystemSpec, WalkPrior
from memtrace_loop.pipeline.backends.embeddings import Embedder


def _build(knobs: EverMemOSKnobs, embedder: Embedder) -> EverMemOSMemory:
    return EverMemOSMemory(embedder, knobs)


SPEC: MemorySystemSpec[EverMemOSKnobs] = MemorySystemSpec(
    name="evermemos",
    knobs=EverMemOSKnobs,
    build=_build,
    stages=EverMemOSMemory.stages,
    faults=FAULTS,
    generous_knobs={"top_k": 1000},
    prior=WalkPrior(
        first_stages=frozenset({"detect_boundary", "write_episode", "write_events"}),
        skip_stages=frozenset({"check_sufficiency", "expand_queries"}),  # they steer the search, carry nothing
    ),
)
