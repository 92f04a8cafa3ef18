"""Where the attribution benchmark's faults land in `memory_system=mem0ai` (its `SPEC.faults`)."""

from __future__ import annotations

from memtrace_loop.memory_systems.spec import WRONG_ANSWER, FaultPlan

__all__ = ["FAULTS"]

FAULTS: tuple[FaultPlan, ...] = (WRONG_ANSWER,)
