"""Optimizers by config name: `OPTIMIZERS`, `optimizer_settings`, `build_optimizer`.

An unknown name or key, a bad value or a missing rewriter LM is a `ConfigError` naming `optimizer.<key>`.
Each line names its spec in `optimizers.specs` (DSPy-free, each builder importing its module).
It does not configure DSPy or build LMs.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memtrace_loop.optimizers.base import Optimizer, OptimizerSetup, OptimizerSpec
from memtrace_loop.optimizers.settings import NoSettings, RewriteSettings
from memtrace_loop.pipeline.core.config import parse_config
from memtrace_loop.pipeline.core.registry import Registry

if TYPE_CHECKING:
    import dspy
    from memtrace_loop.memory_systems.base import MemorySystem
    from memtrace_loop.pipeline.analysis.attribution.protocol import Attributor

__all__ = ["OPTIMIZERS", "NoSettings", "RewriteSettings", "build_optimizer", "optimizer_settings"]

OPTIMIZERS: Registry[OptimizerSpec] = Registry(
    "optimizer",
    "optimizer.name",
    {
        "attribution": "memtrace_loop.optimizers.specs:ATTRIBUTION",
        "uniform": "memtrace_loop.optimizers.specs:UNIFORM",
        "uniform_reasons": "memtrace_loop.optimizers.specs:UNIFORM_REASONS",
        "gepa": "memtrace_loop.optimizers.specs:GEPA",
        "gepa_blame": "memtrace_loop.optimizers.specs:GEPA_BLAME",
        "none": "memtrace_loop.optimizers.specs:NONE",
    },
    unknown="{key}: unknown {what} {name!r}; choose one of {choices}",
)


def optimizer_settings(name: object, settings: Mapping[str, Any] | None) -> Any:
    """The validated settings record of optimizer `name` from its config node (`name` key ignored)."""
    given = {k: v for k, v in (settings or {}).items() if k != "name"}
    return parse_config(OPTIMIZERS.get(name).schema, given, "optimizer")


def build_optimizer(
    name: str, rewriter_lm: dspy.BaseLM | None, settings: Mapping[str, Any] | None = None, *,
    system: MemorySystem | None = None, attributor: Attributor | None = None, work_dir: Path | None = None,
) -> Optimizer:
    """The optimizer called `name`, built once for its run (`work_dir`: where it may keep resumable state; a temporary
    folder when None)."""
    spec = OPTIMIZERS.get(name)
    setup = OptimizerSetup(optimizer_settings(name, settings), rewriter_lm, system, attributor, work_dir)
    return spec.build(setup)
