"""`memory_system=mem0ai`: the real `mem0ai` 1.0.x library in the loop (its `SPEC`).

The folder: `hooks.py` (mem0's prompt hooks and their defaults), `signatures.py` (the two mem0
stages), `memory.py` (one `Memory` per conversation), `bridge.py` (mem0's LLM and embedder through
our LM layer), `observers.py` (what one `add()` did, without editing mem0), `trace.py` (that as graph
operations), `restore.py` (units put back for replay), `recall.py` (a stage called again with mem0's
own messages, for replay's stage repair), `system.py` (the system), `faults.py` (the
attribution benchmark's faults), `fragment.py` (the mem0 config fragment an export writes), `sim.py` (the
simulated world's answers to mem0's requests). The manual: docs/mem0ai.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memtrace_loop.memory_systems.mem0 import SPEC as MEM0_STYLE
from memtrace_loop.memory_systems.mem0ai.faults import FAULTS
from memtrace_loop.memory_systems.mem0ai.fragment import MEM0_CONFIG_FRAGMENT
from memtrace_loop.memory_systems.mem0ai.schema import STAGES, Mem0aiKnobs
from memtrace_loop.memory_systems.spec import MemorySystemSpec, Replay

if TYPE_CHECKING:
    from memtrace_loop.memory_systems.base import MemorySystem
    from memtrace_loop.pipeline.backends.embeddings import Embedder


def build(knobs: Mem0aiKnobs, embedder: Embedder) -> MemorySystem:
    from memtrace_loop.memory_systems.mem0ai.system import Mem0aiMemory  # mem0 and DSPy: when a system is built

    return Mem0aiMemory(embedder, knobs)


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
