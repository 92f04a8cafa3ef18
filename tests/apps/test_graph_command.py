"""`memtrace graph convert|show` as a user runs it (the command line's `main`, in-process with its own
stdout, stderr, cwd and 80 columns; the installed console script in a subprocess where the process itself
is what is proven: a conversion, an exit 2 with its one line, `--help`): a real
run graph through ExecNetwork and back unchanged, summaries of both formats that agree and list the
questions judged wrong, a folder converted with its files rewritten when already in the target format,
a MemTraceBench-style document with its label, and every error ending with exit 2 and one line naming
the file, nothing half-written."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from memtrace_loop.experiments import cli
from memtrace_loop.pipeline.core.graph_io import graph_to_json, load_graph, save_graph
from memtrace_loop.pipeline.interop.graph_files import GraphFormat, detect_format
from memtrace_loop.pipeline.loop.runner import RunResult

from tests.support.sim import sim_run

MEMTRACE = Path(sys.executable).parent / "memtrace"


def memtrace_graph(*args: str | Path, cwd: Path, process: bool = False) -> subprocess.CompletedProcess[str]:
    """`memtrace graph <args>` in `cwd`: in-process through `cli.main` (what the console script calls), or
    with `process=True` the installed console script in a subprocess (6-9 s of imports each)."""
    argv = ["graph", *map(str, args)]
    if process:
        env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}  # a pipe: 80 columns
        return subprocess.run([str(MEMTRACE), *argv], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=300, check=False)
    out, err = io.StringIO(), io.StringIO()
    before, columns = Path.cwd(), os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "80"  # what a pipe gets
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main(argv)
            except SystemExit as exit_:  # argparse
                code = exit_.code if isinstance(exit_.code, int) else 1
    finally:
        os.chdir(before)
        if columns is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = columns
    return subprocess.CompletedProcess([str(MEMTRACE), *argv], code, out.getvalue(), err.getvalue())


def shown(*files: str | Path, cwd: Path) -> list[dict]:
    done = memtrace_graph("show", "--json", *files, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def run_result() -> RunResult:
    return sim_run("mem0", seed=2, n_conversations=2, sessions_per_conversation=4)


@pytest.fixture(scope="module")
def run_dir(run_result: RunResult, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run's graphs as `memtrace run` saves them: graphs/<conversation>.json in our format."""
    folder = tmp_path_factory.mktemp("run") / "graphs"
    for conversation_id, graph in run_result.graph_by_conversation.items():
        save_graph(graph, folder / f"{conversation_id}.json")
    return folder


def wrong_question_ids(run_result: RunResult, conversation_id: str) -> list[str]:
    return [c.question.id for c in run_result.results
            if c.question.conversation_id == conversation_id and not c.correct]


# --------------------------------------------------------------------------- a run graph, both ways


def test_a_run_graph_goes_to_exec_network_and_back_unchanged(run_result, run_dir, tmp_path):
    ours = run_dir / "sim-2-0.json"
    to_theirs = memtrace_graph("convert", ours, "conv.exec.json", "--to", "exec-network", cwd=tmp_path, process=True)
    assert to_theirs.returncode == 0, to_theirs.stderr
    assert "(memtrace -> exec-network)" in to_theirs.stdout and to_theirs.stderr == ""
    exported = json.loads((tmp_path / "conv.exec.json").read_text())
    assert detect_format(exported) is GraphFormat.EXEC_NETWORK and "format" not in exported
    back = memtrace_graph("convert", "conv.exec.json", "back/conv.json", "--to", "memtrace", cwd=tmp_path)
    assert back.returncode == 0, back.stderr
    assert "(exec-network -> memtrace)" in back.stdout
    assert graph_to_json(load_graph(tmp_path / "back/conv.json")) == graph_to_json(load_graph(ours))
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["back", "conv.exec.json", "conv.json"]  # no temp left


