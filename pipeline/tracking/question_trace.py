"""What one answered question looks like as a trace: its root, the operations on its path, its tags and
its blame — planned from the execution graph, before (and without) MLflow.

`plan_run_traces(result, attributions, cap=..., secrets=...)` gives one `QuestionTrace` per judged case
of a run, in dataset order, up to `cap` (`failures_only`: only the failures the loop attributes, i.e.
cases not judged CORRECT outside the run's excluded categories: what `optimize` traces per iteration).
A case is *answered* when the run judged it (every `CaseResult`). Its trace:

- root: the question (inputs: question text, question and conversation ids, category, evidence turn
  ids; outputs: answer, gold, verdict); its state (`QuestionTrace.state`) is ERROR for a wrong answer
  (verdict not CORRECT) and for a case whose answering or judging raised, OK for a correct one;
- spans: the operations on the question's path as `pipeline.analysis.failure_path` selects them (the
  selection report.html draws: the evidence's path to the answer, the answering chain, the blamed
  operation and suspects, what the attribution's reason names), at most `TraceLimits.max_spans` by its
  priority, in sequence order; what did not fit is counted in the root's `memtrace.spans_omitted`.
- each span's inputs and outputs are its variables (`{variable id: value}`; a retrieval's outputs are
  the memory units it returned as MLflow documents), every value redacted (`core.redaction.redact`)
  THEN cut to `max_chars`, at most `max_values` per side; attributes: op id, name, stage, kind, seq,
  status (and error), prompt variable and version, LM usage, near misses, whether it is blamed;
  span type by what the operation is: LLM (it used a prompt), RETRIEVER, TOOL (a non-LLM construction
  step such as a store write), CHAIN (anything else; the root).
- tags (what the MLflow UI filters on): `memtrace.conversation`, `memtrace.question`,
  `memtrace.category`, `memtrace.verdict`, and for an attributed failure `memtrace.blamed_stage`,
  `memtrace.error_type`, `memtrace.blamed_op`, `memtrace.verified` (the replay check: verified / refuted /
  unchecked / unverifiable).
- blame (`BlameFeedback`): for an attributed failure only. Decision: a correct case, an excluded
  category and a failure the attributor could not explain carry NO blame (no assessment, no blame
  tags), so "has a blame assessment" means "an attributor explained this failure".

Pure: reads graphs and records, writes nothing. Writing to MLflow is `pipeline.tracking.traces`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memtrace_loop.pipeline.analysis.attribution.records import Attribution
from memtrace_loop.pipeline.analysis.failure_path import failure_path
from memtrace_loop.pipeline.core.conventions import (
    CONSTRUCTION_OP_KINDS,
    MEMORY_KINDS,
    NEAR_MISSES,
    OpKind,
)
from memtrace_loop.pipeline.core.graph import ExecutionGraph, Operation
from memtrace_loop.pipeline.core.records import CaseResult
from memtrace_loop.pipeline.core.redaction import redact
from memtrace_loop.pipeline.loop.runner import RunResult

__all__ = [
    "BLAME_FEEDBACK",
    "TAG_BLAMED_STAGE",
    "TAG_CONVERSATION",
    "TAG_ERROR_TYPE",
    "TAG_QUESTION",
    "TAG_VERDICT",
    "BlameFeedback",
    "QuestionTrace",
    "SpanPlan",
    "TraceLimits",
    "plan_question_trace",
    "plan_run_traces",
]

BLAME_FEEDBACK = "blame"
TAG_CONVERSATION = "memtrace.conversation"
TAG_QUESTION = "memtrace.question"
TAG_CATEGORY = "memtrace.category"
TAG_VERDICT = "memtrace.verdict"
TAG_BLAMED_STAGE = "memtrace.blamed_stage"
TAG_ERROR_TYPE = "memtrace.error_type"
TAG_BLAMED_OP = "memtrace.blamed_op"
TAG_VERIFIED = "memtrace.verified"

# MLflow's span type names (mlflow.entities.SpanType), written out so this module stays free of MLflow
SPAN_LLM, SPAN_RETRIEVER, SPAN_TOOL, SPAN_CHAIN = "LLM", "RETRIEVER", "TOOL", "CHAIN"


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
    blamed: bool = False


@dataclass(frozen=True)
class BlameFeedback:
    """The attribution as an assessment: `value` the error type, `rationale` the reason."""

    value: str
    rationale: str
    metadata: Mapping[str, Any]
    source_id: str  # the attribution method (lineage, llm, lineage+replay, ...)
    op: str  # the blamed operation (its span carries the feedback when it is shown)


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
        """The trace's state in MLflow: OK for a correct answer; ERROR for a wrong one or a failed case."""
        return "OK" if self.correct and self.error is None else "ERROR"


# ------------------------------------------------------------------ values


