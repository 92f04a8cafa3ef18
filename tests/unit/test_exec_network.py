"""Tests for pipeline.interop.exec_network: exact round trip of a real Mem0 graph, their naming conventions,
import of a hand-written graph in their format (annotations, unknown keys, version chains),
conflicting producers, cycles, malformed documents and attribution scoring."""

from __future__ import annotations

import copy
import json
import re

import pytest
from memtrace_loop.pipeline.analysis.attribution.lineage import ConversationLineage
from memtrace_loop.pipeline.analysis.attribution.records import ErrorType
from memtrace_loop.pipeline.core.graph import ExecutionGraph, OpKind, Usage
from memtrace_loop.pipeline.core.graph_io import graph_to_json
from memtrace_loop.pipeline.data.locomo import DataError
from memtrace_loop.pipeline.interop.exec_network import (
    LABELS_META,
    MARK,
    NAME_TABLE,
    annotation_from_attribution,
    from_exec_network,
    load_exec_network,
    op_id_for,
    our_name,
    save_exec_network,
    their_name,
    to_exec_network,
)
from memtrace_loop.pipeline.interop.exec_network.labels import (
    AttributionScore,
    BenchAnnotation,
    ExecNetworkError,
    parse_error_label,
    score_attributions,
)
from memtrace_loop.pipeline.loop.runner import RunResult

from tests.support.sim import sim_run

STAMP = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3}")


@pytest.fixture(scope="module")
def run_result() -> RunResult:
    return sim_run("mem0", seed=2, n_conversations=1, sessions_per_conversation=4)


@pytest.fixture(scope="module")
def graph(run_result: RunResult) -> ExecutionGraph:
    (only,) = run_result.graph_by_conversation.values()
    return only


def with_edgeless_operations(graph: ExecutionGraph) -> ExecutionGraph:
    """A copy with operations no variable->variable edge can express, a failed one and rich meta."""
    twin = graph.copy()
    source = twin.add_variable("note:x", "note", "free-standing", {"why": ["a", 1], "nested": {"k": None}})
    twin.add_operation("emit_note", "notes", OpKind.OTHER, inputs=(), outputs=(source.id,))
    twin.add_operation("log_only", "notes", OpKind.OTHER, inputs=(source.id, "prompt:extract@1"), outputs=())
    failed = twin.add_variable("facts:bad", "facts", "")
    twin.add_operation(
        "extract_facts", "extract", OpKind.EXTRACTION, inputs=("turn:D1:1@1",), outputs=(failed.id,),
        prompt="prompt:extract@1", status="failed", error="unparsable output", usage=Usage(10, 2, 1, 1),
        meta={"raw": "{oops"},
    )
    twin.add_operation("nothing", "notes", OpKind.OTHER, inputs=(), outputs=())
    twin.add_variable("memory:m1", "memory", "a later version nobody produced")
    return twin


# --------------------------------------------------------------------------- export and round trip


def test_round_trip_of_a_real_mem0_graph_is_exact(graph: ExecutionGraph) -> None:
    assert graph.n_operations > 50 and graph.names("memory:") and graph.names("prompt:")
    imported = from_exec_network(to_exec_network(graph))
    assert imported.native
    assert graph_to_json(imported.graph) == graph_to_json(graph)


def test_round_trip_keeps_operations_without_inputs_or_outputs(graph: ExecutionGraph, tmp_path) -> None:
    twin = with_edgeless_operations(graph)
    path = save_exec_network(twin, tmp_path / "net.json")
    imported = load_exec_network(path)
    assert graph_to_json(imported.graph) == graph_to_json(twin)
    imported.graph.check()
    last = list(imported.graph.operations())[-4:]
    assert [op.name for op in last] == ["emit_note", "log_only", "extract_facts", "nothing"]
    assert last[1].outputs == () and last[0].inputs == () and last[2].error == "unparsable output"
    assert last[2].usage == Usage(10, 2, 1, 1)


