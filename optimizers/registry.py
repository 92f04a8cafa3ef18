"""Building an optimizer by name from configuration.

`build_optimizer(name, rewriter_lm, settings)` knows the names `attribution`, `uniform` and `none`.
`settings` may hold `top_stages`, `max_feedback_chars` and `max_instruction_chars` (positive integers;
a `name` key is ignored so a whole Hydra group node can be passed); any other key, an unknown name or a
missing rewriter LM is a `ValueError` that says what is allowed. It does not configure DSPy or build
LMs (see `pipeline.lm`).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import dspy
from memtrace_loop.optimizers.attribution_guided import AttributionGuidedOptimizer
from memtrace_loop.optimizers.base import Optimizer
from memtrace_loop.optimizers.noop import NoOptimizer
from memtrace_loop.optimizers.rewrite import DEFAULT_MAX_INSTRUCTION_CHARS, InstructionRewriter
from memtrace_loop.optimizers.uniform import UniformBlameOptimizer

OPTIMIZER_NAMES: tuple[str, ...] = ("attribution", "uniform", "none")
_DEFAULTS: Mapping[str, int] = MappingProxyType(
    {"top_stages": 2, "max_feedback_chars": 4000, "max_instruction_chars": DEFAULT_MAX_INSTRUCTION_CHARS}
)


def _settings(settings: Mapping[str, Any] | None) -> dict[str, int]:
    given = dict(settings or {})
    given.pop("name", None)
    unknown = sorted(str(key) for key in given if key not in _DEFAULTS)
    if unknown:
        raise ValueError(f"optimizer settings: unknown keys {unknown}; allowed keys: {sorted(_DEFAULTS)}")
    values = {**_DEFAULTS, **given}
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"optimizer setting {key} must be a positive integer, got {value!r}")
    return values


def build_optimizer(name: str, rewriter_lm: dspy.BaseLM | None, settings: Mapping[str, Any] | None = None) -> Optimizer:
    """The optimizer called `name`, using `rewriter_lm` for its rewrites (unused by `none`)."""
    if name not in OPTIMIZER_NAMES:
        raise ValueError(f"unknown optimizer {name!r}; choose one of {list(OPTIMIZER_NAMES)}")
    values = _settings(settings)
    if name == "none":
        return NoOptimizer()
    if rewriter_lm is None:
        raise ValueError(f"optimizer {name!r} needs a rewriter LM")
    rewriter = InstructionRewriter(rewriter_lm, max_chars=values["max_instruction_chars"])
    if name == "attribution":
        return AttributionGuidedOptimizer(rewriter, values["top_stages"], values["max_feedback_chars"])
    return UniformBlameOptimizer(rewriter, values["top_stages"], values["max_feedback_chars"])
