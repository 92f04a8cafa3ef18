"""Optimizers by config name: `OPTIMIZERS` and each option's `OptimizerSpec`, `optimizer_settings`, `build_optimizer`.

Each spec names its settings record (`optimizers.settings`) and a builder that imports its optimizer's
module when called, so listing, sweeping and validating optimizers (the config tree does, at every start)
imports no DSPy. An unknown name or key, a bad value or a missing rewriter LM is a `ConfigError` naming
`optimizer.<key>`. It does not configure DSPy or build LMs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memtrace_loop.optimizers.base import Candidate, OptimizationContext, Optimizer, OptimizerSetup, OptimizerSpec
from memtrace_loop.optimizers.settings import GepaSettings, NoSettings, RewriteSettings
from memtrace_loop.pipeline.core.config import parse_config
from memtrace_loop.pipeline.core.registry import Registry

if TYPE_CHECKING:
    import dspy
    from memtrace_loop.memory_systems.base import MemorySystem
    from memtrace_loop.pipeline.analysis.attribution.protocol import Attributor

__all__ = [
    "ATTRIBUTION", "GEPA", "GEPA_BLAME", "NONE", "OPTIMIZERS", "UNIFORM", "UNIFORM_REASONS", "NoOptimizer",
    "NoSettings", "RewriteSettings", "build_optimizer", "optimizer_settings",
]


def _builder(module: str, name: str = "build") -> Callable[[OptimizerSetup], Optimizer]:
    """`memtrace_loop.optimizers.<module>.<name>`, imported when called (DSPy: when an optimizer is built)."""

    def build(setup: OptimizerSetup) -> Optimizer:
        built: Optimizer = getattr(importlib.import_module(f"memtrace_loop.optimizers.{module}"), name)(setup)
        return built

    return build


class NoOptimizer:
    """The no-optimization baseline: proposes nothing, so "no optimization" runs through the same loop, gate and
    logging as the real optimizers, and the loop keeps the starting prompts. It calls no LM."""

    name: str = "none"

    def propose(self, context: OptimizationContext) -> Sequence[Candidate]:
        return ()


ATTRIBUTION = OptimizerSpec(RewriteSettings, _builder("attribution_guided"))
UNIFORM = OptimizerSpec(RewriteSettings, _builder("uniform"))
UNIFORM_REASONS = OptimizerSpec(RewriteSettings, _builder("uniform", "build_reasons"))
GEPA = OptimizerSpec(GepaSettings, _builder("gepa"))
GEPA_BLAME = OptimizerSpec(GepaSettings, _builder("gepa", "build_blame"))
NONE = OptimizerSpec(NoSettings, lambda setup: NoOptimizer())

OPTIMIZERS: Registry[OptimizerSpec] = Registry(
    "optimizer",
    "optimizer.name",
    {
        "attribution": "memtrace_loop.optimizers.registry:ATTRIBUTION",
        "uniform": "memtrace_loop.optimizers.registry:UNIFORM",
        "uniform_reasons": "memtrace_loop.optimizers.registry:UNIFORM_REASONS",
        "gepa": "memtrace_loop.optimizers.registry:GEPA",
        "gepa_blame": "memtrace_loop.optimizers.registry:GEPA_BLAME",
        "none": "memtrace_loop.optimizers.registry:NONE",
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