def test_export_uses_their_layout_and_names(graph: ExecutionGraph) -> None:
    doc = json.loads(json.dumps(to_exec_network(graph)))
    assert set(doc) == {"graph_id", "user_id", "project_id", "storage_path", "strict", "driver_type", "created_at",
                        "metadata", "data"}
    assert doc["driver_type"] == "in_memory"
    data = doc["data"]
    assert {"sessions", "nodes", "operations", "edges"} <= set(data)
    nodes = {node["full_node_id"]: node for node in data["nodes"]}
    sample = graph.graph_id
    assert f"U{sample}:D1:1@1" in nodes and nodes[f"U{sample}:D1:1@1"]["category"] == "turn"
    assert {"fact-extraction-system-prompt@1", "memory-update-decision-prompt@1", "question-answering-prompt@1"} <= set(
        nodes
    )
    assert "memory-unit-m1@1" in nodes
    question = next(v.name for v in graph.variables() if v.kind == "query")
    qid = question.split(":", 1)[1]
    assert f"{question}@1" in nodes  # queries keep `query:<question id>`, as class `query` and name `<qid>`
    assert (nodes[f"{question}@1"]["class_name"], nodes[f"{question}@1"]["name"]) == ("query", qid)
    assert nodes[f"prediction:{qid}@1"]["category"] == "answer"
    assert nodes[f"golden_answers:{qid}@1"]["category"] == "gold"
    assert nodes[f"judge_verdict:{qid}@1"]["category"] == "verdict"
    assert nodes["judge_prompt:llm-judge@1"]["category"] == "prompt"
    for full_id, node in nodes.items():
        qualified = f"{node['class_name']}:{node['name']}" if node["class_name"] is not None else node["name"]
        assert full_id == f"{qualified}@{node['version']}" and node["version"] >= 1 and node["class_name"] != ""
        assert STAMP.fullmatch(node["created_at"]) and isinstance(node["value"], str)
        assert node["graph_id"] == graph.graph_id and node["filename"] and node["lineno"] == 0
    op_names = {op["op_name"] for op in data["operations"]}
    assert {"question-answering", "llm-judge", "extract_facts"} <= op_names
    assert all(re.fullmatch(r"op-[0-9a-f]+", op["op_id"]) for op in data["operations"])
    assert len({op["op_id"] for op in data["operations"]}) == graph.n_operations
    ops = {op["op_id"] for op in data["operations"]}
    sessions = {s["session_id"] for s in data["sessions"]}
    category_by_op = {op["op_id"]: op["category"] for op in data["operations"]}
    for edge in data["edges"]:
        assert edge["op_id"] in ops and edge["source_full_node_id"] in nodes and edge["target_full_node_id"] in nodes
        assert edge["category"] == category_by_op[edge["op_id"]] and edge["session_id"] in sessions
    assert all(n["session_id"] in sessions for n in data["nodes"])
    expected = sum((len(op.inputs) + (op.prompt is not None)) * len(op.outputs) for op in graph.operations())
    assert len(data["edges"]) == expected
    assert len({e["edge_id"] for e in data["edges"]}) == expected
    answer = next(op for op in graph.operations() if op.name == "question_answering")
    assert op_id_for(graph, answer.id) in ops


def test_name_table_round_trips_every_rule() -> None:
    for rule in NAME_TABLE:
        what = "operation" if rule.what == "operation" else "variable"
        ours = rule.ours + ("D3:7" if rule.ours == "turn:" else "m9" if rule.what == "prefix" else "")
        assert our_name(their_name(ours, "conv-26", what), what) == ours
    assert their_name("turn:D3:7", "conv-26") == "Uconv-26:D3:7"
    assert our_name("User:profile") == "User:profile"  # not a turn: the remainder is no dialog id


def test_stripped_export_imports_generically_with_the_same_structure(graph: ExecutionGraph) -> None:
    doc = copy.deepcopy(to_exec_network(graph))
    doc["metadata"] = {}
    for record in (*doc["data"]["nodes"], *doc["data"]["operations"]):
        record["metadata"] = {}
    imported = from_exec_network(doc)
    assert not imported.native and imported.conflicts == ()
    got = imported.graph
    got.check()
    assert {v.id for v in got.variables()} == {v.id for v in graph.variables()}
    assert {v.id: v.kind for v in got.variables()} == {v.id: v.kind for v in graph.variables()}
    assert [(op.name, set(op.inputs), op.outputs, op.prompt, op.kind) for op in got.operations()] == [
        (op.name, set(op.inputs), op.outputs, op.prompt, op.kind) for op in graph.operations()
    ]
    respond = next(op for op in got.operations() if op.name == "question_answering")
    assert respond.stage == "respond"
    ours = {v.id: v for v in graph.variables()}
    for var in got.variables():
        assert var.value == ours[var.id].value and var.previous == ours[var.id].previous


