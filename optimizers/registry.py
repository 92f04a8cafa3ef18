"""Optimizers by config name: `optimizer=<name>` -> the module exporting its `SPEC` (`OptimizerSpec`).

`OPTIMIZERS` is a `pipeline.core.registry.Registry`: adding an optimizer is its own module (exporting
`SPEC`: settings record, `build`, `compare`), one line below and `conf/optimizer/<name>.yaml`; the
project's own are named in `optimizers.specs` (DSPy-free, each builder importing its module). Sweeps
list `OPTIMIZERS.compared()` (the `memtrace.compared` config resolver, `conf/__init__.py`).
`optimizer_settings(name, node)` checks a config node against the spec's schema and
`build_optimizer(name, rewriter_lm, node, system=, attributor=, work_dir=)` builds the optimizer with
what is fixed for its run: an unknown name, an unknown key, a non-positive value or a missing rewriter
LM is a `ConfigError` (a ValueError) naming `optimizer.<key>`. It does not configure DSPy or build
LMs (see `pipeline.backends`).
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
    name: str,
    rewriter_lm: dspy.BaseLM | None,
    settings: Mapping[str, Any] | None = None,
    *,
    system: MemorySystem | None = None,
    attributor: Attributor | None = None,
    work_dir: Path | None = None,
) -> Optimizer:
    """The optimizer called `name`, built once for its run: `rewriter_lm` for its rewrites (unused by
    `none`), `system` the memory system it optimizes, `attributor` the loop's, `work_dir` where it may
    keep resumable state (a temporary folder when None)."""
    spec = OPTIMIZERS.get(name)
    setup = OptimizerSetup(optimizer_settings(name, settings), rewriter_lm, system, attributor, work_dir)
    return spec.build(setup)
