"""The closed loop (`OptimizationLoop`): evaluate, attribute, blame, propose, gate — iteration by iteration —
then test once; its records (`CandidateOutcome`, `IterationRecord`, `LoopResult`) and the `LoopEvaluator`
an optimizer scores prompt sets with.

Iteration 0 evaluates the starting prompt set on train and dev. Each later iteration evaluates the current
prompt set on train (with `train_conversations`, on the next part of train after each accepted candidate:
`pipeline.data.splits.train_part`), attributes the train failures (the injected `Attributor`; lineage by
default), aggregates blame, asks the optimizer for candidates (handing it a `LoopEvaluator` that scores
through this loop's runner and memory cache, its calls counted) and gates them on dev: a candidate is
accepted only when its paired gain over the current prompt set on the same dev questions reaches
`min_gain`. `patience` iterations without an acceptance stop the loop. The test split is evaluated once,
at the end, for the starting and the final prompt set. Train and dev leave out `exclude_categories`.

LM calls are counted only at the LM layer, by the `CallLedger` the caller built the LMs with; `LoopBudget`
owns what is spent against `budget_calls` (0: none). It is checked before each step (an iteration's train
evaluation, attribution, proposal, each candidate's dev evaluation; iteration 0 always runs): a step is
never started once the budget is spent and a started step is finished. The final test evaluation is
outside the budget. A resumed run (`run(resume=checkpoint)`) continues the spent count its checkpoint
recorded (re-evaluating dev at resume is not counted). Built memories are reused through a `MemoryCache`.
After every iteration the loop writes a checkpoint from which an interrupted run reaches the same result.
Logging is an observer's (`LoopObserver`): this module neither talks to MLflow nor prints.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

import dspy
from memtrace_loop.memory_systems.base import MemorySystem
from memtrace_loop.optimizers.base import Candidate, CandidateEvaluation, OptimizationContext, Optimizer, TracedCase
from memtrace_loop.pipeline.analysis.attribution.lineage import LineageAttributor
from memtrace_loop.pipeline.analysis.attribution.protocol import Attributor, TracedRun, attribute_run
from memtrace_loop.pipeline.analysis.attribution.records import Attribution
from memtrace_loop.pipeline.analysis.blame import BlameTable, aggregate_blame
from memtrace_loop.pipeline.analysis.evaluation import PairedDifference, paired_difference
from memtrace_loop.pipeline.backends.call_count import CallLedger, CallTally
from memtrace_loop.pipeline.core.records import Dataset, PromptSet, Question
from memtrace_loop.pipeline.core.stop import StopToken
from memtrace_loop.pipeline.data.splits import Split, train_part
from memtrace_loop.pipeline.loop.budget import LoopBudget
from memtrace_loop.pipeline.loop.checkpoint import Checkpoint, LoopProgress, write_checkpoint
from memtrace_loop.pipeline.loop.failure_impact import FailureImpact, failure_impact
from memtrace_loop.pipeline.loop.runner import LoopCaseRunner, MemoryCache, ProgressSink, RunResult, run_dataset
from memtrace_loop.pipeline.loop.screening import CandidateScreens, ScreenOutcome
from memtrace_loop.pipeline.loop.settings import LoopSettings
from memtrace_loop.pipeline.loop.summaries import CandidateSummary, IterationSummary

logger = logging.getLogger(__name__)


class StopReason(StrEnum):
    """Why the loop stopped iterating."""

    MAX_ITERATIONS = "max_iterations"
    PATIENCE = "patience"
    BUDGET = "budget"


@dataclass(frozen=True)
class CandidateOutcome:
    """The gate's verdict on one candidate. Screened out: `dev_accuracy` and `gain` are the screen's
    estimate (outside the screen's questions, the incumbent's verdicts) and `full_calls` is 0; evaluated
    fully: they are its dev evaluation's. `audit`: with `loop.screen.audit`, a screened-out candidate's
    real paired gain on the whole dev split (outside the budget; the verdict stays "screened out")."""

    candidate: Candidate
    dev_accuracy: float
    gain: PairedDifference
    accepted: bool
    screen: ScreenOutcome | None = None
    full_calls: int = 0  # budget calls of its whole-dev evaluation
    audit: PairedDifference | None = None

    @property
    def screened_out(self) -> bool:
        return self.screen is not None and not self.screen.verdict.passed

    @property
    def calls(self) -> int:
        """Budget calls this candidate cost the loop: its screen and its whole-dev evaluation."""
        return (self.screen.calls if self.screen is not None else 0) + self.full_calls


@dataclass(frozen=True)
class IterationRecord:
    """What one iteration did. Iteration 0 is the baseline (no blame, no candidates)."""

    iteration: int
    prompts: PromptSet  # the current prompt set the iteration started from
    train: RunResult
    dev: RunResult
    attributions: tuple[Attribution, ...] = ()
    blame: BlameTable = field(default_factory=BlameTable)
    outcomes: tuple[CandidateOutcome, ...] = ()
    knobs: Mapping[str, Any] = field(default_factory=dict)  # the knob changes the iteration started from
    calls: CallTally = field(default_factory=CallTally)  # cumulative LM calls (across resumes) at its end
    budget_spent: int = 0  # cumulative budget spent at its end (across resumes)

    @property
    def accepted(self) -> CandidateOutcome | None:
        return next((o for o in self.outcomes if o.accepted), None)


def summarize_iteration(record: IterationRecord) -> IterationSummary:
    """The digest of an iteration that checkpoints keep and tables and plots show."""
    dev = record.dev.report.overall
    return IterationSummary(
        record.iteration,
        record.train.report.overall.judge_accuracy,
        dev.judge_accuracy,
        (dev.ci_low, dev.ci_high),
        BlameTable.from_rows(record.blame.as_rows()),
        tuple(
            CandidateSummary(
                tuple(o.candidate.changed_stages), o.dev_accuracy, o.gain.mean_difference,
                (o.gain.ci_low, o.gain.ci_high), o.accepted, o.candidate.rationale, o.candidate.knobs,
                o.screened_out, o.screen.calls if o.screen is not None else 0, o.full_calls,
                None if o.audit is None else o.audit.mean_difference,
            )
            for o in record.outcomes
        ),
        record.budget_spent,
    )


@dataclass(frozen=True)
class LoopResult:
    start_prompts: PromptSet
    final_prompts: PromptSet
    iterations: tuple[IterationRecord, ...]  # those run by this process (after a resume: only the new ones)
    history: tuple[IterationSummary, ...]  # every iteration, including those before a resume
    test_start: RunResult
    test_final: RunResult
    dev_final: RunResult
    split_log: tuple[tuple[str, int], ...]  # (split, iteration) of every evaluation, in order
    lm_calls_made: int  # LM calls made, every role, the test evaluation included
    lm_calls_saved: int  # LM calls reusing built memories saved (they were never asked of an LM)
    stop_reason: str = ""  # a StopReason
    calls: CallTally = field(default_factory=CallTally)  # per role, across resumes, test evaluation included
    budget_spent: int = 0  # budget calls spent before the test evaluation (across resumes)
    # knob changes accepted over the system's configured knobs (field -> value; {} when none)
    final_knobs: Mapping[str, Any] = field(default_factory=dict)
    lm_tokens_made: int = 0  # prompt + completion tokens of the evaluations' calls made
    # per split, what failed operations did to the verdicts of every evaluation on it in this process
    # (summed: a dev verdict counts once per evaluation); `failure_impact`
    impact_by_split: Mapping[str, FailureImpact] = field(default_factory=dict)
    train_reused: int = 0  # iterations that reused the last train evaluation (same prompts and knobs)


class LoopObserver(Protocol):
    """Gets every finished iteration and the final result (MLflow logging, progress, interruption tests)."""

    def on_iteration(self, record: IterationRecord) -> None: ...

    def on_finish(self, result: LoopResult) -> None: ...


class OptimizationLoop:
    """Runs the loop for one memory system, judge, optimizer and train/dev/test split."""

    def __init__(
        self,
        system: MemorySystem,
        judge: dspy.Predict,
        optimizer: Optimizer,
        splits: Split,
        settings: LoopSettings,
        *,
        checkpoint: Path | None = None,
        config_digest: str = "",
        observers: Sequence[LoopObserver] = (),
        progress: ProgressSink | None = None,
        memory_cache: MemoryCache | None = None,
        run_id: str | None = None,
        attributor: Attributor | None = None,
        calls: CallLedger,
        stop: StopToken | None = None,
    ) -> None:
        self.system = system
        self.stop = stop
        self.judge = judge
        self.optimizer = optimizer
        self.splits = splits.scored(settings.exclude_categories)  # excluded categories are never answered
        self.settings = settings
        self.checkpoint = checkpoint
        self.config_digest = config_digest
        self.observers = tuple(observers)
        self.progress = progress
        self.cache = memory_cache or MemoryCache()
        self.run_id = run_id  # the MLflow run the checkpoints name (None: none)
        self.attributor = attributor if attributor is not None else LineageAttributor()
        self._split_log: list[tuple[str, int]] = []
        self._tokens_made = 0
        self._impact: dict[str, FailureImpact] = {}
        self._impact_lock = threading.Lock()  # an optimizer may evaluate from several threads
        self.calls = calls  # the one count of LM calls: the caller's LMs count into it
        self.budget = LoopBudget(calls, settings.budget_calls, settings.budget_counts_cached)
        self._last_train: tuple[tuple[str, str, int], RunResult] | None = None
        self._train_reused = 0

    def case_runner(self) -> LoopCaseRunner:
        return LoopCaseRunner(
            self.judge, {"train": self.splits.train, "dev": self.splits.dev}, self.cache,
            self.settings.exclude_categories,
        )

    # ------------------------------------------------------------------ evaluation

    def evaluate(
        self, prompts: PromptSet, split: str, iteration: int, dataset: Dataset | None = None,
        knobs: Mapping[str, Any] | None = None,
    ) -> RunResult:
        """Run `prompts` (with the knob changes `knobs`) over the split (or the given part of it); its LM
        calls count into the ledger, its tokens made into `LoopResult.lm_tokens_made`."""
        dataset = dataset if dataset is not None else getattr(self.splits, split)
        self._split_log.append((split, iteration))
        system = self.system.with_knobs(knobs or {}).with_prompts(prompts)
        result = run_dataset(
            system, self.judge, dataset, workers=self.settings.workers,
            progress=self.progress, exclude_categories=self.settings.exclude_categories, seed=self.settings.seed,
            memory_cache=self.cache, stop=self.stop,
        )
        # tokens of the calls really made: DSPy's cache reports none, those of reused memories are left out
        self._tokens_made += result.counts.prompt_tokens + result.counts.completion_tokens - result.tokens_saved
        impact = failure_impact(result)
        with self._impact_lock:
            self._impact[split] = self._impact.get(split, FailureImpact()) + impact
        return result

    def evaluate_train(
        self, prompts: PromptSet, iteration: int, knobs: Mapping[str, Any], round_: int = 0
    ) -> RunResult:
        """The train evaluation an iteration starts from. When the prompt set and knob changes are those the
        last train evaluation ran with (the incumbent was kept, or iteration 1 after iteration 0), that
        result is the answer: nothing in its inputs changed, so nothing is redone. With
        `train_conversations`, each incumbent is evaluated on the next part of train (`train_part`; `round_`
        is the number of candidates accepted so far, `LoopProgress.accepted`, so a resumed run reads the
        same part)."""
        key = (prompts.digest(), repr(sorted(knobs.items())), round_)
        if self._last_train is not None and self._last_train[0] == key:
            self._train_reused += 1
            return self._last_train[1]
        part = train_part(self.splits.train, self.settings.train_conversations, round_, self.settings.seed)
        result = self.evaluate(prompts, "train", iteration, dataset=part, knobs=knobs)
        self._last_train = (key, result)
        return result

    def _with_calls(self, record: IterationRecord) -> IterationRecord:
        return replace(record, calls=self.budget.tally(), budget_spent=self.budget.spent())

    # ------------------------------------------------------------------ the loop

    def run(self, start_prompts: PromptSet | None = None, resume: Checkpoint | None = None) -> LoopResult:
        """Run (or continue from the checkpoint `resume`, read and checked by `read_checkpoint` and
        `Checkpoint.check_fits`) until budget or patience runs out."""
        self._last_train, self._train_reused = None, 0
        if resume is not None:
            progress = resume.progress
            self.budget.begin(progress.calls)
        else:
            self.budget.begin()
            start = start_prompts or self.system.prompt_set()
            progress = LoopProgress(0, start, 0, start)
        records: list[IterationRecord] = []

        current, knobs = progress.current, dict(progress.knobs)
        current_dev = self.evaluate(current, "dev", progress.iteration, knobs=knobs)
        if resume is not None:  # re-establishing the dev results the checkpoint does not keep is outside the budget
            self.budget.continue_from(progress.budget_spent)
        else:  # iteration 0: the starting prompt set on train and dev
            record = self._with_calls(IterationRecord(0, current, self.evaluate_train(current, 0, knobs), current_dev))
            records.append(record)
            progress = self._finish_iteration(record, progress)

        iteration, stale = progress.iteration, progress.stale
        settings = self.settings
        while iteration < settings.max_iterations and stale < settings.patience and not self.budget.exhausted():
            iteration += 1
            record, accepted_dev = self._iterate(iteration, current, current_dev, knobs, progress.accepted)
            record = self._with_calls(record)
            records.append(record)
            accepted = record.accepted
            if accepted is not None and accepted_dev is not None:
                current, current_dev, stale = accepted.candidate.prompts, accepted_dev, 0
                knobs = {**knobs, **accepted.candidate.knobs}
            else:
                stale += 1
            progress = self._finish_iteration(
                record, LoopProgress(
                    iteration, current, stale, progress.start, progress.history, record.budget_spent, knobs
                )
            )
            logger.info(  # before: the prompt set the iteration started from (what tables and charts show)
                "iteration %d: dev before %.3f -> after %.3f, %d candidates, %s", iteration,
                record.dev.report.overall.judge_accuracy, current_dev.report.overall.judge_accuracy,
                len(record.outcomes), "accepted" if accepted_dev is not None else "none accepted",
            )

        stop_reason = (
            StopReason.BUDGET if self.budget.cut
            else StopReason.MAX_ITERATIONS if iteration >= self.settings.max_iterations
            else StopReason.PATIENCE
        )
        spent = self.budget.spent()  # the test evaluation below is outside the budget
        logger.info("loop stopped (%s) after iteration %d; budget calls spent: %d", stop_reason, iteration, spent)
        test_start = self.evaluate(progress.start, "test", iteration)
        test_final = self.evaluate(current, "test", iteration, knobs=knobs)
        tally = self.budget.tally()
        result = LoopResult(
            start_prompts=progress.start,
            final_prompts=current,
            iterations=tuple(records),
            history=progress.history,
            test_start=test_start,
            test_final=test_final,
            dev_final=current_dev,
            split_log=tuple(self._split_log),
            lm_calls_made=tally.made(),
            lm_calls_saved=self.cache.stats().lm_calls_saved,
            stop_reason=stop_reason.value,
            calls=tally,
            budget_spent=spent,
            final_knobs=MappingProxyType(dict(knobs)),
            lm_tokens_made=self._tokens_made,
            impact_by_split=MappingProxyType(dict(self._impact)),
            train_reused=self._train_reused,
        )
        for observer in self.observers:
            observer.on_finish(result)
        return result

    def _iterate(
        self, iteration: int, current: PromptSet, current_dev: RunResult, knobs: Mapping[str, Any], round_: int
    ) -> tuple[IterationRecord, RunResult | None]:
        """Attribute train failures (on train part `round_`), propose, gate on dev. Returns the record and
        the accepted dev result."""
        train = self.evaluate_train(current, iteration, knobs, round_)
        record = partial(IterationRecord, iteration, current, train, current_dev, knobs=dict(knobs))
        if self.budget.exhausted():
            return record(), None
        traced = TracedRun(
            train.results, train.graph_by_conversation, {c.id: c for c in self.splits.train.conversations},
            tuple(self.settings.exclude_categories),
        )
        attributions = attribute_run(self.attributor, traced, max_checked=self.settings.verify_cases)
        blame = aggregate_blame(attributions)
        if self.budget.exhausted():
            return record(attributions, blame), None
        screens = self.screens(current_dev, iteration)
        context = OptimizationContext(
            iteration, current, blame, attributions, traced.failures(),
            knobs=MappingProxyType(self.system.with_knobs(knobs).knob_values()),
            graph_by_conversation=train.graph_by_conversation,
            evaluator=LoopEvaluator(self, iteration, knobs, current, screens),
            budget=self.budget,
        )
        outcomes = []
        for candidate in list(self.optimizer.propose(context))[: self.settings.max_candidates]:
            if self.budget.exhausted():
                break
            outcome, result = self._gate(candidate, current_dev, iteration, {**knobs, **candidate.knobs}, screens)
            outcomes.append(outcome)
            if outcome.accepted:
                return record(attributions, blame, tuple(outcomes)), result
        return record(attributions, blame, tuple(outcomes)), None

    # ------------------------------------------------------------------ the gate

    def _gate(
        self, candidate: Candidate, current_dev: RunResult, iteration: int, knobs: Mapping[str, Any],
        screens: CandidateScreens,
    ) -> tuple[CandidateOutcome, RunResult | None]:
        """Screen the candidate (when screening is on), then, unless screened out, score it on the whole dev
        split: accepted when its paired gain over the incumbent reaches `min_gain`."""
        screened = screens.outcome(candidate.prompts, knobs, self.candidate_stages(candidate.changed_stages,
                                                                                  candidate.knobs))
        if screened is not None and not screened.verdict.passed:
            estimate = screened.verdict.estimate
            accuracy = current_dev.report.overall.judge_accuracy + estimate.mean_difference
            audit = self._audit(candidate, current_dev, iteration, knobs) if self.settings.screen.audit else None
            return CandidateOutcome(candidate, accuracy, estimate, False, screened, audit=audit), None
        start = self.budget.spent()
        result = self.evaluate(candidate.prompts, "dev", iteration, knobs=knobs)
        gain = self._paired(result, current_dev)
        accepted = gain.mean_difference >= self.settings.min_gain
        outcome = CandidateOutcome(candidate, result.report.overall.judge_accuracy, gain, accepted, screened,
                                   self.budget.spent() - start)
        return outcome, (result if accepted else None)

    def _paired(self, result: RunResult, current_dev: RunResult) -> PairedDifference:
        return paired_difference(result.results, current_dev.results, seed=self.settings.seed,
                                 exclude_categories=self.settings.exclude_categories)

    def screens(self, current_dev: RunResult, iteration: int) -> CandidateScreens:
        """The candidate screens of one iteration against the incumbent's dev result."""
        return CandidateScreens(
            self.splits.dev, current_dev,
            lambda prompts, part, knobs: self.evaluate(prompts, "dev", iteration, part, knobs=knobs),
            self.budget.spent, settings=self.settings.screen, min_gain=self.settings.min_gain,
            seed=self.settings.seed, exclude_categories=self.settings.exclude_categories,
        )

    def candidate_stages(self, changed: Sequence[str], knobs: Mapping[str, Any]) -> tuple[str, ...]:
        """The stages a candidate can move: those it rewrites and those owning the knobs it changes."""
        owners = [spec.name for spec in self.system.stages if set(spec.knobs) & set(knobs)]
        if knobs and not owners:
            return ()  # a knob no stage claims: every failure is on its path
        return tuple(dict.fromkeys((*changed, *owners)))

    def _audit(
        self, candidate: Candidate, current_dev: RunResult, iteration: int, knobs: Mapping[str, Any]
    ) -> PairedDifference:
        """A screened-out candidate's real whole-dev gain, for the audit; its calls are kept out of the budget."""
        with self.budget.uncounted():
            result = self.evaluate(candidate.prompts, "dev", iteration, knobs=knobs)
        return self._paired(result, current_dev)

    def _finish_iteration(self, record: IterationRecord, progress: LoopProgress) -> LoopProgress:
        progress = LoopProgress(
            progress.iteration, progress.current, progress.stale, progress.start,
            (*progress.history, summarize_iteration(record)), record.budget_spent, progress.knobs, self.budget.tally(),
        )
        for observer in self.observers:
            observer.on_iteration(record)
        if self.checkpoint is not None:
            write_checkpoint(self.checkpoint, progress, self.config_digest, self.run_id)
        return progress


class LoopEvaluator:
    """The `Evaluator` (optimizers.base) an optimizer gets in one iteration: the loop's own evaluation on
    train or dev (whole, or some questions), and single questions through a `LoopCaseRunner`; never test.
    An evaluation's `lm_calls_made` is the ledger's made calls while it ran (concurrent evaluations see
    each other's; the loop's totals stay exact). With screening on, a dev question asked of a prompt set
    other than the incumbent (`current`) first screens it (once per iteration, shared with the gate): a
    screened-out one is answered from its screen and the incumbent, so scoring it costs only the screen."""

    SPLITS = ("train", "dev")

    def __init__(
        self, loop: OptimizationLoop, iteration: int, knobs: Mapping[str, Any] | None = None,
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
