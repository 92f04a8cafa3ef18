"""`memtrace run`: the Hydra app that runs one memory system over one dataset split, traces every
operation, evaluates the answers and logs everything to MLflow, with a progress display and a summary.
An entry point (it configures DSPy's cache and prints); the work is `pipeline.loop.runner`.
"""

from __future__ import annotations

import logging
import math
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import dspy
import hydra
from memtrace_loop.experiments.config import RunConfig, stand_in_tags, validated_run
from memtrace_loop.experiments.console import (
    RichProgress,
    blame_table,
    calls_table,
    counts_line,
    diagnosis_panel,
    failed_calls_lines,
    impact_clause,
    report_table,
    setup_logging,
)
from memtrace_loop.experiments.factory import (
    attributor_of,
    build_components,
    local_models,
    run_split,
    secret_values,
    to_plain,
)
from memtrace_loop.experiments.failure_analysis import FailureAnalysis, analyse_failures
from memtrace_loop.experiments.lifecycle import run_app
from memtrace_loop.experiments.output_dirs import run_name as sweep_run_name
from memtrace_loop.experiments.secret_guard import guarded
from memtrace_loop.experiments.session import AppSession, open_session
from memtrace_loop.memory_systems.base import MemorySystem
from memtrace_loop.pipeline.analysis.attribution.protocol import Attributor
from memtrace_loop.pipeline.backends.embeddings import build_embedder
from memtrace_loop.pipeline.backends.failure_guard import FailedCalls, failed_calls_outcome
from memtrace_loop.pipeline.backends.lm import LMSet
from memtrace_loop.pipeline.backends.preflight import check_endpoints
from memtrace_loop.pipeline.core.command_line import command_line
from memtrace_loop.pipeline.core.records import Dataset
from memtrace_loop.pipeline.core.stop import StopToken
from memtrace_loop.pipeline.loop.failure_impact import FailureImpact, failure_impact
from memtrace_loop.pipeline.loop.runner import RunResult, run_dataset
from memtrace_loop.pipeline.report.run_report import report_for_run
from memtrace_loop.pipeline.tracking.metric_names import ELAPSED_S
from memtrace_loop.pipeline.tracking.redacting_tracker import RedactingTracker
from memtrace_loop.pipeline.tracking.run_logging import (
    RESULTS_TABLE,
    call_metrics,
    dataset_input,
    dataset_source,
    failed_call_metrics,
    failed_call_tags,
    flatten,
    git_commit,
    impact_metrics,
    params_for_logging,
    process_tags,
    result_columns,
    retry_metrics,
    run_metrics,
    save_run,
    scrub,
    token_metrics,
)
from memtrace_loop.pipeline.tracking.run_record import (
    RECORD_TAG,
    NotLoggedError,
    RunRecord,
    log_record,
    new_record_id,
    unreachable_message,
    write_run_record,
)
from memtrace_loop.pipeline.tracking.store_access import failure_cause, tracking_available
from memtrace_loop.pipeline.tracking.traces import log_question_traces
from memtrace_loop.pipeline.tracking.tracker import DatasetInput
from omegaconf import DictConfig
from rich.console import Console

logger = logging.getLogger("memtrace.run")


@dataclass(frozen=True)
class _RunParts:

    dataset: Dataset
    lms: LMSet
    system: MemorySystem
    judge: dspy.Predict
    attributor: Attributor
    run_name: str
    title: str  # `<system> on <dataset> (<split>)`
    tags: dict[str, str]
    params: dict[str, str]
    data_input: DatasetInput


@dataclass(frozen=True)
class _Failures:
    """The run's finally failed LM calls and what failed operations did to its score."""

    calls: FailedCalls
    impact: FailureImpact


def run(cfg: DictConfig, console: Console | None = None, stop: StopToken | None = None) -> dict[str, object]:
    """`_run` inside the run's local model servers (`lm=local`)."""
    with local_models() as servers:
        session = open_session("run", to_plain(cfg), validated_run, console=console, stop=stop, servers=servers)
        return _run(session)


