"""What failed operations did to a score (`pipeline.loop.failure_impact`) and the one rule that ends a
run with failed LM calls (`pipeline.backends.failure_guard.failed_calls_outcome`)."""

from __future__ import annotations

import math

import pytest
from memtrace_loop.pipeline.analysis.evaluation import score_case, summarize
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
    failed, q4 (category 5, excluded) retrieves m1."""
    graph = ExecutionGraph("c1")
    turn = graph.add_variable("turn:1", "turn", "hi")
    m1 = graph.add_variable("memory:1", "memory", "")
    m2 = graph.add_variable("memory:2", "memory", "x")
    graph.add_operation("ingest", "extract", OpKind.EXTRACTION, [turn.id], [m1.id], status=OpStatus.FAILED, error="429")
    graph.add_operation("ingest", "extract", OpKind.EXTRACTION, [turn.id], [m2.id])
    for qid, memory, status in (("q1", m1, OpStatus.OK), ("q2", m2, OpStatus.OK), ("q3", m2, OpStatus.FAILED),
                                ("q4", m1, OpStatus.OK)):
        answer = graph.add_variable(f"answer:{qid}", "answer", "a")
        graph.add_operation("answer", "answer", OpKind.RESPONSE, [memory.id], [answer.id])
        verdict = graph.add_variable(verdict_name(qid), "verdict", "WRONG")
        graph.add_operation("llm_judge", "judge", OpKind.JUDGE, [answer.id], [verdict.id], status=status)
    return graph


def _result(correct: dict[str, bool]) -> RunResult:
    results = tuple(
        score_case(Question(qid, "c1", "?", "a", 5 if qid == "q4" else 1), "a",
                   "CORRECT" if ok else "WRONG", None)
        for qid, ok in correct.items()
    )
    return RunResult(results, {"c1": _graph()}, summarize(results), LMCallCounts(0, 0, 0, 0, 0))


def test_questions_downstream_of_a_failed_operation_are_touched() -> None:
    result = _result({"q1": False, "q2": True, "q3": True, "q4": False})
    assert touched_questions(result.results, result.graph_by_conversation) == {"q1", "q3", "q4"}
    impact = failure_impact(result)  # q4's category is excluded from the overall score
    assert impact == FailureImpact(scored=3, correct=2, touched=2, touched_wrong=1)
    assert impact.accuracy == pytest.approx(2 / 3)
    assert impact.accuracy_untouched == 1.0  # q2 alone
    assert (impact.accuracy_low, impact.accuracy_high) == (pytest.approx(1 / 3), 1.0)


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
