"""Small conversation graphs built by hand, the way the memory systems record them.

The variable names, kinds, operation names, stages and op kinds are those of `memory_systems/mem0/system.py`,
`long_context.py`, `rag.py`, `evermemos/system.py`, `answering.py` and the judge of `pipeline/loop/runner.py`:
a turn (`turn`), Mem0's extract -> search_similar -> decide -> store writes (`extract`, `search_and_decide`,
`memory_add`, `memory_write`), and the question side (`answer_side`). The lineage attributor's tests and
those of its graph reading (`information_flow`) plant faults in them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from memtrace_loop.pipeline.core.graph import ExecutionGraph, Operation, OpKind, Usage
from memtrace_loop.pipeline.core.records import CaseResult, Question, Scores

TIME = "2023-05-08T13:56"
DATE = "8 May 2023"
QID = "c1:q0"
LIVES = Question(QID, "c1", "Where does Alice live?", "Lisbon", 1, ("D1:1",))
MOVED = "I moved to Lisbon in May."


def new_graph(*stages: str) -> ExecutionGraph:
    """A conversation graph with every stage prompt declared up front (`runner.build_memory`)."""
    graph = ExecutionGraph("c1", {"system": "hand-built"})
    for stage in (*stages, "respond", "judge"):
        graph.add_variable(f"prompt:{stage}", "prompt", f"The {stage} instruction.", {"stage": stage})
    return graph


def turn(graph: ExecutionGraph, dia_id: str, speaker: str, text: str) -> str:
    meta = {"speaker": speaker, "session": int(dia_id[1:].split(":")[0]), "time": TIME}
    return graph.add_variable(f"turn:{dia_id}", "turn", f"[{DATE}] {speaker}: {text}", meta).id


def case(question: Question, prediction: str) -> CaseResult:
    return CaseResult(question, prediction, "WRONG", Scores(0.0, 0.0, 0.0))


@dataclass(frozen=True)
class Answered:
    """The question side of a graph: what the attributor should blame in it."""

    retrieval: Operation | None
    respond: Operation


def answer_side(
    graph: ExecutionGraph,
    question: Question,
    prediction: str,
    *,
    units: Iterable[str] = (),
    context: str | None = None,
    context_var: str | None = None,
    retrieval_name: str = "retrieve_memories",
    extra_inputs: Iterable[str] = (),
    meta: Mapping[str, Any] | None = None,
    query_var: str | None = None,
    respond_status: str = "ok",
) -> Answered:
    """`answering.record_query` + `record_retrieval` (unless a built `context_var` is given, as in
    Long-Context) + `respond`, then the judge (`runner.judge_answer`)."""
    query = query_var or graph.add_variable(f"query:{question.id}", "query", question.text).id
    retrieval = None
    if context_var is None:
        units = tuple(units)
        text = context if context is not None else "\n".join(graph.variable(u).value for u in units)
        context_var = graph.add_variable(f"retrieved:{question.id}", "context", text).id
        retrieval = graph.add_operation(
            retrieval_name, "retrieve", OpKind.RETRIEVAL, [query, *extra_inputs, *units], [context_var],
            meta=meta or {"k": 10},
        )
    answer = graph.add_variable(f"answer:{question.id}", "answer", prediction).id
    respond = graph.add_operation(
        "question_answering", "respond", OpKind.RESPONSE, [query, context_var], [answer], prompt="prompt:respond@1",
        status=respond_status, error=None if respond_status == "ok" else "TimeoutError: no answer",
    )
    gold = graph.add_variable(f"gold:{question.id}", "gold", question.gold).id
    verdict = graph.add_variable(f"verdict:{question.id}", "verdict", "WRONG").id
    graph.add_operation("llm_judge", "judge", OpKind.JUDGE, [query, gold, answer], [verdict],
                        prompt="prompt:judge@1", meta={"category": question.category})
    return Answered(retrieval, respond)


# Mem0 (memory_systems/mem0/system.py): extract -> search_similar -> decide -> store writes


def extract(graph: ExecutionGraph, dia_id: str, facts: list[str], **failure: Any) -> tuple[str, Operation]:
    out = graph.add_variable(f"facts:{dia_id}", "facts", json.dumps(facts)).id
    op = graph.add_operation("extract_facts", "extract", OpKind.EXTRACTION, [f"turn:{dia_id}@1"], [out],
                             prompt="prompt:extract@1", usage=Usage(50, 10, 1, 0), **failure)
    return out, op


def search_and_decide(
    graph: ExecutionGraph, dia_id: str, facts_var: str, similar: Iterable[str], actions: list[dict[str, str]]
) -> tuple[str, Operation]:
    similar = tuple(similar)
    lines = "\n".join(f"[{graph.variable(v).name.removeprefix('memory:')}] {graph.variable(v).value}" for v in similar)
    similar_var = graph.add_variable(f"similar:{dia_id}", "retrieved", lines).id
    graph.add_operation("search_similar", "search_similar", OpKind.RETRIEVAL, [facts_var, *similar], [similar_var],
                        meta={"k": 5})
    decision = graph.add_variable(f"decision:{dia_id}", "decision", json.dumps(actions)).id
    op = graph.add_operation("decide_updates", "decide", OpKind.UPDATE, [facts_var, similar_var], [decision],
                             prompt="prompt:decide@1")
    return decision, op


def memory_add(graph: ExecutionGraph, decision: str, unit: str, text: str, dia_id: str) -> str:
    out = graph.add_variable(f"memory:{unit}", "memory", text, {"time": TIME, "turn": dia_id}).id
    graph.add_operation("memory_add", "store", OpKind.EXTRACTION, [decision], [out])
    return out


def memory_write(graph: ExecutionGraph, decision: str, old: str, text: str, dia_id: str) -> tuple[str, Operation]:
    """`memory_update` with `text`, or `memory_delete` when `text` is empty (value "", meta deleted)."""
    deleted = not text
    name = graph.variable(old).name
    out = graph.add_variable(name, "memory", text, {"time": TIME, "turn": dia_id, "deleted": deleted}).id
    kind, op_name = (OpKind.DELETION, "memory_delete") if deleted else (OpKind.UPDATE, "memory_update")
    return out, graph.add_operation(op_name, "store", kind, [decision, old], [out])


def mem0_stored_lisbon() -> tuple[ExecutionGraph, str]:
    """Mem0 after turn D1:1: the move to Lisbon extracted, decided and stored as memory:m1@1."""
    graph = new_graph("extract", "decide")
    turn(graph, "D1:1", "Alice", MOVED)
    facts, _ = extract(graph, "D1:1", ["Alice moved to Lisbon in May 2023"])
    decision, _ = search_and_decide(graph, "D1:1", facts, [], [{"event": "ADD", "text": "Alice lives in Lisbon"}])
    return graph, memory_add(graph, decision, "m1", "Alice lives in Lisbon", "D1:1")


@dataclass(frozen=True)
class Overwrite:
    """What `mem0_overwrote_lisbon` wrote: the stored fact, the version that replaced it, and the two steps."""

    stored: str  # memory:m1@1, "Alice lives in Lisbon"
    overwritten: str  # memory:m1@2, "Alice loves the food in Porto"
    decide: Operation  # the decision to update m1
    update: Operation  # the store write that executed it


def mem0_overwrote_lisbon() -> tuple[ExecutionGraph, Overwrite]:
    """Mem0 after turn D1:2: the decision on the food in Porto overwrote the stored move to Lisbon."""
    graph, stored = mem0_stored_lisbon()
    turn(graph, "D1:2", "Alice", "The food in Porto is amazing.")
    facts, _ = extract(graph, "D1:2", ["Alice loves the food in Porto"])
    decision, decide_op = search_and_decide(
        graph, "D1:2", facts, [stored], [{"event": "UPDATE", "id": "m1", "text": "Alice loves the food in Porto"}]
    )
    overwritten, update_op = memory_write(graph, decision, stored, "Alice loves the food in Porto", "D1:2")
    return graph, Overwrite(stored, overwritten, decide_op, update_op)