class _Text:
    """Redacts, then cuts: a secret is masked before a cut could leave a piece of it."""

    def __init__(self, secrets: Iterable[str], limits: TraceLimits) -> None:
        self.secrets = tuple(secrets)
        self.limits = limits

    def __call__(self, value: object, max_chars: int | None = None) -> str:
        text = redact(str(value), self.secrets)
        limit = max_chars or self.limits.max_chars
        if len(text) <= limit:
            return text
        return f"{text[:limit]}… (+{len(text) - limit} chars)"

    def values(self, graph: ExecutionGraph, var_ids: Sequence[str]) -> dict[str, str]:
        shown = {self(v, 200): self(graph.variable(v).value) for v in var_ids[: self.limits.max_values]}
        if len(var_ids) > self.limits.max_values:
            shown["…"] = f"+{len(var_ids) - self.limits.max_values} more variables"
        return shown


def _span_type(op: Operation) -> str:
    if op.prompt is not None:
        return SPAN_LLM
    if op.kind == OpKind.RETRIEVAL:
        return SPAN_RETRIEVER
    if op.kind in CONSTRUCTION_OP_KINDS:
        return SPAN_TOOL
    return SPAN_CHAIN


def _span_name(graph: ExecutionGraph, op: Operation, blamed: Attribution | None) -> str:
    target = graph.variable(op.outputs[0]).name if op.outputs else op.id
    name = f"{op.name} → {target}"
    if blamed is not None and blamed.op == op.id:
        name += f" [blamed: {blamed.error_type.value}]"
    return name


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
    blamed = attribution is not None and op.id in {attribution.op, *(f.op for f in attribution.joint)}
    if blamed:
        attributes["memtrace.blamed"] = True
    if attribution is not None and op.id in {f.op for f in attribution.suspects}:
        attributes["memtrace.suspect"] = True

    outputs: Any
    if op.kind == OpKind.RETRIEVAL:
        units = [v for v in op.inputs if graph.variable(v).kind in MEMORY_KINDS]
        others = [v for v in op.inputs if v not in units]
        inputs = text.values(graph, others)
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
    error = text(op.error or "failed") if op.failed else None
    return SpanPlan(op.id, op.seq, text(_span_name(graph, op, attribution), 250), _span_type(op), inputs, outputs,
                    attributes, error, blamed)


# ------------------------------------------------------------------ traces


def _verified(attribution: Attribution) -> str:
    """The tag value: the replay check's state (verified, refuted, unchecked, unverifiable)."""
    return attribution.check.value


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
    case: CaseResult,
    graph: ExecutionGraph | None,
    attribution: Attribution | None = None,
    *,
    secrets: Iterable[str] = (),
    limits: TraceLimits = TraceLimits(),
) -> QuestionTrace:
    """The trace of one judged case (see the module docstring); `graph` is its conversation's graph
    (None: a trace with the root only)."""
    text = _Text(secrets, limits)
    question = case.question
    ops, omitted = (failure_path(graph, case, attribution).operations(graph, limits.max_spans)
                    if graph is not None else ((), 0))
    spans = tuple(_plan_span(graph, op, attribution, text) for op in ops) if graph is not None else ()
    tags = {
        TAG_CONVERSATION: text(question.conversation_id, 250), TAG_QUESTION: text(question.id, 250),
        TAG_CATEGORY: text(question.category_name, 250), TAG_VERDICT: case.verdict,
    }
    if attribution is not None:
        tags |= {TAG_BLAMED_STAGE: attribution.stage, TAG_ERROR_TYPE: attribution.error_type.value,
                 TAG_BLAMED_OP: attribution.op, TAG_VERIFIED: _verified(attribution)}
    return QuestionTrace(
        question_id=question.id,
        name=text(f"question {question.id}", 250),
        inputs={"question": text(question.text), "question_id": text(question.id, 250),
                "conversation": text(question.conversation_id, 250), "category": question.category,
                "evidence": [text(e, 100) for e in question.evidence[: limits.max_values]]},
        outputs={"answer": text(case.prediction), "gold": text(question.gold), "verdict": case.verdict},
        tags=tags,
        attributes={"memtrace.conversation": tags[TAG_CONVERSATION], "memtrace.question": tags[TAG_QUESTION],
                    "memtrace.spans_omitted": omitted, "memtrace.judge_score": case.scores.judge,
                    "memtrace.f1": case.scores.f1},
        spans=spans,
        error=text(case.error) if case.error else None,
        blame=_blame(attribution, text) if attribution is not None else None,
        omitted=omitted,
        correct=case.correct,
    )


def plan_run_traces(
    result: RunResult,
    attributions: Iterable[Attribution],
    *,
    cap: int,
    secrets: Iterable[str] = (),
    limits: TraceLimits = TraceLimits(),
    failures_only: bool = False,
) -> tuple[QuestionTrace, ...]:
    """One trace per judged case of `result` (`failures_only`: per case not judged CORRECT outside the
    run's excluded categories), in dataset order, at most `cap`; each failure with an attribution
    carries its blame."""
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
