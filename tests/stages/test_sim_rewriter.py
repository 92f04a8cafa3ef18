"""The simulated rewriter: guesses from symptoms, misfires, narrowing by diagnoses, and a vocabulary not
copied from the attributor. Through real DSPy calls on the sim LM and through its pure functions."""

from __future__ import annotations

import ast
import re
from itertools import pairwise
from pathlib import Path

import dspy
import pytest
from memtrace_loop.memory_systems.signatures import AnswerQuestion, DecideUpdates, ExtractFacts
from memtrace_loop.optimizers.feedback import OTHER_STAGE_DIAGNOSIS, FailureFeedback
from memtrace_loop.optimizers.rewrite import InstructionRewriter
from memtrace_loop.pipeline.sim import stand_in
from memtrace_loop.pipeline.sim.handlers import NOT_MENTIONED, answer_question
from memtrace_loop.pipeline.sim.judge import is_correct
from memtrace_loop.pipeline.sim.rewriter import rewrite, target_stage
from memtrace_loop.pipeline.sim.rules import RULES, RULES_BY_ID, RuleEffect, rules_in, with_rules
from memtrace_loop.pipeline.sim.symptoms import Block, guesses, parse_blocks, symptom_guesses

from tests.support.paths import REPO
from tests.support.sim import sim_dataset, sim_lm

EXTRACT = ExtractFacts.instructions
DECIDE = DecideUpdates.instructions
ANSWER = AnswerQuestion.instructions
NO_ATTRIBUTION = "the final answer was wrong; no attribution was made, so this failure is sent to every stage."
WHEN = {"question": "When did Alice go hiking?", "gold": "6 May 2023", "answer": "Alice went hiking.",
        "category": "2 (temporal)"}
SISTER = {"question": "Where does Alice's sister work?", "gold": "Acme", "answer": "Globex",
          "category": "4 (single-hop)"}
LOST = {"question": "What is Bob's job?", "gold": "nurse", "answer": NOT_MENTIONED, "category": "4 (single-hop)"}
MOVED = {"question": "Where does Bob live?", "gold": "Paris", "answer": "Berlin", "category": "4 (single-hop)"}
PARTIAL = {"question": "What hobbies does Nora have?", "gold": "pottery and painting", "answer": "painting",
           "category": "1 (multi-hop)"}
TRAP = {"question": "What is Olga's dog called?", "gold": "Not mentioned in the conversation", "answer": "Biscuit",
        "category": "5 (adversarial)"}


def block(symptom: dict[str, str], error: str = "Unattributed", op: str = "", diagnosis: str = NO_ATTRIBUTION) -> str:
    return FailureFeedback(
        question_id="q1", question=symptom["question"], gold=symptom["gold"], answer=symptom["answer"],
        error_type=error, op_name=op, diagnosis=diagnosis, category=symptom["category"],
    ).render()


def added(current: str, feedback: str, stage: str) -> frozenset[str]:
    return rules_in(rewrite(current, feedback, stage, 4000)) - rules_in(current)


@pytest.fixture(scope="module")
def lm() -> dspy.LM:
    return sim_lm()


# ---------------------------------------------------------------------------------------------- symptoms


@pytest.mark.parametrize(
    ("symptom", "wanted"),
    [
        (WHEN, {"extract": {"resolve_dates"}, "decide": set(), "answer": {"use_dates", "one_answer"},
                "write_events": {"event_dates"}, "expand_queries": set()}),
        (SISTER, {"extract": {"third_party"}, "decide": {"newest_wins"}, "answer": set(),
                  "write_events": {"event_third_party"}, "expand_queries": {"expand_related"}}),
        (LOST, {"extract": {"complete_facts"}, "decide": {"keep_compatible"}, "answer": {"best_guess"},
                "write_events": set(), "expand_queries": set()}),
        (MOVED, {"extract": set(), "decide": {"newest_wins"}, "answer": set()}),
        (PARTIAL, {"extract": set(), "decide": {"keep_compatible"}, "answer": set()}),
        (TRAP, {"extract": set(), "decide": set(), "answer": {"abstain"}}),
    ],
    ids=["when", "relative", "lost-fact", "other-value", "partial-list", "gold-abstains"],
)
def test_unattributed_block_adds_the_guesses_of_the_stage_being_rewritten(symptom, wanted) -> None:
    feedback = block(symptom)
    for stage, rules in wanted.items():
        assert added("", feedback, stage) == rules, stage


