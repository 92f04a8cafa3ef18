"""The Long-Context system: the whole conversation in a token-window buffer (its `SPEC`)."""

from __future__ import annotations

from memtrace_loop.memory_systems.long_context.faults import FAULTS
from memtrace_loop.memory_systems.long_context.system import LongContextKnobs, LongContextMemory
from memtrace_loop.memory_systems.spec import MemorySystemSpec, WalkPrior
from memtrace_loop.pipeline.backends.embeddings import Embedder
from memtrace_loop.pipeline.core.conventions import OpKind


def _build(knobs: LongContextKnobs, embedder: Embedder) -> LongContextMemory:
    return LongContextMemory(knobs)  # no embedder: the context is the buffer


SPEC: MemorySystemSpec[LongContextKnobs] = MemorySystemSpec(
    name="long_context", knobs=LongContextKnobs, build=_build, stages=LongContextMemory.stages, faults=FAULTS,
    generous_knobs={"window_tokens": 1_000_000},
    prior=WalkPrior(first_kinds=frozenset({OpKind.UPDATE, OpKind.DELETION})),
)
