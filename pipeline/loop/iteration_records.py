"""What the loop records of its work: each candidate's verdict (`CandidateOutcome`), each iteration
(`IterationRecord`, and `summarize_iteration`, the digest checkpoints keep), why it stopped
(`StopReason`) and the whole run (`LoopResult`). Immutable records only; the loop that fills them is
`pipeline.loop.optimization`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from memtrace_loop.optimizers.base import Candidate
from memtrace_loop.pipeline.analysis.attribution.records import Attribution
from memtrace_loop.pipeline.analysis.blame import BlameTable
from memtrace_loop.pipeline.analysis.evaluation import PairedDifference
from memtrace_loop.pipeline.backends.call_count import CallTally
from memtrace_loop.pipeline.core.records import PromptSet
from memtrace_loop.pipeline.loop.candidate_screens import ScreenOutcome
from memtrace_loop.pipeline.loop.failure_impact import FailureImpact
from memtrace_loop.pipeline.loop.runner import RunResult
from memtrace_loop.pipeline.loop.summaries import CandidateSummary, IterationSummary

__all__ = ["CandidateOutcome", "IterationRecord", "LoopResult", "StopReason", "summarize_iteration"]


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
    lm_tokens_made: int = 0  # prompt + completion tokens of the evaluations' calls made (`tokens_made`)
    # per split, what failed operations did to the verdicts of every evaluation on it in this process
    # (summed: a dev verdict counts once per evaluation); `failure_impact`
    impact_by_split: Mapping[str, FailureImpact] = field(default_factory=dict)
    train_reused: int = 0  # iterations that reused the last train evaluation (same prompts and knobs)
