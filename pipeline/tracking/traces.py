"""Blame in MLflow's trace view: each answered question of a run as a finished MLflow trace linked to the run,
its attribution as a `blame` assessment.

`plan_run_traces(result, attributions, cap=...)` plans one `QuestionTrace` per judged case, in dataset
order, up to `cap` (`failures_only`: the cases not judged CORRECT outside the excluded categories, what
`optimize` traces per iteration, `FailureTraces`). A trace:

- root: the question (inputs: text, ids, category, evidence; outputs: answer, gold, verdict); state
  ERROR for a wrong answer or a case whose answering or judging raised, OK for a correct one;
- spans: the operations `pipeline.analysis.failure_path` selects (what report.html draws), at most
  `TraceLimits.max_spans` by its priority, in sequence order; the rest counted in `memtrace.spans_omitted`.
  Inputs and outputs are the variables (a retrieval's outputs: its memory units as MLflow documents),
  every value redacted THEN cut; span type LLM (used a prompt), RETRIEVER, TOOL (a construction step),
  CHAIN (anything else; the root).
- tags: `memtrace.conversation|question|category|verdict`, and for an attributed failure
  `memtrace.blamed_stage|error_type|blamed_op|verified` (the replay check).
- blame: only for a failure an attributor explained (no assessment, no blame tags otherwise); source CODE
  `memtrace.<method>`, attached to the blamed operation's span when it is shown.

`log_question_traces` writes them after the run (no live tracing): span times are synthetic, 1 ms apart
in sequence order. Writing is batched the way MLflow's exporter stores a finished trace: one
`start_trace` per trace and one `log_spans` per `SPANS_PER_WRITE` spans of many traces (live spans took
most of a `memtrace run`'s wall time). It never fails the run: an error is warned and the number of
traces stored returned; an interruption (`StopToken`, checked before each trace) still propagates, after
the spans of the traces already started are written. It does not decide whether traces are logged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import mlflow
from memtrace_loop.pipeline.analysis.attribution.records import Attribution
from memtrace_loop.pipeline.analysis.failure_path import failure_path
from memtrace_loop.pipeline.core.conventions import CONSTRUCTION_OP_KINDS, MEMORY_KINDS, NEAR_MISSES, OpKind
from memtrace_loop.pipeline.core.graph import ExecutionGraph, Operation
from memtrace_loop.pipeline.core.records import CaseResult
from memtrace_loop.pipeline.core.redaction import redact
from memtrace_loop.pipeline.core.stop import StopToken
from memtrace_loop.pipeline.loop.runner import RunResult
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

logger = logging.getLogger(__name__)

BLAME_FEEDBACK = "blame"
SPANS_PER_WRITE = 1000  # spans of consecutive traces stored by one `log_spans` (one transaction)
STEP_NS = 1_000_000  # synthetic span spacing: 1 ms per operation, in sequence order
_IDS = RandomIdGenerator()
_RESOURCE = Resource.get_empty()  # one for every span (OpenTelemetry builds a default per span, slowly)


@dataclass(frozen=True)
class TraceLimits:
    """How big one question's trace may get: spans (besides the root), characters per value, and
    variables shown per span side."""

    max_spans: int = 40
    max_chars: int = 300
    max_values: int = 12

    def __post_init__(self) -> None:
        if self.max_spans < 1 or self.max_chars < 20 or self.max_values < 1:
            raise ValueError(f"trace limits too small: {self}")


@dataclass(frozen=True)
class SpanPlan:
    """One operation as a span."""

    op: str
    seq: int
    name: str
    span_type: str
    inputs: Mapping[str, Any]
    outputs: Any
    attributes: Mapping[str, Any]
    error: str | None = None  # the operation failed (span status ERROR)


@dataclass(frozen=True)
class BlameFeedback:
    """The attribution as an assessment: `value` the error type, `rationale` the reason, `source_id` the
    attribution method, `op` the blamed operation."""

    value: str
    rationale: str
    metadata: Mapping[str, Any]
    source_id: str
    op: str


@dataclass(frozen=True)
class QuestionTrace:
    question_id: str
    name: str
    inputs: Mapping[str, Any]
    outputs: Mapping[str, Any]
    tags: Mapping[str, str]
    attributes: Mapping[str, Any]
    spans: tuple[SpanPlan, ...] = ()
    error: str | None = None  # answering or judging failed (root status ERROR)
    blame: BlameFeedback | None = None
    omitted: int = 0  # path operations left out by `TraceLimits.max_spans`
    correct: bool = False  # the judge's verdict was CORRECT

    @property
    def state(self) -> str:
        return "OK" if self.correct and self.error is None else "ERROR"


class _Text:
    """Redacts, then cuts: a secret is masked before a cut could leave a piece of it."""

    def __init__(self, secrets: Iterable[str], limits: TraceLimits) -> None:
        self.secrets = tuple(secrets)
        self.limits = limits

    def __call__(self, value: object, max_chars: int | None = None) -> str:
        text = redact(str(value), self.secrets)
        limit = max_chars or self.limits.max_chars
        return text if len(text) <= limit else f"{text[:limit]}… (+{len(text) - limit} chars)"

    def values(self, graph: ExecutionGraph, var_ids: Sequence[str]) -> dict[str, str]:
        shown = {self(v, 200): self(graph.variable(v).value) for v in var_ids[: self.limits.max_values]}
        if len(var_ids) > self.limits.max_values:
            shown["…"] = f"+{len(var_ids) - self.limits.max_values} more variables"
        return shown


def _span_type(op: Operation) -> str:
    if op.prompt is not None:
        return SpanType.LLM
    if op.kind == OpKind.RETRIEVAL:
        return SpanType.RETRIEVER
    return SpanType.TOOL if op.kind in CONSTRUCTION_OP_KINDS else SpanType.CHAIN


def _plan_span(graph: ExecutionGraph, op: Operation, attribution: Attribution | None, text: _Text) -> SpanPlan:
    attributes: dict[str, Any] = {
        "memtrace.op": op.id, "memtrace.op_name": op.name, "memtrace.stage": op.stage,
        "memtrace.kind": op.kind.value, "memtrace.seq": op.seq, "memtrace.status": op.status.value,
    }
    if op.prompt is not None:
        prompt = graph.variable(op.prompt)
        attributes |= {"memtrace.prompt": prompt.id, "memtrace.prompt_version": prompt.version}
    if op.usage.calls:
        attributes |= {"memtrace.lm_calls": op.usage.calls, "memtrace.cached_calls": op.usage.cached_calls,
                       "memtrace.prompt_tokens": op.usage.prompt_tokens,
                       "memtrace.completion_tokens": op.usage.completion_tokens}
    near = op.meta.get(NEAR_MISSES)
    if near:
        attributes["memtrace.near_misses"] = [text(v, 200) for v in list(near)[: text.limits.max_values]]
    for key in ("k", "scores"):
        if key in op.meta:
            attributes[f"memtrace.{key}"] = op.meta[key]
    if attribution is not None and op.id in {attribution.op, *(f.op for f in attribution.joint)}:
        attributes["memtrace.blamed"] = True
    if attribution is not None and op.id in {f.op for f in attribution.suspects}:
        attributes["memtrace.suspect"] = True

    outputs: Any
    if op.kind == OpKind.RETRIEVAL:
        units = [v for v in op.inputs if graph.variable(v).kind in MEMORY_KINDS]
        inputs = text.values(graph, [v for v in op.inputs if v not in units])
        outputs = [
            {"id": text(v, 200), "page_content": text(graph.variable(v).value), "metadata": {"doc_uri": text(v, 200)}}
            for v in units[: text.limits.max_values]
        ] or text.values(graph, op.outputs)
        if len(units) > text.limits.max_values:
            attributes["memtrace.units_not_shown"] = len(units) - text.limits.max_values
    else:
        inputs = text.values(graph, op.inputs)
        outputs = text.values(graph, op.outputs)
    if op.prompt is not None:
        inputs["prompt"] = text(graph.variable(op.prompt).value)
    name = f"{op.name} → {graph.variable(op.outputs[0]).name if op.outputs else op.id}"
    if attribution is not None and attribution.op == op.id:
        name += f" [blamed: {attribution.error_type.value}]"
    error = text(op.error or "failed") if op.failed else None
    return SpanPlan(op.id, op.seq, text(name, 250), _span_type(op), inputs, outputs, attributes, error)


def _blame(attribution: Attribution, text: _Text) -> BlameFeedback:
    return BlameFeedback(
        value=attribution.error_type.value,
        rationale=text(attribution.reason, 2000),
        metadata={
            "stage": attribution.stage, "op": attribution.op, "op_name": attribution.op_name,
            "verified": attribution.verified, "check": attribution.check.value, "confidence": attribution.confidence,
            "tunable": attribution.tunable.value, "method": attribution.method,
            "joint": [f.op for f in attribution.joint],
            "alternatives": [f"{f.stage}:{f.op}" for f in attribution.alternatives],
        },
        source_id=f"memtrace.{attribution.method}",
        op=attribution.op,
    )


def plan_question_trace(
    case: CaseResult, graph: ExecutionGraph | None, attribution: Attribution | None = None, *,
    secrets: Iterable[str] = (), limits: TraceLimits = TraceLimits(),
) -> QuestionTrace:
    """The trace of one judged case; `graph` is its conversation's graph (None: the root only)."""
    text = _Text(secrets, limits)
    question = case.question
    ops, omitted = (failure_path(graph, case, attribution).operations(graph, limits.max_spans)
                    if graph is not None else ((), 0))
    spans = tuple(_plan_span(graph, op, attribution, text) for op in ops) if graph is not None else ()
    tags = {
        "memtrace.conversation": text(question.conversation_id, 250), "memtrace.question": text(question.id, 250),
        "memtrace.category": text(question.category_name, 250), "memtrace.verdict": case.verdict,
    }
    if attribution is not None:
        tags |= {"memtrace.blamed_stage": attribution.stage, "memtrace.error_type": attribution.error_type.value,
                 "memtrace.blamed_op": attribution.op, "memtrace.verified": attribution.check.value}
    return QuestionTrace(
        question_id=question.id,
        name=text(f"question {question.id}", 250),
        inputs={"question": text(question.text), "question_id": text(question.id, 250),
                "conversation": text(question.conversation_id, 250), "category": question.category,
                "evidence": [text(e, 100) for e in question.evidence[: limits.max_values]]},
        outputs={"answer": text(case.prediction), "gold": text(question.gold), "verdict": case.verdict},
        tags=tags,
        attributes={"memtrace.conversation": tags["memtrace.conversation"],
                    "memtrace.question": tags["memtrace.question"], "memtrace.spans_omitted": omitted,
                    "memtrace.judge_score": case.scores.judge, "memtrace.f1": case.scores.f1},
        spans=spans,
        error=text(case.error) if case.error else None,
        blame=_blame(attribution, text) if attribution is not None else None,
        omitted=omitted,
        correct=case.correct,
    )


