"""What failed operations did to a score (`pipeline.loop.failure_impact`) and the one rule that ends a
run with failed LM calls (`pipeline.backends.failure_guard.failed_calls_outcome`)."""

from __future__ import annotations

import math

import pytest
from memtrace_loop.pipeline.analysis.evaluation import summarize
from memtrace_loop.pipeline.analysis.judge import score_case
from memtrace_loop.pipeline.backends.failure_guard import (
    FailedCalls,
    FailureCounts,
    FinishedWithFailedCalls,
    failed_calls_outcome,
)
from memtrace_loop.pipeline.core.conventions import verdict_name
from memtrace_loop.pipeline.core.graph import ExecutionGraph, OpKind, OpStatus
from memtrace_loop.pipeline.core.records import Question
from memtrace_loop.pipeline.loop.failure_impact import FailureImpact, failure_impact, touched_questions
from memtrace_loop.pipeline.loop.runner import LMCallCounts, RunResult


def _graph() -> ExecutionGraph:
    """Two memories, m1 built by a failed ingestion; q1 retrieves m1, q2 retrieves m2, q3's judge call
    failed, q4 (category 5, excluded) retrieves m1; the extraction of turn 2 failed (no memory: q5,
    whose evidence it is, has no path from it)."""
    graph = ExecutionGraph("c1")
    turn = graph.add_variable("turn:1", "turn", "hi")
    second = graph.add_variable("turn:2", "turn", "bye")
    facts = graph.add_variable("facts:2", "facts", "")
    graph.add_operation("extract", "extract", OpKind.EXTRACTION, [second.id], [facts.id], status=OpStatus.FAILED)
    # turn 4 became a memory; the decision on turn 5's facts, given what was retrieved, failed
    fourth, fifth = graph.add_variable("turn:4", "turn", "x"), graph.add_variable("turn:5", "turn", "y")
    m4, facts5 = graph.add_variable("memory:4", "memory", "x"), graph.add_variable("facts:5", "facts", "y")
    similar = graph.add_variable("similar:5", "retrieved", "x")
    decision = graph.add_variable("decision:5", "decision", "")
    graph.add_operation("extract", "extract", OpKind.EXTRACTION, [fourth.id], [m4.id])
    graph.add_operation("extract", "extract", OpKind.EXTRACTION, [fifth.id], [facts5.id])
    graph.add_operation("search", "search", OpKind.RETRIEVAL, [facts5.id, m4.id], [similar.id])
    graph.add_operation("decide", "decide", OpKind.UPDATE, [facts5.id, similar.id], [decision.id],
                        status=OpStatus.FAILED)
    m1 = graph.add_variable("memory:1", "memory", "")
    m2 = graph.add_variable("memory:2", "memory", "x")
    graph.add_operation("ingest", "extract", OpKind.EXTRACTION, [turn.id], [m1.id], status=OpStatus.FAILED, error="429")
    graph.add_operation("ingest", "extract", OpKind.EXTRACTION, [turn.id], [m2.id])
    for qid, memory, status in (("q1", m1, OpStatus.OK), ("q2", m2, OpStatus.OK), ("q3", m2, OpStatus.FAILED),
                                ("q4", m1, OpStatus.OK), ("q5", m2, OpStatus.OK), ("q6", m2, OpStatus.OK),
                                ("q7", m2, OpStatus.OK)):
        answer = graph.add_variable(f"answer:{qid}", "answer", "a")
        graph.add_operation("answer", "answer", OpKind.RESPONSE, [memory.id], [answer.id])
        verdict = graph.add_variable(verdict_name(qid), "verdict", "WRONG")
        graph.add_operation("llm_judge", "judge", OpKind.JUDGE, [answer.id], [verdict.id], status=status)
    return graph


EVIDENCE = {"q5": ("2",), "q6": ("4",), "q7": ("5",)}


def _result(correct: dict[str, bool]) -> RunResult:
    results = tuple(
        score_case(Question(qid, "c1", "?", "a", 5 if qid == "q4" else 1, evidence=EVIDENCE.get(qid, ())),
                   "a",
                   "CORRECT" if ok else "WRONG", None)
        for qid, ok in correct.items()
    )
    return RunResult(results, {"c1": _graph()}, summarize(results), LMCallCounts(0, 0, 0, 0, 0))


def test_questions_downstream_of_a_failed_operation_are_touched() -> None:
    result = _result({"q1": False, "q2": True, "q3": True, "q4": False, "q5": False, "q6": True, "q7": True})
    # q6: turn 4 only reached the failed decision through a retrieval, so it is not touched
    assert touched_questions(result.results, result.graph_by_conversation) == {"q1", "q3", "q4", "q5", "q7"}
    impact = failure_impact(result)  # q4's category is excluded from the overall score
    assert impact == FailureImpact(scored=6, correct=4, touched=4, touched_wrong=2)
    assert impact.accuracy == pytest.approx(4 / 6)
    assert impact.accuracy_untouched == 1.0  # q2 and q6
    assert (impact.accuracy_low, impact.accuracy_high) == (pytest.approx(2 / 6), 1.0)


def test_impacts_add_up_and_an_all_touched_score_has_no_untouched_accuracy() -> None:
    total = FailureImpact(2, 1, 2, 1) + FailureImpact(3, 3, 0, 0)
    assert total == FailureImpact(5, 4, 2, 1)
    assert math.isnan(FailureImpact(2, 1, 2, 1).accuracy_untouched)
    assert "judge_accuracy_untouched" not in FailureImpact(2, 1, 2, 1).to_dict()


def test_the_rule_a_clean_run_succeeds_a_run_with_failed_calls_exits_3_unless_allowed() -> None:
    clean = FailedCalls(FailureCounts(40, 0), {"task": 0})
    failed = FailedCalls(FailureCounts(40, 3), {"task": 2, "judge": 1, "rewriter": 0})
    assert failed_calls_outcome(clean, allowed=False) is None
    assert failed_calls_outcome(failed, allowed=True) is None
    error = failed_calls_outcome(failed, allowed=False, impact="eval: 2 of 10 touched")
    assert isinstance(error, FinishedWithFailedCalls)
    assert str(error).startswith(
        "finished with failed LM calls: 3 of 40 LM calls finally failed (7.5%; task 2, judge 1;"
    )
    assert "eval: 2 of 10 touched" in str(error) and "allow_failed_calls=true" in str(error)
    assert dict(failed.by_role) == {"task": 2, "judge": 1}
