"""report.html: a failure's subgraph is bounded and holds the evidence, the blamed operation and the
answer; the layout is deterministic and follows sequence order; every text of a conversation or an
LM is escaped; the JSON block reads back unchanged; a sim run's report stays small with bounded
drawings."""

from __future__ import annotations

import json
import re
from types import MappingProxyType

import pytest
from memtrace_loop.pipeline.analysis.attribution.records import Attribution, ErrorType
from memtrace_loop.pipeline.analysis.blame import aggregate_blame
from memtrace_loop.pipeline.analysis.evaluation import summarize
from memtrace_loop.pipeline.analysis.judge import score_case
from memtrace_loop.pipeline.core.conventions import (
    OpKind,
    VarKind,
    answer_name,
    gold_name,
    memory_name,
    query_name,
    retrieved_name,
    turn_name,
    verdict_name,
)
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.records import Question
from memtrace_loop.pipeline.loop.summaries import CandidateSummary, IterationSummary
from memtrace_loop.pipeline.report.data import DiagnosisGroup, ReportData, Rewrite
from memtrace_loop.pipeline.report.render import (
    DATA_ELEMENT_ID,
    failures_payload,
    json_for_script,
    render_report,
    write_report,
)
from memtrace_loop.pipeline.report.run_report import report_for_run
from memtrace_loop.pipeline.report.subgraph import NODE_H, NODE_W, Role, failure_subgraph, layout

SCRIPT = "<script>alert('turn')</script>"
IMG = '<img src=x onerror="alert(1)">'


def chain_graph(n_updates: int, n_noise: int = 0, turn_text: str = "Alice: I moved to Paris.", answer: str = "Rome"):
    """turn → extract → memory m1 updated `n_updates` times → retrieval → respond → answer → judge, plus
    `n_noise` unrelated turns each extracted into its own memory. Returns the graph, the case and the
    id of the update operation halfway along the chain."""
    graph = ExecutionGraph("c1")
    for i in range(n_noise):
        noise = graph.add_variable(turn_name(f"N{i}"), VarKind.TURN, f"Bob: noise {i}")
        unit = graph.add_variable(memory_name(f"n{i}"), VarKind.MEMORY, f"noise {i}")
        graph.add_operation("extract_facts", "extract", OpKind.EXTRACTION, [noise.id], [unit.id])
    turn = graph.add_variable(turn_name("D1:1"), VarKind.TURN, turn_text)
    unit = graph.add_variable(memory_name("m1"), VarKind.MEMORY, "Alice lives in Paris")
    graph.add_operation("extract_facts", "extract", OpKind.EXTRACTION, [turn.id], [unit.id])
    middle = None
    for i in range(n_updates):
        new = graph.add_variable(memory_name("m1"), VarKind.MEMORY, f"Alice lives in Paris (v{i + 2})")
        op = graph.add_operation("memory_update", "decide", OpKind.UPDATE, [unit.id], [new.id])
        if i == n_updates // 2:
            middle = op.id
        unit = new
    query = graph.add_variable(query_name("q1"), VarKind.QUERY, "Where does Alice live?")
    context = graph.add_variable(retrieved_name("q1"), VarKind.CONTEXT, unit.value)
    graph.add_operation("retrieve_memories", "retrieve", OpKind.RETRIEVAL, [query.id, unit.id], [context.id])
    answer_var = graph.add_variable(answer_name("q1"), VarKind.ANSWER, answer)
    graph.add_operation("question_answering", "respond", OpKind.RESPONSE, [query.id, context.id], [answer_var.id])
    gold = graph.add_variable(gold_name("q1"), VarKind.GOLD, "Paris")
    verdict = graph.add_variable(verdict_name("q1"), VarKind.VERDICT, "WRONG")
    graph.add_operation("llm_judge", "judge", OpKind.JUDGE, [query.id, gold.id, answer_var.id], [verdict.id])
    question = Question("q1", "c1", "Where does Alice live?", "Paris", 1, ("D1:1",))
    return graph, score_case(question, answer, "WRONG", None), middle


def blame_on(case, op_id: str, graph: ExecutionGraph) -> Attribution:
    op = graph.operation(op_id)
    return Attribution(case, op.id, op.name, op.stage, ErrorType.UPDATE, "the update lost it", 0.8, "lineage",
                       evidence=("D1:1",))


def data_of(graph, case, attributions=(), title="report", **extra) -> ReportData:
    return ReportData(title, summarize([case], ()), (case,), MappingProxyType({"c1": graph}),
                      tuple(attributions), **extra)


# ------------------------------------------------------------------ subgraph


