"""`optimizer=gepa`: `dspy.GEPA` over the memory system as one program, inside our loop.

One GEPA run spans the loop: each `propose()` continues it for another `max_metric_calls`, and GEPA's
candidates better than the current prompts on dev are proposed, best first, for the loop's gate. It stops
when the `CallBudget` is spent; its state lives in `OptimizerSetup.work_dir` (resumable, seeded).

`optimizer=gepa_blame` (`GepaBlameOptimizer`, through `metric_and_selector`): `BlameComponentSelector`
mutates the minibatch's most-blamed prompt stage (round robin when none); `BlameMetric` keeps the judge's
score but tells a stage the attribution did not blame that the failure lies elsewhere. One attribution per
prediction (`BlameSource`).
"""

from __future__ import annotations

import json
import logging
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Self

import dspy
from gepa.strategies.component_selector import RoundRobinReflectionComponentSelector
from memtrace_loop.optimizers.base import CallBudget, Candidate, OptimizationContext, OptimizerSetup, TracedCase
from memtrace_loop.optimizers.feedback import feedback_for_attribution, feedback_for_other_stage
from memtrace_loop.optimizers.gepa_program import (
    JudgeMetric,
    MemoryProgram,
    judge_feedback,
    question_examples,
    traced_of,
)
from memtrace_loop.optimizers.settings import GepaSettings as Settings
from memtrace_loop.pipeline.analysis.attribution.lineage import LineageAttributor
from memtrace_loop.pipeline.analysis.attribution.protocol import Attributor
from memtrace_loop.pipeline.analysis.attribution.records import Attribution, Tunable
from memtrace_loop.pipeline.analysis.blame import aggregate_blame
from memtrace_loop.pipeline.core.config import ConfigError
from memtrace_loop.pipeline.core.records import PromptSet

logger = logging.getLogger(__name__)

TABLE_FILE = "gepa_candidates.json"
_ATTRIBUTION_KEY = "memtrace_attribution"


class BudgetStopper:
    """A gepa stop callback: True once the loop's call budget has nothing left."""

    def __init__(self, budget: CallBudget) -> None:
        self.budget = budget

    def __call__(self, gepa_state: Any) -> bool:
        remaining = self.budget.remaining()
        return remaining is not None and remaining <= 0


def candidate_table(result: Any, start: PromptSet) -> dict[str, list[str]]:
    """GEPA's candidate pool as table columns (one row per candidate, index 0 = the starting prompts)."""
    rows = range(len(result.candidates))
    return {
        "candidate": [str(i) for i in rows],
        "parents": [",".join(str(p) for p in result.parents[i] if p is not None) for i in rows],
        "dev_score": [f"{result.val_aggregate_scores[i]:.4f}" for i in rows],
        "found_at_metric_call": [str(result.discovery_eval_counts[i]) for i in rows],
        "changed_stages": [",".join(result.candidates[i].system.prompt_set().changed_stages(start)) for i in rows],
        "best": [str(i == result.best_idx) for i in rows],
    }


