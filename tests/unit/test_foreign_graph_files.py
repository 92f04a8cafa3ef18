"""Another tool's graph files read as a run to attribute (`pipeline.interop.foreign_graphs`): stages named
after operations or by a stage map, cases from the graph's questions and gold answers, a verdict judged
by containment when the graph has no judge, and one-line refusals naming the file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from memtrace_loop.pipeline.interop.foreign_graphs import graph_paths, read_foreign_graphs, read_stage_map
from memtrace_loop.pipeline.interop.graph_files import GraphFileError

from tests.support.paths import FIXTURES

BENCH = FIXTURES / "smartcomment" / "memtracebench_like.json"


def test_stages_are_operation_names_unless_mapped_and_cases_come_from_the_graph() -> None:
    (plain,) = read_foreign_graphs(BENCH, {})
    (mapped,) = read_foreign_graphs(BENCH, {"fact-extraction": "extract"})
    assert {op.stage for op in plain.graph.operations()} == {op.name for op in plain.graph.operations()}
    assert {op.stage for op in mapped.graph.operations() if op.name == "fact-extraction"} == {"extract"}
    (case,) = plain.cases
    assert (case.question.gold, case.prediction, case.verdict) == ("Anna, her sister", "I don't know.", "WRONG")
    assert case.question.evidence == ("D1:3",)  # the annotation's evidence node, as our turn id


def test_without_a_judge_the_verdict_is_containment(tmp_path: Path) -> None:
    doc = json.loads(BENCH.read_text())
    data = doc["data"]
    judged = {n["full_node_id"] for n in data["nodes"] if n["full_node_id"].startswith("judge_verdict:")}
    data["nodes"] = [n for n in data["nodes"] if n["full_node_id"] not in judged]
    data["edges"] = [e for e in data["edges"] if e["target_full_node_id"] not in judged]
    for node in data["nodes"]:
        if node["full_node_id"].startswith("prediction:"):
            node["value"] = repr("It is Anna, her sister.")
    path = tmp_path / "g.json"
    path.write_text(json.dumps(doc))
    (read,) = read_foreign_graphs(path, {})
    assert read.graph.latest(f"verdict:{read.cases[0].question.id}") is None
    assert read.cases[0].verdict == "CORRECT"


def test_refusals_name_the_file(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(GraphFileError, match=r"empty: a folder without graph files"):
        graph_paths(tmp_path / "empty")
    for name in ("a.json", "b.json"):
        shutil.copy(BENCH, tmp_path / name)
    with pytest.raises(GraphFileError, match="two files hold the same graph id"):
        read_foreign_graphs(tmp_path, {})
    (tmp_path / "map.yaml").write_text("- not a mapping\n")
    with pytest.raises(GraphFileError, match=r"map\.yaml: stage_map: expected a mapping"):
        read_stage_map("map.yaml", tmp_path)
    assert read_stage_map({"retrieve_docs": "retrieve"}, tmp_path) == {"retrieve_docs": "retrieve"}
