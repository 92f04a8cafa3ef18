"""A quote in a stage's instruction reaches the stand-in through DSPy's adapters (real `dspy.Predict`
calls on the `sim` engine), for the stages replay repairs by re-running their predictor with a hint."""

from __future__ import annotations

import dspy
import pytest
from memtrace_loop.memory_systems.evermemos.signatures import CheckSufficiency
from memtrace_loop.memory_systems.signatures import AnswerQuestion, ExtractFacts
from memtrace_loop.pipeline.sim.engine import SimEngine

HINT = ' Make sure your output keeps this information: "{}" (a later question is answered by "{}").'
TURN = "[8 May 2023] Alice: My sister Carol just moved to Denver. I went hiking at Mount Rainier yesterday!"
HIKE = "Memory: Alice went hiking at Mount Rainier. Time: 8 May 2023"
CONTEXT = f"{HIKE}\nMemory: Alice lives in Boston. Time: 1 May 2023"
ADAPTERS = {"chat": dspy.ChatAdapter, "json": dspy.JSONAdapter}


@pytest.fixture(scope="module")
def lm() -> dspy.LM:
    return dspy.LM("sim/stand-in", engine=SimEngine(), cache=False)


def _predict(lm: dspy.LM, adapter: str, signature: type[dspy.Signature], hint: str, **inputs: str) -> dspy.Prediction:
    with dspy.context(lm=lm, adapter=ADAPTERS[adapter]()):
        return dspy.Predict(signature.with_instructions(signature.instructions + hint))(**inputs)


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
def test_a_hinted_extraction_keeps_the_quoted_fact(lm: dspy.LM, adapter: str) -> None:
    plain = _predict(lm, adapter, ExtractFacts, "", turn=TURN).facts
    hinted = _predict(lm, adapter, ExtractFacts, HINT.format(TURN, "Denver"), turn=TURN).facts
    assert "Carol (Alice's sister) lives in Denver." not in plain
    assert hinted == [
        "Alice has a sister named Carol.",
        "Carol (Alice's sister) lives in Denver.",
        "Alice went hiking at Mount Rainier on 7 May 2023.",
    ]


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
def test_a_hinted_answer_and_check_use_only_what_their_inputs_hold(lm: dspy.LM, adapter: str) -> None:
    quoted = f' Answer from this memory: "{HIKE}".'
    when = "When did Alice go hiking?"
    assert _predict(lm, adapter, AnswerQuestion, "", context=CONTEXT, question=when).answer != "8 May 2023"
    assert _predict(lm, adapter, AnswerQuestion, quoted, context=CONTEXT, question=when).answer == "8 May 2023"
    episodes = CONTEXT.replace(f"{HIKE}\n", "")
    missed = HINT.format("Memory: Alice lives in Austin. Time: 9 May 2023", "Austin")
    where = "Where does Alice live?"
    assert _predict(lm, adapter, CheckSufficiency, "", question=where, retrieved_episodes=episodes).sufficient
    assert not _predict(lm, adapter, CheckSufficiency, missed, question=where, retrieved_episodes=episodes).sufficient
