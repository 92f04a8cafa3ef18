"""The stand-in LM through real DSPy calls: rules, stage handlers, adapters, judge, fallbacks, engine."""

from __future__ import annotations

import json

import dspy
import pytest
from memtrace_loop.memory_systems.signatures import AnswerQuestion, DecideUpdates, ExtractFacts
from memtrace_loop.pipeline.sim import stand_in
from memtrace_loop.pipeline.sim.engine import SimEngine, request_messages
from memtrace_loop.pipeline.sim.judge import is_correct
from memtrace_loop.pipeline.sim.protocol import parse_request
from memtrace_loop.pipeline.sim.rules import RULES, RULES_BY_ID, rules_for_stage, rules_in, rules_pointed_by, with_rules
from memtrace_loop.pipeline.sim.stages import STAGE_ORDER, expected_cause, stage_for_outputs

pytestmark = pytest.mark.usefixtures("lm_history")  # what the stand-in was sent and answered: `lm.history`

SIGNATURES = {"extract": ExtractFacts, "decide": DecideUpdates, "answer": AnswerQuestion}


class Judge(dspy.Signature):
    """Grade the generated answer against the gold answer."""

    question: str = dspy.InputField()
    gold_answer: str = dspy.InputField()
    generated_answer: str = dspy.InputField()
    label: str = dspy.OutputField(desc="CORRECT or WRONG")


@pytest.fixture(scope="module")
def lm() -> dspy.LM:
    return dspy.LM("sim/stand-in", engine=SimEngine(), cache=False)


def run(lm: dspy.LM, stage: str, rules: tuple[str, ...] = (), adapter: dspy.Adapter | None = None, **inputs):
    signature = SIGNATURES[stage]
    signature = signature.with_instructions(with_rules(signature.instructions, rules))
    with dspy.context(lm=lm, adapter=adapter or dspy.ChatAdapter()):
        return dspy.Predict(signature)(**inputs)


# ---------------------------------------------------------------------------------------------- rules


def test_default_instructions_state_no_rule() -> None:
    for signature in SIGNATURES.values():
        assert rules_in(signature.instructions) == frozenset()


def test_every_rule_sentence_is_detected_as_exactly_its_own_rule() -> None:
    for rule in RULES:
        assert rules_in(rule.sentence) == {rule.id}
        assert rules_in(rule.sentence.upper()) == {rule.id}


def test_with_rules_appends_each_missing_sentence_once() -> None:
    base = ExtractFacts.instructions
    once = with_rules(base, ["resolve_dates", "third_party"])
    assert rules_in(once) == {"resolve_dates", "third_party"}
    assert with_rules(once, ["resolve_dates"]) == once
    assert once.startswith(base.strip())


def test_feedback_points_only_at_rules_of_the_stage() -> None:
    feedback = "The memory about Alice's sister was never extracted: it was about another person."
    assert [r.id for r in rules_pointed_by(feedback, "extract")] == ["third_party"]
    assert [r.id for r in rules_pointed_by("a memory was deleted", "decide")] == ["keep_compatible"]
    assert rules_pointed_by("nothing relevant here", "answer") == ()
    assert rules_pointed_by("the update kept it", "extract") == ()  # "date" only at a word start


def test_expected_cause_is_the_earliest_stage_with_a_missing_rule() -> None:
    assert expected_cause(["resolve_dates", "use_dates"]) == ("ExtractionError", "extract")
    assert expected_cause(["resolve_dates", "use_dates"], ["resolve_dates"]) == ("ResponseError", "answer")
    assert expected_cause(["keep_compatible"]) == ("DeletionError", "decide")
    assert expected_cause([]) == (None, None)
    assert {"extract", "decide", "answer"} <= {r.stage for r in RULES}
    assert all(r.stage in STAGE_ORDER for r in RULES)
    assert [r.id for r in rules_for_stage("decide")] == ["newest_wins", "keep_compatible"]
    assert stage_for_outputs(["reasoning", "answer"]) == "answer"
    assert RULES_BY_ID["abstain"].fixes_error_type == "ResponseError"


# ---------------------------------------------------------------------------------------------- protocol


@pytest.mark.parametrize("adapter", [dspy.ChatAdapter(), dspy.JSONAdapter()], ids=["chat", "json"])
def test_parse_request_reads_what_the_adapters_write(adapter: dspy.Adapter) -> None:
    signature = DecideUpdates.with_instructions(with_rules(DecideUpdates.instructions, ["newest_wins"]))
    messages = adapter.format(signature, demos=[], inputs={"existing_memories": "[m1] x", "new_facts": ["a", "b"]})
    request = parse_request(messages)
    assert request.output_names == {"actions"}
    assert set(request.input_types) == {"existing_memories", "new_facts"}
    assert request.inputs == {"existing_memories": "[m1] x", "new_facts": '["a", "b"]'}
    assert rules_in(request.instruction) == {"newest_wins"}
    assert request.json_mode is isinstance(adapter, dspy.JSONAdapter)


