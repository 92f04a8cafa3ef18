"""What every memory system records the same way: its turns (`record_turn`) and the answer side.

The query, a retrieval operation from the query and the unit versions it returned to `retrieved:<qid>`,
then the shared `respond` stage (`AnswerQuestion`); `conversation_from_graph` reads turns back. It retrieves nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import dspy
from memtrace_loop.memory_systems.signatures import render_turn
from memtrace_loop.memory_systems.stages import RESPOND_STAGE
from memtrace_loop.pipeline.core.conventions import (
    Namespace,
    OpKind,
    VarKind,
    answer_name,
    first_version,
    prefix,
    query_name,
    retrieved_name,
    turn_id_of,
    turn_name,
)
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.records import Conversation, Question, Turn
from memtrace_loop.pipeline.core.tracing import Tracer


@dataclass(frozen=True)
class AnswerOutcome:
    """The answer to one question and the graph variables a judge and an attributor need."""

    text: str
    query_var: str
    answer_var: str
    error: str | None = None


def record_turn(tracer: Tracer, turn: Turn) -> str:
    """Record one conversation turn (rendered with its speaker and date); returns its variable id."""
    return tracer.variable(
        turn_name(turn.id), VarKind.TURN, render_turn(turn.speaker, turn.time, turn.text),
        {"speaker": turn.speaker, "session": turn.session, "time": turn.time},
    )


def conversation_from_graph(graph: ExecutionGraph) -> Conversation:
    """The conversation whose turns `record_turn` wrote into `graph` (in the order they were recorded)."""
    turns = []
    for name in graph.names(prefix(Namespace.TURN)):
        var = graph.variable(first_version(name))
        speaker, time = str(var.meta.get("speaker", "")), str(var.meta.get("time", ""))
        text = var.value.removeprefix(render_turn(speaker, time, ""))
        turns.append(Turn(turn_id_of(var.id), speaker, text, int(var.meta.get("session", 0) or 0), time))
    return Conversation(graph.graph_id, tuple(dict.fromkeys(t.speaker for t in turns)), tuple(turns))


def record_query(tracer: Tracer, question: Question) -> str:
    return tracer.variable(query_name(question.id), VarKind.QUERY, question.text)


def record_retrieval(
    tracer: Tracer, question: Question, query_var: str, unit_vars: Iterable[str], context: str, *,
    stage: str = "retrieve", name: str = "retrieve_memories", extra_inputs: Iterable[str] = (),
    meta: Mapping[str, Any] | None = None,
) -> str:
    """Record the context a retrieval produced; returns the context variable id."""
    context_var = tracer.variable(retrieved_name(question.id), VarKind.CONTEXT, context)
    tracer.operation(name, stage, OpKind.RETRIEVAL, [query_var, *extra_inputs, *unit_vars], [context_var], meta=meta)
    return context_var


def respond(
    tracer: Tracer, predictor: dspy.Predict, question: Question, query_var: str, context_var: str, context: str
) -> AnswerOutcome:
    """Run the `respond` stage on a recorded context and record the answer."""
    with tracer.stage(
        predictor, RESPOND_STAGE, op="question_answering", kind=OpKind.RESPONSE, inputs=[query_var, context_var],
        context=context, question=question.text,
    ) as answered:
        text = str(answered.prediction.answer).strip() if answered.ok else ""
        answer_var = answered.output(answer_name(question.id), VarKind.ANSWER, text)
    return AnswerOutcome(text, query_var, answer_var, answered.error)