def test_show_agrees_on_both_formats_and_lists_the_questions_judged_wrong(run_result, run_dir, tmp_path):
    ours = run_dir / "sim-2-0.json"
    assert memtrace_graph("convert", ours, "conv.exec.json", "--to", "exec-network", cwd=tmp_path).returncode == 0
    mine, theirs = shown(ours, "conv.exec.json", cwd=tmp_path)
    graph = run_result.graph_by_conversation["sim-2-0"]
    wrong = wrong_question_ids(run_result, "sim-2-0")
    assert wrong, "the fixture must have a question judged wrong"
    assert (mine["format"], theirs["format"]) == ("memtrace", "exec-network")
    assert mine["graph_id"] == theirs["graph_id"] == "sim-2-0"
    edges = sum((len(op.inputs) + (op.prompt is not None)) * len(op.outputs) for op in graph.operations())
    assert mine["counts"] == theirs["counts"] == {
        "variables": graph.n_variables, "operations": graph.n_operations, "edges": edges, "failed_operations": 0,
        "questions": len([c for c in run_result.results if c.question.conversation_id == "sim-2-0"]),
        "failed_questions": len(wrong), "annotations": 0}
    assert mine["document"] is None
    assert theirs["document"]["edges"] == edges and theirs["document"]["nodes"] == graph.n_variables
    assert theirs["document"]["sessions"] >= 1
    assert mine["variable_kinds"]["turn"] == len(graph.names("turn:")) and mine["operation_kinds"]["judge"] > 0
    assert mine["variable_kinds"] == theirs["variable_kinds"] and mine["operation_kinds"] == theirs["operation_kinds"]
    assert [q["question_id"] for q in mine["failed_questions"]] == wrong
    assert mine["failed_questions"] == theirs["failed_questions"]
    first = next(c for c in run_result.results if c.question.id == wrong[0])
    assert mine["failed_questions"][0] == {"question_id": first.question.id, "verdict": first.verdict,
                                           "question": first.question.text, "prediction": first.prediction,
                                           "gold": first.question.gold}

    relative = Path(ours.name)  # short enough for the 80-column header line
    printed = memtrace_graph("show", relative, "--limit", "0", cwd=ours.parent)
    assert printed.returncode == 0, printed.stderr
    lines = printed.stdout.splitlines()
    assert lines[0].startswith(f"{relative}") and "memtrace, graph sim-2-0" in lines[0]
    assert f"{graph.n_variables} variables, {graph.n_operations} operations, {edges} edges" in printed.stdout
    assert f"Failed questions: {len(wrong)} of " in printed.stdout
    assert all(f"  {qid}: WRONG" in lines for qid in wrong)
    assert max(len(line) for line in lines if not line.startswith(str(relative))) <= 80
    limited = memtrace_graph("show", ours, "--limit", "1", cwd=tmp_path).stdout
    assert f"  {wrong[0]}: WRONG" in limited and f"  {wrong[1]}: WRONG" not in limited
    assert f"... and {len(wrong) - 1} more" in limited


