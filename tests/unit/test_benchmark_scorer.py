"""The attribution benchmark's scorer on hand-made cases: every score from a known set of verdicts."""

from __future__ import annotations

import itertools
import math

from memtrace_loop.experiments.lab.benchmark.scoring import (
    BenchCase,
    FaultKind,
    InjectedFault,
    adjacent,
    attribute_cases,
    compare,
    score_attributor,
    summarize,
)
from memtrace_loop.pipeline.analysis.attribution.records import Attribution, AttributionCost, Check, ErrorType
from memtrace_loop.pipeline.core.conventions import OpKind
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.records import CaseResult, Question, Scores


def chain_graph() -> tuple[ExecutionGraph, list[str]]:
    """turn -> extract -> facts -> decide -> decision -> store -> memory -> retrieve -> context -> respond."""
    graph = ExecutionGraph("c1")
    turn = graph.add_variable("turn:D1:1", "turn", "Alice: I moved to Paris.")
    ops = []
    current = turn.id
    for name, stage, kind, out in (
        ("extract_facts", "extract", OpKind.EXTRACTION, "facts:D1:1"),
        ("decide_updates", "decide", OpKind.UPDATE, "decision:D1:1"),
        ("memory_add", "store", OpKind.EXTRACTION, "memory:m1"),
        ("retrieve_memories", "retrieve", OpKind.RETRIEVAL, "retrieved:q"),
        ("question_answering", "respond", OpKind.RESPONSE, "answer:q"),
    ):
        variable = graph.add_variable(out, "x", "v")
        ops.append(graph.add_operation(name, stage, kind, inputs=(current,), outputs=(variable.id,)).id)
        current = variable.id
    return graph, ops


def failed_case(qid: str) -> CaseResult:
    return CaseResult(Question(qid, "c1", "Where?", "Paris", 4, ("D1:1",)), "Rome", "WRONG", Scores(0.0, 0.0, 0.0))


def attribution(case: CaseResult, graph: ExecutionGraph, op: str, error: ErrorType, verified=None, calls=0):
    operation = graph.operation(op)
    return Attribution(
        case, op, operation.name, operation.stage, error, "r", 1.0, "hand", check=Check.of(verified),
        cost=AttributionCost(lm_calls=calls, replay_calls=1 if verified is not None else 0),
    )


class Scripted:
    """An attributor that answers from a table (question id -> attribution or None)."""

    name = "scripted"

    def __init__(self, by_question):
        self.by_question = by_question

    def attribute(self, graph, case, conversation=None):
        return self.by_question[case.question.id]


def test_adjacency_is_one_shared_variable_or_the_same_operation():
    graph, ops = chain_graph()
    assert adjacent(graph, ops[0], ops[0])
    assert adjacent(graph, ops[0], ops[1]) and adjacent(graph, ops[1], ops[0])
    assert not adjacent(graph, ops[0], ops[2])
    assert not adjacent(graph, ops[0], "op:missing")


def test_scores_count_each_criterion_over_hand_made_cases():
    graph, ops = chain_graph()
    extract, decide, store, retrieve, respond = ops
    truths = [
        InjectedFault("q1", "mem0", FaultKind.EXTRACTION_DROP, extract, "extract", ErrorType.EXTRACTION),
        InjectedFault("q2", "mem0", FaultKind.UPDATE_OVERWRITE, decide, "decide", ErrorType.UPDATE),
        InjectedFault("q3", "mem0", FaultKind.RETRIEVAL_MISS, retrieve, "retrieve", ErrorType.RETRIEVAL),
        InjectedFault("q4", "mem0", FaultKind.RESPONSE_WRONG, respond, "respond", ErrorType.RESPONSE),
    ]
    cases = [BenchCase(graph, failed_case(t.question_id), None, t) for t in truths]
    by_question = {
        # exact, verified right
        "q1": attribution(cases[0].case, graph, extract, ErrorType.EXTRACTION, verified=True, calls=2),
        # one hop away (decide -> store), right type, wrong stage; verified, so a wrong verified blame
        "q2": attribution(cases[1].case, graph, store, ErrorType.UPDATE, verified=True),
        # wrong type and two hops away, refuted
        "q3": attribution(cases[2].case, graph, decide, ErrorType.EXTRACTION, verified=False),
        "q4": None,
    }
    ticks = itertools.count()
    score = score_attributor(Scripted(by_question), cases, "mem0", clock=lambda: float(next(ticks)))
    assert score.n == 4 and score.attributor == "scripted"
    assert score.error_type_accuracy == 0.5  # q1, q2
    assert score.stage_accuracy == 0.25  # q1
    assert score.op_accuracy == 0.25  # q1
    assert score.within_one_hop == 0.5  # q1 (equal), q2 (adjacent)
    assert score.unattributed == 0.25
    assert score.verified == 0.5
    assert score.verified_precision == 0.5  # q1 right, q2 neither exact op nor stage+type
    assert score.lm_calls_per_case == (3 + 1 + 1 + 0) / 4
    assert score.ms_per_case == 1000.0  # each call took one tick of the fake clock
    assert score.op_accuracy_by_kind == {"extraction_drop": 1.0, "update_overwrite": 0.0, "retrieval_miss": 0.0,
                                         "response_wrong": 0.0}
    row = score.as_row()
    assert row["op_acc"] == 0.25 and row["verified_precision"] == 0.5 and row["system"] == "mem0"


def test_right_stage_and_type_counts_for_verified_precision_even_on_another_operation():
    graph, ops = chain_graph()
    truth = InjectedFault("q1", "mem0", FaultKind.DELETION, ops[1], "decide", ErrorType.DELETION)
    case = BenchCase(graph, failed_case("q1"), None, truth)
    twin = graph.copy()
    other = twin.add_operation("decide_updates", "decide", OpKind.UPDATE, inputs=(), outputs=()).id
    scored = compare(BenchCase(twin, case.case, None, truth),
                     attribution(case.case, twin, other, ErrorType.DELETION, verified=True))
    assert scored.right and not scored.op_ok
    assert summarize("mem0", "x", [scored]).verified_precision == 1.0


def test_nothing_verified_and_no_cases():
    graph, ops = chain_graph()
    truth = InjectedFault("q1", "mem0", FaultKind.RESPONSE_WRONG, ops[-1], "respond", ErrorType.RESPONSE)
    case = BenchCase(graph, failed_case("q1"), None, truth)
    scores = attribute_cases(Scripted({"q1": attribution(case.case, graph, ops[-1], ErrorType.RESPONSE)}), [case])
    summary = summarize("mem0", "x", scores)
    assert summary.op_accuracy == 1.0 and summary.verified == 0.0 and summary.verified_precision is None
    empty = summarize("rag", "x", [])
    assert empty.n == 0 and empty.op_accuracy == 0.0 and empty.as_row()["verified_precision"] is None
    assert not math.isnan(empty.ms_per_case)
