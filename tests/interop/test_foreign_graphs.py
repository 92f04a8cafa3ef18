"""`memtrace attribute graphs=...` on graphs a user's own program traced with the real smartcomment 0.1.2:
the blamed operation is named as the program named it (with smartcomment's op id), its stage is the
operation's name unless `stage_map=` (inline or a file) says otherwise; a folder attributes every file;
a graph without gold answers is refused in one line naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from memtrace_loop.experiments.attribute import attribute
from memtrace_loop.pipeline.core.config import ConfigError
from memtrace_loop.pipeline.interop.graph_files import GraphFileError

from tests.support.requires import import_or_fail

smartcomment = import_or_fail("smartcomment", "smartcomment 0.1.2 is installed by `make` (test extra)")
from smartcomment import comment_graph, comment_op, comment_session, comment_variable  # noqa: E402

NOTES = ("Ada: I moved to Rome in 2020.", "Ada: My sister Anna visits me next week.", "Ada: I love pizza.")
QUESTION = "Who visits Ada next week?"


def named(name: str):
    return lambda _value: name


def user_program(graph_id: str, retrieved: tuple[int, ...], answer: str, gold: bool = True) -> dict:
    """A user's RAG traced with smartcomment's annotations: index notes, retrieve, generate (and the gold
    answer recorded for evaluation, unless `gold` is False)."""
    with comment_graph(graph_id=graph_id) as graph:
        with comment_session(session_id=f"{graph_id}-index", session_name="index", category="construction"):
            for i, note in enumerate(NOTES, 1):
                turn = comment_variable(note, to_runtime=True, class_name="turn", id_strategy=named(f"D1:{i}"),
                                        category="turn")
                comment_op(op_name="index_note", category="extraction", inputs=[turn],
                           outputs=[(note, {"class_name": "doc", "id_strategy": named(str(i)), "category": "memory"})])
        with comment_session(session_id=f"{graph_id}-answer", session_name="answer", category="answering"):
            query = comment_variable(QUESTION, to_runtime=True, class_name="query", id_strategy=named("q1"),
                                     category="query")
            docs = [graph.get_variable(f"doc:{i}@1") for i in retrieved]
            context = "\n".join(NOTES[i - 1] for i in retrieved)
            comment_op(op_name="retrieve_docs", category="retrieval", inputs=[query, *docs],
                       outputs=[(context, {"class_name": "retrieved", "id_strategy": named("q1"),
                                           "category": "context"})])
            comment_op(op_name="generate", category="response", inputs=[query, graph.get_variable("retrieved:q1@1")],
                       outputs=[(answer, {"class_name": "prediction", "id_strategy": named("q1"),
                                          "category": "prediction"})])
            if gold:
                comment_variable(json.dumps(["Anna, her sister"]), to_runtime=True, class_name="golden_answers",
                                 id_strategy=named("q1"), category="golden_answers")
    assert graph is not None
    doc: dict = graph.export_graph()
    return doc


def attribute_graphs(tmp_path: Path, *overrides: str) -> dict:
    with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
        cfg = compose("attribute", overrides=[f"tracking.uri=sqlite:///{tmp_path}/m.db", "log=false", *overrides])
    return attribute(cfg)


@pytest.fixture
def graphs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "graphs"
    folder.mkdir()
    missed = user_program("missed-retrieval", (1, 3), "Nobody.")  # the note about Anna never retrieved
    wrong = user_program("wrong-answer", (1, 2, 3), "Ada's cousin.")  # all retrieved, answered wrongly
    for name, doc in (("missed.json", missed), ("wrong.json", wrong)):
        (folder / name).write_text(json.dumps(doc))
    return folder


def test_the_blamed_operation_and_stage_of_a_smartcomment_graph(graphs: Path, tmp_path: Path, capsys) -> None:
    out = attribute_graphs(tmp_path, f"graphs={graphs / 'missed.json'}", "stage_map={retrieve_docs: retrieve}")
    printed = capsys.readouterr().out
    (row,) = json.loads(Path(out["attributions_path"]).read_text())
    source = json.loads((graphs / "missed.json").read_text())
    retrieve_op = next(o["op_id"] for o in source["data"]["operations"] if o.get("op_name") == "retrieve_docs")
    assert (row["operation"], row["stage"], row["error_type"]) == ("retrieve_docs", "retrieve", "RetrievalError")
    assert row["source_op_id"] == retrieve_op  # smartcomment's own id of the blamed operation
    assert "at operation 'retrieve_docs'" in printed and "stage 'retrieve'" in printed
    assert [r.stage for r in out["blame"].rows] == ["retrieve"]


def test_a_folder_and_a_stage_map_file(graphs: Path, tmp_path: Path) -> None:
    (tmp_path / "stages.yaml").write_text("generate: respond\n")
    out = attribute_graphs(tmp_path, f"graphs={graphs}", "stage_map=stages.yaml")
    rows = {r["file"].rsplit("/", 1)[-1]: r for r in json.loads(Path(out["attributions_path"]).read_text())}
    assert (rows["missed.json"]["operation"], rows["missed.json"]["stage"]) == ("retrieve_docs", "retrieve_docs")
    assert (rows["wrong.json"]["operation"], rows["wrong.json"]["stage"]) == ("generate", "respond")
    assert rows["wrong.json"]["error_type"] == "ResponseError"


def test_a_graph_without_gold_answers_is_refused_naming_the_file(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "no_gold.json"
    path.write_text(json.dumps(user_program("no-gold", (1,), "Nobody.", gold=False)))
    with pytest.raises(GraphFileError) as info:
        attribute_graphs(tmp_path, f"graphs={path}")
    assert str(info.value).startswith(f"{path}: no gold answers") and "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="graphs= from another tool cannot be replayed"):
        attribute_graphs(tmp_path, f"graphs={path}", "attributor.verify=true")
