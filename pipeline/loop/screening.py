"""Candidate screening: score a candidate on the dev questions its change can move before spending a
whole dev evaluation on it.

A screen (`build_screen`) is two sets of the incumbent's scored dev questions:

- **failures on the candidate's path**: the incumbent's wrong dev answers whose information path runs
  through a stage the candidate changes (`stages_on_path`: the stages upstream of the answer, plus those
  that read the question's evidence turns, so a fact never written still counts the stage that dropped
  it). A knob change counts the stages owning the knob; a candidate naming no stage screens every failure.
- **a guard**: a fixed, seeded sample of the questions the incumbent answered correctly (at least
  `min_guard`, `guard_fraction` of them), the questions a candidate could break.

`screen_verdict` estimates the candidate's whole-dev paired gain as if every question outside the screen
kept the incumbent's verdict (optimistic: breakage counts only where the guard sampled it). A candidate
whose estimate is below the gate's `min_gain` is screened out; one that passes is evaluated on the whole
dev split, where the gate decides. One that could not reach `min_gain` even by fixing every failure on
its path (`reachable`) is screened out without running anything.

`CandidateScreens` runs each (prompt set, knob changes) screen once per iteration, whoever asks first (the
gate, or an optimizer scoring dev questions through the `Evaluator`, e.g. GEPA's valset), through the
loop's own evaluation; `case` answers a per-question request for a screened-out candidate from its screen
and the incumbent, running nothing new. No acceptance (the loop's gate), no MLflow.

>>> s = ScreenSettings(guard_fraction=0.5, min_guard=1)
>>> guard_size(10, s), guard_size(1, s), guard_size(0, s)
(5, 1, 0)
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memtrace_loop.optimizers.base import TracedCase
from memtrace_loop.pipeline.analysis.evaluation import PairedDifference, paired_difference
from memtrace_loop.pipeline.analysis.judge import JUDGE_STAGE
from memtrace_loop.pipeline.core.conventions import answer_name, first_version, turn_name
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.records import CaseResult, Dataset, PromptSet
from memtrace_loop.pipeline.core.single_flight import KeyedLocks
from memtrace_loop.pipeline.loop.runner import RunResult
from memtrace_loop.pipeline.loop.settings import ScreenSettings

logger = logging.getLogger(__name__)

__all__ = [
    "CandidateScreens", "Screen", "ScreenOutcome", "ScreenSettings", "ScreenVerdict", "build_screen",
    "estimated_results", "guard_size", "reachable", "screen_verdict", "stages_on_path",
]


@dataclass(frozen=True)
class Screen:
    """The dev questions one candidate is screened on (ids in dataset order) and why."""

    stages: tuple[str, ...]  # the stages whose paths select failures (empty: every failure)
    failures: tuple[str, ...]
    guard: tuple[str, ...]

    @property
    def question_ids(self) -> tuple[str, ...]:
        return (*self.failures, *self.guard)


@dataclass(frozen=True)
class ScreenVerdict:
    """What the screen saw: failures fixed, guard questions broken, and the whole-dev estimate."""

    questions: int  # the screen's questions that were run (0: it could not pass even fixing all, see `reachable`)
    fixed: int
    broken: int
    estimate: PairedDifference  # the paired gain over dev, outside the screen assumed unchanged
    passed: bool


def guard_size(correct: int, settings: ScreenSettings) -> int:
    """How many of `correct` incumbent-correct questions the guard samples."""
    return min(correct, max(settings.min_guard, math.ceil(settings.guard_fraction * correct)))


def stages_on_path(graph: ExecutionGraph, question_id: str, evidence: Iterable[str] = ()) -> frozenset[str]:
    """The stages on a question's information path in `graph`: those of the operations upstream of its
    (latest) answer and those of the operations that read one of its `evidence` turns (judge excluded).
    Empty when the graph holds no answer to the question."""
    answer = graph.latest(answer_name(question_id))
    if answer is None:
        return frozenset()
    nodes = set(graph.ancestors(answer.id))
    for turn in evidence:
        turn_id = first_version(turn_name(turn))
        if turn_id in graph:
            nodes.update(op.id for op in graph.consumers(turn_id))
    stages = {graph.operation(n).stage for n in nodes if n.startswith("op:")}
    return frozenset(stages - {JUDGE_STAGE})


def _scored(results: Sequence[CaseResult], excluded: Collection[int]) -> list[CaseResult]:
    return [r for r in results if r.question.category not in excluded]


def build_screen(
    incumbent: Sequence[CaseResult],
    graph_by_conversation: Mapping[str, ExecutionGraph],
    stages: Collection[str],
    settings: ScreenSettings,
    *,
    seed: int,
    exclude_categories: Collection[int] = (5,),
) -> Screen:
    """The screen of a candidate changing `stages` (empty: any) against the incumbent's dev results."""
    scored = _scored(incumbent, exclude_categories)
    wanted = frozenset(stages)
    failures = []
    for result in scored:
        if result.correct:
            continue
        graph = graph_by_conversation.get(result.question.conversation_id)
        path = stages_on_path(graph, result.question.id, result.question.evidence) if graph else frozenset()
        if not wanted or not path or path & wanted:  # an untraced failure is kept: nothing says it is off-path
            failures.append(result.question.id)
    correct = sorted(r.question.id for r in scored if r.correct)
    sampled = set(random.Random(seed).sample(correct, guard_size(len(correct), settings)))
    guard = tuple(r.question.id for r in scored if r.question.id in sampled)
    return Screen(tuple(sorted(wanted)), tuple(failures), guard)


