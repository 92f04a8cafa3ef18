"""Blame in MLflow's trace view: each answered question of a run logged as an MLflow trace, linked to the run,
with its attribution as a `blame` assessment.

`log_question_traces(result, attributions, run_id=..., cap=..., secrets=...)` writes the traces that
`pipeline.tracking.question_trace.plan_run_traces` plans (one per judged case, dataset order, at most
`cap`; spans = the operations on the question's path; values redacted and cut) to the tracking store
MLflow is pointed at (`MlflowTracker.open_experiment` sets it), in the run's experiment, each linked to
the run (trace metadata `mlflow.sourceRun`: the run's Traces tab lists them). Each explained failure
carries its feedback assessment named `blame` (value: the error type; rationale: the reason; metadata:
stage, op, op_name, verified, check, confidence, tunable, method, joint; source CODE `memtrace.<method>`;
attached to the blamed operation's span when that span is shown). Trace tags make the UI filter work:
`tags.memtrace.blamed_stage = 'extract'`, `tags.memtrace.verdict = 'WRONG'`, ...

`FailureTraces` is what `memtrace optimize` logs per iteration: the train failures (capped) into the
iteration's nested run. A trace's state is ERROR for a wrong answer (`QuestionTrace.state`), so the
trace list's state column and filter find the failures.

Traces are built AFTER the run from its execution graphs, as finished records: no live tracing, no
autologging, nothing traced while the run works. Span times are synthetic: spans follow the graph's
sequence order 1 ms apart, so the timeline reads in execution order; they are not wall-clock times.
Writing is batched through MLflow's tracing client, the way its own exporter stores a finished trace:
one `start_trace` per trace (its info, tags, metadata and blame assessment in one write) and one
`log_spans` per `SPANS_PER_WRITE` spans of many traces (live spans, one SQLite transaction per handful
of spans, took most of a `memtrace run`'s wall time).

Logging traces never fails the run: any error (store down, a locked database after MLflow's retries, a
bad value) is logged as a warning and the function returns how many traces it did store. An
interruption (`RunStopped`, KeyboardInterrupt; with a `StopToken`, checked before each trace) still
propagates, after the spans of the traces already started are written.

This module imports MLflow (with `mlflow_tracker`, `prompt_registry` and `store_access`); it does not
decide whether traces are logged (`tracking.traces`, `tracking.max_traces` in the config) nor attribute.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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
from mlflow.entities import Assessment, AssessmentSource, Feedback, Span, SpanType, TraceInfo, TraceLocation, TraceState
from mlflow.tracing.client import TracingClient
from mlflow.tracing.constant import (
    MAX_CHARS_IN_TRACE_INFO_METADATA,
    TRACE_REQUEST_RESPONSE_PREVIEW_MAX_LENGTH_OSS,
    TRACE_SCHEMA_VERSION_KEY,
    SpanAttributeKey,
    TraceMetadataKey,
    TraceTagKey,
)
from mlflow.tracing.utils import dump_span_attribute_value, generate_mlflow_trace_id_from_otel_trace_id
from mlflow.tracking import MlflowClient
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import SpanContext, Status, StatusCode, TraceFlags

__all__ = ["FailureTraces", "log_question_traces", "write_traces"]

logger = logging.getLogger(__name__)

SPANS_PER_WRITE = 1000  # spans of consecutive traces stored by one `log_spans` (one transaction)
STEP_NS = 1_000_000  # synthetic span spacing: 1 ms per operation, in sequence order
_IDS = RandomIdGenerator()
_RESOURCE = Resource.get_empty()  # one for every span (OpenTelemetry builds a default per span, slowly)


@dataclass(frozen=True)
class _Built:
    """One planned trace as MLflow records: its info (tags, metadata, blame) and its spans."""

    info: TraceInfo
    spans: tuple[Span, ...]


def _span(name: str, trace: int, span_id: int, parent: int | None, attributes: Mapping[str, Any],
          start_ns: int, end_ns: int, error: bool) -> Span:
    context = SpanContext(trace, span_id, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    parent_context = None if parent is None else SpanContext(trace, parent, is_remote=False)
    encoded = {key: dump_span_attribute_value(value) for key, value in attributes.items() if value is not None}
    return Span(ReadableSpan(name=name, context=context, parent=parent_context, attributes=encoded,
                             start_time=start_ns, end_time=end_ns, resource=_RESOURCE,
                             status=Status(StatusCode.ERROR if error else StatusCode.OK)))


def _cut(text: str, limit: int) -> str:
    """`text` within `limit` characters, as MLflow cuts a trace's previews and metadata values."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _build(plan: QuestionTrace, experiment_id: str, run_id: str) -> _Built:
    """The trace of `plan` as MLflow's exporter would store it had it been traced live (root span with
    the question's inputs and outputs, one child per planned operation 1 ms apart)."""
    start, otel_trace = time.time_ns(), _IDS.generate_trace_id()
    trace_id, root_id = generate_mlflow_trace_id_from_otel_trace_id(otel_trace), _IDS.generate_span_id()
    end = start + max(len(plan.spans), 1) * STEP_NS
    common = {SpanAttributeKey.REQUEST_ID: trace_id}
    spans, blamed_span = [], None
    for i, planned in enumerate(plan.spans):
        span_id = _IDS.generate_span_id()
        if plan.blame is not None and planned.op == plan.blame.op:
            blamed_span = format(span_id, "016x")
        attributes = {**common, SpanAttributeKey.SPAN_TYPE: planned.span_type, SpanAttributeKey.INPUTS: planned.inputs,
                      **planned.attributes, SpanAttributeKey.OUTPUTS: planned.outputs, "memtrace.error": planned.error}
        spans.append(_span(planned.name, otel_trace, span_id, root_id, attributes, start + i * STEP_NS,
                           start + (i + 1) * STEP_NS - 1, planned.error is not None))
    root_attributes = {**common, SpanAttributeKey.EXPERIMENT_ID: experiment_id, SpanAttributeKey.SPAN_TYPE:
                       SpanType.CHAIN, SpanAttributeKey.INPUTS: dict(plan.inputs), **plan.attributes,
                       SpanAttributeKey.OUTPUTS: dict(plan.outputs), "memtrace.error": plan.error}
    root = _span(plan.name, otel_trace, root_id, None, root_attributes, start, end, plan.state == "ERROR")
    request, response = dump_span_attribute_value(dict(plan.inputs)), dump_span_attribute_value(dict(plan.outputs))
    blame = plan.blame
    assessments: list[Assessment] = [] if blame is None else [Feedback(
        name=BLAME_FEEDBACK, value=blame.value, rationale=blame.rationale, metadata=dict(blame.metadata),
        source=AssessmentSource(source_type="CODE", source_id=blame.source_id), trace_id=trace_id, span_id=blamed_span,
    )]
    info = TraceInfo(
        trace_id=trace_id, trace_location=TraceLocation.from_experiment_id(experiment_id),
        request_time=start // 1_000_000, state=TraceState(plan.state),
        request_preview=_cut(request, TRACE_REQUEST_RESPONSE_PREVIEW_MAX_LENGTH_OSS),
        response_preview=_cut(response, TRACE_REQUEST_RESPONSE_PREVIEW_MAX_LENGTH_OSS),
        execution_duration=(end - start) // 1_000_000,
        trace_metadata={TraceMetadataKey.SOURCE_RUN: run_id, TRACE_SCHEMA_VERSION_KEY: "3",
                        TraceMetadataKey.INPUTS: _cut(request, MAX_CHARS_IN_TRACE_INFO_METADATA),
                        TraceMetadataKey.OUTPUTS: _cut(response, MAX_CHARS_IN_TRACE_INFO_METADATA)},
        tags={TraceTagKey.TRACE_NAME: plan.name, **plan.tags}, assessments=assessments,
    )
    return _Built(info, (root, *spans))


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
    uri = mlflow.get_tracking_uri()
    experiment_id = MlflowClient(uri).get_run(run_id).info.experiment_id
    client = TracingClient(uri)
    started: list[str] = []
    pending: list[Span] = []  # spans of started traces not yet written
    try:
        for plan in plans:
            if stop is not None:
                stop.check()  # `Interrupted` (a BaseException) propagates: the run ends KILLED
            built = _build(plan, experiment_id, run_id)
            client.start_trace(built.info)
            started.append(built.info.trace_id)
            pending.extend(built.spans)
            if len(pending) >= SPANS_PER_WRITE:
                client.log_spans(experiment_id, pending)
                pending = []
    except Exception as exc:  # keep what was written; its spans still go below
        logger.warning("stopped logging question traces after %d of %d: %s: %s", len(started), len(plans),
                       type(exc).__name__, exc)
    finally:
        if pending:  # the spans of every trace started (also on an interruption)
            client.log_spans(experiment_id, pending)
    stored = _stored(run_id, experiment_id, started)
    if stored < len(started):
        logger.warning("MLflow stored %d of the %d question traces sent for run %s", stored, len(started), run_id)
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
