"""`optimizer=gepa_blame`: GEPA whose component choice and per-stage feedback follow attribution.

`BlameComponentSelector` mutates the minibatch's most-blamed prompt stage (round robin when none);
`BlameMetric` keeps the judge's score but tells a stage the attribution did not blame that the failure lies
elsewhere. One attribution per prediction (`BlameSource`).
"""

from __future__ import annotations

import threading
from typing import Any

from gepa.strategies.component_selector import RoundRobinReflectionComponentSelector
from memtrace_loop.optimizers.base import OptimizationContext, OptimizerSetup, TracedCase
from memtrace_loop.optimizers.feedback import feedback_for_attribution, feedback_for_other_stage
from memtrace_loop.optimizers.gepa import GepaOptimizer, Settings
from memtrace_loop.optimizers.gepa_program import JudgeMetric, judge_feedback, traced_of
from memtrace_loop.pipeline.analysis.attribution.lineage import LineageAttributor
from memtrace_loop.pipeline.analysis.attribution.protocol import Attributor
from memtrace_loop.pipeline.analysis.attribution.records import Attribution, Tunable
from memtrace_loop.pipeline.analysis.blame import aggregate_blame

__all__ = ["BlameComponentSelector", "BlameMetric", "BlameSource", "GepaBlameOptimizer", "Settings", "build"]

_ATTRIBUTION_KEY = "memtrace_attribution"


def blamed_prompt_stages(attribution: Attribution) -> tuple[str, ...]:
    return tuple(c.stage for c in attribution.causes() if c.tunable == Tunable.PROMPT)


class BlameSource:
    """Attributions of the program's failed predictions, made once per prediction (thread-safe)."""

    def __init__(self, attributor: Attributor) -> None:
        self.attributor = attributor
        self._lock = threading.Lock()

    def attribution(self, prediction: Any) -> Attribution | None:
        traced = traced_of(prediction)
        if traced is None or traced.case.correct:
            return None
        with self._lock:
            if _ATTRIBUTION_KEY not in prediction:
                prediction[_ATTRIBUTION_KEY] = self.attributor.attribute(traced.graph, traced.case, traced.conversation)
            return prediction[_ATTRIBUTION_KEY]


class BlameComponentSelector:
    """Mutates the most-blamed prompt stage of the minibatch's failures (round robin when none)."""

    def __init__(self, source: BlameSource) -> None:
        self.source = source
        self.fallback = RoundRobinReflectionComponentSelector()
        self.choices: list[tuple[str, str]] = []  # (stage, "blame" | "round_robin"), in order

    def __call__(
        self, state: Any, trajectories: list[Any], subsample_scores: list[float], candidate_idx: int,
        candidate: dict[str, str],
    ) -> list[str]:
        attributions = [a for t in trajectories if (a := self.source.attribution(t.get("prediction"))) is not None]
        stages = [s for s in aggregate_blame(attributions).prompt_stages() if s in candidate]
        if stages:
            self.choices.append((stages[0], "blame"))
            return [stages[0]]
        chosen = self.fallback(state, trajectories, subsample_scores, candidate_idx, candidate)
        self.choices.extend((stage, "round_robin") for stage in chosen)
        return chosen


class BlameMetric(JudgeMetric):
    """The judge's score; per-stage feedback routed by the attribution."""

    def __init__(self, source: BlameSource) -> None:
        self.source = source

    def stage_feedback(self, prediction: Any, traced: TracedCase, pred_name: str | None) -> str:
        attribution = self.source.attribution(prediction) if pred_name is not None else None
        if attribution is None:
            return judge_feedback(traced.case).render()
        if pred_name in blamed_prompt_stages(attribution):
            return feedback_for_attribution(attribution).render()
        return feedback_for_other_stage(attribution).render()  # the failure lies in the blamed stage


class GepaBlameOptimizer(GepaOptimizer):
    """GEPA with blame-guided component selection and attribution-routed feedback."""

    name: str = "gepa_blame"

    def metric_and_selector(self, context: OptimizationContext) -> tuple[JudgeMetric, Any]:
        source = BlameSource(self.attributor or LineageAttributor())
        return BlameMetric(source), BlameComponentSelector(source)

    def describe_run(self, selector: Any) -> str:
        choices = getattr(selector, "choices", [])
        by_blame = sum(1 for _, how in choices if how == "blame")
        return f"{by_blame} of {len(choices)} components chosen by blame"


def build(setup: OptimizerSetup) -> GepaBlameOptimizer:
    """The optimizer from its validated settings; the rewriter LM is GEPA's reflection LM."""
    return GepaBlameOptimizer.from_setup(setup)