def test_reply_formats(lm: dspy.LM) -> None:
    run(lm, "extract", turn="[8 May 2023] Alice: I grew up in Ohio.")
    assert lm.history[-1]["outputs"][0] == '[[ ## facts ## ]]\n["Alice grew up in Ohio."]\n\n[[ ## completed ## ]]'
    run(lm, "extract", adapter=dspy.JSONAdapter(), turn="[8 May 2023] Alice: I grew up in Ohio.")
    assert json.loads(lm.history[-1]["outputs"][0]) == {"facts": ["Alice grew up in Ohio."]}


# ---------------------------------------------------------------------------------------------- extract

TURN = (
    "[8 May 2023] Alice: Guess what. I went hiking at Mount Rainier last Saturday! "
    "My sister Carol just moved to Boston."
)


def test_extract_without_rules_drops_dates_and_third_parties(lm: dspy.LM) -> None:
    facts = run(lm, "extract", turn=TURN).facts
    assert facts == ["Alice went hiking at Mount Rainier.", "Alice has a sister named Carol."]


def test_extract_with_resolve_dates_keeps_the_absolute_date(lm: dspy.LM) -> None:
    facts = run(lm, "extract", ("resolve_dates",), turn=TURN).facts
    assert facts[0] == "Alice went hiking at Mount Rainier on 6 May 2023."  # 8 May 2023 was a Monday
    assert len(facts) == 2


def test_extract_with_third_party_adds_the_other_persons_fact(lm: dspy.LM) -> None:
    facts = run(lm, "extract", ("third_party",), turn=TURN).facts
    assert "Carol (Alice's sister) lives in Boston." in facts
    bare = run(lm, "extract", ("third_party",), turn="[8 May 2023] Bob: Carol works as a chef these days.").facts
    assert bare == ["Carol works as a chef."]
    assert run(lm, "extract", turn="[8 May 2023] Bob: Carol works as a chef these days.").facts == []


def test_few_shot_demos_are_ignored_and_the_last_request_is_answered(lm: dspy.LM) -> None:
    predictor = dspy.Predict(ExtractFacts)
    predictor.demos = [dspy.Example(turn="[1 May 2023] Bob: I grew up in Iowa.", facts=["Bob grew up in Iowa."])]
    with dspy.context(lm=lm):
        assert predictor(turn="[8 May 2023] Alice: I grew up in Ohio.").facts == ["Alice grew up in Ohio."]
    assert "Iowa" in str(lm.history[-1]["messages"])


def test_extract_skips_small_talk_and_falls_back_on_unknown_text(lm: dspy.LM) -> None:
    assert run(lm, "extract", turn="[8 May 2023] Alice: Hey Bob, how have you been?").facts == []
    real = "[8 May 2023] Caroline: I went to a LGBTQ support group yesterday and it was so powerful."
    facts = run(lm, "extract", tuple(RULES_BY_ID), turn=real).facts
    assert facts == ["Caroline said: I went to a LGBTQ support group yesterday and it was so powerful."]
    long_text = "[8 May 2023] Mel: " + "word " * 200
    (only,) = run(lm, "extract", turn=long_text).facts
    assert only.startswith("Mel said: word") and len(only) < 300


# ---------------------------------------------------------------------------------------------- decide

EXISTING = "\n".join(
    [
        "[m1] Alice works at Globex.",
        "[m2] Alice enjoys pottery as a hobby.",
        "[m3] Alice went hiking at Mount Hood.",
    ]
)


def actions(lm: dspy.LM, rules: tuple[str, ...], facts: list[str]) -> list[tuple[str, str | None, str]]:
    result = run(lm, "decide", rules, existing_memories=EXISTING, new_facts=facts)
    return [(a.event, a.id, a.text) for a in result.actions]


def test_decide_contradiction_is_lost_without_newest_wins(lm: dspy.LM) -> None:
    assert actions(lm, (), ["Alice works at Hooli."]) == [("NONE", "m1", "")]
    assert actions(lm, ("newest_wins",), ["Alice works at Hooli."]) == [("UPDATE", "m1", "Alice works at Hooli.")]


def test_decide_deletes_a_compatible_memory_without_keep_compatible(lm: dspy.LM) -> None:
    fact = "Alice enjoys chess as a hobby."
    assert actions(lm, ("newest_wins",), [fact]) == [("DELETE", "m2", ""), ("ADD", None, fact)]
    assert actions(lm, ("keep_compatible",), [fact]) == [("ADD", None, fact)]


