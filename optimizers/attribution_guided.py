"""`optimizer=attribution`: rewrite the prompts of the stages the blame table points at.

For the `top_stages` most-blamed prompt stages, their attributed failures become folded feedback for the
`InstructionRewriter`; stages blamed through knobs get knob candidates (`optimizers.knobs`), in blame order.
It does not evaluate or accept candidates.
"""

from __future__ import annotations

from collections.abc import Sequence

from memtrace_loop.optimizers.base import Candidate, OptimizationContext, OptimizerSetup
from memtrace_loop.optimizers.feedback import feedback_for_attribution, fold_feedback
from memtrace_loop.optimizers.knobs import knob_candidates
from memtrace_loop.optimizers.rewrite import RewritingOptimizer
from memtrace_loop.pipeline.analysis.attribution.records import Tunable
from memtrace_loop.pipeline.analysis.blame import StageBlame


def _types(row: StageBlame) -> str:
    return ", ".join(f"{kind} {n}" for kind, n in row.count_by_error_type.items())


def unrewritable_note(context: OptimizationContext) -> str:
    """A sentence naming the blamed stages this optimizer cannot rewrite (knobs, or no prompt)."""
    knobs = [row for row in context.blame.rows if row.tunable != Tunable.PROMPT]
    missing = [s for s in context.blame.prompt_stages() if s not in context.prompts]
    parts = []
    if knobs:
        listed = "; ".join(f"{row.stage} ({row.count} failures: {_types(row)})" for row in knobs)
        parts.append(f"Blamed on non-prompt knobs, not rewritten (knob candidates address them): {listed}.")
    if missing:
        parts.append(f"Blamed stages with no prompt in this prompt set, not rewritten: {', '.join(missing)}.")
    return " ".join(parts)


class AttributionGuidedOptimizer(RewritingOptimizer):
    """Rewrites the most-blamed prompt stages from the feedback of their own attributed failures."""

    name: str = "attribution"

    def target_stages(self, context: OptimizationContext) -> tuple[str, ...]:
        """The most-blamed stages that have a prompt in the current prompt set, at most `top_stages`."""
        stages = [s for s in context.blame.prompt_stages() if s in context.prompts]
        return tuple(stages[: self.top_stages])

    def propose(self, context: OptimizationContext) -> Sequence[Candidate]:
        order = [row.stage for row in context.blame.rows]
        candidates = [*self.prompt_candidates(context), *knob_candidates(context, self.knob_fields_by_stage)]
        return sorted(candidates, key=lambda c: order.index(c.changed_stages[0]) if c.changed_stages[0] in order
                      else len(order))  # stable: within a stage, prompt first

    def prompt_candidates(self, context: OptimizationContext) -> list[Candidate]:
        note = unrewritable_note(context)
        candidates: list[Candidate] = []
        for stage in self.target_stages(context):
            attributed = [  # the stage's own blames, and joint causes that include it
                a for a in context.attributions
                if any(c.stage == stage and c.tunable == Tunable.PROMPT for c in a.causes())
            ]
            if not attributed:
                continue
            feedback = fold_feedback([feedback_for_attribution(a) for a in attributed], self.max_feedback_chars)
            row = context.blame.by_stage[stage]
            why = (
                f"Stage {stage} was blamed for {row.count} of {context.blame.total} attributed failures "
                f"({row.share:.0%}; {_types(row)}); its instruction was rewritten from their folded feedback"
            )
            candidate = self.rewrite_stage(context.prompts, stage, feedback, why, note)
            if candidate is not None:
                candidates.append(candidate)
        return candidates


def build(setup: OptimizerSetup) -> AttributionGuidedOptimizer:
    """The optimizer from its validated settings, the rewriter LM and the system's stage signatures and
    knob fields (for knob candidates)."""
    return AttributionGuidedOptimizer.from_setup("attribution", setup)
