"""Optimizers by config name: `optimizer.name` -> (settings schema, builder).

`build_optimizer(name, rewriter_lm, settings)` knows `attribution`, `uniform` and `none`. `settings` is
the `optimizer` config node (its `name` key is ignored) and is checked against the optimizer's schema:
`RewriteSettings` (the single home of the rewriting optimizers' defaults) or `NoSettings`. An unknown
name, an unknown key, a non-positive value or a missing rewriter LM is a `ConfigError` (a ValueError)
naming `optimizer.<key>`. It does not configure DSPy or build LMs (see `pipeline.backends.lm`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from types import MappingProxyType
from typing import Any

import dspy
from memtrace_loop.optimizers.attribution_guided import AttributionGuidedOptimizer
from memtrace_loop.optimizers.base import Optimizer
from memtrace_loop.optimizers.noop import NoOptimizer
from memtrace_loop.optimizers.rewrite import DEFAULT_MAX_INSTRUCTION_CHARS, InstructionRewriter
from memtrace_loop.optimizers.uniform import UniformBlameOptimizer
from memtrace_loop.pipeline.core.config import ConfigError, parse_config


@dataclass(frozen=True)
class RewriteSettings:
    """Settings of the optimizers that rewrite the blamed stages' instructions."""

    top_stages: int = 2  # stages rewritten (one candidate each) per iteration
    max_instruction_chars: int = DEFAULT_MAX_INSTRUCTION_CHARS
    max_feedback_chars: int = 4000

    def __post_init__(self) -> None:
        for key, value in asdict(self).items():
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{key} must be a positive integer, got {value!r}")


@dataclass(frozen=True)
class NoSettings:
    """The `none` baseline has no settings."""


def _rewriter(name: str, lm: dspy.BaseLM | None, settings: RewriteSettings) -> InstructionRewriter:
    if lm is None:
        raise ConfigError(f"optimizer {name!r} needs a rewriter LM")
    return InstructionRewriter(lm, max_chars=settings.max_instruction_chars)


def _attribution(lm: dspy.BaseLM | None, s: RewriteSettings) -> Optimizer:
    return AttributionGuidedOptimizer(_rewriter("attribution", lm, s), s.top_stages, s.max_feedback_chars)


def _uniform(lm: dspy.BaseLM | None, s: RewriteSettings) -> Optimizer:
    return UniformBlameOptimizer(_rewriter("uniform", lm, s), s.top_stages, s.max_feedback_chars)


@dataclass(frozen=True)
class OptimizerEntry:
    schema: type
    build: Callable[[dspy.BaseLM | None, Any], Optimizer]


ENTRY_BY_OPTIMIZER: Mapping[str, OptimizerEntry] = MappingProxyType(
    {
        "attribution": OptimizerEntry(RewriteSettings, _attribution),
        "uniform": OptimizerEntry(RewriteSettings, _uniform),
        "none": OptimizerEntry(NoSettings, lambda lm, s: NoOptimizer()),
    }
)
OPTIMIZER_NAMES: tuple[str, ...] = tuple(ENTRY_BY_OPTIMIZER)


def optimizer_entry(name: object) -> OptimizerEntry:
    if name not in ENTRY_BY_OPTIMIZER:
        raise ConfigError(f"optimizer.name: unknown optimizer {name!r}; choose one of {list(OPTIMIZER_NAMES)}")
    return ENTRY_BY_OPTIMIZER[str(name)]


def optimizer_settings(name: str, settings: Mapping[str, Any] | None) -> Any:
    """The validated settings record of optimizer `name` from its config node (`name` key ignored)."""
    given = {k: v for k, v in (settings or {}).items() if k != "name"}
    return parse_config(optimizer_entry(name).schema, given, "optimizer")


def build_optimizer(name: str, rewriter_lm: dspy.BaseLM | None, settings: Mapping[str, Any] | None = None) -> Optimizer:
    """The optimizer called `name`, using `rewriter_lm` for its rewrites (unused by `none`)."""
    return optimizer_entry(name).build(rewriter_lm, optimizer_settings(name, settings))
