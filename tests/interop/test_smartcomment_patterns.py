"""The smartcomment fixture set: every documented pattern, built with the real smartcomment's public API.

Checks that each pattern (tests/support/smartcomment_patterns.py) round-trips through smartcomment's own
`ExecNetwork.import_graph(...).export_graph()`, shows the property it is named for, and that the committed
JSON fixtures (tests/fixtures/smartcomment/) are what the generator writes today. Our own importer is not
tested here; its tests read these fixtures.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from tests.support.requires import import_or_fail

smartcomment = import_or_fail(
    "smartcomment", "make test adds it with --ignore-requires-python; CI has it (a failure under CI=true)"
)

from smartcomment import IdentityRegistry  # noqa: E402
from smartcomment.runtime import ExecNetwork  # noqa: E402

from tests.fixtures.smartcomment.make_fixtures import relative_sources  # noqa: E402
from tests.support.smartcomment_patterns import (  # noqa: E402
    PATTERNS,
    QUESTION_ID,
    RegisteredMemoryEntry,
    identity_registry,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "smartcomment"
NONE_NODE = "COMMENT:NONE@1"
NONE_OP = "__none_op__"
# patterns whose node names come from id() (`object_id`): different on every run
OBJECT_ID_PATTERNS = frozenset({"concepts_object_id", "in_place_mutation"})

Doc = dict[str, Any]


@pytest.fixture(scope="module")
def docs() -> dict[str, Doc]:
    return {name: build() for name, build in PATTERNS.items()}


def _nodes(doc: Doc) -> dict[str, Doc]:
    return {node["full_node_id"]: node for node in doc["data"]["nodes"]}


def _ops(doc: Doc) -> dict[str, Doc]:
    return {op["op_id"]: op for op in doc["data"]["operations"]}


def _edges(doc: Doc) -> list[Doc]:
    return list(doc["data"]["edges"])


def _edge_triples(doc: Doc) -> set[tuple[str, str, str, str]]:
    return {(e["edge_id"], e["source_full_node_id"], e["target_full_node_id"], e["op_id"]) for e in _edges(doc)}


def _shape(doc: Doc) -> dict[str, Any]:
    data = doc["data"]
    return {
        "node_kinds": sorted({(n["category"], n["class_name"] or "") for n in data["nodes"]}),
        "counts": {key: len(data[key]) for key in ("nodes", "edges", "operations", "sessions")},
        "op_names": sorted(op["op_name"] for op in data["operations"]),
        "has_annotations": "annotations" in data,
    }


def _through_smartcomment(doc: Doc) -> Doc:
    exported: Doc = ExecNetwork.import_graph(json.loads(json.dumps(doc))).export_graph()
    return exported


# ---------------------------------------------------------------------------------------------------
# every pattern: valid for smartcomment itself


def test_the_registry_covers_every_documented_pattern() -> None:
    assert len(PATTERNS) == 21
    assert {"operation_reuse", "in_place_mutation", "link_outside_op", "chained_links_outside_op",
            "op_without_inputs", "op_without_outputs", "multi_producer", "memtracebench_like"} <= set(PATTERNS)


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_pattern_round_trips_through_smartcomment(docs: dict[str, Doc], name: str) -> None:
    doc = docs[name]
    again = _through_smartcomment(doc)
    assert set(_nodes(again)) == set(_nodes(doc))
    assert set(_ops(again)) == set(_ops(doc))
    assert _edge_triples(again) == _edge_triples(doc)
    assert {s["session_id"] for s in again["data"]["sessions"]} == {s["session_id"] for s in doc["data"]["sessions"]}
    assert again["graph_id"] == doc["graph_id"] and again["metadata"] == doc["metadata"]


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_every_edge_joins_recorded_nodes_and_operations(docs: dict[str, Doc], name: str) -> None:
    nodes, ops = _nodes(docs[name]), _ops(docs[name])
    for edge in _edges(docs[name]):
        assert edge["source_full_node_id"] in nodes and edge["target_full_node_id"] in nodes
        assert edge["op_id"] in ops


@pytest.mark.parametrize("name", sorted(PATTERNS.keys() - OBJECT_ID_PATTERNS))
def test_content_ids_are_deterministic(docs: dict[str, Doc], name: str) -> None:
    again = PATTERNS[name]()
    assert set(_nodes(again)) == set(_nodes(docs[name]))
    assert again["graph_id"] == docs[name]["graph_id"]
    assert _ops(again).keys().isdisjoint(_ops(docs[name]).keys() - {NONE_OP})  # op ids are fresh uuids


# ---------------------------------------------------------------------------------------------------
# each pattern shows what it is named for


# node ids printed in smartcomment's docs (content ids): the patterns record the docs' own values
DOCS_NODE_IDS = {
    "quick_start_sync": {"list:f6aec3640a5ed939fd8623fca8fd54fbde0d19ed@1",
                         "str:bec801153e4d0f5ee0bd7415f0cb7ac31d9f93d5@1"},
    "quick_start_async": {"list:1d6ec1568e1e66c2d87daa731a480d29c316944c@1",
                          "str:bec801153e4d0f5ee0bd7415f0cb7ac31d9f93d5@1"},
    "quick_start_param_options": {"list:b95906d21e162d90dc6d86a502932fc3f6e10861@1",
                                  "str:bec801153e4d0f5ee0bd7415f0cb7ac31d9f93d5@1"},
    "operation_reuse": {"str:8ec7e3e8663b8f05cb6fb29dbf4debd5747450e3@1",
                        "str:00ed4af3c4e1a190a1beba891400c6cf8b6cc901@1",
                        "dict:49efe408116cb643649e73f2718f311b58f90930@1"},
    "to_runtime_reuse": {"mem-001@1", "str:a49c76c7ab6fc8aad410da8adf158826a62ffe1b@1"},
    "class_name_namespaces": {"prompt_template:str:7c77680ccccb2079b8244166f313788aaad588b6@1",
                              "user_input:str:a49c76c7ab6fc8aad410da8adf158826a62ffe1b@1",
                              "model_output:str:a49c76c7ab6fc8aad410da8adf158826a62ffe1b@1"},
}


@pytest.mark.parametrize("name", sorted(DOCS_NODE_IDS))
def test_patterns_reproduce_the_node_ids_of_the_docs(docs: dict[str, Doc], name: str) -> None:
    assert set(_nodes(docs[name])) == DOCS_NODE_IDS[name]


def test_values_are_repr_strings_unless_an_encoding_fn_is_given(docs: dict[str, Doc]) -> None:
    values = [n["value"] for n in docs["quick_start_sync"]["data"]["nodes"]]
    assert "'You can use `smartcomment` to record a funcation call.'" in values
    assert any(v.startswith("[{'role': 'system', 'content': 'You are a helpful assistant.'}") for v in values)
    assert [n["value"] for n in docs["concepts_object_id"]["data"]["nodes"]] == ["1.0", "2.0", "3.0", "6.0"]
    (memory,) = docs["encoding_fn"]["data"]["nodes"]
    assert json.loads(memory["value"]) == {"content": "The user likes graph visualization.", "id": "mem-001",
                                           "timestamp": "2026-06-01T10:00:00"}


def test_comment_fn_records_one_operation_from_argument_to_result(docs: dict[str, Doc]) -> None:
    for name in ("quick_start_sync", "quick_start_async", "quick_start_param_options"):
        doc = docs[name]
        (op,) = doc["data"]["operations"]
        (edge,) = _edges(doc)
        nodes = _nodes(doc)
        assert nodes[edge["source_full_node_id"]]["name"].startswith("list:")
        assert nodes[edge["target_full_node_id"]]["name"].startswith("str:")
        assert op["category"] == edge["category"] == "llm_call"
        assert op["metadata"] == edge["metadata"] == {"provider": "dummy-openai", "model": "dummy-chat-model",
                                                      "temperature": 0.0}
    (async_op,) = docs["quick_start_async"]["data"]["operations"]
    assert async_op["op_name"].endswith("async_generate_response")  # the function's qualified name
    assert async_op["comment"].endswith("] Call the asynchronous dummy OpenAI client.")  # its docstring
    categories = {n["category"] for n in docs["quick_start_param_options"]["data"]["nodes"]}
    assert categories == {"chat_messages", "chat_completion"}


def test_object_id_names_nodes_by_identity(docs: dict[str, Doc]) -> None:
    doc = docs["concepts_object_id"]
    assert all(re.fullmatch(r"float:\d+", n["name"]) for n in doc["data"]["nodes"])
    (op,) = doc["data"]["operations"]
    assert op["op_name"] == "sum" and len(_edges(doc)) == 3
    (session,) = doc["data"]["sessions"]
    assert session["session_name"] == "arithmetic" and session["session_id"] == "session-arithmetic"


def test_fine_grained_edges_carry_their_own_category(docs: dict[str, Doc]) -> None:
    op_doc = docs["fine_grained_comment_op"]
    (op,) = op_doc["data"]["operations"]
    assert {e["category"] for e in _edges(op_doc)} == {op["category"]} == {"llm_response"}
    assert {n["category"] for n in op_doc["data"]["nodes"]} == {"prompt_template", "user_input", "response"}

    link_doc = docs["fine_grained_comment_link"]
    (scope,) = link_doc["data"]["operations"]
    edges = _edges(link_doc)
    assert len(edges) == 3 and {e["op_id"] for e in edges} == {scope["op_id"]}
    assert Counter(e["category"] for e in edges) == {"prompt_formatting": 2, "llm_response": 1}
    assert scope["category"] == "response_generation"  # edges do not mirror the scope's category here


def test_operation_reuse_puts_one_op_id_on_a_chain_of_edges(docs: dict[str, Doc]) -> None:
    doc = docs["operation_reuse"]
    (op,) = doc["data"]["operations"]
    edges = _edges(doc)
    assert len(edges) == 2 and {e["op_id"] for e in edges} == {op["op_id"]}
    first, second = sorted(edges, key=lambda e: e["created_at"])
    assert first["target_full_node_id"] == second["source_full_node_id"]  # prompt -> raw -> parsed
    assert [first["category"], second["category"]] == ["llm_generation", "json_parsing"]
    assert op["op_name"] == op["category"] == "llm_json_extraction"


def test_in_place_mutation_is_a_version_chain_with_extra_inputs(docs: dict[str, Doc]) -> None:
    doc = docs["in_place_mutation"]
    nodes = _nodes(doc)
    queue_versions = sorted((n for n in nodes.values() if n["category"] == "message_queue"), key=lambda n: n["version"])
    assert [n["version"] for n in queue_versions] == [1, 2, 3, 4]
    assert len({n["name"] for n in queue_versions}) == 1 and queue_versions[0]["name"].startswith("deque:")
    assert queue_versions[-1]["value"].startswith("deque(['Hello, smartcomment.'")
    ops = _ops(doc)
    assert len(ops) == 3 and {op["op_name"] for op in ops.values()} == {"message_queue.append"}
    for before, after in pairwise(queue_versions):
        into = [e for e in _edges(doc) if e["target_full_node_id"] == after["full_node_id"]]
        assert {e["source_full_node_id"] for e in into} >= {before["full_node_id"]}
        assert len(into) == 2 and len({e["op_id"] for e in into}) == 1  # version edge + the message
        assert {nodes[e["source_full_node_id"]]["category"] for e in into} == {"message_queue", "message"}


def test_identity_registry_names_by_id_and_leaves_no_registration() -> None:
    doc = identity_registry()
    assert set(_nodes(doc)) == {"mem-001@1"}
    assert doc["strict"] is True
    assert RegisteredMemoryEntry not in IdentityRegistry.keys("type")


def test_runtime_handles_and_identity_only_reuse_the_memory_node(docs: dict[str, Doc]) -> None:
    for name in ("to_runtime_reuse", "identity_only", "export_import_continue"):
        doc = docs[name]
        nodes = _nodes(doc)
        assert [n for n in nodes if n.startswith("mem-001")] == ["mem-001@1"], name
        (edge,) = _edges(doc)
        assert edge["source_full_node_id"] == "mem-001@1"
        assert nodes[edge["target_full_node_id"]]["category"] == "answer"
        assert _ops(doc)[edge["op_id"]]["op_name"] == "answer_generation"


def test_continued_tracing_after_import_keeps_the_first_process_records(docs: dict[str, Doc]) -> None:
    doc = docs["export_import_continue"]
    nodes = _nodes(doc)
    assert nodes["mem-001@1"]["comment"] == "The memory entry traced in the first process."
    (op,) = doc["data"]["operations"]
    assert nodes["mem-001@1"]["created_at"] <= op["created_at"]


@pytest.mark.parametrize("name", ["link_outside_op", "chained_links_outside_op"])
def test_links_outside_an_operation_use_the_none_sentinel_op(docs: dict[str, Doc], name: str) -> None:
    doc = docs[name]
    (op,) = doc["data"]["operations"]
    assert op["op_id"] == NONE_OP and op["op_name"] == "NONE sentinel" and op["category"] == "sentinel"
    assert {e["op_id"] for e in _edges(doc)} == {NONE_OP}
    assert "__none__" in {s["session_id"] for s in doc["data"]["sessions"]}
    assert NONE_NODE not in _nodes(doc)


def test_chained_links_outside_an_operation_form_a_path(docs: dict[str, Doc]) -> None:
    first, second = sorted(_edges(docs["chained_links_outside_op"]), key=lambda e: e["created_at"])
    assert first["target_full_node_id"] == second["source_full_node_id"]
    assert first["category"] == second["category"] == "link"  # the default without an op


def test_operations_without_inputs_or_outputs_touch_the_none_node(docs: dict[str, Doc]) -> None:
    (no_inputs,) = _edges(docs["op_without_inputs"])
    assert no_inputs["source_full_node_id"] == NONE_NODE and no_inputs["target_full_node_id"] != NONE_NODE
    (no_outputs,) = _edges(docs["op_without_outputs"])
    assert no_outputs["target_full_node_id"] == NONE_NODE and no_outputs["source_full_node_id"] != NONE_NODE
    for name in ("op_without_inputs", "op_without_outputs"):
        none = _nodes(docs[name])[NONE_NODE]
        assert (none["name"], none["value"], none["category"], none["session_id"]) == (
            "COMMENT:NONE", "NONE", "sentinel", "__none__")
        assert NONE_OP not in _ops(docs[name])  # a real operation, only the node is a placeholder


def test_a_node_can_have_two_producing_operations(docs: dict[str, Doc]) -> None:
    doc = docs["multi_producer"]
    producers: dict[str, set[str]] = defaultdict(set)
    for edge in _edges(doc):
        producers[edge["target_full_node_id"]].add(edge["op_id"])
    (shared,) = [node for node, ops in producers.items() if len(ops) == 2]
    assert _nodes(doc)[shared]["value"] == "'The user lives in Rome.'"
    assert {_ops(doc)[op]["op_name"] for op in producers[shared]} == {"summarize", "translate"}


def test_several_sessions_share_nodes_across_stages(docs: dict[str, Doc]) -> None:
    doc = docs["several_sessions"]
    sessions = {s["session_id"]: s for s in doc["data"]["sessions"]}
    assert set(sessions) == {"session-ingest", "session-retrieve", "session-answer"}
    op_session = {op["op_name"]: op["session_id"] for op in doc["data"]["operations"]}
    assert op_session == {"extract": "session-ingest", "search": "session-retrieve", "respond": "session-answer"}
    nodes = _nodes(doc)
    crossing = [e for e in _edges(doc) if nodes[e["source_full_node_id"]]["session_id"] != e["session_id"]]
    assert crossing  # the memory written in ingest is read in retrieve
    assert doc["metadata"] == {"experiment": "sessions"}


def test_class_name_separates_same_content_variables(docs: dict[str, Doc]) -> None:
    nodes = docs["class_name_namespaces"]["data"]["nodes"]
    by_class = {n["class_name"]: n for n in nodes}
    assert set(by_class) == {"prompt_template", "user_input", "model_output"}
    assert by_class["user_input"]["name"] == by_class["model_output"]["name"]
    assert by_class["user_input"]["full_node_id"] == f"user_input:{by_class['user_input']['name']}@1"


# ---------------------------------------------------------------------------------------------------
# the MemTraceBench-like trace


def test_memtracebench_like_uses_the_benchmark_names(docs: dict[str, Doc]) -> None:
    doc = docs["memtracebench_like"]
    nodes = _nodes(doc)
    assert {"U0:D1:1@1", "U0:D1:2@1", "U0:D1:3@1", "memory-unit-1@1", "memory-unit-1@2",
            "fact-extraction-system-prompt@1", "memory-update-decision-prompt@1", "question-answering-prompt@1",
            f"query:{QUESTION_ID}@1", f"prediction:{QUESTION_ID}@1", f"golden_answers:{QUESTION_ID}@1",
            f"judge_verdict:{QUESTION_ID}@1"} <= set(nodes)
    assert nodes[f"query:{QUESTION_ID}@1"]["class_name"] == "query"
    op_names = {op["op_name"] for op in doc["data"]["operations"]}
    assert {"fact-extraction", "memory-update-decision", "memory-search", "question-answering", "llm-judge"} == op_names


def test_memtracebench_like_labels_resolve_in_the_graph(docs: dict[str, Doc]) -> None:
    doc = docs["memtracebench_like"]
    (label,) = doc["data"]["annotations"]
    assert set(label) == {"query_id", "query", "golden_answers", "prediction", "source_evidence_ids",
                          "final_error_type", "final_op_id", "reason"}
    nodes, ops = _nodes(doc), _ops(doc)
    assert label["query_id"] in nodes and all(e in nodes for e in label["source_evidence_ids"])
    assert ops[label["final_op_id"]]["op_name"] == "fact-extraction"
    blamed_inputs = {e["source_full_node_id"] for e in _edges(doc) if e["op_id"] == label["final_op_id"]}
    assert set(label["source_evidence_ids"]) <= blamed_inputs
    assert label["final_error_type"] == "ExtractionError"


def test_smartcomment_queries_work_on_memtracebench_like(docs: dict[str, Doc]) -> None:
    graph = ExecNetwork.import_graph(json.loads(json.dumps(docs["memtracebench_like"])))
    versions = graph.get_versions("memory-unit-1")
    assert [v.version for v in versions] == [1, 2]
    reached = {node.full_node_id for node in graph.bfs(f"prediction:{QUESTION_ID}@1", "backward").nodes}
    assert {"U0:D1:1@1", "U0:D1:2@1", "memory-unit-1@2", f"query:{QUESTION_ID}@1"} <= reached
    assert "U0:D1:3@1" not in reached  # the evidence never reached memory: the extraction error
    assert "annotations" not in graph.export_graph()["data"]  # smartcomment drops unknown keys under data
    assert graph.export_graph()["metadata"] == {"dataset": "locomo", "system": "mem0"}  # ... keeps metadata


# ---------------------------------------------------------------------------------------------------
# the committed fixtures


def test_every_pattern_has_a_committed_fixture_and_no_stale_ones() -> None:
    assert {p.stem for p in FIXTURES.glob("*.json")} == set(PATTERNS)


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_committed_fixture_matches_the_generator(docs: dict[str, Doc], name: str) -> None:
    path = FIXTURES / f"{name}.json"
    committed = json.loads(path.read_text(encoding="utf-8"))
    assert _shape(committed) == _shape(docs[name])
    if name not in OBJECT_ID_PATTERNS:
        assert set(_nodes(committed)) == set(_nodes(docs[name]))
    assert path.stat().st_size < 30_000
    for record in (*committed["data"]["nodes"], *committed["data"]["edges"], *committed["data"]["operations"]):
        assert not Path(record["filename"]).is_absolute(), record["filename"]  # repository-relative
    again = _through_smartcomment(committed)  # still a valid smartcomment graph
    assert set(_nodes(again)) == set(_nodes(committed)) and _edge_triples(again) == _edge_triples(committed)


def test_relative_sources_rewrites_only_paths_under_the_root(tmp_path: Path) -> None:
    doc = {"data": {"nodes": [{"filename": f"{tmp_path}/a/b.py", "trigger_point": f"{tmp_path}/a/b.py:3"},
                              {"filename": "<sentinel>", "trigger_point": "<sentinel>:0"}]}}
    relative_sources(doc, tmp_path)
    assert doc["data"]["nodes"] == [{"filename": "a/b.py", "trigger_point": "a/b.py:3"},
                                    {"filename": "<sentinel>", "trigger_point": "<sentinel>:0"}]
