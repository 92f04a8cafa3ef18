"""A failure's drawing holds what its reason names: for a missed retrieval, the memory unit that held the
answer with the evidence's path to it (turn → construction op → unit) and the search that missed it,
while the search's other hits are capped and stacked in one column beside it (not a sideways strip). The
question's MLflow trace shows the operations of that same selection (`pipeline.analysis.failure_path`)."""

from __future__ import annotations

from memtrace_loop.pipeline.analysis.attribution.records import Attribution, ErrorType, Tunable
from memtrace_loop.pipeline.analysis.failure_path import MAX_UNRELATED, failure_path, named_nodes
from memtrace_loop.pipeline.analysis.judge import score_case
from memtrace_loop.pipeline.core import conventions as names
from memtrace_loop.pipeline.core.conventions import OpKind, VarKind
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.records import Question
from memtrace_loop.pipeline.report.subgraph import NODE_W, Role, failure_subgraph, layout
from memtrace_loop.pipeline.tracking.traces import TraceLimits, plan_question_trace

N_HITS = 10  # what the search returned instead


def missed_retrieval():
    """The evidence turn → extract → memory m1 (the answer); ten noise turns → their units, all of which the
    search returned (k=10) instead of m1; then context → answer → judge. Returns graph, case, attribution."""
    graph = ExecutionGraph("c1")
    turn = graph.add_variable(names.turn_name("D1:1"), VarKind.TURN, "Alice: I moved to Paris.")
    held = graph.add_variable(names.memory_name("m1"), VarKind.MEMORY, "Alice lives in Paris")
    graph.add_operation("extract_facts", "extract", OpKind.EXTRACTION, [turn.id], [held.id])
    hits = []
    for i in range(N_HITS):
        noise = graph.add_variable(names.turn_name(f"N{i}"), VarKind.TURN, f"Bob: I like tea number {i}.")
        unit = graph.add_variable(names.memory_name(f"n{i}"), VarKind.MEMORY, f"Bob likes tea {i}")
        graph.add_operation("extract_facts", "extract", OpKind.EXTRACTION, [noise.id], [unit.id])
        hits.append(unit.id)
    query = graph.add_variable(names.query_name("q1"), VarKind.QUERY, "Where does Alice live?")
    context = graph.add_variable(names.retrieved_name("q1"), VarKind.CONTEXT, "Bob likes tea")
    search = graph.add_operation("retrieve_memories", "retrieve", OpKind.RETRIEVAL, [query.id, *hits], [context.id])
    answer = graph.add_variable(names.answer_name("q1"), VarKind.ANSWER, "London")
    graph.add_operation("question_answering", "respond", OpKind.RESPONSE, [query.id, context.id], [answer.id])
    gold = graph.add_variable(names.gold_name("q1"), VarKind.GOLD, "Paris")
    verdict = graph.add_variable(names.verdict_name("q1"), VarKind.VERDICT, "WRONG")
    graph.add_operation("llm_judge", "judge", OpKind.JUDGE, [query.id, gold.id, answer.id], [verdict.id])
    case = score_case(Question("q1", "c1", "Where does Alice live?", "Paris", 1, ("D1:1",)), "London", "WRONG", None)
    reason = (f"{held.id} \"{held.value}\" holds the answer \"Paris\" and was in the store when q1 was asked, but "
              f"retrieve_memories ({search.id}, k=10) did not retrieve it into {context.id}.")
    attribution = Attribution(case, search.id, search.name, "retrieve", ErrorType.RETRIEVAL, reason, 0.85,
                              "lineage", Tunable.KNOBS, ("D1:1",))
    return graph, case, attribution


def test_a_missed_retrieval_draws_the_unit_that_held_the_answer_and_the_path_to_it():
    graph, case, attribution = missed_retrieval()
    sub = failure_subgraph(graph, case, attribution)
    ids = {n.id for n in sub.nodes}
    role = {n.id: n.role for n in sub.nodes}
    extract = graph.producer("memory:m1@1")
    assert extract is not None
    assert {"turn:D1:1@1", extract.id, "memory:m1@1", attribution.op, "retrieved:q1@1", "answer:q1@1"} <= ids
    assert ("turn:D1:1@1", extract.id) in sub.edges and (extract.id, "memory:m1@1") in sub.edges
    assert role["memory:m1@1"] == Role.NAMED and role[attribution.op] == Role.BLAMED
    assert all(node in ids for node in named_nodes(graph, attribution.reason))  # every node the reason names


def test_the_searchs_other_hits_are_capped_and_stacked_beside_it():
    graph, case, attribution = missed_retrieval()
    sub = failure_subgraph(graph, case, attribution)
    hits = [n.id for n in sub.nodes if n.id.startswith("memory:n")]
    assert len(hits) == MAX_UNRELATED and sub.elided_by_kind.get("memory") == N_HITS - MAX_UNRELATED
    assert not any(n.id.startswith("turn:N") for n in sub.nodes)  # their own lineage is not drawn
    placed = layout(sub)
    x_of = {p.id: p.x for p in placed.placed}
    assert len({x_of[h] for h in hits}) == 1 and x_of[hits[0]] < x_of[attribution.op]  # one column, left of it
    assert placed.width < 12 * (NODE_W + 40)  # a handful of columns, not one per hit


def test_names_in_a_reason_resolve_to_nodes_and_unknown_ones_are_ignored():
    graph, _, attribution = missed_retrieval()
    text = "turn:D1:1 and memory:m1@1. Also memory:zz@1, op:999 and retrieved:q1@1: done"
    assert named_nodes(graph, text) == ["turn:D1:1@1", "memory:m1@1", "retrieved:q1@1"]
    assert named_nodes(graph, attribution.reason)[:2] == ["memory:m1@1", attribution.op]


def test_the_trace_shows_the_operations_the_drawing_shows_by_the_same_priority():
    graph, case, attribution = missed_retrieval()
    drawn = {n.id for n in failure_subgraph(graph, case, attribution).nodes if n.kind == "op"}
    traced = plan_question_trace(case, graph, attribution)
    assert {s.op for s in traced.spans} == drawn and traced.omitted == 0
    first = plan_question_trace(case, graph, attribution, limits=TraceLimits(max_spans=1))
    assert [s.op for s in first.spans] == [attribution.op] and first.omitted == len(drawn) - 1  # the blamed op first
    path = failure_path(graph, case, attribution)
    assert path.ranked[0] == attribution.op and path.nodes(3) == frozenset(path.ranked[:3])
