"""The optimizer registry's entries: each option's `OptimizerSpec` (its settings record and builder).

One spec per line of `optimizers.registry` (`ATTRIBUTION`, `UNIFORM`, `UNIFORM_REASONS`, `GEPA`,
`GEPA_BLAME`, `NONE`), each naming its settings record (`optimizers.settings`) and a builder that
imports its optimizer's module when called, so listing the optimizers, sweeping them and validating
their settings (the config tree does, at every start) imports no DSPy. It builds nothing at import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memtrace_loop.optimizers.base import OptimizerSpec
from memtrace_loop.optimizers.settings import GepaSettings, NoSettings, RewriteSettings

if TYPE_CHECKING:
    from memtrace_loop.optimizers.base import Optimizer, OptimizerSetup

__all__ = ["ATTRIBUTION", "GEPA", "GEPA_BLAME", "NONE", "UNIFORM", "UNIFORM_REASONS"]


def _attribution(setup: OptimizerSetup) -> Optimizer:
    from memtrace_loop.optimizers.attribution_guided import build

    return build(setup)


def _uniform(setup: OptimizerSetup) -> Optimizer:
    from memtrace_loop.optimizers.uniform import build

    return build(setup)


def _uniform_reasons(setup: OptimizerSetup) -> Optimizer:
    from memtrace_loop.optimizers.uniform_reasons import build

    return build(setup)


def _gepa(setup: OptimizerSetup) -> Optimizer:
    from memtrace_loop.optimizers.gepa import build

    return build(setup)


def _gepa_blame(setup: OptimizerSetup) -> Optimizer:
    from memtrace_loop.optimizers.gepa_blame import build

    return build(setup)


def _none(setup: OptimizerSetup) -> Optimizer:
    from memtrace_loop.optimizers.noop import build

    return build(setup)


ATTRIBUTION = OptimizerSpec(RewriteSettings, _attribution)
UNIFORM = OptimizerSpec(RewriteSettings, _uniform)
UNIFORM_REASONS = OptimizerSpec(RewriteSettings, _uniform_reasons)
GEPA = OptimizerSpec(GepaSettings, _gepa)
GEPA_BLAME = OptimizerSpec(GepaSettings, _gepa_blame)
NONE = OptimizerSpec(NoSettings, _none)