def test_a_folder_is_converted_file_by_file_and_rewritten_when_already_in_the_format(run_dir, tmp_path):
    done = memtrace_graph("convert", run_dir, "exec", "--to", "exec-network", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "exec").iterdir()) == ["sim-2-0.json", "sim-2-1.json"]
    assert done.stderr == ""  # no progress bar outside a terminal
    assert "2 files" in done.stdout and "2 from memtrace" in " ".join(done.stdout.split())
    assert {s["format"] for s in shown(*sorted((tmp_path / "exec").iterdir()), cwd=tmp_path)} == {"exec-network"}
    again = memtrace_graph("convert", "exec", "exec2", "--to", "exec-network", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "2 already exec-network (rewritten, normalised)" in " ".join(again.stdout.split())
    names = ("sim-2-0.json", "sim-2-1.json")
    assert (shown(*(f"exec/{n}" for n in names), cwd=tmp_path)[1]["counts"]
            == shown(*(f"exec2/{n}" for n in names), cwd=tmp_path)[1]["counts"])
    one = memtrace_graph("convert", run_dir / "sim-2-1.json", "same.json", "--to", "memtrace", cwd=tmp_path)
    assert "already memtrace: rewritten, normalised" in " ".join(one.stdout.split())
    assert (tmp_path / "same.json").read_text() == (run_dir / "sim-2-1.json").read_text()

    for refused in ((run_dir, run_dir), (run_dir / "sim-2-0.json", run_dir / "sim-2-0.json"),
                    (run_dir / "sim-2-0.json", run_dir)):  # OUT a folder: the same name in it, IN itself
        before = {p.name: p.read_text() for p in run_dir.iterdir()}
        bad = memtrace_graph("convert", *refused, "--to", "memtrace", cwd=tmp_path)
        assert bad.returncode == 2 and "refusing to overwrite" in bad.stderr
        assert {p.name: p.read_text() for p in run_dir.iterdir()} == before


# --------------------------------------------------------------------------- MemTraceBench


def bench_document() -> dict:
    """A small MemTraceBench-style ExecNetwork document: a LoCoMo turn `U<sample>:D1:3`, a memory unit,
    a retrieval that missed it, a wrong answer and one label blaming the retrieval."""
    def node(name: str, value: str, category: str, class_name: str = "") -> dict:
        return {"name": name, "version": 1, "value": value, "comment": "", "category": category,
                "class_name": class_name, "session_id": "s-1", "created_at": "2025-03-01 10:00:00.000",
                "metadata": {}}

    def edge(op_id: str, source: str, target: str) -> dict:
        return {"edge_id": f"e-{source}-{target}", "source_full_node_id": source, "target_full_node_id": target,
                "op_id": op_id, "category": "", "comment": ""}

    nodes = [node("Uconv-26:D1:3", "Caroline: I went to the LGBTQ support group yesterday.", "message"),
             node("memory-unit-1", "Caroline went to an LGBTQ support group on 7 May 2023", "memory"),
             node("q-7", "When did Caroline go to the LGBTQ support group?", "question", class_name="query"),
             node("retrieved-context", "Caroline likes hiking", "context"),
             node("answer", "She went hiking", "answer")]
    ops = [{"op_id": "op-01", "op_name": "fact-extraction", "session_id": "s-1", "metadata": {}},
           {"op_id": "op-02", "op_name": "vector-search", "session_id": "s-2", "metadata": {}},
           {"op_id": "op-03", "op_name": "question-answering", "session_id": "s-2", "metadata": {}}]
    edges = [edge("op-01", "Uconv-26:D1:3@1", "memory-unit-1@1"),
             edge("op-02", "query:q-7@1", "retrieved-context@1"),
             edge("op-03", "query:q-7@1", "answer@1"), edge("op-03", "retrieved-context@1", "answer@1")]
    label = {"query_id": "query:q-7@1", "query": "When did Caroline go to the LGBTQ support group?",
             "golden_answers": ["7 May 2023"], "prediction": "She went hiking",
             "source_evidence_ids": ["Uconv-26:D1:3@1"], "final_error_type": "RetrievalError", "final_op_id": "op-02",
             "reason": "the unit holding the date was not retrieved"}
    return {"graph_id": "conv-26", "user_id": "u", "project_id": "memtracebench", "strict": False,
            "driver_type": "in_memory", "created_at": "2025-03-01 09:59:59.000", "metadata": {"system": "mem0"},
            "data": {"sessions": [{"session_id": "s-1", "session_name": "ingest"},
                                  {"session_id": "s-2", "session_name": "answer"}],
                     "nodes": nodes, "operations": ops, "edges": edges, "annotations": [label]}}


def test_a_memtracebench_graph_is_shown_with_its_label_and_converted(tmp_path):
    (tmp_path / "conv-26.json").write_text(json.dumps(bench_document()))
    (summary,) = shown("conv-26.json", cwd=tmp_path)
    assert summary["format"] == "exec-network" and summary["graph_id"] == "conv-26"
    assert summary["document"] == {"sessions": 2, "nodes": 5, "operations": 3, "edges": 4}
    assert summary["counts"]["variables"] == 5 and summary["counts"]["operations"] == 3
    assert summary["counts"]["edges"] == 4 and summary["counts"]["annotations"] == 1
    assert summary["variable_kinds"]["turn"] == 1 and summary["operation_kinds"]["retrieval"] == 1
    assert summary["annotations"] == [{"query_id": "query:q-7@1", "error_type": "RetrievalError", "op_id": "op-02",
                                       "query": "When did Caroline go to the LGBTQ support group?",
                                       "prediction": "She went hiking", "golden_answers": ["7 May 2023"]}]
    printed = memtrace_graph("show", "conv-26.json", cwd=tmp_path).stdout
    assert "MemTraceBench labels: 1" in printed and "  query:q-7@1: RetrievalError at op-02" in printed
    assert "predicted: She went hiking" in printed and "golden: 7 May 2023" in printed

    assert memtrace_graph("convert", "conv-26.json", "ours.json", "--to", "memtrace", cwd=tmp_path).returncode == 0
    (ours,) = shown("ours.json", cwd=tmp_path)
    assert ours["format"] == "memtrace" and ours["counts"]["variables"] == 5 and ours["counts"]["edges"] == 4
    again = memtrace_graph("convert", "conv-26.json", "again.json", "--to", "exec-network", cwd=tmp_path)
    assert again.returncode == 0 and "1 label," in again.stdout
    (theirs,) = shown("again.json", cwd=tmp_path)
    assert [(a["query_id"], a["error_type"]) for a in theirs["annotations"]] == [("query:q-7@1", "RetrievalError")]


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(("content", "problem"), [
    (None, "no such file"),
    ("{not json", "invalid JSON at line 1"),
    ('{"hello": "world"}', "neither a memtrace graph"),
    ("[1, 2]", "neither a memtrace graph"),
    ('{"format": "memtrace-graph", "format_version": 7}', "unsupported format_version 7"),
    ("BENCH_BAD_LABEL", "data.annotations[0]: field 'final_error_type'"),
])
def test_a_bad_file_ends_with_exit_2_and_one_line_naming_it(content, problem, tmp_path):
    bad = tmp_path / "bad.json"
    if content == "BENCH_BAD_LABEL":
        document = bench_document()
        document["data"]["annotations"][0]["final_error_type"] = "Typo"
        content = json.dumps(document)
    if content is not None:
        bad.write_text(content)
    for n, args in enumerate((("show", "bad.json"), ("show", "--json", "bad.json"),
                              ("convert", "bad.json", "out.json", "--to", "exec-network"))):
        done = memtrace_graph(*args, cwd=tmp_path, process=content is None and n == 0)  # one as a process
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert done.stdout == ""
        (line,) = done.stderr.splitlines()
        assert line.startswith("memtrace graph: bad.json: ") and problem in line, line
        assert not (tmp_path / "out.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ([] if content is None else ["bad.json"])


def test_a_folder_stops_at_its_bad_file_and_leaves_no_partial_file(run_dir, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.json").write_text((run_dir / "sim-2-0.json").read_text())
    (folder / "b.json").write_text('{"format": "memtrace-graph", "format_version": 1, "variables": 3}')
    done = memtrace_graph("convert", "in", "out", "--to", "exec-network", cwd=tmp_path)
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith("memtrace graph: in/b.json: not a valid memtrace graph"), line
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.json"]  # whole, and nothing else
    json.loads((tmp_path / "out" / "a.json").read_text())
    into = memtrace_graph("convert", "out/a.json", "in", "--to", "memtrace", cwd=tmp_path)
    assert into.returncode == 0 and "-> in/a.json" in into.stdout  # into the folder, under its own name
    (tmp_path / "none").mkdir()
    nothing = memtrace_graph("convert", "none", "x", "--to", "memtrace", cwd=tmp_path)
    assert nothing.returncode == 2 and nothing.stderr == "memtrace graph: none: no *.json file in this folder\n"


def test_the_command_line_is_checked_by_argparse(tmp_path):
    missing_to = memtrace_graph("convert", "a.json", "b.json", cwd=tmp_path)
    assert missing_to.returncode == 2 and "--to" in missing_to.stderr
    wrong_to = memtrace_graph("convert", "a.json", "b.json", "--to", "xml", cwd=tmp_path)
    assert wrong_to.returncode == 2 and "invalid choice: 'xml'" in wrong_to.stderr
    assert memtrace_graph("--help", cwd=tmp_path).returncode == 0
    usage = subprocess.run([str(MEMTRACE), "--help"], capture_output=True, text=True, timeout=60, check=False)
    assert "\n  graph " in usage.stdout and "memtrace graph convert" in usage.stdout


SMARTCOMMENT_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "smartcomment"


def test_every_smartcomment_fixture_goes_to_memtrace_and_back_to_the_same_document(tmp_path):
    """The committed documents smartcomment's own API wrote (tests/fixtures/smartcomment): a folder to
    our JSON and back gives each document back (labels also in the metadata copy smartcomment keeps)."""
    ours, back = tmp_path / "ours", tmp_path / "back"
    for args in (("convert", SMARTCOMMENT_FIXTURES, ours, "--to", "memtrace"),
                 ("convert", ours, back, "--to", "exec-network")):
        done = memtrace_graph(*args, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    originals = sorted(SMARTCOMMENT_FIXTURES.glob("*.json"))
    assert len(originals) >= 20
    for original in originals:
        expected = json.loads(original.read_text(encoding="utf-8"))
        if expected["data"].get("annotations"):
            expected["metadata"]["annotations"] = expected["data"]["annotations"]
        assert detect_format(json.loads((ours / original.name).read_text())) is GraphFormat.MEMTRACE
        assert json.loads((back / original.name).read_text(encoding="utf-8")) == expected, original.name
    (bench,) = shown(back / "memtracebench_like.json", cwd=tmp_path)
    assert len(bench["annotations"]) == 1 and bench["annotations"][0]["error_type"] == "ExtractionError"
