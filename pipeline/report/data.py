"""What a failure report shows, as one typed record: `ReportData` (and the small records it holds).

`rewrites_of` reads a `LoopResult`'s accepted rewrites. It only holds data: no subgraph, layout or rendering.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

from memtrace_loop.pipeline.analysis.attribution.records import Attribution
from memtrace_loop.pipeline.analysis.blame import BlameTable
from memtrace_loop.pipeline.analysis.evaluation import EvaluationReport
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.records import CaseResult

if TYPE_CHECKING:  # the loop's records load the LM stack: a report of a run needs none of it
    from memtrace_loop.pipeline.loop.optimization import LoopResult
    from memtrace_loop.pipeline.loop.summaries import IterationSummary

DEFAULT_MAX_NODES = 60  # nodes drawn per failure; the rest is summarized


@dataclass(frozen=True)
class Rewrite:
    """A rewrite the gate accepted: the iteration, the stages it changed, its dev gain and the diff."""

    iteration: int
    stages: tuple[str, ...]
    gain: float
    gain_ci: tuple[float, float]
    rationale: str
    diff: str


@dataclass(frozen=True)
class DiagnosisGroup:
    """Failures that share a stage and an error type, with a few representative question ids."""

    stage: str
    error_type: str
    count: int
    question_ids: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class ReportData:
    """Everything one report.html shows."""

    title: str
    report: EvaluationReport
    results: tuple[CaseResult, ...]
    graph_by_conversation: Mapping[str, ExecutionGraph]
    attributions: tuple[Attribution, ...] = ()
    blame: BlameTable | None = None
    diagnosis: str | None = None
    diagnosis_groups: tuple[DiagnosisGroup, ...] = ()
    history: tuple[IterationSummary, ...] = ()
    rewrites: tuple[Rewrite, ...] = ()
    meta: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # run id, system, dataset...
    banner: str | None = None  # a warning shown above everything (e.g. the stand-in LM on a real dataset)
    max_nodes: int = DEFAULT_MAX_NODES
    accuracy_label: str = ""  # what the accuracy table covers (e.g. "test split, final prompts")
    failures_label: str = ""  # which evaluation's failures the list shows (e.g. "train split, iteration 2")

    def failures(self) -> tuple[CaseResult, ...]:
        """The failed cases outside the report's excluded categories, in result order."""
        excluded = set(self.report.excluded_categories)
        return tuple(r for r in self.results if not r.correct and r.question.category not in excluded)

    def attribution_by_question(self) -> dict[str, Attribution]:
        return {a.question_id: a for a in self.attributions}


def rewrites_of(result: LoopResult) -> tuple[Rewrite, ...]:
    """The accepted rewrites of the iterations this process ran, with the diff against the prompt set
    each started from (iterations before a resume are only in `history`, without their diff)."""
    from memtrace_loop.pipeline.tracking.loop_observer import prompt_diff  # the loop's side of tracking

    found = []
    for record in result.iterations:
        outcome = record.accepted
        if outcome is None:
            continue
        found.append(
            Rewrite(
                record.iteration, tuple(outcome.candidate.changed_stages), outcome.gain.mean_difference,
                (outcome.gain.ci_low, outcome.gain.ci_high), outcome.candidate.rationale,
                prompt_diff(record.prompts, outcome.candidate.prompts),
            )
        )
    return tuple(found)
