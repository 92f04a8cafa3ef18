"""The EverMemOS-style system: episodes with events, searched by BM25 and embeddings (its `SPEC`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from memtrace_loop.memory_systems.evermemos.faults import FAULTS
from memtrace_loop.memory_systems.evermemos.schema import STAGES, EverMemOSKnobs
from memtrace_loop.memory_systems.spec import KnobWorld, MemorySystemSpec, Replay, WalkPrior
from memtrace_loop.pipeline.core.conventions import Namespace, OpKind

if TYPE_CHECKING:
    from memtrace_loop.memory_systems.base import MemorySystem
    from memtrace_loop.pipeline.backends.embeddings import Embedder


def build(knobs: EverMemOSKnobs, embedder: Embedder) -> MemorySystem:
    from memtrace_loop.memory_systems.evermemos.system import EverMemOSMemory  # DSPy: when a system is built

    return EverMemOSMemory(embedder, knobs)


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