# --------------------------------------------------------------------------- their graphs


def node(name: str, version: int, value: str, category: str = "", created: str = "", class_name: str = "") -> dict:
    return {"name": name, "version": version, "value": value, "comment": "", "category": category,
            "class_name": class_name, "session_id": "s-1", "created_at": created, "metadata": {"note": name}}


def edge(op_id: str, source: str, target: str) -> dict:
    return {"edge_id": f"e-{source}-{target}", "source_full_node_id": source, "target_full_node_id": target,
            "op_id": op_id, "category": "", "comment": ""}


def their_document() -> dict:
    """A small invented MemTraceBench-style graph: one turn, a memory unit updated twice (versions
    1 and 3 captured), a retrieval, an answer and a judgement, with labels and an unknown key."""
    t = "2025-03-01 10:00:00.{:03d}"
    nodes = [
        node("Uconv-9:D1:2", 1, "Mara: I moved to Lisbon in May.", "message", t.format(1)),
        node("fact-extraction-system-prompt", 1, "Extract facts.", "prompt", t.format(0)),
        node("memory-unit-7", 1, "Mara lives in Porto", "memory", t.format(2)),
        node("memory-unit-7", 3, "Mara lives in Lisbon since May", "memory", t.format(4)),
        node("q-41", 1, "Where does Mara live?", "question", t.format(5), class_name="query"),
        node("retrieved-context", 1, "Mara lives in Porto", "context", t.format(6)),
        node("question-answering-prompt", 1, "Answer briefly.", "prompt", t.format(0)),
        node("answer", 1, "Porto", "answer", t.format(7)),
        node("golden-answer", 1, "Lisbon", "", t.format(5)),
        node("judgement", 1, '{"label": "WRONG"}', "", t.format(8)),
    ]
    ops = [
        {"op_id": "op-aa01", "op_name": "fact-extraction", "comment": "", "category": "", "session_id": "s-1",
         "metadata": {}},
        {"op_id": "op-aa02", "op_name": "memory-update", "comment": "", "category": "", "session_id": "s-1",
         "metadata": {}},
        {"op_id": "op-aa03", "op_name": "vector-search", "comment": "", "category": "", "session_id": "s-2",
         "metadata": {}},
        {"op_id": "op-aa04", "op_name": "question-answering", "comment": "", "category": "", "session_id": "s-2",
         "metadata": {"model": "gpt-4o-mini"}},
        {"op_id": "op-aa06", "op_name": "heartbeat", "comment": "no data flow", "category": "", "session_id": "s-2",
         "metadata": {}},
    ]
    edges = [  # written out of order on purpose: the judge first
        edge("op-aa05", "query:q-41@1", "judgement@1"),
        edge("op-aa05", "golden-answer@1", "judgement@1"),
        edge("op-aa05", "answer@1", "judgement@1"),
        edge("op-aa01", "fact-extraction-system-prompt@1", "memory-unit-7@1"),
        edge("op-aa01", "Uconv-9:D1:2@1", "memory-unit-7@1"),
        edge("op-aa02", "memory-unit-7@1", "memory-unit-7@3"),
        edge("op-aa02", "Uconv-9:D1:2@1", "memory-unit-7@3"),
        edge("op-aa03", "query:q-41@1", "retrieved-context@1"),
        edge("op-aa03", "memory-unit-7@1", "retrieved-context@1"),
        edge("op-aa04", "question-answering-prompt@1", "answer@1"),
        edge("op-aa04", "query:q-41@1", "answer@1"),
        edge("op-aa04", "retrieved-context@1", "answer@1"),
    ]
    annotations = [
        {"query_id": "query:q-41@1", "query": "Where does Mara live?", "golden_answers": ["Lisbon"],
         "prediction": "Porto", "source_evidence_ids": ["Uconv-9:D1:2@1"], "final_error_type": "RetrievalError",
         "final_op_id": "op-aa03", "reason": "the updated unit was not retrieved", "annotator": "a1"},
        {"query_id": "query:q-41@1", "query": "Where does Mara live?", "golden_answers": "Lisbon",
         "prediction": "Porto", "source_evidence_ids": [], "final_error_type": "JudgeError", "final_op_id": None,
         "reason": "second opinion"},
    ]
    return {
        "graph_id": "g-123", "user_id": "u", "project_id": "p", "strict": False, "driver_type": "networkx",
        "created_at": "2025-03-01 09:59:59.000", "metadata": {"dataset": "locomo"},
        "data": {"sessions": [{"session_id": "s-1", "session_name": "ingest", "category": "", "metadata": {}}],
                 "nodes": {f"{n['class_name'] + ':' if n['class_name'] else ''}{n['name']}@{n['version']}": n
                           for n in nodes},
                 "operations": ops, "edges": edges, "annotations": annotations, "viewer_layout": {"zoom": 2}},
    }


