"""Blame in MLflow's trace view: each answered question of a run logged as an MLflow trace, linked to the run,
with its attribution as a `blame` assessment.

`log_question_traces(result, attributions, run_id=..., cap=..., secrets=...)` writes the traces that
`pipeline.tracking.question_trace.plan_run_traces` plans (one per judged case, dataset order, at most
`cap`; spans = the operations on the question's path; values redacted and cut) to the tracking store
MLflow is pointed at (`MlflowTracker.open_experiment` sets it), in the run's experiment, each linked to
the run (trace metadata `mlflow.sourceRun`: the run's Traces tab lists them). Then each explained
failure gets its feedback assessment named `blame` (value: the error type; rationale: the reason;
metadata: stage, op, op_name, verified, check, confidence, tunable, method, joint; source CODE
`memtrace.<method>`; attached to the blamed operation's span when that span is shown). Trace tags make
the UI filter work: `tags.memtrace.blamed_stage = 'extract'`, `tags.memtrace.verdict = 'WRONG'`, ...

`FailureTraces` is what `memtrace optimize` logs per iteration: the train failures (capped) into the
iteration's nested run. A trace's state is ERROR for a wrong answer (`QuestionTrace.state`), so the
trace list's state column and filter find the failures.

Traces are built AFTER the run from its execution graphs with MLflow's client tracing API (no
autologging, nothing traced while the run works). Span times are synthetic: spans follow the graph's
sequence order 1 ms apart, so the timeline reads in execution order; they are not wall-clock times.
MLflow exports traces asynchronously; this module flushes its queues every `FLUSH_SPANS` spans (so they
never overflow and drop spans) and before the assessments, then counts what landed. Each span write
is a SQLite transaction: `configure_trace_export()` (called by the entry point before the experiment
is opened) lets MLflow write 100 spans at a time instead of 5, which halves the time.

Logging traces never fails the run: any error (store down, a locked database after MLflow's retries, a
bad value) is logged as a warning and the function returns how many traces it did store. An
interruption (`RunStopped`, KeyboardInterrupt; with a `StopToken`, checked before each trace) still
propagates.

This module imports MLflow (with `mlflow_tracker`, `prompt_registry` and `store_access`); it does not
decide whether traces are logged (`tracking.traces`, `tracking.max_traces` in the config) nor attribute.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, MutableMapping, Sequence
from dataclasses import dataclass

import mlflow
from memtrace_loop.pipeline.analysis.attribution.records import Attribution
from memtrace_loop.pipeline.core.stop import StopToken
from memtrace_loop.pipeline.loop.runner import RunResult
from memtrace_loop.pipeline.tracking.question_trace import (
    BLAME_FEEDBACK,
    QuestionTrace,
    TraceLimits,
    plan_run_traces,
)
from mlflow.entities import AssessmentSource, SpanType
from mlflow.tracking import MlflowClient

__all__ = ["FailureTraces", "configure_trace_export", "log_question_traces", "write_traces"]

logger = logging.getLogger(__name__)

# spans written between two flushes of MLflow's export queues (OpenTelemetry's span queue holds 2048 and
# drops what overflows; MLflow's task queue holds 1000)
FLUSH_SPANS = 1000
# spans per `log_spans` write (MLflow's default is 5; each write costs a SQLite transaction, so a question
# trace of 40 spans took 8 writes; 100 halves the logging time on a SQLite store)
SPAN_BATCH_SIZE = 100
ENV_SPAN_BATCH_SIZE = "MLFLOW_ASYNC_TRACE_LOGGING_MAX_SPAN_BATCH_SIZE"
STEP_NS = 1_000_000  # synthetic span spacing: 1 ms per operation, in sequence order


def configure_trace_export(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Let MLflow write a trace's spans in batches of `SPAN_BATCH_SIZE` (in `environ`, the process
    environment by default; a value the user set wins); returns what was set. MLflow reads it when its
    tracer starts, i.e. at the first span after `mlflow.set_tracking_uri`: entry points call it before
    opening the experiment (as they call `store_access.configure_tracking_client`)."""
    target = os.environ if environ is None else environ
    if ENV_SPAN_BATCH_SIZE in target:
        return {}
    target[ENV_SPAN_BATCH_SIZE] = str(SPAN_BATCH_SIZE)
    return {ENV_SPAN_BATCH_SIZE: str(SPAN_BATCH_SIZE)}