def test_subgraph_is_bounded_and_keeps_evidence_blamed_op_and_answer():
    graph, case, middle = chain_graph(n_updates=80, n_noise=30)
    attribution = blame_on(case, middle, graph)
    sub = failure_subgraph(graph, case, attribution, max_nodes=20)
    ids = {n.id for n in sub.nodes}
    assert len(sub.nodes) <= 20
    assert "turn:D1:1@1" in ids and middle in ids and "answer:q1@1" in ids
    assert sub.elided > 100  # the long version chain, summarized
    assert not any(i.startswith("turn:N") or i.startswith("memory:n") for i in ids)  # unrelated lineage left out
    role = {n.id: n.role for n in sub.nodes}
    assert role[middle] == Role.BLAMED and role["turn:D1:1@1"] == Role.EVIDENCE and role["answer:q1@1"] == Role.ANSWER
    assert all(a in ids and b in ids for a, b in sub.edges)


def test_small_subgraph_is_the_whole_path_in_sequence_order():
    graph, case, middle = chain_graph(n_updates=3, n_noise=5)
    sub = failure_subgraph(graph, case, blame_on(case, middle, graph))
    ids = [n.id for n in sub.nodes]
    assert sub.elided == 0
    assert ids[0] == "turn:D1:1@1"
    assert [f"memory:m1@{v}" for v in range(1, 5)] == [i for i in ids if i.startswith("memory:")]
    assert {"verdict:q1@1", "gold:q1@1", "query:q1@1", "retrieved:q1@1"} <= set(ids)
    assert [n.seq for n in sub.nodes] == sorted(n.seq for n in sub.nodes)
    assert ("memory:m1@1", "memory:m1@2") in sub.version_edges


def test_lost_information_is_said_and_the_drop_is_drawn():
    graph, case, _ = chain_graph(n_updates=0)
    dropped = graph.add_variable(turn_name("D2:1"), VarKind.TURN, "Alice: my sister is Eve.")
    facts = graph.add_variable("facts:D2:1", VarKind.FACTS, "[]")
    drop = graph.add_operation("extract_facts", "extract", OpKind.EXTRACTION, [dropped.id], [facts.id])
    question = Question("q1", "c1", "Who is Alice's sister?", "Eve", 1, ("D2:1",))
    case = score_case(question, "Rome", "WRONG", None)
    attribution = Attribution(case, drop.id, drop.name, "extract", ErrorType.EXTRACTION, "lost", 0.9, "lineage")
    sub = failure_subgraph(graph, case, attribution)
    ids = {n.id for n in sub.nodes}
    assert {dropped.id, drop.id, facts.id, "answer:q1@1"} <= ids
    assert "lost on the way" in sub.note


def test_max_nodes_must_be_positive():
    graph, case, _ = chain_graph(1)
    with pytest.raises(ValueError, match="max_nodes"):
        failure_subgraph(graph, case, max_nodes=0)


# ------------------------------------------------------------------ layout


def test_layout_is_deterministic_and_left_to_right():
    graph, case, middle = chain_graph(n_updates=30, n_noise=10)
    attribution = blame_on(case, middle, graph)
    first = layout(failure_subgraph(graph, case, attribution, max_nodes=25))
    again = layout(failure_subgraph(graph, case, attribution, max_nodes=25))
    assert first == again
    sub = failure_subgraph(graph, case, attribution, max_nodes=25)
    x_of = {p.id: p.x for p in first.placed}
    assert all(x_of[a] < x_of[b] for a, b in sub.edges)  # every data-flow edge points right
    boxes = {(p.x, p.y) for p in first.placed}
    assert len(boxes) == len(first.placed)  # no two nodes overlap
    assert all(p.x >= 0 and p.x + NODE_W <= first.width and p.y + NODE_H <= first.height
               for p in first.placed)


# ------------------------------------------------------------------ escaping


def data_block(page: str) -> str:
    match = re.search(rf'<script type="application/json" id="{DATA_ELEMENT_ID}">(.*?)</script>', page, re.S)
    assert match is not None
    return match.group(1)


