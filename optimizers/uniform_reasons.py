"""`optimizer=uniform_reasons`: the attributor's reasons, sent to every prompt stage in rotation.

Like `uniform`, but the feedback is the attributed failures' own blocks: it isolates what choosing the stage
is worth against `attribution`.
"""

from __future__ import annotations

from memtrace_loop.optimizers.base import OptimizationContext, OptimizerSetup
from memtrace_loop.optimizers.feedback import feedback_for_attribution, fold_feedback
from memtrace_loop.optimizers.uniform import UniformBlameOptimizer


class UniformReasonsOptimizer(UniformBlameOptimizer):
    """Rewrites `top_stages` prompt stages per iteration, in rotation, from the attributed feedback."""

    name: str = "uniform_reasons"

    def feedback(self, context: OptimizationContext) -> str:
        """Every attribution's block, folded (the same text for every rotated stage)."""
        return fold_feedback([feedback_for_attribution(a) for a in context.attributions], self.max_feedback_chars)

    def describe(self, context: OptimizationContext, stage: str) -> str:
        return (
            f"Attributor's reasons without routing: the {len(context.attributions)} attributed failures' "
            f"feedback was sent to each of the {len(context.prompts)} prompt stages; stage {stage} was "
            "rewritten in rotation from it"
        )


def build(setup: OptimizerSetup) -> UniformReasonsOptimizer:
    """The optimizer from its validated settings, the rewriter LM and the system's stage signatures."""
    return UniformReasonsOptimizer.from_setup("uniform_reasons", setup)
