"""The routing ablation: the attributor's reasons, sent to every prompt stage in rotation.

Like `uniform` (same rotation over the prompt stages, same `top_stages` per iteration, same rewriter and
feedback budget), but the one feedback text every rotated stage receives is made of the attributed
failures' own blocks (`feedback_for_attribution`: error type, blamed operation and the attributor's
reason), folded. Against `attribution`, which sends the same reasons only to the blamed stages, it
isolates what choosing the stage is worth; against `uniform`, what the reasons' wording is worth.

It does not pick stages from the blame table, evaluate candidates, or tune knobs.
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