def plan_run_traces(
    result: RunResult, attributions: Iterable[Attribution], *, cap: int, secrets: Iterable[str] = (),
    limits: TraceLimits = TraceLimits(), failures_only: bool = False,
) -> tuple[QuestionTrace, ...]:
    """One trace per judged case of `result` (see the module docstring), at most `cap`."""
    secrets = tuple(secrets)
    attribution_by_question = {a.question_id: a for a in attributions}
    excluded = set(result.report.excluded_categories)
    cases = [c for c in result.results if not c.correct and c.question.category not in excluded] if failures_only \
        else list(result.results)
    return tuple(
        plan_question_trace(
            case, result.graph_by_conversation.get(case.question.conversation_id),
            attribution_by_question.get(case.question.id), secrets=secrets, limits=limits,
        )
        for case in cases[: max(cap, 0)]
    )


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


def _build(plan: QuestionTrace, experiment_id: str, run_id: str) -> tuple[TraceInfo, list[Span]]:
    """The trace of `plan` as MLflow's exporter would store it had it been traced live."""
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
    return info, [root, *spans]


def _write(plans: Sequence[QuestionTrace], run_id: str, stop: StopToken | None) -> int:
    """Log `plans` linked to run `run_id`; returns how many the store holds. A failure while writing stops
    the writing (warned) but keeps what was written."""
    uri = mlflow.get_tracking_uri()
    experiment_id = MlflowClient(uri).get_run(run_id).info.experiment_id
    client = TracingClient(uri)
    started: list[str] = []
    pending: list[Span] = []  # spans of started traces not yet written
    try:
        for plan in plans:
            if stop is not None:
                stop.check()  # `Interrupted` (a BaseException) propagates: the run ends KILLED
            info, spans = _build(plan, experiment_id, run_id)
            client.start_trace(info)
            started.append(info.trace_id)
            pending.extend(spans)
            if len(pending) >= SPANS_PER_WRITE:
                client.log_spans(experiment_id, pending)
                pending = []
    except Exception as exc:  # keep what was written; its spans still go below
        logger.warning("stopped logging question traces after %d of %d: %s: %s", len(started), len(plans),
                       type(exc).__name__, exc)
    finally:
        if pending:  # the spans of every trace started (also on an interruption)
            client.log_spans(experiment_id, pending)
    found = mlflow.search_traces(locations=[experiment_id], run_id=run_id, include_spans=False, return_type="list")
    stored = len({trace.info.trace_id for trace in found} & set(started))
    if stored < len(started):
        logger.warning("MLflow stored %d of the %d question traces sent for run %s", stored, len(started), run_id)
    return stored