def _run(session: AppSession[RunConfig]) -> dict[str, object]:
    """Run, evaluate, save on disk, then log; returns the MLflow run id and the overall judge accuracy."""
    config, services = session.config, session.services
    parts = _build(session)
    tracker, unreachable = _open_store(session)
    with tracker.start_run(parts.run_name) if tracker else nullcontext(None) as run_id:
        if tracker is not None:
            tracker.set_tags(parts.tags)
            tracker.log_params(parts.params)
            tracker.log_dataset(parts.data_input)  # again with the record (MLflow keeps one input per dataset)
        started = time.perf_counter()
        with RichProgress(session.console) as progress:
            result = run_dataset(
                parts.system, parts.judge, parts.dataset, workers=config.workers, progress=progress,
                exclude_categories=config.evaluation.exclude_categories, seed=config.seed, stop=services.stop,
            )
            failures = analyse_failures(result, parts.dataset, parts.attributor, parts.lms.attributor,  # why
                                        config.evaluation.exclude_categories, progress, services.stop)
        elapsed = time.perf_counter() - started
        failed = _Failures(FailedCalls.of(session.ledger.guard, session.ledger.call_tally()), failure_impact(result))
        saved, report, record = _save(session, parts, result, failures, elapsed, failed)
        _print_results(session, parts, result, failures)
        _log(session, tracker, unreachable, record, saved)
        if run_id is not None and config.tracking.traces and config.tracking.max_traces:  # never raises
            traced = log_question_traces(result, failures.attributions, run_id=run_id,
                                         cap=config.tracking.max_traces, secrets=session.secrets, stop=services.stop)
            logger.info("logged %d question traces (with their blame) to MLflow run %s", traced, run_id)
        _print_summary(session, result, elapsed, run_id, report, saved, failed)
        _end_with_failed_calls(session, failed)  # inside the MLflow run: it ends FAILED
    return {"run_id": run_id, "judge_accuracy": result.report.overall.judge_accuracy,
            "run_dir": str(session.folder.root)}


def _build(session: AppSession[RunConfig]) -> _RunParts:
    """Data first, then LMs, system, judge and attributor (endpoints checked); the run's name, tags, params."""
    config, base_dir = session.config, session.base_dir
    session.configure_cache()
    dataset = run_split(config, base_dir)
    lms, system, judge = build_components(config, base_dir, session.services)
    check_endpoints(lms, embedder=build_embedder(config.embedder), stop=session.services.stop)  # before any work
    attributor = attributor_of(config, lms, system, judge)  # its LM calls count under the attributor role
    logger.info("running %s on %s (%s split): %d conversations, %d questions",
                system.name, dataset.name, config.split, len(dataset.conversations), len(dataset.questions))
    if session.notice:
        logger.warning(session.notice)
    run_name = sweep_run_name("run", config.run_name, f"run-{system.name}-{config.dataset.name}-{config.split}")
    tags = {"memtrace.command": "run", "memtrace.system": system.name, "memtrace.dataset": dataset.name,
            "memtrace.split": config.split, "git_commit": git_commit(base_dir), RECORD_TAG: new_record_id(),
            "memtrace.attributor": attributor.name, **stand_in_tags(config), **process_tags()}
    source = scrub(dataset_source(config.dataset.node("kind"), base_dir), session.secrets)
    return _RunParts(
        dataset, lms, system, judge, attributor, run_name, f"{system.name} on {dataset.name} ({config.split})", tags,
        params_for_logging(flatten(dict(session.source)), session.secrets),
        dataset_input(dataset, "eval", config.split, source),  # logged live and kept in the record
    )


def _open_store(session: AppSession[RunConfig]) -> tuple[RedactingTracker | None, str | None]:
    """(the tracker, None), or (None, why) when the store is unreachable (the results wait on disk)."""
    tracking = session.config.tracking
    tracker = session.tracker()
    unreachable = tracking_available(tracking.uri, tracking.timeout_s)
    if unreachable is None:
        try:
            tracker.open_experiment(tracking.experiment)
        except Exception as exc:
            unreachable = failure_cause(exc)
    if unreachable is None:
        return tracker, None
    logger.warning("MLflow unreachable (%s): running without it; the results will be saved in %s",
                   session.scrub(unreachable), session.folder.root)
    return None, unreachable


