"""Why a run's questions failed: attribute its failures, aggregate blame, diagnose, and save / log the result.

`analyse_failures(result, dataset, attributor, lm, ...)` (`memtrace run`, after its evaluation)
attributes every scored failure with the configured attributor (an LLM attributor's calls count under
the ledger's `attributor` role), aggregates the blame table and diagnoses the failures
(`pipeline.analysis.diagnosis`: one LM call, none when nothing failed). The `FailureAnalysis` knows its
files (`write`), metrics and MLflow table, for the run's artifacts folder and `RunRecord`.

`loop_diagnosis` (`memtrace optimize`) diagnoses the attributed TRAIN failures of the latest iteration
that attributed any, on purpose: those attributions exist already (no extra attribution, no replay on
test; the test split stays evaluated once and never analysed). When that iteration accepted a
candidate, the final prompts differ from the ones diagnosed (the title names the iteration); a resumed
run with no new attributing iteration gets an empty diagnosis. It neither prints nor talks to MLflow.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import dspy
from memtrace_loop.pipeline.analysis.attribution.protocol import Attributor, TracedRun, attribute_run
from memtrace_loop.pipeline.analysis.attribution.records import Attribution
from memtrace_loop.pipeline.analysis.blame import BlameTable, aggregate_blame
from memtrace_loop.pipeline.analysis.diagnosis import Diagnosis, diagnose
from memtrace_loop.pipeline.core.records import CaseResult, Dataset
from memtrace_loop.pipeline.core.run_folder import RunFolder
from memtrace_loop.pipeline.core.stop import StopToken
from memtrace_loop.pipeline.loop.optimization import LoopResult
from memtrace_loop.pipeline.loop.runner import ProgressSink, RunResult
from memtrace_loop.pipeline.tracking import metric_names as names
from memtrace_loop.pipeline.tracking.run_logging import (
    attribution_columns,
    attribution_metrics,
    attribution_rows,
    scrub,
)


@dataclass(frozen=True)
class FailureAnalysis:
    """The attributions of a run's failures, their blame table and diagnosis, and what finding them took."""

    attributions: tuple[Attribution, ...]
    blame: BlameTable
    diagnosis: Diagnosis
    attributor: str
    failures: int  # failed cases outside the excluded categories (some may have no attribution)
    seconds: float = 0.0

    def metrics(self) -> dict[str, float]:
        """`attribution/*` (count, verified/refuted/joint shares, LM and replay calls, seconds), the blame
        share and count per stage (`blame/<stage>/share`, `blame/<stage>/count`) and `diagnosis/ok`."""
        metrics = {**attribution_metrics(self.attributions), names.attribution("failures"): float(self.failures),
                   names.attribution("seconds"): self.seconds, names.DIAGNOSIS_OK: float(self.diagnosis.ok)}
        for row in self.blame.rows:
            metrics[names.blame(row.stage, "share")] = row.share
            metrics[names.blame(row.stage, "count")] = float(row.count)
        return metrics

    def tables(self, secrets: Iterable[str] = ()) -> dict[str, dict[str, list[str]]]:
        """The attribution table for the run record (none when nothing was attributed)."""
        if not self.attributions:
            return {}
        return {RunFolder.ATTRIBUTIONS_TABLE: attribution_columns(self.attributions, secrets)}

    def write(self, directory: Path, secrets: Iterable[str] = ()) -> list[Path]:
        """attributions.json, blame.json, diagnosis.json and diagnosis.md in `directory` (secrets masked)."""
        secrets = tuple(secrets)
        directory.mkdir(parents=True, exist_ok=True)
        attributions = directory / RunFolder.ATTRIBUTIONS
        attributions.write_text(
            scrub(json.dumps(attribution_rows(self.attributions), indent=1, ensure_ascii=False), secrets),
            encoding="utf-8",
        )
        blame = directory / RunFolder.BLAME
        blame.write_text(scrub(json.dumps(self.blame.as_rows(), indent=2, ensure_ascii=False), secrets),
                         encoding="utf-8")
        return [attributions, blame, *write_diagnosis(directory, self.diagnosis, secrets)]


def write_diagnosis(directory: Path, diagnosis: Diagnosis, secrets: Iterable[str] = ()) -> list[Path]:
    """diagnosis.json (`Diagnosis.to_dict`) and diagnosis.md in `directory`, secrets masked."""
    secrets = tuple(secrets)
    directory.mkdir(parents=True, exist_ok=True)
    as_json = directory / RunFolder.DIAGNOSIS_JSON
    as_json.write_text(scrub(json.dumps(diagnosis.to_dict(), indent=1, ensure_ascii=False), secrets), encoding="utf-8")
    as_md = directory / RunFolder.DIAGNOSIS_MD
    as_md.write_text(scrub(diagnosis.markdown(), secrets), encoding="utf-8")
    return [as_json, as_md]


def attribute_result(
    result: RunResult, dataset: Dataset, attributor: Attributor, exclude_categories: Iterable[int] = (),
    progress: ProgressSink | None = None, stop: StopToken | None = None,
) -> tuple[tuple[Attribution, ...], BlameTable]:
    """The attributions of every failure of `result` (outside `exclude_categories`) and their blame table.
    `stop` is checked after each case (an interruption stops the attribution, not just the next LM call)."""
    run = TracedRun(
        result.results, result.graph_by_conversation, {c.id: c for c in dataset.conversations},
        tuple(int(c) for c in exclude_categories),
    )
    if progress is not None:
        progress.begin("attribute", len(run.failures()))

    def on_case(_case: CaseResult) -> None:
        if progress is not None:
            progress.advance("attribute")
        if stop is not None:
            stop.check()

    attributions = attribute_run(attributor, run, on_case)
    return attributions, aggregate_blame(attributions)


def analyse_failures(
    result: RunResult, dataset: Dataset, attributor: Attributor, lm: dspy.BaseLM | None,
    exclude_categories: Iterable[int] = (), progress: ProgressSink | None = None, stop: StopToken | None = None,
) -> FailureAnalysis:
    """Attribute, blame and diagnose the failures of `result` (the diagnosis's analysis is written by `lm`)."""
    excluded = tuple(exclude_categories)
    started = time.perf_counter()
    attributions, blame = attribute_result(result, dataset, attributor, excluded, progress, stop)
    diagnosis = diagnose(attributions, lm)
    failures = sum(1 for r in result.results if not r.correct and r.question.category not in excluded)
    return FailureAnalysis(attributions, blame, diagnosis, attributor.name, failures, time.perf_counter() - started)


def loop_diagnosis(result: LoopResult, lm: dspy.BaseLM | None) -> tuple[int | None, Diagnosis]:
    """(iteration, diagnosis) of the train failures of the latest iteration of `result` that attributed
    any (see the module doc); (None, empty diagnosis) when no iteration did."""
    latest = next((record for record in reversed(result.iterations) if record.attributions), None)
    if latest is None:
        return None, diagnose((), lm)
    return latest.iteration, diagnose(latest.attributions, lm)