def log_question_traces(
    result: RunResult, attributions: Iterable[Attribution], *, run_id: str, cap: int = 200,
    secrets: Iterable[str] = (), limits: TraceLimits = TraceLimits(), stop: StopToken | None = None,
    failures_only: bool = False,
) -> int:
    """The traces `plan_run_traces` plans, logged linked to run `run_id` in the tracking store MLflow is
    pointed at; returns how many were stored, never raises for a logging failure (`Interrupted` propagates)."""
    if cap <= 0:
        return 0
    try:
        plans = plan_run_traces(result, attributions, cap=cap, secrets=secrets, limits=limits,
                                failures_only=failures_only)
        return _write(plans, run_id, stop) if plans else 0
    except Exception as exc:
        logger.warning("could not log the question traces of MLflow run %s: %s: %s", run_id,
                       type(exc).__name__, exc)
        return 0


@dataclass(frozen=True)
class FailureTraces:
    """What `memtrace optimize` logs into each iteration's nested run: the train failures as traces, at most
    `cap` (`tracking.max_traces_per_iteration`); `TrackingLoopObserver` calls it."""

    cap: int
    secrets: tuple[str, ...] = ()
    stop: StopToken | None = None

    def __call__(self, result: RunResult, attributions: Iterable[Attribution], run_id: str) -> int:
        return log_question_traces(result, attributions, run_id=run_id, cap=self.cap, secrets=self.secrets,
                                   stop=self.stop, failures_only=True)