def _save(
    session: AppSession[RunConfig], parts: _RunParts, result: RunResult, failures: FailureAnalysis, elapsed: float,
    failed: _Failures,
) -> tuple[Path, Path, RunRecord]:
    """Everything MLflow gets, written locally first (artifacts/, run_record.json): an outage costs only
    the upload; returns (artifacts, report, record)."""
    config, secrets, ledger = session.config, session.secrets, session.ledger
    saved = save_run(session.folder.artifacts, result, parts.system.prompt_set(), secrets, dict(session.source))
    failures.write(saved, secrets)  # attributions.json, blame.json, diagnosis.json, diagnosis.md
    report = report_for_run(  # report.html beside them: logged with the artifacts
        result, saved, title=f"{parts.run_name}: {parts.title}", attributions=failures.attributions,
        conversation_by_id={c.id: c for c in parts.dataset.conversations}, diagnosis=failures.diagnosis,
        meta={"system": parts.system.name, "dataset": parts.dataset.name, "split": config.split,
              "attributor": parts.attributor.name},
        banner=session.notice,
    )
    tally, columns = ledger.call_tally(), result_columns(result, secrets)
    record = RunRecord(
        config.tracking.experiment, parts.run_name, tags={**parts.tags, **failed_call_tags(failed.calls)},
        params=parts.params,
        metrics={**run_metrics(result), ELAPSED_S: elapsed, **call_metrics(tally, failed=True),
                 **token_metrics(tally), **retry_metrics(ledger.retry_tally()), **failures.metrics(),
                 **failed_call_metrics(failed.calls), **impact_metrics(failed.impact)},
        tables={**({RESULTS_TABLE: columns} if columns else {}), **failures.tables(secrets)},
        record_id=parts.tags[RECORD_TAG], datasets=(parts.data_input,),
    )
    write_run_record(session.folder.root, record)
    return saved, report, record


def _log(
    session: AppSession[RunConfig], tracker: RedactingTracker | None, unreachable: str | None, record: RunRecord,
    saved: Path,
) -> None:
    """The record and its artifacts to MLflow; a `NotLoggedError` saying how to upload them later otherwise."""
    out_dir = session.folder.root
    if tracker is None:
        cause = f"{session.config.tracking.uri}: {unreachable}"
        raise NotLoggedError(session.scrub(unreachable_message(out_dir, cause)))
    try:
        log_record(tracker, record, saved)
    except Exception as exc:  # the results are on disk: say how to log them later
        raise NotLoggedError(session.scrub(unreachable_message(out_dir, exc))) from exc


def _print_results(session: AppSession[RunConfig], parts: _RunParts, result: RunResult,
                   failures: FailureAnalysis) -> None:
    console = session.console
    console.print(report_table(result.report, parts.title))
    if failures.attributions:
        console.print(blame_table(failures.blame, f"blame per stage ({parts.attributor.name}): "
                                  f"{len(failures.attributions)} of {failures.failures} failures"))
    console.print(diagnosis_panel(failures.diagnosis))


def _print_summary(session: AppSession[RunConfig], result: RunResult, elapsed: float, run_id: str | None,
                   report: Path, saved: Path, failed: _Failures) -> None:
    console = session.console
    console.print(calls_table(session.ledger.call_tally(), title="LM calls by role (counted at the LM layer)"))
    console.print(counts_line(result.counts) + f", {elapsed:.1f} s")
    for line in failed_calls_lines(failed.calls, {"eval": failed.impact}):
        console.print(line, style="bold red", soft_wrap=True, markup=False)
    session.print_mlflow_run(run_id, "Open it with")
    console.print(f"Report: {report} (open it in a browser; also in the MLflow run's artifacts)")
    console.print(f"Saved cases and graphs in {saved}; attribute them with: "
                  f"{command_line('memtrace', 'attribute', run_dir=session.folder.root)}", soft_wrap=True, markup=False)
    if session.notice:
        logger.warning(session.notice)


def _end_with_failed_calls(session: AppSession[RunConfig], failed: _Failures) -> None:
    """Exit 3 and a FAILED MLflow run when LM calls finally failed, unless `allow_failed_calls` (docs/usage.md)."""
    error = failed_calls_outcome(failed.calls, allowed=session.config.allow_failed_calls,
                                 impact=impact_clause("eval", failed.impact))
    if error is not None:
        raise error
    if failed.calls:
        logger.warning("accepted (allow_failed_calls=true): %s", failed.calls.summary())


@guarded  # refuses secret overrides before Hydra parses (and saves) them
@hydra.main(config_path="pkg://memtrace_loop.conf", config_name="run", version_base="1.3")
def main(cfg: DictConfig) -> float:
    setup_logging()
    outcome = run_app("run", lambda stop: run(cfg, stop=stop), lambda: secret_values(to_plain(cfg)))
    accuracy = outcome["judge_accuracy"]
    return float(accuracy) if isinstance(accuracy, int | float) else math.nan
