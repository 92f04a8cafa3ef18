"""GEPA's reflection requests answered by the simulated world: gepa's real prompt template and dspy
GEPA's real `InstructionProposer`, through a real `dspy.LM` on the sim engine."""

from __future__ import annotations

from typing import Any

import dspy
import pytest
from dspy.teleprompt.gepa.instruction_proposal import InstructionProposer
from gepa.strategies.instruction_proposal import InstructionProposalSignature
from memtrace_loop.memory_systems.signatures import AnswerQuestion, DecideUpdates
from memtrace_loop.optimizers.feedback import FailureFeedback
from memtrace_loop.pipeline.sim.reflection import parse_reflection
from memtrace_loop.pipeline.sim.rules import rules_in

from tests.support.sim import sim_lm

ANSWER = AnswerQuestion.instructions
DECIDE = DecideUpdates.instructions


def block(error: str = "ResponseError", op: str = "question_answering", diagnosis: str = "", **kw: str) -> str:
    fields = {
        "question": "When did Alice go hiking?",
        "gold": "6 May 2023",
        "answer": "Alice went hiking.",
        "category": "2 (temporal)",
    } | kw
    return FailureFeedback(
        question_id="q1",
        question=fields["question"],
        gold=fields["gold"],
        answer=fields["answer"],
        error_type=error,
        op_name=op,
        diagnosis=diagnosis or "the context had it; the reply left it out.",
        category=fields["category"],
    ).render()


def examples(feedback: str, outputs: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return [{
        "Inputs": {"context": "Memory: Alice went hiking. Time: 6 May 2023", "question": "When did Alice go hiking?"},
        "Generated Outputs": outputs if outputs is not None else {"answer": "Alice went hiking."},
        "Feedback": feedback,
    }]


@pytest.fixture(scope="module")
def lm() -> dspy.LM:
    return sim_lm()


def propose_via_gepa_template(lm: dspy.LM, current: str, data: list[dict[str, Any]]) -> str:
    inputs = {"current_instruction_doc": current, "dataset_with_feedback": data}
    return InstructionProposalSignature.run(lambda prompt: lm(prompt)[0], inputs)["new_instruction"]


def test_gepa_template_prompt_is_recognised_and_answered(lm: dspy.LM) -> None:
    prompt = InstructionProposalSignature.prompt_renderer(
        {"current_instruction_doc": ANSWER, "dataset_with_feedback": examples(block())}
    )
    parsed = parse_reflection([{"role": "user", "content": prompt}])
    assert parsed is not None and parsed.current.strip() == ANSWER.strip()
    assert parsed.output_fields == ("answer",) and parsed.stage == "answer"
    new = propose_via_gepa_template(lm, ANSWER, examples(block()))
    assert new.startswith(ANSWER.strip()) and "use_dates" in rules_in(new)


def test_gepa_template_stage_from_output_fields(lm: dspy.LM) -> None:
    update = block(
        error="UpdateError", op="decide_updates", question="Where does Alice live?", gold="Paris",
        answer="Berlin", category="4 (single-hop)", diagnosis="the newest value never reached the store",
    )
    data = examples(update, outputs={"actions": "[]"})
    assert rules_in(propose_via_gepa_template(lm, DECIDE, data)) == {"newest_wins"}
    # the same feedback on the answer stage adds nothing: an UpdateError has no answer-stage repair
    assert propose_via_gepa_template(lm, ANSWER, examples(update)) == ANSWER.strip()


def test_block_traced_to_another_stage_adds_nothing(lm: dspy.LM) -> None:
    elsewhere = block(error="ExtractionError", op="extract_facts",
                      diagnosis="this failure was traced to another stage, not this one: extract.")
    assert propose_via_gepa_template(lm, ANSWER, examples(elsewhere)) == ANSWER.strip()


def test_dspy_gepa_instruction_proposer_is_answered(lm: dspy.LM) -> None:
    with dspy.context(lm=lm):
        proposed = InstructionProposer()(
            candidate={"respond": ANSWER}, reflective_dataset={"respond": examples(block())},
            components_to_update=["respond"],
        )
        short = InstructionProposer(max_chars=len(ANSWER) + 5)(
            candidate={"respond": ANSWER}, reflective_dataset={"respond": examples(block())},
            components_to_update=["respond"],
        )
    assert "use_dates" in rules_in(proposed["respond"])
    assert short["respond"] == ANSWER.strip()  # the length limit is kept: no rule fits


def test_adapter_requests_are_not_taken_for_reflection_prompts() -> None:
    messages = [
        {"role": "system", "content": "Your input fields are:\n1. `question` (str)\n```x``` # Example 1"},
        {"role": "user", "content": "[[ ## question ## ]]\nWhen?"},
    ]
    assert parse_reflection(messages) is None
