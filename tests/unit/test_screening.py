"""Candidate screening: which dev questions a candidate is screened on (failures on its stages' paths, a
seeded guard of correct ones), and the screen's verdict (an optimistic whole-dev estimate against the
gate's min_gain); what candidates cost, from a run's history."""

from __future__ import annotations

import doctest
import math

import pytest
from memtrace_loop.pipeline.analysis.blame import BlameTable
from memtrace_loop.pipeline.analysis.evaluation import paired_difference
from memtrace_loop.pipeline.core.conventions import OpKind, VarKind
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.records import CaseResult, Question, Scores
from memtrace_loop.pipeline.loop import costs, screening
from memtrace_loop.pipeline.loop.costs import calls_to_gain, candidate_costs
from memtrace_loop.pipeline.loop.screening import (
    Screen,
    ScreenSettings,
    build_screen,
    estimated_results,
    guard_size,
    reachable,
    screen_verdict,
    stages_on_path,
)
from memtrace_loop.pipeline.loop.summaries import CandidateSummary, IterationSummary


def _graph() -> ExecutionGraph:
    """D1:1 is extracted into m1, which answers q1; D1:2 is read by an extraction that writes nothing
    (q2's evidence, never stored), q2 is answered from m1 anyway."""
    g = ExecutionGraph("c1")
    t1 = g.add_variable("turn:D1:1", VarKind.TURN, "Ada: I moved to Paris.").id
    t2 = g.add_variable("turn:D1:2", VarKind.TURN, "Ada: I adopted a cat.").id
    m1 = g.add_variable("memory:m1", VarKind.MEMORY, "Ada moved to Paris.").id
    g.add_operation("extract", "extract", OpKind.EXTRACTION, [t1], [m1])
    none = g.add_variable("facts:D1:2", VarKind.FACTS, "[]").id
    g.add_operation("extract", "extract", OpKind.EXTRACTION, [t2], [none])
    for q in ("q1", "q2"):
        ctx = g.add_variable(f"retrieved:{q}", VarKind.RETRIEVED, "Ada moved to Paris.").id
        g.add_operation("search", "retrieve", OpKind.RETRIEVAL, [m1], [ctx])
        answer = g.add_variable(f"answer:{q}", VarKind.ANSWER, "Paris").id
        g.add_operation("answer", "respond", OpKind.RESPONSE, [ctx], [answer])
        verdict = g.add_variable(f"verdict:{q}", VarKind.VERDICT, "WRONG").id
        g.add_operation("judge", "judge", OpKind.JUDGE, [answer], [verdict])
    return g


def test_the_path_holds_the_answers_ancestry_and_the_stages_that_read_its_evidence():
    g = _graph()
    assert stages_on_path(g, "q1") == {"extract", "retrieve", "respond"}  # the judge is not on it
    no_extract = ExecutionGraph("c2")
    ctx = no_extract.add_variable("retrieved:q3", VarKind.RETRIEVED, "").id
    answer = no_extract.add_variable("answer:q3", VarKind.ANSWER, "I don't know").id
    no_extract.add_operation("answer", "respond", OpKind.RESPONSE, [ctx], [answer])
    assert stages_on_path(no_extract, "q3") == {"respond"}
    assert stages_on_path(no_extract, "q9") == frozenset()  # never answered in this graph


def test_a_fact_never_written_still_puts_its_extraction_on_the_path():
    g = ExecutionGraph("c1")
    turn = g.add_variable("turn:D1:2", VarKind.TURN, "Ada: I adopted a cat.").id
    g.add_operation("extract", "decide", OpKind.UPDATE, [turn], [g.add_variable("facts:D1:2", VarKind.FACTS, "[]").id])
    ctx = g.add_variable("retrieved:q2", VarKind.RETRIEVED, "").id
    g.add_operation("answer", "respond", OpKind.RESPONSE, [ctx], [g.add_variable("answer:q2", VarKind.ANSWER, "?").id])
    assert stages_on_path(g, "q2") == {"respond"}
    assert stages_on_path(g, "q2", evidence=["D1:2"]) == {"respond", "decide"}


def _case(qid: str, correct: bool, conversation: str = "c1", category: int = 1) -> CaseResult:
    question = Question(qid, conversation, f"question {qid}?", "gold", category, ("D1:1",))
    verdict = "CORRECT" if correct else "WRONG"
    return CaseResult(question, "answer", verdict, Scores(float(correct), 0.0, 0.0))


