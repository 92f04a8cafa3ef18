"""Optimizers by config name: `optimizer.name` -> (settings schema, builder).

Each optimizer module exports `Settings` (the frozen record that is the schema and the single home of
the defaults of its `optimizer` config node) and `build(rewriter_lm, settings) -> Optimizer`. Adding an
optimizer is its own module, one line in `MODULE_BY_OPTIMIZER` and `conf/optimizer/<name>.yaml`.
`build_optimizer(name, rewriter_lm, settings)` checks `settings` (the `optimizer` config node; its
`name` key is ignored) against the schema: an unknown name, an unknown key, a non-positive value or a
missing rewriter LM is a `ConfigError` (a ValueError) naming `optimizer.<key>`. It does not configure
DSPy or build LMs (see `pipeline.backends`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import dspy
from memtrace_loop.optimizers.base import Optimizer
from memtrace_loop.optimizers.noop import Settings as NoSettings
from memtrace_loop.optimizers.rewrite import RewriteSettings
from memtrace_loop.pipeline.core.config import ConfigError, parse_config

__all__ = ["ENTRY_BY_OPTIMIZER", "OPTIMIZER_NAMES", "NoSettings", "RewriteSettings", "build_optimizer",
           "optimizer_entry", "optimizer_settings"]

MODULE_BY_OPTIMIZER: Mapping[str, str] = MappingProxyType(
    {
        "attribution": "memtrace_loop.optimizers.attribution_guided",
        "uniform": "memtrace_loop.optimizers.uniform",
        "uniform_reasons": "memtrace_loop.optimizers.uniform_reasons",
        "gepa": "memtrace_loop.optimizers.gepa",
        "gepa_blame": "memtrace_loop.optimizers.gepa_blame",
        "none": "memtrace_loop.optimizers.noop",
    }
)


@dataclass(frozen=True)
class OptimizerEntry:
    schema: type
    build: Callable[[dspy.BaseLM | None, Any], Optimizer]


def _load(module_name: str) -> OptimizerEntry:
    module = importlib.import_module(module_name)
    return OptimizerEntry(module.Settings, module.build)


ENTRY_BY_OPTIMIZER: Mapping[str, OptimizerEntry] = MappingProxyType(
    {name: _load(module) for name, module in MODULE_BY_OPTIMIZER.items()}
)
OPTIMIZER_NAMES: tuple[str, ...] = tuple(ENTRY_BY_OPTIMIZER)


def optimizer_entry(name: object) -> OptimizerEntry:
    if not isinstance(name, str) or name not in ENTRY_BY_OPTIMIZER:
        raise ConfigError(f"optimizer.name: unknown optimizer {name!r}; choose one of {list(OPTIMIZER_NAMES)}")
    return ENTRY_BY_OPTIMIZER[str(name)]


def optimizer_settings(name: object, settings: Mapping[str, Any] | None) -> Any:
    """The validated settings record of optimizer `name` from its config node (`name` key ignored)."""
    given = {k: v for k, v in (settings or {}).items() if k != "name"}
    return parse_config(optimizer_entry(name).schema, given, "optimizer")


def build_optimizer(name: str, rewriter_lm: dspy.BaseLM | None, settings: Mapping[str, Any] | None = None) -> Optimizer:
    """The optimizer called `name`, using `rewriter_lm` for its rewrites (unused by `none`)."""
    return optimizer_entry(name).build(rewriter_lm, optimizer_settings(name, settings))
