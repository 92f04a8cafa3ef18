"""The one call an app makes to write report.html: `report_for_run`, `report_for_loop` (and `report_data`).

Failures without attributions are attributed here by the lineage attributor (no LM). It neither logs nor prints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from memtrace_loop.pipeline.analysis.attribution.lineage import attribute_failures
from memtrace_loop.pipeline.analysis.attribution.records import Attribution
from memtrace_loop.pipeline.analysis.blame import BlameTable
from memtrace_loop.pipeline.analysis.evaluation import EvaluationReport, summarize
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.records import CaseResult, Conversation
from memtrace_loop.pipeline.core.run_folder import RunFolder
from memtrace_loop.pipeline.report.data import DEFAULT_MAX_NODES, DiagnosisGroup, ReportData, rewrites_of
from memtrace_loop.pipeline.report.render import write_report

if TYPE_CHECKING:  # records of the LM stack: `memtrace report` of a saved run loads none of it
    from memtrace_loop.pipeline.analysis.diagnosis import Diagnosis
    from memtrace_loop.pipeline.loop.optimization import LoopResult
    from memtrace_loop.pipeline.loop.runner import RunResult

REPORT_FILE = RunFolder.REPORT


def report_data(
    title: str, results: Sequence[CaseResult], graph_by_conversation: Mapping[str, ExecutionGraph], *,
    report: EvaluationReport | None = None, attributions: Sequence[Attribution] | None = None,
    conversation_by_id: Mapping[str, Conversation] | None = None, exclude_categories: Sequence[int] = (5,),
    blame: BlameTable | None = None, diagnosis: Diagnosis | None = None, diagnosis_scope: str = "",
    meta: Mapping[str, str] | None = None, max_nodes: int = DEFAULT_MAX_NODES, banner: str | None = None,
) -> ReportData:
    """A `ReportData` for judged cases and their graphs (`banner`: a warning shown above everything);
    `attributions=None` attributes the failures with the lineage attributor (no LM); `report=None`
    summarizes the cases (without `exclude_categories`); `diagnosis` is shown at the top, its analysis
    prefixed with `diagnosis_scope`."""
    report = report if report is not None else summarize(results, exclude_categories)
    if attributions is None:
        attributions = attribute_failures(
            results, graph_by_conversation, conversation_by_id, report.excluded_categories
        )
    groups = () if diagnosis is None else tuple(
        DiagnosisGroup(g.stage, g.error_type, g.count, tuple(c.question_id for c in g.cases),
                       f"{100 * g.share:.0f}% of the attributed failures")
        for g in diagnosis.groups
    )
    text = f"{diagnosis_scope}{diagnosis.headline()}" if diagnosis is not None and diagnosis.groups else None
    return ReportData(
        title, report, tuple(results), graph_by_conversation, tuple(attributions), blame, text, groups,
        meta=dict(meta or {}), max_nodes=max_nodes, banner=banner,
    )


def report_for_run(
    result: RunResult, out_dir: str | Path, *, title: str = "MemTrace run",
    attributions: Sequence[Attribution] | None = None, conversation_by_id: Mapping[str, Conversation] | None = None,
    diagnosis: Diagnosis | None = None, meta: Mapping[str, str] | None = None,
    max_nodes: int = DEFAULT_MAX_NODES, banner: str | None = None,
) -> Path:
    """Write `<out_dir>/report.html` for a finished run and return its path (see `report_data`)."""
    data = report_data(
        title, result.results, result.graph_by_conversation, report=result.report, attributions=attributions,
        conversation_by_id=conversation_by_id, diagnosis=diagnosis, meta=meta, max_nodes=max_nodes, banner=banner,
    )
    return write_report(data, Path(out_dir) / REPORT_FILE)


def report_for_loop(
    result: LoopResult, out_dir: str | Path, *, title: str = "MemTrace optimization",
    conversation_by_id: Mapping[str, Conversation] | None = None, diagnosis: Diagnosis | None = None,
    diagnosis_scope: str = "", meta: Mapping[str, str] | None = None, banner: str | None = None,
) -> Path:
    """Write `<out_dir>/report.html` for an optimization: test accuracy, scores per iteration, accepted
    rewrites and the failures of the last attributed train evaluation (else of the final test one)."""
    latest = next((record for record in reversed(result.iterations) if record.attributions), None)
    test_label = "test split, final prompts"
    shown = result.test_final if latest is None else latest.train
    data = report_data(
        title, shown.results, shown.graph_by_conversation, report=result.test_final.report,
        attributions=None if latest is None else latest.attributions,
        conversation_by_id=conversation_by_id if latest is None else None,
        blame=None if latest is None else latest.blame, diagnosis=diagnosis, diagnosis_scope=diagnosis_scope,
        meta=meta, banner=banner,
    )
    data = replace(data, history=tuple(result.history), rewrites=rewrites_of(result), accuracy_label=test_label,
                   failures_label=test_label if latest is None else f"train split, iteration {latest.iteration}")
    return write_report(data, Path(out_dir) / REPORT_FILE)