def reachable(screen: Screen, scored: int, min_gain: float) -> bool:
    """Whether fixing every failure on the candidate's path and breaking nothing would reach `min_gain` over
    `scored` dev questions; when not, the candidate is screened out without running anything.

    >>> reachable(Screen((), ("q1",), ("q2",)), 50, 0.02), reachable(Screen((), (), ("q2",)), 50, 0.02)
    (True, False)
    """
    return scored > 0 and len(screen.failures) / scored >= min_gain - 1e-12


def estimated_results(screened: Sequence[CaseResult], incumbent: Sequence[CaseResult]) -> tuple[CaseResult, ...]:
    """The incumbent's dev results with the screened questions' results put in their place."""
    by_id = {r.question.id: r for r in screened}
    return tuple(by_id.get(r.question.id, r) for r in incumbent)


def screen_verdict(
    screen: Screen,
    screened: Sequence[CaseResult],
    incumbent: Sequence[CaseResult],
    min_gain: float,
    *,
    seed: int = 0,
    exclude_categories: Collection[int] = (5,),
) -> ScreenVerdict:
    """Pass or not: the optimistic whole-dev estimate of the candidate's paired gain reaches `min_gain`."""
    before = {r.question.id: r.correct for r in incumbent}
    after = {r.question.id: r.correct for r in screened}
    fixed = sum(1 for q in screen.failures if after.get(q) and not before.get(q))
    broken = sum(1 for q in screen.guard if before.get(q) and not after.get(q))
    estimate = paired_difference(estimated_results(screened, incumbent), incumbent, seed=seed,
                                 exclude_categories=exclude_categories)
    passed = math.isfinite(estimate.mean_difference) and estimate.mean_difference >= min_gain
    return ScreenVerdict(len(screened), fixed, broken, estimate, passed)


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

    def outcome(self, prompts: PromptSet, knobs: Mapping[str, Any], stages: Sequence[str]) -> ScreenOutcome | None:
        """The screen of `prompts` with the knob changes `knobs`, moving `stages` (empty: any); run once.
        None: screening is off, or the screen would hold every scored dev question (the whole-dev
        evaluation then costs no more)."""
        if not self._settings.enabled:
            return None
        key = f"{prompts.digest()}|{sorted(knobs.items())!r}"
        with self._runs.hold(key):
            if key not in self._outcomes:
                self._outcomes[key] = self._run(prompts, knobs, stages)
            return self._outcomes[key]

    def _run(self, prompts: PromptSet, knobs: Mapping[str, Any], stages: Sequence[str]) -> ScreenOutcome | None:
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
            "estimated gain %+.3f: %s (%d budget calls)", ", ".join(stages) or "every stage",
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