class GepaOptimizer:
    """Runs `dspy.GEPA` per loop iteration and proposes its improving candidates, best first."""

    name: str = "gepa"

    def __init__(
        self, reflection_lm: dspy.BaseLM, settings: Settings, attributor: Attributor | None = None,
        work_dir: Path | None = None,
    ) -> None:
        self.reflection_lm = reflection_lm
        self.settings = settings
        self.attributor = attributor  # the loop's attributor (gepa_blame's)
        self.work_dir = work_dir  # GEPA's state lives in <work_dir>/<name>
        self._proposed: set[str] = set()  # digests of prompt sets already sent to the gate
        self._scratch: Path | None = None  # GEPA's state when the loop gives no work_dir

    @classmethod
    def from_setup(cls, setup: OptimizerSetup) -> Self:
        """The optimizer from what is fixed for the run; a missing rewriter LM is a ConfigError."""
        if setup.rewriter_lm is None:
            raise ConfigError(f"optimizer {cls.name!r} needs a rewriter LM (GEPA's reflection LM)")
        return cls(setup.rewriter_lm, setup.settings, setup.attributor, setup.work_dir)

    def metric_and_selector(self, context: OptimizationContext) -> tuple[JudgeMetric, Any]:
        """The metric and component selector of one run (plain GEPA: the judge's verdict, round robin)."""
        return JudgeMetric(), "round_robin"

    def describe_run(self, selector: Any) -> str:
        return "components chosen round robin"

    def log_dir(self) -> Path:
        if self.work_dir is not None:
            return self.work_dir / self.name
        if self._scratch is None:
            self._scratch = Path(tempfile.mkdtemp(prefix=f"memtrace-{self.name}-"))
        return self._scratch

    def propose(self, context: OptimizationContext) -> Sequence[Candidate]:
        evaluator = context.evaluator
        if evaluator is None:
            raise ValueError(f"optimizer {self.name!r} runs inside the loop: it needs the context's evaluator")
        budget = context.budget
        if budget is not None and BudgetStopper(budget)(None):
            logger.info("%s: no call budget left, no GEPA run", self.name)
            return ()
        train, dev = evaluator.questions("train"), evaluator.questions("dev")
        if not train or not dev:
            return ()
        split_by_question = {q.id: "train" for q in train} | {q.id: "dev" for q in dev}
        program = MemoryProgram(evaluator.system(context.prompts), evaluator, split_by_question)
        metric, selector = self.metric_and_selector(context)
        log_dir = self.log_dir()
        stoppers = [BudgetStopper(budget)] if budget is not None else []
        optimizer = dspy.GEPA(
            metric, max_metric_calls=self.settings.max_metric_calls * max(context.iteration, 1),
            reflection_lm=self.reflection_lm, reflection_minibatch_size=self.settings.reflection_minibatch_size,
            candidate_selection_strategy=self.settings.candidate_selection_strategy, component_selector=selector,
            use_merge=self.settings.use_merge, num_threads=self.settings.num_threads, log_dir=str(log_dir),
            track_stats=True, warn_on_score_mismatch=False, seed=self.settings.seed,
            gepa_kwargs={"stop_callbacks": stoppers} if stoppers else None,
        )
        optimized = optimizer.compile(program, trainset=question_examples(train), valset=question_examples(dev))
        return self.candidates(optimized.detailed_results, context, selector, log_dir)

    def candidates(self, result: Any, context: OptimizationContext, selector: Any, log_dir: Path) -> list[Candidate]:
        table = candidate_table(result, context.prompts)
        text = json.dumps(table, indent=2)
        (log_dir / f"iteration-{context.iteration}-{TABLE_FILE}").write_text(text, encoding="utf-8")
        scores = result.val_aggregate_scores
        pool = [c.system.prompt_set() for c in result.candidates]
        start_score = max((s for s, p in zip(scores, pool, strict=True) if p == context.prompts), default=scores[0])
        order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
        proposed = []
        for index in order:
            prompts = pool[index]
            stages = prompts.changed_stages(context.prompts)
            if scores[index] <= start_score or not stages or prompts.digest() in self._proposed:
                continue
            self._proposed.add(prompts.digest())
            rationale = (
                f"GEPA ({self.name}, {self.describe_run(selector)}): candidate {index} of {len(scores)} scored "
                f"{scores[index]:.3f} on dev against {start_score:.3f} for the current prompts, after "
                f"{result.total_metric_calls} metric calls; changed {', '.join(stages)}."
            )
            proposed.append(Candidate(prompts, stages, rationale, tables={TABLE_FILE: table}))
        logger.info("%s: %d candidates, %d improve on dev", self.name, len(scores) - 1, len(proposed))
        return proposed


def build(setup: OptimizerSetup) -> GepaOptimizer:
    """The optimizer from its validated settings; the rewriter LM is GEPA's reflection LM."""
    return GepaOptimizer.from_setup(setup)


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


def build_blame(setup: OptimizerSetup) -> GepaBlameOptimizer:
    return GepaBlameOptimizer.from_setup(setup)
