"""`optimizer=uniform` and `optimizer=uniform_reasons`: rewrite prompts without routing, at the same budget.

`uniform`: every failure is blamed on every prompt stage (`uniform_blame`) with the same no-attribution
feedback; `top_stages` stages per iteration, rotating in prompt-set order. No attributions, no knobs.
`uniform_reasons`: the same rotation, but the feedback is the attributed failures' own blocks: it isolates
what choosing the stage is worth against `attribution`.
"""

from __future__ import annotations

from collections.abc import Sequence

from memtrace_loop.optimizers.base import Candidate, OptimizationContext, OptimizerSetup
from memtrace_loop.optimizers.feedback import feedback_for_attribution, feedback_without_attribution, fold_feedback
from memtrace_loop.optimizers.rewrite import RewritingOptimizer
from memtrace_loop.pipeline.analysis.blame import uniform_blame


def rotated(stages: Sequence[str], iteration: int, count: int) -> tuple[str, ...]:
    """`count` consecutive stages (cyclically) starting at `iteration * count`: over successive
    iterations every stage gets its turn."""
    if not stages:
        return ()
    count = min(count, len(stages))
    start = (iteration * count) % len(stages)
    return tuple(stages[(start + i) % len(stages)] for i in range(count))


class UniformBlameOptimizer(RewritingOptimizer):
    """Rewrites `top_stages` prompt stages per iteration, in rotation, from unattributed feedback."""

    name: str = "uniform"

    def target_stages(self, context: OptimizationContext) -> tuple[str, ...]:
        """This iteration's stages: the uniform blame table's stages (all tied), rotated."""
        failed = [case for case in context.failures if not case.correct]
        if not failed:
            return ()
        blame = uniform_blame(failed, context.prompts.stages())
        return rotated(blame.prompt_stages(), context.iteration, self.top_stages)

    def feedback(self, context: OptimizationContext) -> str:
        """The one folded feedback text every rotated stage receives: the failures, unattributed."""
        failed = [case for case in context.failures if not case.correct]
        return fold_feedback([feedback_without_attribution(c) for c in failed], self.max_feedback_chars)

    def describe(self, context: OptimizationContext, stage: str) -> str:
        """The first sentence of a candidate's rationale: where the feedback came from."""
        failed = sum(1 for case in context.failures if not case.correct)
        return (
            f"Uniform blame (no attribution): all {failed} failures were blamed on each of the "
            f"{len(context.prompts)} prompt stages; stage {stage} was rewritten in rotation from their "
            "unattributed feedback"
        )

    def propose(self, context: OptimizationContext) -> Sequence[Candidate]:
        stages = self.target_stages(context)
        feedback = self.feedback(context) if stages else ""
        if not feedback:
            return []
        candidates = [self.rewrite_stage(context.prompts, s, feedback, self.describe(context, s)) for s in stages]
        return [c for c in candidates if c is not None]


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


def build(setup: OptimizerSetup) -> UniformBlameOptimizer:
    """The optimizer from its validated settings, the rewriter LM and the system's stage signatures."""
    return UniformBlameOptimizer.from_setup("uniform", setup)


def build_reasons(setup: OptimizerSetup) -> UniformReasonsOptimizer:
    return UniformReasonsOptimizer.from_setup("uniform_reasons", setup)