def test_import_of_their_graph() -> None:
    imported = from_exec_network(their_document(), source="bench.json")
    g = imported.graph
    g.check()
    assert g.graph_id == "g-123"
    assert {v.id for v in g.variables()} == {
        "turn:D1:2@1", "prompt:extract@1", "memory:7@1", "memory:7@2", "query:q-41@1", "retrieved-context@1",
        "prompt:respond@1", "answer@1", "golden-answer@1", "judgement@1",
    }
    kinds = {v.id: v.kind for v in g.variables()}
    assert kinds["turn:D1:2@1"] == "turn" and kinds["memory:7@2"] == "memory" and kinds["query:q-41@1"] == "query"
    assert kinds["golden-answer@1"] == "gold" and kinds["judgement@1"] == "verdict"
    assert [v.id for v in g.versions("memory:7")] == ["memory:7@1", "memory:7@2"]
    second = g.variable("memory:7@2")
    assert second.previous == "memory:7@1" and second.meta["exec_network"]["record"]["version"] == 3
    assert second.meta["exec_network"]["full_node_id"] == "memory-unit-7@3"
    assert imported.node_id_map["memory-unit-7@3"] == "memory:7@2"

    ops = list(g.operations())
    # by created_at of what they produce; the heartbeat (no edges, no time) goes last
    assert [op.name for op in ops] == ["fact-extraction", "memory-update", "vector-search", "question_answering",
                                      "op-aa05", "heartbeat"]
    extract, update, search, respond, judge, heartbeat = ops
    assert heartbeat.inputs == () and heartbeat.outputs == () and heartbeat.kind == OpKind.OTHER
    assert extract.kind == OpKind.EXTRACTION and extract.prompt == "prompt:extract@1" and extract.stage == "extract"
    assert extract.inputs == ("turn:D1:2@1",) and extract.outputs == ("memory:7@1",)
    assert update.kind == OpKind.UPDATE and update.inputs == ("memory:7@1", "turn:D1:2@1")
    assert search.kind == OpKind.RETRIEVAL and search.outputs == ("retrieved-context@1",)
    assert respond.kind == OpKind.RESPONSE and respond.stage == "respond" and respond.prompt == "prompt:respond@1"
    assert respond.meta["exec_network"]["record"]["metadata"] == {"model": "gpt-4o-mini"}
    assert judge.inputs == ("query:q-41@1", "golden-answer@1", "answer@1") and judge.kind == OpKind.OTHER
    assert imported.op_id_map["op-aa03"] == search.id and imported.op_id_map["op-aa05"] == judge.id
    assert g.meta["exec_network"]["header"]["driver_type"] == "networkx"
    assert "viewer_layout" in g.meta["exec_network"]["data_extra"]  # kept for the way back, unused

    retrieval, judged = imported.annotations
    assert retrieval.error_type == ErrorType.RETRIEVAL and retrieval.final_op_id == "op-aa03"
    assert retrieval.golden_answers == ("Lisbon",) and retrieval.reason.startswith("the updated unit")
    assert retrieval.extra["annotator"] == "a1" and retrieval.is_memory_error
    assert judged.final_error_type == "JudgeError" and judged.error_type is None and not judged.is_memory_error
    assert judged.golden_answers == ("Lisbon",)


