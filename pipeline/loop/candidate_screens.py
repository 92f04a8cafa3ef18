"""Running candidate screens for one loop: each (prompt set, knob changes) screened once per iteration,
whoever asks first — the loop's gate, or an optimizer scoring dev questions through the `Evaluator`
(GEPA's valset evaluation of a new candidate).

`CandidateScreens.outcome` builds the screen (`pipeline.loop.screening.build_screen`) against the
incumbent's dev results, runs its questions as one evaluation through the loop (so built memories are
reused and calls counted), and keeps the verdict; concurrent askers for the same candidate wait for the
first. `CandidateScreens.case` answers a per-question request for a screened-out candidate without
running anything new: a screened question gets the screen's own result, any other the incumbent's (the
screen's assumption, so an optimizer's dev score of such a candidate is the screen's estimate).

It does not decide acceptance (the loop's gate does, on the whole dev split) and does not log.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memtrace_loop.optimizers.base import TracedCase
from memtrace_loop.pipeline.core.records import Dataset, PromptSet
from memtrace_loop.pipeline.core.single_flight import KeyedLocks
from memtrace_loop.pipeline.loop.runner import RunResult
from memtrace_loop.pipeline.loop.screening import (
    Screen,
    ScreenSettings,
    ScreenVerdict,
    build_screen,
    reachable,
    screen_verdict,
)

logger = logging.getLogger(__name__)

__all__ = ["CandidateScreens", "ScreenOutcome"]

# (prompts, the part of dev to run, knob changes) -> the run; the loop's own evaluation
Evaluate = Callable[[PromptSet, Dataset, Mapping[str, Any]], RunResult]


@dataclass(frozen=True)
class ScreenOutcome:
    """A candidate's screen: its questions, what it saw, the budget calls it spent, and its run (None
    when nothing was run: the candidate could not pass, `screening.reachable`)."""

    screen: Screen
    verdict: ScreenVerdict
    calls: int
    run: RunResult | None = None


class CandidateScreens:
    """The screens of one iteration against one incumbent dev result (thread-safe)."""

    def __init__(
        self, dev: Dataset, incumbent: RunResult, evaluate: Evaluate, spent: Callable[[], int], *,
        settings: ScreenSettings, min_gain: float, seed: int, exclude_categories: Sequence[int],
    ) -> None:
        self._dev = dev
        self._conversations = {c.id: c for c in dev.conversations}
        self._incumbent = incumbent
        self._evaluate = evaluate
        self._spent = spent
        self._settings = settings
        self._min_gain = min_gain
        self._seed = seed
        self._excluded = tuple(exclude_categories)
        self._runs = KeyedLocks()
        self._outcomes: dict[str, ScreenOutcome | None] = {}

    @property
    def enabled(self) -> bool:
        return self._settings.enabled

    def outcome(
        self, prompts: PromptSet, knobs: Mapping[str, Any], stages: Sequence[str], label: str = ""
    ) -> ScreenOutcome | None:
        """The screen of `prompts` with the knob changes `knobs`, moving `stages` (empty: any); run once.
        None: screening is off, or the screen would hold every scored dev question (the whole-dev
        evaluation then costs no more)."""
        if not self._settings.enabled:
            return None
        key = f"{prompts.digest()}|{sorted(knobs.items())!r}"
        with self._runs.hold(key):
            if key not in self._outcomes:
                self._outcomes[key] = self._run(prompts, knobs, stages, label)
            return self._outcomes[key]

    def _run(
        self, prompts: PromptSet, knobs: Mapping[str, Any], stages: Sequence[str], label: str
    ) -> ScreenOutcome | None:
        incumbent, scored = self._incumbent, self._incumbent.report.overall.n
        screen = build_screen(incumbent.results, incumbent.graph_by_conversation, stages, self._settings,
                              seed=self._seed, exclude_categories=self._excluded)
        if len(screen.question_ids) >= scored:
            return None
        start = self._spent()
        run = None  # nothing is run when fixing every failure on its path would not reach min_gain
        if reachable(screen, scored, self._min_gain):
            run = self._evaluate(prompts, self._dev.for_questions(screen.question_ids), knobs)
        verdict = screen_verdict(screen, run.results if run else (), incumbent.results, self._min_gain,
                                 seed=self._seed, exclude_categories=self._excluded)
        outcome = ScreenOutcome(screen, verdict, self._spent() - start, run)
        logger.info(
            "screen of %s: %d of %d dev questions run (%d failures on its path, %d guard), %d fixed, %d broken, "
            "estimated gain %+.3f: %s (%d budget calls)", label or ", ".join(stages) or "every stage",
            verdict.questions, scored, len(screen.failures), len(screen.guard), verdict.fixed, verdict.broken,
            verdict.estimate.mean_difference, "passed" if verdict.passed else "screened out", outcome.calls,
        )
        return outcome

    def case(self, outcome: ScreenOutcome, question_id: str) -> TracedCase:
        """A dev question's case for a screened-out candidate: the screen's result for a screened question,
        else the incumbent's (nothing new is run)."""
        run = outcome.run
        source = run if run is not None and question_id in run.result_by_question else self._incumbent
        result = source.result_by_question[question_id]
        conversation = self._conversations[result.question.conversation_id]
        graph = source.graph_by_conversation[conversation.id]
        return TracedCase(result, graph, conversation, (), 0, True)
