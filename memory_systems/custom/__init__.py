"""`memory_system=custom`: a user's own memory system, imported from `memory_system.target` (its `SPEC`).

The contract the user implements is `contract.UserMemorySystem`, the public API `api` (docs/
custom_system.md); `target` imports the user's `build`, `adapter.CustomMemory` makes it one of our
systems. The default target is the worked example (`example`), so the generic tests and a bare
`memory_system=custom` run it; the spec's stage table is the example's (a user's system brings its
own, read from its `stages()` when built). Not swept by `make compare` (`compare=False`); no fault
plans beyond a wrong answer (the attribution benchmark does not run it) and no knob worlds (a user's
knobs are the user's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memtrace_loop.memory_systems.custom.example import build as build_example
from memtrace_loop.memory_systems.custom.schema import CustomKnobs, stage_table
from memtrace_loop.memory_systems.custom.target import load_target
from memtrace_loop.memory_systems.spec import WRONG_ANSWER, MemorySystemSpec, Replay, WalkPrior
from memtrace_loop.pipeline.core.conventions import Namespace, OpKind

if TYPE_CHECKING:
    from memtrace_loop.memory_systems.base import MemorySystem
    from memtrace_loop.pipeline.backends.embeddings import Embedder


def build(knobs: CustomKnobs, embedder: Embedder) -> MemorySystem:
    from memtrace_loop.memory_systems.custom.adapter import CustomMemory  # DSPy: when a system is built

    return CustomMemory(load_target(knobs.target), knobs)


SPEC: MemorySystemSpec[CustomKnobs] = MemorySystemSpec(
    name="custom",
    knobs=CustomKnobs,
    build=build,
    stages=stage_table(build_example().stages()),
    unit_namespaces=frozenset({Namespace.MEMORY}),  # the worked example's chunks, written with `writes_unit`
    op_kinds=frozenset({OpKind.EXTRACTION, OpKind.RETRIEVAL, OpKind.RESPONSE}),
    replay=Replay.NONE,  # a user's system answers in one call and has no repair hooks
    faults=(WRONG_ANSWER,),
    prior=WalkPrior(first_kinds=frozenset({OpKind.RETRIEVAL}), seed_retrieval=True),
    compare=False,
    knob_worlds=(),
)
