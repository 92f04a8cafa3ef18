"""The stage rows memory systems add to the simulated world, reached through the memory-system registry.

A system whose LLM stages the world's own table (`pipeline.sim.stages.STAGES`) lacks declares them in
its folder (`SPEC.sim` names the module; it exports `STAGES`, a tuple of `SimStage`). `system_stages()`
collects those rows for every registered system, through a `Registry` of the one shape, so the sim
world never names a system and a system's folder is the only place its simulated behaviour lives.
It imports each system's spec (not its sim module) only when called; it does not dispatch.
"""

from __future__ import annotations

from memtrace_loop.memory_systems.registry import SYSTEMS
from memtrace_loop.pipeline.core.registry import Registry
from memtrace_loop.pipeline.sim.stages import SimStage

__all__ = ["system_stages"]


def system_stages() -> tuple[SimStage, ...]:
    """Every registered system's own rows (in registry order; none for a system the table covers)."""
    tables: Registry[tuple[SimStage, ...]] = Registry(
        "simulated stage table", "memory_system.name",
        {name: spec.sim for name, spec in SYSTEMS.items() if spec.sim}, attribute="STAGES",
    )
    return tuple(stage for _, rows in tables.items() for stage in rows)
