"""The Long-Context system: the whole conversation in a token-window buffer (its `SPEC`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from memtrace_loop.memory_systems.long_context.faults import FAULTS
from memtrace_loop.memory_systems.long_context.schema import STAGES, LongContextKnobs
from memtrace_loop.memory_systems.spec import KnobWorld, MemorySystemSpec, Replay, WalkPrior
from memtrace_loop.pipeline.core.conventions import Namespace, OpKind

if TYPE_CHECKING:
    from memtrace_loop.memory_systems.base import MemorySystem
    from memtrace_loop.pipeline.backends.embeddings import Embedder


def build(knobs: LongContextKnobs, embedder: Embedder) -> MemorySystem:
    from memtrace_loop.memory_systems.long_context.system import LongContextMemory  # DSPy: when a system is built

    return LongContextMemory(knobs)  # no embedder: the context is the buffer


SPEC: MemorySystemSpec[LongContextKnobs] = MemorySystemSpec(
    name="long_context",
    knobs=LongContextKnobs,
    build=build,
    stages=STAGES,
    faults=FAULTS,
    unit_namespaces=frozenset({Namespace.ENTRY}),
    op_kinds=frozenset({OpKind.EXTRACTION, OpKind.RETRIEVAL, OpKind.RESPONSE}),  # + UPDATE when a trim happens
    replay=Replay.FULL,
    generous_knobs={"window_tokens": 1_000_000},
    prior=WalkPrior(first_kinds=frozenset({OpKind.UPDATE, OpKind.DELETION})),
    knob_worlds=(KnobWorld("800-token window", {"window_tokens": 800}),),
)
