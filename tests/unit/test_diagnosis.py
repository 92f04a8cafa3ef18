"""The diagnostic summary: pure grouping and representative cases, and the written analysis by an LM stage
(on the simulated world and on scripted LMs, an unusable reply recorded and never raised)."""

from __future__ import annotations

import json
from dataclasses import replace

import dspy
import pytest
from dspy.utils import DummyLM
from memtrace_loop.pipeline.analysis.attribution.records import Attribution, ErrorType, Tunable
from memtrace_loop.pipeline.analysis.diagnosis import (
    Diagnosis,
    case_lines,
    diagnose,
    diagnosis_from_dict,
    failure_table,
    group_failures,
)
from memtrace_loop.pipeline.core.records import CaseResult, Question, Scores
from memtrace_loop.pipeline.sim.diagnosis_handler import diagnose_failures
from memtrace_loop.pipeline.sim.protocol import StageRequest

from tests.support.sim import sim_lm


def blamed(i: int, stage: str, error: ErrorType, confidence: float = 0.8, question: str = "Where does Alice live?",
           gold: str = "Rome", answer: str = "Paris") -> Attribution:
    case = CaseResult(Question(f"c:q{i:02d}", "c", question, gold, 1, ()), answer, "WRONG", Scores(0.0, 0.0, 0.0))
    return Attribution(case, f"op:{i}", "extract_facts", stage, error, f"lost fact {i}", confidence, "lineage",
                       Tunable.PROMPT)


ATTRIBUTIONS = (
    blamed(1, "decide", ErrorType.UPDATE, 0.6),
    blamed(2, "extract", ErrorType.EXTRACTION, 0.7),
    blamed(3, "extract", ErrorType.EXTRACTION, 0.9),
    blamed(4, "extract", ErrorType.EXTRACTION, 0.7),
    blamed(5, "extract", ErrorType.EXTRACTION, 0.5),
    blamed(6, "respond", ErrorType.RESPONSE, 0.9),
    blamed(7, "decide", ErrorType.UPDATE, 0.6),
    blamed(8, "extract", ErrorType.RETRIEVAL, 0.9),
)


def test_groups_are_by_stage_and_error_type_most_failures_first_with_shares():
    groups = group_failures(ATTRIBUTIONS)
    assert [(g.stage, g.error_type, g.count) for g in groups] == [
        ("extract", "ExtractionError", 4), ("decide", "UpdateError", 2),
        ("extract", "RetrievalError", 1), ("respond", "ResponseError", 1),  # ties: by stage, then error type
    ]
    assert [g.share for g in groups] == pytest.approx([0.5, 0.25, 0.125, 0.125])
    assert sum(g.count for g in groups) == len(ATTRIBUTIONS)


def test_representatives_are_the_most_confident_ties_by_question_id():
    (top, decide, *_) = group_failures(ATTRIBUTIONS, max_cases=3)
    assert [c.question_id for c in top.cases] == ["c:q03", "c:q02", "c:q04"]  # 0.9, then 0.7 by id; 0.5 left out
    assert [c.question_id for c in decide.cases] == ["c:q01", "c:q07"]
    case = top.cases[0]
    assert (case.question, case.gold, case.answer, case.reason) == ("Where does Alice live?", "Rome", "Paris",
                                                                    "lost fact 3")
    shuffled = group_failures(tuple(reversed(ATTRIBUTIONS)), max_cases=3)
    assert shuffled == group_failures(ATTRIBUTIONS, max_cases=3)  # independent of the attributions' order


@pytest.mark.usefixtures("lm_history")  # reads `lm.history` (off in the test session)
def test_no_failures_is_an_empty_diagnosis_without_an_lm_call():
    lm = DummyLM([])  # any call would fail
    diagnosis = diagnose((), lm)
    assert diagnosis == Diagnosis() and diagnosis.ok and diagnosis.groups == ()
    assert lm.history == []
    assert "nothing to diagnose" in diagnosis.headline()


