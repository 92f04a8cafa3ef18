"""The simulated world as a `TestWorld` (`pipeline.backends.test_world`): perfect instructions and rules.

Per stage (by the output fields of its signature) of the world's table plus the rows memory systems
add (`pipeline.sim.system_stages`): the instruction with every fix of that stage appended, and those
fixes' ids. Reached through `pipeline.backends.registry.backend_test_world("sim")`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

from memtrace_loop.pipeline.sim.stages import STAGES, SimStage, perfect_instruction
from memtrace_loop.pipeline.sim.system_stages import system_stages

__all__ = ["SimTestWorld", "sim_test_world"]


@dataclass(frozen=True)
class SimTestWorld:
    __test__: ClassVar[bool] = False  # not a pytest test class
    stages: tuple[SimStage, ...]

    def perfect_instruction(self, instruction: str, output_fields: Iterable[str]) -> str:
        return perfect_instruction(instruction, output_fields, self.stages)

    def rules(self, output_fields: Iterable[str]) -> tuple[str, ...]:
        key = frozenset(output_fields) - {"reasoning"}
        row = next((s for s in self.stages if s.outputs == key and s.foreign is None), None)
        return tuple(r.id for r in row.fixes()) if row is not None else ()


def sim_test_world() -> SimTestWorld:
    """The simulated world's stages (its own table, then the systems' rows)."""
    return SimTestWorld((*STAGES, *system_stages()))