def test_category_alone_marks_a_temporal_question() -> None:
    plain = {"question": "What did Alice do on the trip?", "gold": "hiking", "answer": "hiking boots",
             "category": "4 (single-hop)"}
    assert "use_dates" not in symptom_guesses(parse_blocks(block(plain))[0])
    assert "use_dates" in symptom_guesses(parse_blocks(block(plain | {"category": "2 (temporal)"}))[0])


def test_blocks_are_read_from_folded_and_markdown_text() -> None:
    text = "ExtractionError (2 failures):\n\n" + block(WHEN) + "\n\n## Feedback\n" + block(MOVED) + "\n... and 3 more"
    blocks = parse_blocks(text)
    assert [b.question for b in blocks] == [WHEN["question"], MOVED["question"]]
    assert blocks[0].category_number == 2 and blocks[0].error_type is None


def test_most_suggested_rules_come_first_within_the_budget() -> None:
    feedback = "\n\n".join([block(WHEN), block(WHEN | {"question": "When did Bob move?"}), block(LOST)])
    only_one = len(with_rules(ANSWER, ["use_dates"]))
    assert rules_in(rewrite(ANSWER, feedback, "answer", only_one)) == {"use_dates"}  # 2 votes beat 1
    assert rules_in(rewrite(ANSWER, feedback, "answer", 4000)) == {"use_dates", "one_answer", "best_guess"}
    assert rewrite(ANSWER, feedback, "answer", len(ANSWER) + 10) == ANSWER  # nothing fits


# ---------------------------------------------------------------------------------------------- diagnoses narrow


def test_a_diagnosis_drops_the_misfire_a_bare_symptom_suggests() -> None:
    diagnosed = block(WHEN, "ResponseError", "question_answering", "it replied without the date the memory had.")
    assert added(ANSWER, diagnosed, "answer") == {"use_dates"}
    assert added(ANSWER, block(WHEN), "answer") == {"use_dates", "one_answer"}


def test_the_error_type_keeps_only_consistent_guesses() -> None:
    extraction = block(WHEN, "ExtractionError", "extract_facts", "nothing derived from turn D1:3 carries it.")
    assert added(ANSWER, extraction, "answer") == frozenset()  # the fix is upstream of the answer
    assert added(EXTRACT, extraction, "extract") == {"resolve_dates"}
    assert added(DECIDE, extraction, "decide") == frozenset()


def test_a_precise_diagnosis_is_trusted_over_the_symptoms() -> None:
    update = block(WHEN, "UpdateError", "decide_updates", "the newest value was dropped by the update step.")
    assert guesses(parse_blocks(update)[0]) == ("newest_wins",)
    assert added(DECIDE, update, "decide") == {"newest_wins"}


def test_a_block_traced_to_another_stage_yields_nothing() -> None:
    elsewhere = block(WHEN, "ExtractionError", "extract_facts", OTHER_STAGE_DIAGNOSIS.format(stage="extract"))
    assert parse_blocks(elsewhere)[0].elsewhere
    for current, stage in ((EXTRACT, "extract"), (ANSWER, "answer")):
        assert rewrite(current, elsewhere, stage, 4000) == current


def test_unknown_stage_and_rules_already_stated() -> None:
    assert rewrite(EXTRACT, block(WHEN), None, 4000) == EXTRACT
    current = with_rules(EXTRACT, ["resolve_dates"])
    assert rewrite(current, block(WHEN), "extract", 4000) == current
    assert rewrite(EXTRACT, block(WHEN), "extract", 4000) == rewrite(EXTRACT, block(WHEN), "extract", 4000)


# ---------------------------------------------------------------------------------------------- misfires


def test_misfires_and_noise_are_in_the_catalog() -> None:
    effects = {rule.effect for rule in RULES}
    assert {RuleEffect.FIX, RuleEffect.MISFIRE, RuleEffect.NOISE} <= effects
    assert RULES_BY_ID["one_answer"].stage == "answer" and RULES_BY_ID["one_answer"].effect == RuleEffect.MISFIRE


def _context_of(question_text: str) -> tuple[str, str, int]:
    dataset = sim_dataset(seed=0, n_conversations=1)
    question = next(q for q in dataset.questions if q.text == question_text)
    turns = {t.id: t for c in dataset.conversations for t in c.turns}
    lines = [f"[{turns[e].time[:10]}] {turns[e].speaker}: {turns[e].text}" for e in question.evidence]
    return "\n".join(lines), question.gold, question.category