def _write_one(client: MlflowClient, plan: QuestionTrace, experiment_id: str, run_id: str) -> tuple[str, str | None]:
    """Log one trace; returns its id and the span id of the blamed operation (None when not shown)."""
    start = time.time_ns()
    root = client.start_trace(
        plan.name, span_type=SpanType.CHAIN, inputs=dict(plan.inputs), attributes=dict(plan.attributes),
        tags=dict(plan.tags), experiment_id=experiment_id, start_time_ns=start, run_id=run_id,
    )
    trace_id, blamed_span = root.trace_id, None
    try:
        for i, span in enumerate(plan.spans):
            child = client.start_span(
                span.name, trace_id=trace_id, parent_id=root.span_id, span_type=span.span_type,
                inputs=dict(span.inputs), attributes=dict(span.attributes), start_time_ns=start + i * STEP_NS,
            )
            if plan.blame is not None and span.op == plan.blame.op:
                blamed_span = child.span_id
            status = "ERROR" if span.error else "OK"
            client.end_span(trace_id, child.span_id, outputs=span.outputs, status=status,
                            end_time_ns=start + (i + 1) * STEP_NS - 1,
                            attributes={"memtrace.error": span.error} if span.error else None)
    except BaseException:
        client.end_trace(trace_id, status="ERROR")
        raise
    client.end_trace(trace_id, outputs=dict(plan.outputs), status=plan.state,
                     end_time_ns=start + max(len(plan.spans), 1) * STEP_NS,
                     attributes={"memtrace.error": plan.error} if plan.error else None)
    return trace_id, blamed_span


def _log_blame(plan: QuestionTrace, trace_id: str, span_id: str | None) -> None:
    blame = plan.blame
    if blame is None:
        return
    mlflow.log_feedback(
        trace_id=trace_id, name=BLAME_FEEDBACK, value=blame.value, rationale=blame.rationale,
        source=AssessmentSource(source_type="CODE", source_id=blame.source_id), metadata=dict(blame.metadata),
        span_id=span_id,
    )


def _stored(run_id: str, experiment_id: str, trace_ids: Sequence[str]) -> int:
    found = mlflow.search_traces(locations=[experiment_id], run_id=run_id, include_spans=False, return_type="list")
    wanted = set(trace_ids)
    return sum(trace.info.trace_id in wanted for trace in found)


def write_traces(plans: Sequence[QuestionTrace], *, run_id: str, stop: StopToken | None = None) -> int:
    """Log planned traces linked to run `run_id` (in its experiment) with their blame assessments; returns
    how many of them the store holds. A failure while writing the traces stops the writing (warned) but
    keeps what was written; other MLflow errors are raised (`log_question_traces` does not raise)."""
    if not plans:
        return 0
    client = MlflowClient(mlflow.get_tracking_uri())
    experiment_id = client.get_run(run_id).info.experiment_id
    written: list[tuple[QuestionTrace, str, str | None]] = []
    pending = 0  # spans sent since the last flush
    try:
        for plan in plans:
            if stop is not None:
                stop.check()  # `Interrupted` (a BaseException) propagates: the run ends KILLED
            if pending + len(plan.spans) + 1 > FLUSH_SPANS:
                mlflow.flush_trace_async_logging()
                pending = 0
            trace_id, span_id = _write_one(client, plan, experiment_id, run_id)
            written.append((plan, trace_id, span_id))
            pending += len(plan.spans) + 1
    except Exception as exc:  # keep what was written; its assessments still go below
        logger.warning("stopped logging question traces after %d of %d: %s: %s", len(written), len(plans),
                       type(exc).__name__, exc)
    finally:
        mlflow.flush_trace_async_logging()  # the traces must be stored before an assessment can name them
    for plan, trace_id, span_id in written:
        _log_blame(plan, trace_id, span_id)
    stored = _stored(run_id, experiment_id, [t for _, t, _ in written])
    if stored < len(written):
        logger.warning("MLflow stored %d of the %d question traces sent for run %s", stored, len(written), run_id)
    return stored


def log_question_traces(
    result: RunResult,
    attributions: Iterable[Attribution],
    *,
    run_id: str,
    cap: int = 200,
    secrets: Iterable[str] = (),
    limits: TraceLimits = TraceLimits(),
    stop: StopToken | None = None,
    failures_only: bool = False,
) -> int:
    """One MLflow trace per answered question of `result` (dataset order, at most `cap`; `failures_only`:
    per failure the loop attributes), linked to run `run_id`, each explained failure with its `blame`
    assessment; secrets masked everywhere. Returns the number of traces stored; never raises for a
    logging failure (it warns and returns what got stored). With `stop`, no trace starts after a stop is
    requested (`Interrupted` propagates)."""
    if cap <= 0:
        return 0
    try:
        plans = plan_run_traces(result, attributions, cap=cap, secrets=secrets, limits=limits,
                                failures_only=failures_only)
        return write_traces(plans, run_id=run_id, stop=stop)
    except Exception as exc:
        logger.warning("could not log the question traces of MLflow run %s: %s: %s", run_id,
                       type(exc).__name__, exc)
        return 0


@dataclass(frozen=True)
class FailureTraces:
    """What `memtrace optimize` logs into each iteration's nested run: the iteration's train failures
    (those the loop attributes) as traces with their blame, at most `cap` (`tracking.max_traces_per_iteration`).
    `pipeline.tracking.loop_observer.TrackingLoopObserver` calls it with the train result, its
    attributions and the nested run's id."""

    cap: int
    secrets: tuple[str, ...] = ()
    stop: StopToken | None = None

    def __call__(self, result: RunResult, attributions: Iterable[Attribution], run_id: str) -> int:
        return log_question_traces(result, attributions, run_id=run_id, cap=self.cap, secrets=self.secrets,
                                   stop=self.stop, failures_only=True)