def test_injected_markup_in_a_turn_and_an_answer_is_only_text():
    graph, case, middle = chain_graph(n_updates=2, turn_text=f"Alice: {SCRIPT} {IMG}", answer=f"{IMG} {SCRIPT}")
    attribution = blame_on(case, middle, graph)
    history = (IterationSummary(0, 0.5, 0.5, (0.4, 0.6), aggregate_blame([attribution]),
                                (CandidateSummary(("extract",), 0.6, 0.1, (0.0, 0.2), True, SCRIPT),)),)
    data = data_of(graph, case, [attribution], diagnosis=f"{IMG} lost",
                   history=history, rewrites=(Rewrite(1, ("extract",), 0.1, (0.0, 0.2), IMG, f"+{SCRIPT}"),),
                   meta={"system": IMG})
    data = ReportData(**{**data.__dict__, "title": f"run {SCRIPT}", "diagnosis_groups": (
        DiagnosisGroup("extract", "ExtractionError", 1, ("q1",), SCRIPT),)})
    page = render_report(data)
    assert "alert" in page  # the texts are there...
    assert "<img" not in page.lower()  # ...but never as markup
    assert len(re.findall(r"<script\b", page, re.I)) == 2  # the data block and the page's own script
    assert page.lower().count("</script>") == 2
    block = data_block(page)
    assert "<" not in block and ">" not in block
    payload = json.loads(block)
    failure = payload["failures"][0]
    assert failure["answer"] == f"{IMG} {SCRIPT}"
    assert payload["nodes"]["c1"]["turn:D1:1@1"][2] == f"Alice: {SCRIPT} {IMG}"
    assert "innerHTML" not in page and "eval(" not in page


def test_json_for_script_reads_back_and_cannot_close_the_block():
    text = {"a": "</script><!-- & \u2028 <b>", "b": [1, None, True]}
    encoded = json_for_script(text)
    assert "</" not in encoded and "<!--" not in encoded and "&" not in encoded
    assert json.loads(encoded) == text


def test_page_makes_no_request():
    graph, case, middle = chain_graph(n_updates=2)
    page = render_report(data_of(graph, case, [blame_on(case, middle, graph)]))
    assert "default-src 'none'" in page
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", page, re.I)
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in page


# ------------------------------------------------------------------ a real run


@pytest.fixture(scope="module")
def sim_run():
    from memtrace_loop.experiments.factory import build_memory_system, load_dataset
    from memtrace_loop.pipeline.analysis.judge import make_judge
    from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
    from memtrace_loop.pipeline.loop.runner import run_dataset

    from tests.support.sim import sim_lm

    dataset = load_dataset({"kind": "sim", "seed": 3, "n_conversations": 2, "sessions_per_conversation": 12})
    lm = sim_lm()
    system = build_memory_system({"name": "mem0"}, HashingEmbedder())
    system.set_lm(lm)
    return dataset, run_dataset(system, make_judge(lm), dataset, workers=2)


def test_report_of_a_sim_run_is_small_and_each_drawing_bounded(sim_run, tmp_path):
    dataset, result = sim_run
    path = report_for_run(result, tmp_path, conversation_by_id={c.id: c for c in dataset.conversations}, max_nodes=30)
    assert path == tmp_path / "report.html"
    page = path.read_text(encoding="utf-8")
    assert path.stat().st_size < 10_000_000
    payload = json.loads(data_block(page))
    excluded = result.report.excluded_categories
    failed = [r for r in result.results if not r.correct and r.question.category not in excluded]
    assert failed and len(payload["failures"]) == len(failed)
    drawn = [f["graph"] for f in payload["failures"]]
    assert all(g is not None and 0 < len(g["nodes"]) <= 30 for g in drawn)
    attributed = [f for f in payload["failures"] if f["attr"]]
    assert attributed  # the lineage attributor ran when none were given
    for failure in attributed:  # the blamed operation is drawn, highlighted
        roles = {n[0]: n[3] for n in failure["graph"]["nodes"]}
        assert roles.get(failure["attr"]["op"]) == Role.BLAMED
    assert "<h2>Blame per stage</h2>" in page and "Accuracy per category" in page


def test_write_report_creates_the_folder(tmp_path):
    graph, case, _ = chain_graph(n_updates=1)
    path = write_report(data_of(graph, case), tmp_path / "a" / "b" / "report.html")
    assert path.is_file() and path.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert failures_payload(data_of(graph, case))["failures"][0]["attr"] is None


def test_a_logged_report_is_redacted_like_every_text_artifact(tmp_path):
    from memtrace_loop.pipeline.tracking.redacting_tracker import RedactingTracker

    from tests.support.tracking import InMemoryTracker

    key = "sk-memtrace-LEAKCANARY-report-4242abcd"
    graph, case, middle = chain_graph(n_updates=1, turn_text=f"Alice: my key is {key}")
    path = write_report(data_of(graph, case, [blame_on(case, middle, graph)]), tmp_path / "report.html")
    inner = InMemoryTracker()
    tracker = RedactingTracker(inner, [key])
    with tracker.start_run("r") as run_id:
        tracker.log_artifact(path)
    logged = inner.runs[run_id].artifacts["report.html"]
    assert key in path.read_text(encoding="utf-8")
    assert key.encode() not in (logged if isinstance(logged, bytes) else logged.encode())
    assert b"LEAKCANARY" not in (logged if isinstance(logged, bytes) else logged.encode())
