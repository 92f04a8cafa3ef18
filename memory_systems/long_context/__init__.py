"""The Long-Context system: the whole conversation in a token-window buffer (its `SPEC`)."""

from __future__ import annotations

from memtrace_loop.memory_systems.long_context.faults import FAULTS
from memtrace_loop.memory_systems.long_context.system import LongContextKnobs, LongContextMemory
from memtrace_loop.memory_systems.spec import KnobWorld, MemorySystemSpec, Replay, WalkPrior
from memtrace_loop.pipeline.core.conventions import Namespace, OpKind

SPEC: MemorySystemSpec[LongContextKnobs] = MemorySystemSpec(
    name="long_context",
    knobs=LongContextKnobs,
    build=lambda knobs, embedder: LongContextMemory(knobs),  # no embedder: the context is the buffer
    stages=LongContextMemory.stages,
    faults=FAULTS,
    unit_namespaces=frozenset({Namespace.ENTRY}),
    op_kinds=frozenset({OpKind.EXTRACTION, OpKind.RETRIEVAL, OpKind.RESPONSE}),  # + UPDATE when a trim happens
    replay=Replay.FULL,
    generous_knobs={"window_tokens": 1_000_000},
    prior=WalkPrior(first_kinds=frozenset({OpKind.UPDATE, OpKind.DELETION})),
    knob_worlds=(KnobWorld("800-token window", {"window_tokens": 800}),),
)
