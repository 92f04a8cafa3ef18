"""`memory_system=custom`'s knobs record and stage table: what its `SPEC` states, without DSPy.

`CustomKnobs` is the schema and single home of the defaults of `memory_system=custom` (the user's
`build` target, the knob values to start from); `stage_table` turns a user's declared stages into our
stage table (`adapter.CustomMemory` and the spec read it). Nothing here imports the user's code or builds anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memtrace_loop.memory_systems.custom.contract import LLMStage, Stage
from memtrace_loop.memory_systems.stages import StageRepair, StageSpec

DEFAULT_TARGET = "memtrace_loop.memory_systems.custom.example:build"
UNTRACED = "untraced"  # the stage of what the user's code returned without marking it
TOP_K = "top_k"


@dataclass(frozen=True)
class CustomKnobs:
    """The `memory_system` node of `memory_system=custom`: the user's `build` and knob values to start
    from (`memory_system.knobs={top_k: 8}`; keys must be knobs the system declares)."""

    target: str = DEFAULT_TARGET
    knobs: dict[str, Any] | None = None  # None: the system's own defaults


def stage_table(declared: Sequence[LLMStage | Stage]) -> tuple[StageSpec, ...]:
    """Our stage table for the user's declared stages (how replay would repair them, which build memory),
    and the `untraced` stage last."""
    specs = []
    for stage in declared:
        if isinstance(stage, LLMStage):
            repair = StageRepair.ANSWER if "answer" in stage.outputs else (
                StageRepair.RERUN if stage.builds_memory else StageRepair.NONE)
            specs.append(StageSpec(stage.name, llm=True, repair=repair, construction=stage.builds_memory))
        else:
            repair = StageRepair.WIDEN if TOP_K in stage.knobs and not stage.builds_memory else StageRepair.NONE
            specs.append(StageSpec(stage.name, llm=False, repair=repair, construction=stage.builds_memory,
                                   knobs=stage.knobs))
    return (*specs, StageSpec(UNTRACED, llm=False, repair=StageRepair.NONE))
