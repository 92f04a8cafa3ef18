"""The no-optimization baseline: proposes nothing, so the loop keeps the starting prompts.

It exists so "no optimization" runs through the same loop, gate and logging as the real optimizers.
It does not call any LM.
"""

from __future__ import annotations

from collections.abc import Sequence

from memtrace_loop.optimizers.base import Candidate, OptimizationContext, OptimizerSetup


class NoOptimizer:
    """Proposes no candidates."""

    name: str = "none"

    def propose(self, context: OptimizationContext) -> Sequence[Candidate]:
        return ()


def build(setup: OptimizerSetup) -> NoOptimizer:
    """The baseline; it needs no LM."""
    return NoOptimizer()