def test_decide_duplicates_new_facts_and_added_detail(lm: dspy.LM) -> None:
    assert actions(lm, (), ["Alice works at Globex."]) == [("NONE", "m1", "")]
    assert actions(lm, (), ["Alice grew up in Ohio."]) == [("ADD", None, "Alice grew up in Ohio.")]
    dated = "Alice went hiking at Mount Hood on 6 May 2023."
    assert actions(lm, (), [dated]) == [("UPDATE", "m3", dated)]
    assert actions(lm, (), ["Alice said: hmm"]) == [("ADD", None, "Alice said: hmm")]


# ---------------------------------------------------------------------------------------------- answer

CONTEXT = "\n".join(
    [
        "Memory: Alice went hiking at Mount Rainier on 6 May 2023. Time: 8 May 2023",
        "Memory: Alice went camping at Zion. Time: 2 June 2023",
        "Memory: Alice has a sister named Carol. Time: 8 May 2023",
        "Memory: Carol lives in Boston. Time: 20 May 2023",
        "Memory: Alice has a pet cat named Luna. Time: 8 May 2023",
        "Memory: Alice has a pet dog named Max. Time: 2 June 2023",
        "Memory: Alice loves jazz music. Time: 8 May 2023",
        "Memory: Alice dislikes horror movies. Time: 8 May 2023",
        "Memory: Alice works at Globex. Time: 8 May 2023",
        "Memory: Alice works at Hooli. Time: 2 June 2023",
    ]
)


def answer(lm: dspy.LM, question: str, rules: tuple[str, ...] = (), context: str = CONTEXT) -> str:
    return run(lm, "answer", rules, context=context, question=question).answer


def test_answer_when_needs_use_dates(lm: dspy.LM) -> None:
    assert answer(lm, "When did Alice go hiking?") == "Alice went hiking at Mount Rainier."
    assert answer(lm, "When did Alice go hiking?", ("use_dates",)) == "6 May 2023"
    # a memory without a date: use_dates falls back to the memory's time (which is not the event's date)
    assert answer(lm, "When did Alice go camping?", ("use_dates",)) == "2 June 2023"


def test_answer_adversarial_needs_abstain(lm: dspy.LM) -> None:
    assert answer(lm, "Where did Bob go hiking?") == "Mount Rainier"
    assert answer(lm, "Where did Bob go hiking?", ("abstain",)) == "Not mentioned in the conversation."
    assert answer(lm, "Where did Alice go hiking?", ("abstain",)) == "Mount Rainier"


def test_answer_structured_questions(lm: dspy.LM) -> None:
    assert answer(lm, "Where does Alice's sister live?") == "Boston"
    assert answer(lm, "Where does Alice's sister Carol live?") == "Boston"
    assert answer(lm, "What is the name of Alice's cat?") == "Luna"
    assert answer(lm, "What pets does Alice have?") == "a cat named Luna and a dog named Max"
    assert answer(lm, "Would Alice enjoy a night at a jazz club?").startswith("Yes")
    assert answer(lm, "Would Alice enjoy a horror movie marathon?").startswith("No")
    assert answer(lm, "Where does Alice work?") == "Hooli"  # the newest memory wins when both are shown


def test_answer_reads_raw_turns_as_context(lm: dspy.LM) -> None:
    raw = "[8 May 2023] Alice: I went hiking at Mount Rainier last Saturday!"
    assert answer(lm, "When did Alice go hiking?", ("use_dates",), context=raw) == "6 May 2023"
    assert answer(lm, "Where did Alice go hiking?", context=raw) == "Mount Rainier"
    buffer = "Speaker Alice says: I went hiking at Mount Rainier yesterday! Timestamp: 1:56 pm on 8 May, 2023"
    assert answer(lm, "When did Alice go hiking?", ("use_dates",), context=buffer) == "7 May 2023"


def test_answer_falls_back_to_word_overlap_on_real_text(lm: dspy.LM) -> None:
    context = (
        "Memory: Caroline said: I went to a LGBTQ support group yesterday. Time: 8 May 2023\n"
        "Memory: Melanie said: I painted a sunrise last week. Time: 8 May 2023"
    )
    assert "painted a sunrise" in answer(lm, "What did Melanie paint?", context=context)
    assert answer(lm, "What is Caroline's favourite car?", ("abstain",), context=context).startswith("Not mentioned")
    assert answer(lm, "What did Melanie paint?", context="") == ""


def test_chain_of_thought_gets_reasoning_and_the_same_answer(lm: dspy.LM) -> None:
    signature = AnswerQuestion.with_instructions(with_rules(AnswerQuestion.instructions, ["use_dates"]))
    with dspy.context(lm=lm):
        result = dspy.ChainOfThought(signature)(context=CONTEXT, question="When did Alice go hiking?")
    assert result.answer == "6 May 2023" and result.reasoning


