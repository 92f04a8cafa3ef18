"""The simulated rewriter: through real DSPy calls on the sim LM, and its pure functions."""

from __future__ import annotations

import dspy
import pytest
from memtrace_loop.memory_systems.signatures import AnswerQuestion, DecideUpdates, ExtractFacts
from memtrace_loop.optimizers.feedback import FailureFeedback, feedback_without_attribution, fold_feedback
from memtrace_loop.optimizers.rewrite import InstructionRewriter
from memtrace_loop.pipeline.core.records import CaseResult, Question, Scores
from memtrace_loop.pipeline.sim import stand_in
from memtrace_loop.pipeline.sim.rewriter import diagnosis_text, rewrite, target_stage
from memtrace_loop.pipeline.sim.rules import RULES_BY_ID, rules_in, with_rules

from tests.support.sim import sim_lm

EXTRACT = ExtractFacts.instructions
DECIDE = DecideUpdates.instructions
ANSWER = AnswerQuestion.instructions
DATE_DIAGNOSIS = (
    "turn D1:3 says Alice hiked 'last Saturday', but extract_facts wrote facts:D1:3@1 without it: "
    "the relative date was lost, so no memory holds when it happened."
)


@pytest.fixture(scope="module")
def lm() -> dspy.LM:
    return sim_lm()


def block(diagnosis: str, question: str = "When did Alice go hiking?", error: str = "ExtractionError") -> str:
    return FailureFeedback(
        question_id="q1",
        question=question,
        gold="6 May 2023",
        answer="Alice went hiking.",
        error_type=error,
        op_name="extract_facts",
        diagnosis=diagnosis,
    ).render()


def case(text: str, qid: str) -> CaseResult:
    question = Question(qid, "c1", text, "6 May 2023", 2)
    return CaseResult(question, "Alice went hiking.", "WRONG", Scores(0.0, 0.0, 0.0))


# ---------------------------------------------------------------------------------------------- via DSPy


def test_date_diagnosis_adds_resolve_dates_to_extract(lm: dspy.LM) -> None:
    outcome = InstructionRewriter(lm, 2000).rewrite("extract", "turn -> facts", EXTRACT, block(DATE_DIAGNOSIS))
    assert outcome.ok and outcome.error is None and not outcome.length_retry
    assert "resolve_dates" in rules_in(outcome.instruction)
    assert RULES_BY_ID["resolve_dates"].sentence in outcome.instruction
    assert outcome.instruction.startswith(EXTRACT.strip())  # what was there is kept
    assert rules_in(outcome.instruction).isdisjoint({"newest_wins", "keep_compatible", "use_dates", "abstain"})


def test_date_diagnosis_without_the_word_relative_adds_exactly_resolve_dates(lm: dspy.LM) -> None:
    diagnosis = "extract_facts dropped the date of the hike from facts:D1:3@1; the time of the event is gone."
    outcome = InstructionRewriter(lm, 2000).rewrite("extract", "turn -> facts", EXTRACT, block(diagnosis))
    assert rules_in(outcome.instruction) == {"resolve_dates"}


def test_uniform_feedback_adds_nothing(lm: dspy.LM) -> None:
    cases = [case("When did Alice go hiking last Saturday?", "q1"), case("What date did Bob move?", "q2")]
    feedback = fold_feedback([feedback_without_attribution(c) for c in cases], 4000)
    assert "When did Alice" in feedback  # keywords in questions are there, but not in any diagnosis
    for stage, signature, current in (
        ("extract", "turn -> facts", EXTRACT),
        ("decide", "existing_memories, new_facts -> actions", DECIDE),
        ("respond", "context, question -> answer", ANSWER),
    ):
        outcome = InstructionRewriter(lm, 2000).rewrite(stage, signature, current, feedback)
        assert outcome.instruction == current.strip()
        assert rules_in(outcome.instruction) == frozenset()


def test_date_diagnosis_adds_nothing_to_decide(lm: dspy.LM) -> None:
    signature = "existing_memories, new_facts -> actions"
    outcome = InstructionRewriter(lm, 2000).rewrite("decide", signature, DECIDE, block(DATE_DIAGNOSIS))
    assert outcome.instruction == DECIDE.strip()


def test_stage_comes_from_the_signature_outputs_not_the_name(lm: dspy.LM) -> None:
    diagnosis = "question_answering saw the memory's date but answered without it."
    rewriter = InstructionRewriter(lm, 2000)
    outcome = rewriter.rewrite("respond", "context, question -> answer", ANSWER, block(diagnosis))
    assert rules_in(outcome.instruction) == {"use_dates"}


def test_max_chars_is_respected_in_catalog_order(lm: dspy.LM) -> None:
    both = "the relative date and the facts about her sister were lost"  # points resolve_dates and third_party
    first_only = len(with_rules(EXTRACT, ["resolve_dates"]))
    outcome = InstructionRewriter(lm, first_only).rewrite("extract", "turn -> facts", EXTRACT, block(both))
    assert rules_in(outcome.instruction) == {"resolve_dates"}
    assert len(outcome.instruction) <= first_only
    roomy = InstructionRewriter(lm, 2000).rewrite("extract", "turn -> facts", EXTRACT, block(both))
    assert rules_in(roomy.instruction) == {"resolve_dates", "third_party"}


def test_rewriter_is_registered_for_new_instruction() -> None:
    assert frozenset({"new_instruction"}) in stand_in.HANDLER_BY_OUTPUTS


# ---------------------------------------------------------------------------------------------- pure parts


def test_only_diagnosis_lines_count() -> None:
    feedback = block("the answer was unrelated.", question="When did Alice move? What date?")
    assert diagnosis_text(feedback) == "the answer was unrelated."
    assert rewrite(EXTRACT, feedback, "extract", 2000) == EXTRACT
    assert rewrite(EXTRACT, "Note: the relative date was lost", "extract", 2000) == EXTRACT


def test_nothing_fits_returns_the_instruction_unchanged() -> None:
    assert rewrite(EXTRACT, block(DATE_DIAGNOSIS), "extract", len(EXTRACT) + 10) == EXTRACT


def test_rules_already_stated_are_not_added_again() -> None:
    current = with_rules(EXTRACT, ["resolve_dates"])
    assert rewrite(current, block("the date was lost"), "extract", 2000) == current


def test_target_stage() -> None:
    assert target_stage("turn -> facts") == "extract"
    assert target_stage("context: str, question: str -> reasoning, answer: str") == "answer"
    assert target_stage("", "decide") == "decide"
    assert target_stage("a -> unknown_field", "respond") is None
    assert rewrite(EXTRACT, block(DATE_DIAGNOSIS), None, 2000) == EXTRACT


def test_deterministic() -> None:
    feedback = block(DATE_DIAGNOSIS) + "\n\n" + block("facts about his coworker were skipped")
    assert rewrite(EXTRACT, feedback, "extract", 2000) == rewrite(EXTRACT, feedback, "extract", 2000)
