"""Execution graph invariants, indexes, traversals and the lossless JSON round trip (pure, no LLM)."""

from __future__ import annotations

import json

import pytest
from memtrace_loop.pipeline.core.graph import ExecutionGraph, GraphError, OpKind, Usage
from memtrace_loop.pipeline.core.graph_io import graph_from_json, graph_to_json, load_graph, save_graph


def small_graph() -> ExecutionGraph:
    """turn -> extract -> facts -> add -> memory@1 -> update -> memory@2 -> retrieve -> answer."""
    g = ExecutionGraph("conv-1", {"system": "mem0"})
    turn = g.add_variable("turn:D1:1", "turn", "[8 May 2023] Alice: I moved to Paris.")
    turn2 = g.add_variable("turn:D2:1", "turn", "[9 Jun 2023] Alice: Now I live in Rome.")
    prompt = g.add_variable("prompt:extract", "prompt", "Extract facts.")
    facts = g.add_variable("facts:D1:1", "facts", '["Alice lives in Paris."]')
    g.add_operation("extract_facts", "extract", OpKind.EXTRACTION, [turn.id], [facts.id], prompt=prompt.id,
                    usage=Usage(10, 5, 1, 0))
    m1 = g.add_variable("memory:m1", "memory", "Alice lives in Paris.", {"time": "2023-05-08"})
    g.add_operation("memory_add", "store", OpKind.EXTRACTION, [facts.id], [m1.id])
    facts2 = g.add_variable("facts:D2:1", "facts", '["Alice lives in Rome."]')
    g.add_operation("extract_facts", "extract", OpKind.EXTRACTION, [turn2.id], [facts2.id], prompt=prompt.id)
    m2 = g.add_variable("memory:m1", "memory", "Alice lives in Rome.")
    g.add_operation("memory_update", "store", OpKind.UPDATE, [facts2.id, m1.id], [m2.id])
    query = g.add_variable("query:q1", "query", "Where does Alice live?")
    ctx = g.add_variable("retrieved:q1", "context", "Memory: Alice lives in Rome.")
    g.add_operation("retrieve_memories", "retrieve", OpKind.RETRIEVAL, [query.id, m2.id], [ctx.id])
    answer = g.add_variable("answer:q1", "answer", "Rome")
    g.add_operation("question_answering", "respond", OpKind.RESPONSE, [query.id, ctx.id], [answer.id],
                    status="failed", error="ValueError: boom", meta={"raw_output": "???"})
    return g


def test_versions_chain_and_lineage():
    g = small_graph()
    versions = g.versions("memory:m1")
    assert [v.id for v in versions] == ["memory:m1@1", "memory:m1@2"]
    assert versions[1].previous == "memory:m1@1" and versions[0].previous is None
    assert [op.name for op in g.lineage("memory:m1")] == ["memory_add", "memory_update"]
    assert g.latest("memory:m1").value == "Alice lives in Rome."


def test_producer_and_consumers():
    g = small_graph()
    assert g.producer("memory:m1@2").name == "memory_update"
    assert g.producer("turn:D1:1@1") is None
    assert [op.name for op in g.consumers("prompt:extract@1")] == ["extract_facts", "extract_facts"]
    extract = g.producer("facts:D1:1@1")
    assert extract.inputs == ("turn:D1:1@1",) and g.variable(extract.prompt).value == "Extract facts."


def test_ancestors_reach_turns_and_descendants_reach_answer():
    g = small_graph()
    up = g.ancestors("answer:q1@1")
    assert {"turn:D1:1@1", "turn:D2:1@1", "memory:m1@1", "query:q1@1"} <= up
    assert "prompt:extract@1" not in up
    assert "prompt:extract@1" in g.ancestors("answer:q1@1", include_prompts=True)
    down = g.descendants("turn:D1:1@1")
    assert "answer:q1@1" in down and "memory:m1@2" in down
    assert "turn:D2:1@1" not in down


def test_append_rejects_second_producer_cycles_and_unknown_nodes():
    g = small_graph()
    with pytest.raises(GraphError, match="already has producer"):
        g.add_operation("again", "x", OpKind.OTHER, ["turn:D1:1@1"], ["memory:m1@1"])
    with pytest.raises(GraphError, match="not in graph"):
        g.add_operation("bad", "x", OpKind.OTHER, ["nope@1"], [])
    loop = g.add_variable("loop", "x", "")
    with pytest.raises(GraphError, match="cycle"):
        g.add_operation("self", "x", OpKind.OTHER, [loop.id], [loop.id])
    consumed = g.add_variable("consumed", "x", "")
    g.add_operation("reader", "x", OpKind.OTHER, [consumed.id], [])
    with pytest.raises(GraphError, match="cycle"):
        g.add_operation("late writer", "x", OpKind.OTHER, [], [consumed.id])
    g.check()


def test_graph_is_acyclic_and_sequence_monotonic():
    g = small_graph()
    seqs = [op.seq for op in g.operations()]
    assert seqs == sorted(seqs) == list(range(len(seqs)))
    for op in g.operations():
        assert op.id not in g.ancestors(op.id)


def test_json_round_trip_is_identical(tmp_path):
    g = small_graph()
    text = graph_to_json(g)
    loaded = graph_from_json(text)
    assert graph_to_json(loaded) == text
    assert list(loaded.variables()) == list(g.variables())
    assert list(loaded.operations()) == list(g.operations())
    assert loaded.operation("op:5").meta["raw_output"] == "???"
    path = save_graph(g, tmp_path / "g.json")
    assert graph_to_json(load_graph(path)) == text
    # appending after a load continues the sequence
    v = loaded.add_variable("x", "x", "")
    assert loaded.add_operation("n", "s", OpKind.OTHER, [v.id], []).seq == g.n_operations


def test_loading_a_broken_document_names_the_problem(tmp_path):
    data = json.loads(graph_to_json(small_graph()))
    data["operations"][1][5] = ["facts:D1:1@1"]  # a second producer for the facts
    with pytest.raises(GraphError, match="two producers"):
        graph_from_json(json.dumps(data), "broken.json")
    with pytest.raises(GraphError, match=r"bad\.json: invalid JSON"):
        graph_from_json("{", "bad.json")
    with pytest.raises(GraphError, match="not a memtrace-graph"):
        graph_from_json("{}", "other.json")


def test_copy_is_independent():
    g = small_graph()
    twin = g.copy()
    v = twin.add_variable("memory:m1", "memory", "Alice lives in Oslo.")
    twin.add_operation("memory_update", "store", OpKind.UPDATE, ["memory:m1@2"], [v.id])
    assert len(g.versions("memory:m1")) == 2 and len(twin.versions("memory:m1")) == 3
    assert g.consumers("memory:m1@2") != twin.consumers("memory:m1@2")
    assert graph_to_json(g) == graph_to_json(small_graph())
    twin.check()
