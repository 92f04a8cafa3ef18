"""Interop against the real smartcomment 0.1.2 (installed by `make`), both ways.

Ours -> smartcomment: the graph of a run of every memory system, exported, loads in
`ExecNetwork.import_graph` unchanged (its own export gives back our document byte for byte), its
queries work on it (bfs backward from each answer reaches exactly what our `ancestors` reaches, the
evidence turns included; class-name search; versions of a memory unit; time filters), and the clock
is consistent. Ours -> smartcomment -> ours -> smartcomment keeps every node id, op id, edge and label.

Smartcomment -> ours: every documented pattern, built with smartcomment's public API
(`tests/support/smartcomment_patterns.py`), imports, and smartcomment -> ours -> smartcomment (also
through our own graph JSON, several times) gives back the same document.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from typing import Any

import pytest
from memtrace_loop.memory_systems.registry import SYSTEMS
from memtrace_loop.pipeline.analysis.attribution.lineage import ConversationLineage
from memtrace_loop.pipeline.core.conventions import Namespace, is_in, prefix, turn_name
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.graph_io import graph_from_json, graph_to_json
from memtrace_loop.pipeline.interop.exec_network import (
    NONE_NODE_ID,
    NONE_OP_ID,
    from_exec_network,
    full_node_ids,
    op_id_for,
    to_exec_network,
)
from memtrace_loop.pipeline.loop.runner import RunResult

from tests.support.requires import import_or_fail
from tests.support.sim import sim_run

smartcomment = import_or_fail("smartcomment", "smartcomment 0.1.2 is installed by `make` (test extra)")
from smartcomment.runtime import ExecNetwork  # noqa: E402

from tests.support.smartcomment_patterns import PATTERNS  # noqa: E402


def through_smartcomment(doc: dict[str, Any]) -> dict[str, Any]:
    """`doc` loaded by the real smartcomment and exported again (as JSON text, as a user would save it)."""
    return json.loads(json.dumps(ExecNetwork.import_graph(json.loads(json.dumps(doc))).export_graph()))


def structure(doc: dict[str, Any]) -> dict[str, Any]:
    """What must survive a round trip: node ids, op ids, edges (id, ends, op, category, comment) and labels."""
    data = doc["data"]
    return {
        "nodes": sorted(n["full_node_id"] for n in data["nodes"]),
        "ops": sorted(o["op_id"] for o in data["operations"]),
        "edges": sorted((e["edge_id"], e["source_full_node_id"], e["target_full_node_id"], e["op_id"], e["category"],
                         e.get("comment")) for e in data["edges"]),
        "labels": (doc.get("metadata") or {}).get("annotations") or data.get("annotations") or [],
    }


@pytest.fixture(scope="module", params=sorted(SYSTEMS))
def run(request: pytest.FixtureRequest) -> tuple[RunResult, ExecutionGraph]:
    result = sim_run(request.param, seed=4, n_conversations=1, sessions_per_conversation=3)
    (graph,) = result.graph_by_conversation.values()
    return result, graph


# --------------------------------------------------------------------------- ours -> smartcomment


def test_every_run_graph_loads_unchanged_and_answers_reach_their_evidence(run) -> None:
    result, graph = run
    doc = to_exec_network(graph)
    assert through_smartcomment(doc) == json.loads(json.dumps(doc))  # accepted as is, nothing added or lost
    network = ExecNetwork.import_graph(copy.deepcopy(doc))
    full_ids = full_node_ids(graph)
    reached_evidence = 0
    for case in result.results:
        answer = graph.latest(f"{prefix(Namespace.ANSWER)}{case.question.id}")
        assert answer is not None
        backward = network.bfs(full_ids[answer.id], "backward")
        theirs = {node.full_node_id for node in backward.nodes} - {full_ids[answer.id], NONE_NODE_ID}
        assert theirs == {full_ids[v] for v in graph.ancestors(answer.id, include_prompts=True) if v in full_ids}
        evidence = {full_ids[f"{turn_name(e)}@1"] for e in case.question.evidence}
        reached_evidence += bool(evidence) and evidence <= theirs
    assert reached_evidence >= 1  # the evidence turns are found from the answer, in their graph


def test_their_queries_work_on_our_export(run) -> None:
    result, graph = run
    network = ExecNetwork.import_graph(to_exec_network(graph))
    n_questions = len(result.results)
    for class_name in ("query", "prediction", "golden_answers", "judge_verdict"):
        assert len(network.search_variables(class_name=class_name)) == n_questions, class_name
    assert len(network.search_operations(name_pattern="^llm-judge$", category="judge")) == n_questions
    assert len(network.search_operations(start_time=network.time_range()[1])) == 0  # nothing after the last node
    multi = [name for name in graph.names() if len(graph.versions(name)) > 1]
    full_ids = full_node_ids(graph)
    for name in multi[:3]:
        full_name = full_ids[graph.versions(name)[0].id].rsplit("@", 1)[0]
        assert [v.version for v in network.get_versions(full_name)] == [v.version for v in graph.versions(name)]
    assert network.node_count == graph.n_variables + (NONE_NODE_ID in network)
    assert network.op_count == graph.n_operations


def test_timestamps_are_one_consistent_clock(run) -> None:
    _, graph = run
    doc = through_smartcomment(to_exec_network(graph))
    node_time = {n["full_node_id"]: n["created_at"] for n in doc["data"]["nodes"]}
    op_time = {o["op_id"]: o["created_at"] for o in doc["data"]["operations"]}
    seq_times = [op_time[op_id_for(graph, op.id)] for op in graph.operations()]
    assert seq_times == sorted(seq_times) and len(set(seq_times)) == len(seq_times)  # in sequence order
    for edge in doc["data"]["edges"]:
        source, target = edge["source_full_node_id"], edge["target_full_node_id"]
        if source != NONE_NODE_ID:
            assert node_time[source] < op_time[edge["op_id"]], edge
        if target != NONE_NODE_ID:
            assert op_time[edge["op_id"]] < node_time[target] == edge["created_at"], edge
    network = ExecNetwork.import_graph(doc)
    first, _ = network.time_range()
    middle = sorted(node_time.values())[len(node_time) // 2]
    assert 0 < len(network.filter_by_time(first, middle).nodes) < network.node_count  # time filters select
    sessions = {s["session_id"]: s["created_at"] for s in doc["data"]["sessions"]}
    for record in (*doc["data"]["nodes"], *doc["data"]["operations"]):
        assert sessions[record["session_id"]] <= record["created_at"]


def test_ours_to_smartcomment_and_back_keeps_ids_edges_and_labels(run) -> None:
    result, graph = run
    lineage = ConversationLineage(graph)
    attributions = [a for a in (lineage.attribute(c) for c in result.results if not c.correct) if a is not None]
    doc = json.loads(json.dumps(to_exec_network(graph, attributions)))
    first = through_smartcomment(doc)
    assert "annotations" not in first["data"]  # smartcomment drops unknown keys under `data`...
    assert first["metadata"]["annotations"] == doc["data"]["annotations"]  # ...and keeps the metadata copy
    back = from_exec_network(first)
    assert back.native and graph_to_json(graph_from_json(graph_to_json(back.graph))) == graph_to_json(back.graph)
    assert [a.to_dict() for a in back.annotations] == doc["data"]["annotations"]
    again = to_exec_network(back.graph)
    assert again == doc
    assert structure(through_smartcomment(again)) == structure(first) == structure(doc)
    for label in back.annotations:  # every label resolves in our graph
        assert back.op_id_map[label.final_op_id] in {op.id for op in back.graph.operations()}
        assert back.node_id_map[label.query_id] in back.graph
        assert all(back.node_id_map[e] in back.graph for e in label.source_evidence_ids)


# --------------------------------------------------------------------------- smartcomment -> ours


@pytest.mark.parametrize("pattern", sorted(PATTERNS))
def test_every_documented_pattern_imports_and_goes_back_unchanged(pattern: str) -> None:
    original = json.loads(json.dumps(PATTERNS[pattern]()))
    imported = from_exec_network(copy.deepcopy(original), source=f"{pattern}.json")
    graph = imported.graph
    graph.check()
    assert not imported.native
    nodes = {n["full_node_id"] for n in original["data"]["nodes"]} - {NONE_NODE_ID}
    assert set(imported.node_id_map) == nodes and graph.n_variables == len(nodes)
    linked = {e["op_id"] for e in original["data"]["edges"]}
    recorded = {o["op_id"] for o in original["data"]["operations"]}
    assert set(imported.op_id_map) == (linked | recorded) - ({NONE_OP_ID} - linked)
    expected = copy.deepcopy(original)
    if original["data"].get("annotations"):  # labels also go where smartcomment keeps them
        expected["metadata"]["annotations"] = original["data"]["annotations"]
    for _ in range(3):  # theirs -> ours -> theirs -> ours ..., also through our own graph JSON
        rebuilt = to_exec_network(graph)
        assert rebuilt == expected
        expected = through_smartcomment(rebuilt)
        assert through_smartcomment(expected) == expected  # smartcomment's own round trip is stable too
        graph = graph_from_json(graph_to_json(from_exec_network(expected).graph))
    assert structure(expected) == structure(original)


def test_repr_values_become_the_strings_they_stand_for() -> None:
    doc = PATTERNS["memtracebench_like"]()
    graph = from_exec_network(doc).graph
    reprs = {n["full_node_id"]: n["value"] for n in doc["data"]["nodes"] if n["value"].startswith("'")}
    assert reprs
    by_their_id = {v.meta["exec_network"]["full_node_id"]: v for v in graph.variables()}
    for full_id, stored in reprs.items():
        assert repr(by_their_id[full_id].value) == stored and not by_their_id[full_id].value.startswith("'")


def test_operation_reuse_becomes_steps_of_one_operation() -> None:
    doc = PATTERNS["operation_reuse"]()
    imported = from_exec_network(doc)
    steps = Counter(op.meta["exec_network"]["op_id"] for op in imported.graph.operations())
    (reused, count), = [(op_id, n) for op_id, n in steps.items() if n > 1]
    assert count == 2
    first, second = [op for op in imported.graph.operations() if op.meta["exec_network"]["op_id"] == reused]
    assert set(first.outputs) & set(second.inputs)  # the chain prompt -> raw -> parsed, in order
    assert [op.meta["exec_network"]["part"] for op in (first, second)] == [0, 1]


def test_memtracebench_labels_resolve_after_round_trips() -> None:
    doc = PATTERNS["memtracebench_like"]()
    labels = doc["data"]["annotations"]
    assert labels
    imported = from_exec_network(doc)
    for label in imported.annotations:
        assert imported.node_id_map[label.query_id] in imported.graph
        assert imported.op_id_map[label.final_op_id]
        assert all(e in imported.node_id_map for e in label.source_evidence_ids)
    out = to_exec_network(imported.graph)
    assert out["data"]["annotations"] == labels and out["metadata"]["annotations"] == labels
    through = through_smartcomment(out)  # smartcomment keeps them in metadata only
    again = from_exec_network(through)
    assert [a.to_dict() for a in again.annotations] == labels
    assert {op.meta["exec_network"]["op_id"] for op in again.graph.operations()} >= {a["final_op_id"] for a in labels}
    assert structure(to_exec_network(again.graph)) == structure(out)
    answer_op = next(op for op in again.graph.operations() if op.name == "question_answering")
    assert answer_op.stage == "respond" and is_in(answer_op.prompt or "", Namespace.PROMPT)


def test_our_export_continued_in_smartcomment_keeps_our_names_and_comes_back_unchanged(run, caplog) -> None:
    from smartcomment import comment_graph, comment_op, comment_variable

    _, graph = run
    network = ExecNetwork.import_graph(to_exec_network(graph))
    answer = next(v for v in graph.variables() if is_in(v.name, Namespace.ANSWER))
    their_answer = full_node_ids(graph)[answer.id]
    with comment_graph(graph=network):  # smartcomment's docs: continue tracing on an imported graph
        reviewed = comment_variable(f"reviewed: {answer.value}", category="review")
        comment_op(op_name="human_review", category="review",
                   inputs=[network.get_variable(their_answer)], outputs=[reviewed])
    extended = json.loads(json.dumps(network.export_graph()))
    with caplog.at_level("WARNING"):
        imported = from_exec_network(extended, source="extended.json")
    assert not imported.native and "edited" in caplog.text
    ours = {v.name for v in graph.variables()}
    assert ours <= {v.name for v in imported.graph.variables()}  # our names and kinds, not guesses
    review = next(op for op in imported.graph.operations() if op.name == "human_review")
    assert review.inputs == (imported.node_id_map[their_answer],) and imported.node_id_map[their_answer] == answer.id
    stages = {op.stage for op in graph.operations()}
    assert stages <= {op.stage for op in imported.graph.operations()}
    assert to_exec_network(imported.graph) == extended


def test_failed_and_edgeless_operations_go_through_smartcomment_and_back(run) -> None:
    from memtrace_loop.pipeline.core.graph import OpKind, Usage

    _, graph = run
    twin = graph.copy()
    note = twin.add_variable("note:x", "note", "free-standing", {"why": ["a", 1]})
    twin.add_operation("emit_note", "notes", OpKind.OTHER, inputs=(), outputs=(note.id,))
    twin.add_operation("log_only", "notes", OpKind.OTHER, inputs=(note.id,), outputs=())
    turn = next(v for v in twin.variables() if v.kind == "turn")
    failed = twin.add_variable("facts:bad", "facts", "")
    twin.add_operation("extract_facts", "extract", OpKind.EXTRACTION, inputs=(turn.id,), outputs=(failed.id,),
                       status="failed", error="unparsable output", usage=Usage(10, 2, 1, 0))
    twin.add_operation("nothing", "notes", OpKind.OTHER, inputs=(), outputs=())
    doc = json.loads(json.dumps(to_exec_network(twin)))
    assert through_smartcomment(doc) == doc
    full_ids = full_node_ids(twin)
    placeholder_edges = {(e["source_full_node_id"], e["target_full_node_id"]) for e in doc["data"]["edges"]
                         if NONE_NODE_ID in (e["source_full_node_id"], e["target_full_node_id"])}
    expected = {(NONE_NODE_ID, full_ids[note.id]), (full_ids[note.id], NONE_NODE_ID)}
    expected |= {(full_ids[i], NONE_NODE_ID) for op in graph.operations() if not op.outputs
                 for i in (*((op.prompt,) if op.prompt else ()), *op.inputs)}
    expected |= {(NONE_NODE_ID, full_ids[o]) for op in graph.operations() if not op.inputs and not op.prompt
                 for o in op.outputs}
    assert placeholder_edges == expected
    network = ExecNetwork.import_graph(doc)
    (bad,) = network.search_operations(name_pattern="^extract_facts$", category="extraction")[-1:]
    assert bad.comment == "unparsable output"  # the error is the operation's comment there
    back = from_exec_network(through_smartcomment(doc))
    assert back.native and graph_to_json(back.graph) == graph_to_json(twin)
