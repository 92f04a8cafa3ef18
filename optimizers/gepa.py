"""`optimizer=gepa`: `dspy.GEPA` over the memory system as one program, inside our loop.

One GEPA run spans the loop: each `propose()` continues it (from its saved state) for another
`max_metric_calls`, so the loop's iterations are checkpoints of one GEPA search, not restarts that
re-score the starting prompts on dev every time. The program is
`gepa_program.MemoryProgram` (components = the system's stage prompts; examples = questions, answered
through the loop's `Evaluator`, per question, so built memories are reused and every LM call is counted in the
loop's totals), the trainset is the train questions, the valset the dev questions (GEPA's Pareto
tracking; excluded categories left out, as in the loop's scores), the reflection LM is the rewriter
LM; the run starts from the loop's starting prompts. GEPA's candidates that score above the loop's
current prompt set on dev (GEPA's own valset scores) and were not proposed before are proposed, best
first; the loop's gate then accepts or rejects them on dev like every optimizer's, so MLflow logging (parent and
nested iteration runs) and the prompt export are the loop's own. GEPA's whole candidate pool (score,
parents, when found, changed stages) rides along as a table each candidate carries (`Candidate.tables`),
logged with it, and is written next to GEPA's state after every iteration (the app logs those files).

Budget: with the loop's `CallBudget`, GEPA stops (a gepa stop callback, checked between its steps) as
soon as the budget has nothing left; `max_metric_calls` (per iteration, cumulative over the run) caps
it as well, and is the only limit when there is no budget. Reflection LM calls are made by the
rewriter LM and are not in the loop's task-call totals (LM-level counting is the budget's). A started
step finishes, so a run may overshoot by one minibatch and its reflection. Reproducible: GEPA's
`seed`. Resumable: GEPA's state lives in `<run dir>/optimizer/<name>` (`OptimizerSetup.work_dir`;
a temporary directory of the optimizer outside a run), so a resumed loop continues the GEPA run from
its last saved step.

The blame-guided variant (component selector and per-stage feedback) is `optimizers.gepa_blame`; this
module gives it the hooks (`metric_and_selector`). It does not accept candidates or tune knobs.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Self

import dspy
from memtrace_loop.optimizers.base import CallBudget, Candidate, OptimizationContext, OptimizerSetup
from memtrace_loop.optimizers.gepa_program import JudgeMetric, MemoryProgram, question_examples
from memtrace_loop.optimizers.settings import GepaSettings as Settings
from memtrace_loop.pipeline.analysis.attribution.protocol import Attributor
from memtrace_loop.pipeline.core.config import ConfigError
from memtrace_loop.pipeline.core.records import PromptSet

logger = logging.getLogger(__name__)

TABLE_FILE = "gepa_candidates.json"


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
            metric,
            max_metric_calls=self.settings.max_metric_calls * max(context.iteration, 1),
            reflection_lm=self.reflection_lm,
            reflection_minibatch_size=self.settings.reflection_minibatch_size,
            candidate_selection_strategy=self.settings.candidate_selection_strategy,
            component_selector=selector,
            use_merge=self.settings.use_merge,
            num_threads=self.settings.num_threads,
            log_dir=str(log_dir),
            track_stats=True,
            warn_on_score_mismatch=False,
            seed=self.settings.seed,
            gepa_kwargs={"stop_callbacks": stoppers} if stoppers else None,
        )
        optimized = optimizer.compile(program, trainset=question_examples(train), valset=question_examples(dev))
        return self.candidates(optimized.detailed_results, context, selector, log_dir)

    def candidates(
        self, result: Any, context: OptimizationContext, selector: Any, log_dir: Path
    ) -> list[Candidate]:
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