@pytest.mark.usefixtures("lm_history")  # reads `lm.history` (off in the test session)
def test_the_sim_world_writes_an_analysis_from_the_table_it_is_given():
    lm = sim_lm()
    diagnosis = diagnose(ATTRIBUTIONS, lm)
    assert diagnosis.ok and diagnosis.error == ""
    assert diagnosis.failures == 8 and len(diagnosis.groups) == 4
    text = diagnosis.analysis
    assert "extract stage with ExtractionError: 4 of 8" in text
    assert "Next is decide with UpdateError (2)" in text
    assert "c:q03" in text and "lost fact 3" in text  # the cited case is the group's first representative
    assert len(lm.history) == 1
    # the request carried the table and the cases: the LM saw nothing else
    prompt = json.dumps(lm.history[0]["messages"])
    assert "| extract | ExtractionError | 4 | 50% |" in prompt and "c:q03" in prompt


def test_the_sim_answer_follows_the_request_text_only():
    groups = group_failures([blamed(1, "respond", ErrorType.RESPONSE), blamed(2, "respond", ErrorType.RESPONSE),
                             blamed(3, "decide", ErrorType.DELETION)])
    shown = {"failure_table": failure_table(groups), "representative_cases": case_lines(groups)}
    request = StageRequest("", inputs=shown)
    text = diagnose_failures(request)["analysis"]
    assert "respond stage with ResponseError: 2 of 3" in text and "(67%)" in text
    assert "c:q01" in text and "Next is decide with DeletionError (1)" in text
    quoting = group_failures([blamed(4, "extract", ErrorType.EXTRACTION, answer="Paris")])
    quoting = (replace(quoting[0], cases=(replace(quoting[0].cases[0], reason='it lost the answer "Rome"'),)),)
    cited = diagnose_failures(StageRequest("", inputs={"failure_table": failure_table(quoting),
                                                       "representative_cases": case_lines(quoting)}))["analysis"]
    assert 'got "Paris"' in cited and 'lost the answer "Rome"' in cited  # the case's answer, not the reason's quote
    unreadable = diagnose_failures(StageRequest("", inputs={"failure_table": "nothing here"}))["analysis"]
    assert "no rows" in unreadable


def test_a_scripted_answer_is_used_as_is():
    diagnosis = diagnose(ATTRIBUTIONS, DummyLM([{"analysis": "  Extraction drops facts.  "}]))
    assert diagnosis.ok and diagnosis.analysis == "Extraction drops facts."
    assert diagnosis.headline() == "Extraction drops facts."


@pytest.mark.parametrize(
    "lm,why",
    [(DummyLM([{"verdict": "no analysis field"}] * 4), "AdapterParseError"), (DummyLM([]), "Error"),
     (DummyLM([{"analysis": "   "}] * 2), "no analysis")],
    ids=["unparsable", "failing", "empty"],
)
def test_an_unusable_reply_is_recorded_not_raised_and_the_groups_remain(lm: dspy.BaseLM, why: str):
    diagnosis = diagnose(ATTRIBUTIONS, lm)
    assert not diagnosis.ok and diagnosis.analysis == "" and why in diagnosis.error
    assert [g.count for g in diagnosis.groups] == [4, 2, 1, 1]
    assert diagnosis.headline().startswith("The written analysis is missing")
    assert "| extract | ExtractionError | 4 | 50% |" in diagnosis.markdown()


def test_without_an_lm_the_analysis_is_missing():
    diagnosis = diagnose(ATTRIBUTIONS, None)
    assert not diagnosis.ok and "no LM" in diagnosis.error and diagnosis.failures == 8


def test_the_json_form_reads_back_and_the_markdown_escapes_table_cells():
    diagnosis = diagnose([blamed(1, "extract", ErrorType.EXTRACTION, answer="a | b")], DummyLM([{"analysis": "x"}]))
    assert diagnosis_from_dict(json.loads(json.dumps(diagnosis.to_dict()))) == diagnosis
    assert "a \\| b" in diagnosis.markdown()
