"""The `Evaluator` an optimizer gets from the loop in one iteration (optimizers.base).

`LoopEvaluator` scores prompt sets on train or dev (whole splits or some questions, and one question at
a time) through the loop's own evaluation: its runner, memory cache, call counting, split log and
candidate screens. It neither decides what is accepted (the loop's gate does) nor touches the test split.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from memtrace_loop.memory_systems.base import MemorySystem
from memtrace_loop.optimizers.base import CandidateEvaluation, TracedCase
from memtrace_loop.pipeline.core.records import Dataset, PromptSet, Question
from memtrace_loop.pipeline.data.splits import Split
from memtrace_loop.pipeline.loop.budget import LoopBudget
from memtrace_loop.pipeline.loop.candidate_screens import CandidateScreens, ScreenOutcome
from memtrace_loop.pipeline.loop.case_runner import LoopCaseRunner
from memtrace_loop.pipeline.loop.runner import RunResult

__all__ = ["LoopEvaluator", "LoopView"]


class LoopView(Protocol):
    """What the evaluator uses of the loop (`pipeline.loop.optimization.OptimizationLoop`)."""

    system: MemorySystem
    splits: Split
    budget: LoopBudget

    def case_runner(self) -> LoopCaseRunner: ...

    def evaluate(
        self, prompts: PromptSet, split: str, iteration: int, dataset: Dataset | None = None,
        knobs: Mapping[str, Any] | None = None,
    ) -> RunResult: ...

    def candidate_stages(self, changed: Sequence[str], knobs: Mapping[str, Any]) -> tuple[str, ...]: ...


class LoopEvaluator:
    """The `Evaluator` an optimizer gets in one iteration: the loop's own evaluation (runner, memory
    cache, call counting, split log) on train or dev, or on some of their questions (batch), and single
    questions through a `LoopCaseRunner` (per question). An evaluation's `lm_calls_made` is the
    ledger's made calls (every role) while it ran: evaluations run concurrently by one optimizer would
    each see the others' calls too (the loop's totals stay exact).

    With screening on (`loop.screen`), a dev question asked of a prompt set other than the incumbent
    (`current`) first screens that prompt set (`CandidateScreens`, once per iteration, shared with the gate):
    a screened-out one is answered from its screen and the incumbent without running anything more, so
    an optimizer's whole-dev scoring of it (GEPA's valset) costs only the screen."""

    SPLITS = ("train", "dev")

    def __init__(
        self, loop: LoopView, iteration: int, knobs: Mapping[str, Any] | None = None,
        current: PromptSet | None = None, screens: CandidateScreens | None = None,
    ) -> None:
        self._loop = loop
        self._iteration = iteration
        self._knobs = dict(knobs or {})  # the loop's accepted knob changes: candidates are scored with them
        self._cases = loop.case_runner()
        self._current = current
        self._screens = screens

    def questions(self, split: str) -> tuple[Question, ...]:
        """The scored questions of train or dev (excluded categories left out)."""
        return self._cases.questions(split)

    def system(self, prompts: PromptSet) -> MemorySystem:
        """The loop's system with its accepted knob changes and `prompts`."""
        return self._loop.system.with_knobs(self._knobs).with_prompts(prompts)

    def run_case(self, system: MemorySystem, split: str, question_id: str) -> TracedCase:
        """One train or dev question answered and judged with `system` (memory from the loop's cache); a
        screened-out candidate's dev question from its screen (see the class doc)."""
        outcome = self._screen(system) if split == "dev" else None
        if outcome is not None and not outcome.verdict.passed and self._screens is not None:
            return self._screens.case(outcome, question_id)
        return self._cases.run_case(system, split, question_id)

    def _screen(self, system: MemorySystem) -> ScreenOutcome | None:
        if self._screens is None or self._current is None or not self._screens.enabled:
            return None
        prompts = system.prompt_set()
        base = self._loop.system.with_knobs(self._knobs).knob_values()
        changes = {k: v for k, v in system.knob_values().items() if base.get(k) != v}
        if prompts == self._current and not changes:
            return None  # the incumbent itself
        stages = prompts.changed_stages(self._current)
        return self._screens.outcome(prompts, {**self._knobs, **changes}, self._loop.candidate_stages(stages, changes))

    def evaluate(
        self, prompts: PromptSet, split: str = "train", question_ids: Sequence[str] | None = None
    ) -> CandidateEvaluation:
        if split not in self.SPLITS:
            raise ValueError(f"an optimizer may evaluate on {' or '.join(self.SPLITS)}, not {split!r}")
        dataset: Dataset = getattr(self._loop.splits, split)
        if question_ids is not None:
            wanted = set(question_ids)
            unknown = wanted - {q.id for q in dataset.questions}
            if unknown:
                raise ValueError(f"questions {sorted(unknown)} are not in the {split} split")
            dataset = dataset.for_questions(question_ids)
        before = self._loop.budget.tally()
        result = self._loop.evaluate(prompts, split, self._iteration, dataset, knobs=self._knobs)
        made = (self._loop.budget.tally() - before).made()
        return CandidateEvaluation(prompts, split, result.results, result.graph_by_conversation, result.report, made)