def test_the_one_answer_misfire_really_loses_a_scored_list_question() -> None:
    context, gold, category = _context_of("What hobbies does Nora have?")
    assert category != 5  # scored under the default exclude_categories (5,)
    plain = answer_question(context, "What hobbies does Nora have?", frozenset())
    misfired = answer_question(context, "What hobbies does Nora have?", frozenset({"one_answer"}))
    assert is_correct("What hobbies does Nora have?", gold, plain), (plain, gold)
    assert not is_correct("What hobbies does Nora have?", gold, misfired), (misfired, gold)


def test_best_guess_overrides_abstain() -> None:
    context = "Memory: Bob works as a nurse. Time: 8 May 2023"
    question = "What is Olga's job?"
    assert answer_question(context, question, frozenset({"abstain"})) == NOT_MENTIONED
    assert answer_question(context, question, frozenset({"abstain", "best_guess"})) != NOT_MENTIONED


# ---------------------------------------------------------------------------------------------- vocabulary


ATTRIBUTOR_SOURCES = (
    "pipeline/analysis/attribution/lineage.py",
    "pipeline/analysis/attribution/information_flow.py",
    "pipeline/analysis/attribution/llm.py",
    "pipeline/analysis/attribution/walk_paths.py",
    "pipeline/analysis/attribution/walk_render.py",
    "pipeline/analysis/attribution/repairs.py",
    "pipeline/analysis/attribution/verification.py",
    "pipeline/sim/attributor_handler.py",
)


def _literal_bigrams(paths: tuple[str, ...]) -> frozenset[tuple[str, str]]:
    """Word bigrams of every string literal (f-string parts included) in the attributor's sources."""
    bigrams: set[tuple[str, str]] = set()
    for path in paths:
        for node in ast.walk(ast.parse(Path(REPO, path).read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                words = re.findall(r"[a-z]+", node.value.lower())
                bigrams.update(pairwise(words))
    return frozenset(bigrams)


def copied_phrases(vocabulary: list[str], bigrams: frozenset[tuple[str, str]]) -> list[str]:
    copied = []
    for phrase in vocabulary:
        words = re.findall(r"[a-z]+", phrase.lower())
        if any(pair in bigrams for pair in pairwise(words)):
            copied.append(phrase)
    return copied


def test_rule_vocabulary_copies_no_phrase_of_the_attributors_reasons() -> None:
    bigrams = _literal_bigrams(ATTRIBUTOR_SOURCES)
    # the check bites: the phrases the old vocabulary copied from the reason templates are caught
    assert copied_phrases(["date the answer needs", "not the speaker", "kept the old", "did not retrieve"], bigrams) \
        == ["date the answer needs", "not the speaker", "kept the old", "did not retrieve"]
    vocabulary = [keyword for rule in RULES for keyword in rule.feedback_keywords]
    assert vocabulary and copied_phrases(vocabulary, bigrams) == []


# ---------------------------------------------------------------------------------------------- via DSPy


def test_rewrite_request_through_dspy(lm: dspy.LM) -> None:
    rewriter = InstructionRewriter(lm, 2000)
    outcome = rewriter.rewrite("extract", "turn -> facts", EXTRACT, block(WHEN) + "\n\n" + block(SISTER))
    assert outcome.ok and outcome.instruction.startswith(EXTRACT.strip())
    assert rules_in(outcome.instruction) == {"resolve_dates", "third_party"}
    # the stage comes from the signature's outputs, not the predictor's name
    respond = rewriter.rewrite("respond", "context, question -> answer", ANSWER, block(WHEN))
    assert rules_in(respond.instruction) == {"use_dates", "one_answer"}


def test_rewriter_is_registered_for_new_instruction() -> None:
    assert frozenset({"new_instruction"}) in stand_in.HANDLER_BY_OUTPUTS


def test_target_stage() -> None:
    assert target_stage("turn -> facts") == "extract"
    assert target_stage("context: str, question: str -> reasoning, answer: str") == "answer"
    assert target_stage("", "decide") == "decide"
    assert target_stage("a -> unknown_field", "respond") is None


def test_block_record_defaults() -> None:
    assert Block().error_type is None and Block(error="UpdateError at operation x").error_type == "UpdateError"