def test_conflicting_producers_keep_the_first_and_are_recorded() -> None:
    doc = their_document()
    doc["data"]["edges"].append(edge("op-aa07", "answer@1", "retrieved-context@1"))  # a second producer
    doc["data"]["operations"].append({"op_id": "op-aa07", "op_name": "rewrite", "metadata": {}})
    imported = from_exec_network(doc)
    imported.graph.check()
    assert [dict(c) for c in imported.conflicts] == [
        {"variable": "retrieved-context@1", "kept": "op-aa03", "dropped": "op-aa07"}
    ]
    rewrite = imported.graph.operation(imported.op_id_map["op-aa07"])
    assert rewrite.outputs == () and rewrite.inputs == ("answer@1",)
    assert rewrite.meta["exec_network"]["dropped_outputs"] == ["retrieved-context@1"]
    assert imported.graph.meta["exec_network"]["conflicts"][0]["dropped"] == "op-aa07"
    search = imported.graph.producer("retrieved-context@1")
    assert search is not None and search.id == imported.op_id_map["op-aa03"]


def test_cycles_raise_a_clear_error() -> None:
    doc = their_document()
    doc["data"]["edges"].append(edge("op-aa08", "judgement@1", "Uconv-9:D1:2@1"))
    with pytest.raises(ExecNetworkError, match="cycle among operations") as info:
        from_exec_network(doc, source="loop.json")
    assert "loop.json" in str(info.value) and "op-aa08" in str(info.value)
    doc = their_document()
    doc["data"]["edges"].append(edge("op-aa04", "answer@1", "retrieved-context@1"))
    with pytest.raises(ExecNetworkError, match="consumes its own output"):
        from_exec_network(doc)


@pytest.mark.parametrize(
    ("mutate", "where", "field"),
    [
        (lambda d: d["data"]["edges"].append(edge("op-aa01", "ghost@1", "answer@1")), "data.edges[12]",
         "source_full_node_id"),
        (lambda d: d["data"]["annotations"][0].update(final_error_type="Typo"), "data.annotations[0]",
         "final_error_type"),
        (lambda d: d["data"]["annotations"][1].pop("query_id"), "data.annotations[1]", "query_id"),
        (lambda d: d["data"]["nodes"]["answer@1"].update(version=0), "data.nodes['answer@1']", "version"),
        (lambda d: d["data"]["operations"].append({"op_name": "x"}), "data.operations[5]", "op_id"),
    ],
)
def test_malformed_documents_name_source_record_and_field(mutate, where, field) -> None:
    doc = their_document()
    mutate(doc)
    with pytest.raises(ExecNetworkError) as info:
        from_exec_network(doc, source="bench.json")
    assert isinstance(info.value, DataError)
    assert (info.value.source, info.value.record, info.value.field) == ("bench.json", where, field)


def test_not_a_document_and_unreadable_files(tmp_path) -> None:
    with pytest.raises(ExecNetworkError, match="missing object 'data'"):
        from_exec_network({"graph_id": "x"})
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(ExecNetworkError, match=r"bad\.json: invalid JSON"):
        load_exec_network(bad)


# --------------------------------------------------------------------------- annotations and scoring


