"""`memory_system=mem0ai`: the real `mem0ai` 1.0.x library in the loop (its `SPEC` and benchmark faults).

The folder: `hooks.py` (mem0's prompt hooks and their defaults), `memory.py` (one `Memory` per
conversation), `bridge.py` (mem0's LLM and embedder through our LM layer), `observers.py` (what one
`add()` did, without editing mem0), `trace.py` (that as graph operations), `recall.py` (a stage called
again with mem0's own messages, for replay's stage repair), `system.py` (the system), `fragment.py` (the
mem0 config fragment an export writes), `sim.py` (the simulated world's answers to mem0's requests).
Decision faults are reply edits under the ids mem0 shows; the retrieval miss hides the evidence units from
`memory.search`. The manual: docs/mem0ai.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memtrace_loop.memory_systems.mem0 import SPEC as MEM0_STYLE
from memtrace_loop.memory_systems.mem0 import evidence_units
from memtrace_loop.memory_systems.mem0ai.fragment import MEM0_CONFIG_FRAGMENT
from memtrace_loop.memory_systems.mem0ai.schema import EXTRACTION, STAGES, UPDATE, Mem0aiKnobs
from memtrace_loop.memory_systems.spec import (
    WRONG_ANSWER,
    EditKind,
    FaultKind,
    FaultPlan,
    HideEvidenceFault,
    MemorySystemSpec,
    Replay,
    ReplyFault,
    UnitChangeFault,
)

if TYPE_CHECKING:
    from memtrace_loop.memory_systems.base import MemorySystem
    from memtrace_loop.pipeline.backends.embeddings import Embedder
    from memtrace_loop.pipeline.core.graph import ExecutionGraph


def build(knobs: Mem0aiKnobs, embedder: Embedder) -> MemorySystem:
    from memtrace_loop.memory_systems.mem0ai.system import Mem0aiMemory  # mem0 and DSPy: when a system is built

    return Mem0aiMemory(embedder, knobs)


def _hide(system: MemorySystem, graph: ExecutionGraph, turn_id: str) -> MemorySystem | None:
    from memtrace_loop.memory_systems.mem0ai.system import Mem0aiMemory  # mem0's adapter, when a fault is injected

    units = evidence_units(graph, turn_id)
    if not units or not isinstance(system, Mem0aiMemory):
        return None
    return system.without_units(frozenset(units))


FAULTS: tuple[FaultPlan, ...] = (
    ReplyFault(FaultKind.EXTRACTION_DROP, (EditKind.DROP_FACTS,), EXTRACTION, "ExtractionError"),
    UnitChangeFault(FaultKind.UPDATE_OVERWRITE, "UPDATE", "memory_update", "UpdateError", evidence_units,
                    EditKind.CHANGE_SHOWN_UNITS),
    UnitChangeFault(FaultKind.DELETION, "DELETE", "memory_delete", "DeletionError", evidence_units,
                    EditKind.CHANGE_SHOWN_UNITS),
    ReplyFault(FaultKind.DROPPED_ACTION, (EditKind.DROP_ACTION,), UPDATE, "UpdateError"),
    HideEvidenceFault(_hide),
    WRONG_ANSWER,
)

SPEC: MemorySystemSpec[Mem0aiKnobs] = MemorySystemSpec(
    name="mem0ai",
    knobs=Mem0aiKnobs,
    build=build,
    stages=STAGES,
    faults=FAULTS,
    unit_namespaces=MEM0_STYLE.unit_namespaces,  # the graph has the Mem0-style shape
    op_kinds=MEM0_STYLE.op_kinds,
    replay=Replay.FULL,
    generous_knobs=MEM0_STYLE.generous_knobs,
    prior=MEM0_STYLE.prior,  # the walk looks where it looks there
    knob_worlds=(),  # the rescue bench runs its default and construction-rule worlds only
    compare=False,
    sim="memtrace_loop.memory_systems.mem0ai.sim",
    prompt_formats=(MEM0_CONFIG_FRAGMENT,),  # exports also write mem0_config.yaml/.json (fragment.py)
)
