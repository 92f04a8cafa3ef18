"""`memory_system=custom`: a user's own memory system, imported from `memory_system.target` (its `SPEC`).

The contract the user implements is `contract.UserMemorySystem`, the public API `api` (docs/
custom_system.md); `target` imports the user's `build`, `adapter.CustomMemory` makes it one of our
systems. The default target is the worked example (`example`), so the generic tests and a bare
`memory_system=custom` run it; the spec's stage table is the example's (a user's system brings its
own, read from its `stages()` when built). Not swept by `make compare` (`compare=False`); no fault
plans beyond a wrong answer (the attribution benchmark does not run it).
"""

from __future__ import annotations

from memtrace_loop.memory_systems.custom.adapter import CustomKnobs, CustomMemory, stage_table
from memtrace_loop.memory_systems.custom.example import build as build_example
from memtrace_loop.memory_systems.custom.target import load_target
from memtrace_loop.memory_systems.spec import WRONG_ANSWER, MemorySystemSpec, WalkPrior
from memtrace_loop.pipeline.backends.embeddings import Embedder
from memtrace_loop.pipeline.core.conventions import OpKind


def _build(knobs: CustomKnobs, embedder: Embedder) -> CustomMemory:
    return CustomMemory(load_target(knobs.target), knobs)


SPEC: MemorySystemSpec[CustomKnobs] = MemorySystemSpec(
    name="custom", knobs=CustomKnobs, build=_build, stages=stage_table(build_example().stages()),
    faults=(WRONG_ANSWER,), prior=WalkPrior(first_kinds=frozenset({OpKind.RETRIEVAL}), seed_retrieval=True),
    compare=False,
)