def test_attributions_export_as_annotations_that_score_perfectly(run_result: RunResult, graph) -> None:
    failed = [case for case in run_result.results if not case.correct]
    attributor = ConversationLineage(graph)
    attributions = [a for a in (attributor.attribute(case) for case in failed) if a is not None]
    assert attributions
    doc = to_exec_network(graph, attributions)
    # where MemTraceBench and smartcomment keep them
    assert doc["data"]["annotations"] == doc["metadata"]["annotations"]
    imported = from_exec_network(json.loads(json.dumps(doc)))
    rebuilt = json.loads(graph_to_json(imported.graph))
    assert rebuilt["meta"].pop(LABELS_META) == doc["data"]["annotations"]  # the labels ride in the graph meta
    assert rebuilt == json.loads(graph_to_json(graph))
    assert to_exec_network(imported.graph) == doc  # and are written again without being passed
    assert len(imported.annotations) == len(attributions)
    nodes = {n["full_node_id"] for n in doc["data"]["nodes"]}
    for attribution, label in zip(attributions, imported.annotations, strict=True):
        assert imported.op_id_map[label.final_op_id] == attribution.op
        assert imported.node_id_map[label.query_id] == f"query:{attribution.question_id}@1"
        assert set(label.source_evidence_ids) <= nodes
        assert label.error_type == attribution.error_type and label.reason == attribution.reason
        assert label == annotation_from_attribution(attribution, graph)
    predicted = {a.query_id: (a.error_type, a.final_op_id) for a in imported.annotations}
    assert score_attributions(predicted, imported.annotations) == AttributionScore(1.0, 1.0, len(attributions))


def label(query: str, error: str, op: str | None) -> BenchAnnotation:
    text, error_type = parse_error_label(error)
    return BenchAnnotation(query, text, op, error_type=error_type)


def test_score_attributions_on_hand_made_cases() -> None:
    gold = [
        label("query:a@1", "ExtractionError", "op-1"),
        label("query:b@1", "RetrievalError", "op-2"),
        label("query:c@1", "ResponseError", "op-3"),
        label("query:d@1", "UpdateError", "op-4"),
        label("query:e@1", "JudgeError", None),
        label("query:f@1", "AnnotationError", None),
    ]
    predicted = {
        "query:a@1": (ErrorType.EXTRACTION, "op-1"),  # both right
        "query:b@1": ("retrieval_error", "op-9"),  # type right (spelling normalized), op wrong
        "query:c@1": (ErrorType.RETRIEVAL, "op-3"),  # op right, type wrong
        # query:d has no prediction: wrong on both
        "query:e@1": ("JudgeError", None),
    }
    assert score_attributions(predicted, gold) == AttributionScore(0.5, 0.5, 4)
    with_all = score_attributions(predicted, gold, include_non_memory=True)
    assert with_all.n == 6 and with_all.type_accuracy == pytest.approx(3 / 6) and with_all.op_accuracy == 2 / 6
    assert score_attributions({}, []) == AttributionScore(0.0, 0.0, 0)
    type_accuracy, op_accuracy, n = score_attributions(predicted, gold[:1])
    assert (type_accuracy, op_accuracy, n) == (1.0, 1.0, 1)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("ExtractionError", ("ExtractionError", ErrorType.EXTRACTION)),
        ("deletion error", ("DeletionError", ErrorType.DELETION)),
        ("Retrieve", ("RetrievalError", ErrorType.RETRIEVAL)),
        ("annotation_error", ("AnnotationError", None)),
    ],
)
def test_parse_error_label(raw, expected) -> None:
    assert parse_error_label(raw) == expected


def test_native_marker_is_only_trusted_when_every_record_carries_it(graph: ExecutionGraph) -> None:
    doc = copy.deepcopy(to_exec_network(graph))
    del doc["data"]["nodes"][0]["metadata"][MARK]
    imported = from_exec_network(doc)
    assert not imported.native and imported.graph.n_operations == graph.n_operations


def test_stamps_count_milliseconds_across_seconds_from_any_start(graph: ExecutionGraph) -> None:
    from datetime import datetime, timedelta

    from memtrace_loop.pipeline.interop.exec_network.export import timeline

    start = datetime(2026, 12, 31, 23, 59, 59, 990000)  # ticks cross a second, a minute, a day and a year
    doc = to_exec_network(graph, created_at=start)
    ticks = timeline(graph).tick_by_variable
    for var, node in zip(graph.variables(), doc["data"]["nodes"], strict=True):  # nodes in variable order
        expected = (start + timedelta(milliseconds=ticks[var.id])).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
        assert node["created_at"] == expected
    assert any(n["created_at"].startswith("2027-01-01") for n in doc["data"]["nodes"])
