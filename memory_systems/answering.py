"""The answer side every memory system shares: query, traced retrieval result, and the `respond` stage.

Each system retrieves in its own way; this module records the result the same way for all of them
(a `query:<qid>` variable, a retrieval operation whose inputs are the query and the memory-unit
versions it returned and whose output is the `retrieved:<qid>` context), then runs the shared
`respond` stage (`AnswerQuestion`) and records the answer. Keeping it in one place makes attribution
and blame mean the same thing across systems. It does not retrieve anything itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import dspy
from memtrace_loop.memory_systems.base import AnswerOutcome
from memtrace_loop.pipeline.core.graph import OpKind
from memtrace_loop.pipeline.core.records import Question
from memtrace_loop.pipeline.core.tracing import Tracer

RESPOND_STAGE = "respond"


def record_query(tracer: Tracer, question: Question) -> str:
    return tracer.variable(f"query:{question.id}", "query", question.text)


def record_retrieval(
    tracer: Tracer,
    question: Question,
    query_var: str,
    unit_vars: Iterable[str],
    context: str,
    *,
    stage: str = "retrieve",
    name: str = "retrieve_memories",
    extra_inputs: Iterable[str] = (),
    meta: Mapping[str, Any] | None = None,
) -> str:
    """Record the context a retrieval produced; returns the context variable id."""
    context_var = tracer.variable(f"retrieved:{question.id}", "context", context)
    tracer.operation(
        name, stage, OpKind.RETRIEVAL, [query_var, *extra_inputs, *unit_vars], [context_var], meta=meta
    )
    return context_var


def respond(
    tracer: Tracer, predictor: dspy.Predict, question: Question, query_var: str, context_var: str, context: str
) -> AnswerOutcome:
    """Run the `respond` stage on a recorded context and record the answer."""
    answered = tracer.llm(predictor, RESPOND_STAGE, context=context, question=question.text)
    text = str(answered.prediction.answer).strip() if answered.ok else ""
    answer_var = tracer.variable(f"answer:{question.id}", "answer", text)
    tracer.record_llm(answered, "question_answering", OpKind.RESPONSE, [query_var, context_var], [answer_var])
    return AnswerOutcome(text, query_var, answer_var, answered.error)