def test_the_screen_takes_failures_on_the_candidates_path_and_a_seeded_guard():
    g = _graph()
    incumbent = [_case("q1", False), _case("q2", False), _case("q3", False, "c2"),
                 *(_case(f"ok{i}", True) for i in range(12)), _case("adv", False, category=5)]
    other = ExecutionGraph("c2")
    ctx = other.add_variable("retrieved:q3", VarKind.RETRIEVED, "").id
    other.add_operation("answer", "respond", OpKind.RESPONSE, [ctx], [other.add_variable("answer:q3", VarKind.ANSWER,
                                                                                           "?").id])
    graphs = {"c1": g, "c2": other}
    settings = ScreenSettings(guard_fraction=0.25, min_guard=2)
    extract = build_screen(incumbent, graphs, ["extract"], settings, seed=3)
    assert extract.failures == ("q1", "q2")  # q3's path has no extraction; the excluded category is never taken
    respond = build_screen(incumbent, graphs, ["respond"], settings, seed=3)
    assert respond.failures == ("q1", "q2", "q3")
    assert build_screen(incumbent, graphs, [], settings, seed=3).failures == ("q1", "q2", "q3")  # any stage
    assert len(extract.guard) == guard_size(12, settings) == 3 and set(extract.guard) <= {f"ok{i}" for i in range(12)}
    assert extract.guard == respond.guard  # one fixed sample per seed ...
    assert build_screen(incumbent, graphs, ["extract"], settings, seed=4).guard != extract.guard  # ... seeded
    # a failure whose conversation has no graph is kept: nothing says it is off the path
    assert build_screen(incumbent, {}, ["extract"], settings, seed=3).failures == ("q1", "q2", "q3")


def test_the_verdict_estimates_the_whole_dev_gain_with_the_rest_unchanged():
    incumbent = [_case("f1", False), _case("f2", False), _case("g1", True), *(_case(f"ok{i}", True) for i in range(7))]
    screen = Screen(("respond",), ("f1", "f2"), ("g1",))
    fixed_one = [_case("f1", True), _case("f2", False), _case("g1", True)]
    verdict = screen_verdict(screen, fixed_one, incumbent, min_gain=0.05)
    assert (verdict.questions, verdict.fixed, verdict.broken) == (3, 1, 0)
    assert verdict.estimate.n == 10 and math.isclose(verdict.estimate.mean_difference, 0.1)
    expected = paired_difference(estimated_results(fixed_one, incumbent), incumbent)
    assert verdict.estimate == expected and verdict.passed
    assert not screen_verdict(screen, fixed_one, incumbent, min_gain=0.15).passed  # one fix of ten: 0.1
    breaks = [_case("f1", True), _case("f2", False), _case("g1", False)]  # one fixed, one broken: no gain
    broken = screen_verdict(screen, breaks, incumbent, min_gain=0.05)
    assert (broken.fixed, broken.broken, broken.estimate.mean_difference, broken.passed) == (1, 1, 0.0, False)


def test_a_candidate_that_could_not_reach_min_gain_fixing_everything_is_not_run():
    assert reachable(Screen((), ("f1",), ()), 50, 0.02)
    assert not reachable(Screen((), (), ("g1",)), 50, 0.02)  # nothing to fix
    assert not reachable(Screen((), ("f1",), ()), 100, 0.02)  # one fix of 100 stays below 2 points
    assert not reachable(Screen((), ("f1",), ()), 0, 0.0)


def test_screen_settings_refuse_impossible_values():
    with pytest.raises(ValueError, match="guard_fraction"):
        ScreenSettings(guard_fraction=1.5)


def _candidate(accepted: bool, screened_out: bool, screen: int, full: int, audit: float | None = None):
    return CandidateSummary(("respond",), 0.5, 0.0, (0.0, 0.0), accepted, "", screened_out=screened_out,
                            screen_calls=screen, full_calls=full, audit_gain=audit)


def test_candidate_costs_and_calls_to_ninety_percent_of_the_gain_come_from_the_history():
    history = (
        IterationSummary(0, 0.5, 0.50, (0, 1), BlameTable(), (), 800),
        IterationSummary(1, 0.5, 0.50, (0, 1), BlameTable(),
                         (_candidate(False, True, 20, 0, audit=0.04), _candidate(True, False, 200, 50)), 1200),
        IterationSummary(2, 0.5, 0.80, (0, 1), BlameTable(), (_candidate(False, True, 0, 0, audit=0.0),), 1300),
    )
    costs = candidate_costs(history, min_gain=0.02)
    assert (costs.candidates, costs.screened_out, costs.accepted) == (3, 2, 1)
    assert (costs.screen_calls, costs.full_calls, costs.per_candidate, costs.per_accepted) == (220, 50, 90, 270)
    assert (costs.audited, costs.audit_would_pass) == (2, 1)
    assert calls_to_gain(history, dev_final=0.80) == 1200  # the gain came with iteration 1's acceptance
    assert calls_to_gain(history, dev_final=0.50) is None  # no gain, nothing to reach
    assert math.isnan(candidate_costs(history[:1]).per_candidate)


@pytest.mark.parametrize("module", [screening, costs])
def test_the_worked_examples_in_the_module_docs_hold(module):
    failures, tried = doctest.testmod(module)
    assert tried >= 2 and failures == 0