# ---------------------------------------------------------------------------------------------- judge


@pytest.mark.parametrize(
    ("gold", "prediction", "label"),
    [
        ("6 May 2023", "May 6th, 2023", "CORRECT"),
        ("6 May 2023", "It was on 7 May 2023", "WRONG"),
        ("Mount Rainier", "She went hiking at Mount Rainier.", "CORRECT"),
        ("pottery and rock climbing", "rock climbing", "WRONG"),
        ("Yes", "Yes, Alice loves jazz music.", "CORRECT"),
        ("No", "Yes, probably.", "WRONG"),
        ("Not mentioned in the conversation", "Not mentioned in the conversation.", "CORRECT"),
        ("Not mentioned in the conversation", "Mount Rainier", "WRONG"),
        ("Boston", "Not mentioned in the conversation.", "WRONG"),
    ],
)
def test_judge(lm: dspy.LM, gold: str, prediction: str, label: str) -> None:
    with dspy.context(lm=lm):
        result = dspy.Predict(Judge)(question="Q?", gold_answer=gold, generated_answer=prediction)
    assert result.label == label
    assert is_correct("Q?", gold, prediction) is (label == "CORRECT")


def test_project_judge_signature_is_served() -> None:
    from memtrace_loop.pipeline.analysis import judge
    with dspy.context(lm=dspy.LM("sim/stand-in", engine=SimEngine(), cache=False)):
        result = dspy.Predict(judge.JudgeAnswer)(
            question="When?", gold_answer="6 May 2023", generated_answer="on May 6, 2023"
        )
    assert result.label == "CORRECT"


# ------------------------------------------------------------------------------------- registry and engine


class Summarize(dspy.Signature):
    """Summarize."""

    text: str = dspy.InputField()
    summary: str = dspy.OutputField()
    keywords: list[str] = dspy.OutputField()


def test_unknown_stage_fails_loudly_and_new_stages_can_be_added(lm: dspy.LM) -> None:
    unknown = r"no handler for a stage with output fields \['keywords', 'summary'\]"
    with dspy.context(lm=lm), pytest.raises(Exception, match=unknown):
        dspy.Predict(Summarize)(text="abc")
    handlers = stand_in.with_handlers(
        {("summary", "keywords"): lambda r: {"summary": r.inputs["text"][:2], "keywords": ["k"]}}
    )
    adapter = dspy.ChatAdapter()
    messages = adapter.format(dspy.Predict(Summarize).signature, demos=[], inputs={"text": "abc"})
    reply = adapter.parse(Summarize, stand_in.respond(messages, handlers))
    assert (reply["summary"], reply["keywords"]) == ("ab", ["k"])
    assert frozenset({"summary", "keywords"}) not in stand_in.HANDLER_BY_OUTPUTS  # the default is untouched
    with pytest.raises(ValueError):
        stand_in.with_handlers({("reasoning",): lambda r: {}})


def test_engine_usage_state_and_stream(lm: dspy.LM) -> None:
    run(lm, "extract", turn="[8 May 2023] Alice: I grew up in Ohio.")
    usage = lm.history[-1]["usage"]
    assert usage["prompt_tokens"] > 50
    assert usage["completion_tokens"] == len(lm.history[-1]["outputs"][0].split()) == 15
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    engine = SimEngine.load_state(SimEngine().dump_state())
    assert isinstance(engine, SimEngine)
    request = dspy.lm15.Request(model="sim/stand-in", system="sys", messages=(dspy.lm15.Message.user("hi"),))
    assert request_messages(request) == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hi"},
    ]
    with pytest.raises(stand_in.UnknownStageError):  # "hi" is no stage request
        engine.complete(request)
    system, user = dspy.ChatAdapter().format(
        dspy.Predict(ExtractFacts).signature, demos=[], inputs={"turn": "[8 May 2023] Alice: I grew up in Ohio."}
    )
    stage_request = dspy.lm15.Request(
        model="sim/stand-in", system=system["content"], messages=(dspy.lm15.Message.user(user["content"]),)
    )
    events = list(engine.stream(stage_request))
    assert events[0].type == "start" and events[-1].type == "end"
    engine.close()


def test_lm_with_sim_engine_survives_save_and_load(tmp_path, lm: dspy.LM) -> None:
    predictor = dspy.Predict(ExtractFacts)
    predictor.set_lm(lm)
    path = tmp_path / "extract.json"
    predictor.save(str(path), save_program=False)
    loaded = dspy.Predict(ExtractFacts)
    loaded.load(str(path), allow_unsafe_lm_state=True)
    assert loaded(turn="[8 May 2023] Alice: I grew up in Ohio.").facts == ["Alice grew up in Ohio."]
