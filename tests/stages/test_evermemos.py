"""The EverMemOS-style system: stages, trace, hard limits, failures (scripted LM). Its planted failures on
the simulated world, their attribution, the closed loop and a run on real LoCoMo (whole runs) are in
tests/e2e/test_evermemos_loop.py."""

from __future__ import annotations

import json

import pytest
from dspy.utils import DummyLM
from memtrace_loop.memory_systems.evermemos.system import EverMemOSKnobs, EverMemOSMemory, rerank, terms
from memtrace_loop.memory_systems.registry import build_memory_system
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.core.graph import ExecutionGraph, OpKind
from memtrace_loop.pipeline.core.tracing import Tracer
from memtrace_loop.pipeline.sim.rewriter import target_stage
from memtrace_loop.pipeline.sim.rules import RULES_BY_ID, rules_for_stage, rules_in
from memtrace_loop.pipeline.sim.stages import STAGE_ORDER, stage_for_outputs

from tests.support.sim import CONVERSATION, QUESTION

NEW_RULES = ("event_dates", "event_third_party", "expand_related")
EPISODE_1 = [
    {"events": [{"text": "Alice moved to Paris.", "time": "April 2023"}]},
    {"title": "Alice's move", "narrative": "On 8 May 2023 Alice told Bob she had moved to Paris."},
]
EPISODE_2 = [
    {"events": [{"text": "Alice lives in Rome.", "time": "9 June 2023"}]},
    {"title": "Rome", "narrative": "On 9 June 2023 Alice said she lives in Rome."},
]


def scripted(answers: list[dict], **knobs) -> EverMemOSMemory:
    system = EverMemOSMemory(HashingEmbedder(), EverMemOSKnobs(tokenizer="approx", **knobs))
    system.set_lm(DummyLM(answers))
    return system


def run_scripted(answers: list[dict], **knobs):
    system = scripted(answers, **knobs)
    graph = ExecutionGraph("c1")
    state = system.ingest(CONVERSATION, Tracer(graph))
    outcome = system.answer(QUESTION, state, Tracer(graph))
    graph.check()
    return graph, state, outcome


def ops(graph: ExecutionGraph, name: str) -> list:
    return [op for op in graph.operations() if op.name == name]


# ---------------------------------------------------------------------------------------------- stages


def test_stage_names_and_defaults():
    system = EverMemOSMemory(HashingEmbedder(), EverMemOSKnobs(tokenizer="approx"))
    assert system.stage_names() == (
        "detect_boundary", "write_episode", "write_events", "check_sufficiency", "expand_queries", "respond"
    )
    assert system.construction_stages == ("detect_boundary", "write_events", "write_episode")  # pipeline order
    assert set(system.non_llm_stages()) == {"episode_limits", "retrieve"}
    assert EverMemOSKnobs().top_k == 10 and EverMemOSKnobs().rrf_k == 60 and EverMemOSKnobs().bm25_top == 50
    built = build_memory_system({"name": "evermemos", "top_k": 7, "multi_query": False, "tokenizer": "approx"},
                                HashingEmbedder())
    assert built.knobs.top_k == 7 and not built.knobs.multi_query and built.knobs.emb_top == 50
    assert build_memory_system({"name": "evermemos"}, HashingEmbedder()).knobs.max_episode_turns == 20
    with pytest.raises(ValueError, match="top_k"):
        EverMemOSKnobs(top_k=0)


def test_default_prompts_state_no_rule_and_every_stage_maps_to_a_sim_stage():
    system = EverMemOSMemory(HashingEmbedder(), EverMemOSKnobs(tokenizer="approx"))
    for name, predictor in system.named_predictors():
        signature = predictor.signature
        assert rules_in(signature.instructions) == frozenset(), name
        stage = stage_for_outputs(signature.output_fields)
        assert stage == ("answer" if name == "respond" else name)
        assert stage in STAGE_ORDER
        text = f"{', '.join(signature.input_fields)} -> {', '.join(signature.output_fields)}"
        assert target_stage(text) == stage  # what the simulated rewriter is told
    for rule_id in NEW_RULES:
        rule = RULES_BY_ID[rule_id]
        assert rules_in(rule.sentence) == {rule_id}
        assert rule.stage in system.stage_names()
    assert {r.id for r in rules_for_stage("write_events")} == {"event_dates", "event_third_party"}


def test_memory_key_follows_construction_prompts_and_knobs_only():
    system = EverMemOSMemory(HashingEmbedder(), EverMemOSKnobs(tokenizer="approx"))
    key = system.memory_key(CONVERSATION)
    prompts = system.prompt_set()
    assert system.with_prompts(prompts.replace(respond="Answer.")).memory_key(CONVERSATION) == key
    assert system.with_prompts(prompts.replace(expand_queries="More.")).memory_key(CONVERSATION) == key
    assert system.with_prompts(prompts.replace(write_events="Log.")).memory_key(CONVERSATION) != key
    other = EverMemOSMemory(HashingEmbedder(), EverMemOSKnobs(tokenizer="approx", max_episode_turns=5))
    assert other.memory_key(CONVERSATION) != key
    assert EverMemOSMemory(HashingEmbedder(), EverMemOSKnobs(tokenizer="approx", top_k=3)).memory_key(
        CONVERSATION) == key


def test_rerank_prefers_full_coverage_of_any_query_then_the_fused_score():
    docs = [terms("Alice has a sister named Carol."), terms("Carol lives in Denver."), terms("Alice likes jazz.")]
    fused = [(0, 0.03), (2, 0.02), (1, 0.01)]
    assert [i for i, _, _ in rerank(fused, ["Where does Alice's sister live?"], docs)] == [0, 2, 1]
    ranked = rerank(fused, ["Where does Alice's sister live?", "Where does Carol live?"], docs)
    assert [i for i, _, _ in ranked] == [1, 0, 2] and ranked[0][1] == 1.0
    assert terms("hobbies lives class") == {"hobby", "live", "class"}


# ---------------------------------------------------------------------------------------------- trace


def test_trace_structure_and_op_kinds():
    graph, state, outcome = run_scripted(
        [{"starts_new_episode": False}, {"starts_new_episode": True}, *EPISODE_1, *EPISODE_2,
         {"sufficient": False}, {"queries": ["Alice Rome"]}, {"answer": "Rome"}]
    )
    assert outcome.text == "Rome" and len(state.episodes) == 2
    boundaries = ops(graph, "detect_boundary")
    assert [op.kind for op in boundaries] == [OpKind.OTHER, OpKind.OTHER]
    assert boundaries[1].inputs == ("turn:D1:1@1", "turn:D1:2@1", "turn:D2:1@1")
    assert [graph.variable(op.outputs[0]).value for op in boundaries] == ["same episode", "new episode"]

    events, episodes = ops(graph, "write_events"), ops(graph, "write_episode")
    assert [op.kind for op in events + episodes] == [OpKind.EXTRACTION] * 4
    assert events[0].inputs == ("turn:D1:1@1", "turn:D1:2@1") and events[0].outputs == ("event:1@1",)
    assert episodes[1].inputs == ("turn:D2:1@1",) and episodes[1].outputs == ("episode:2@1",)
    assert events[0].seq < episodes[0].seq  # the event log first: the fact-level record
    assert graph.variable("event:2@1").kind == "event" and graph.variable("episode:1@1").kind == "episode"
    assert graph.variable("event:2@1").value == "Alice lives in Rome. Time: 9 June 2023"
    assert graph.variable("episode:2@1").value == "Rome\nOn 9 June 2023 Alice said she lives in Rome."
    assert graph.variable("turn:D2:1@1").meta["speaker"] == "Alice"
    assert "turn:D2:1@1" in graph.ancestors("event:2@1")
    assert episodes[0].prompt == "prompt:write_episode@1"

    check, expand = ops(graph, "check_sufficiency")[0], ops(graph, "expand_queries")[0]
    assert check.kind == expand.kind == OpKind.RETRIEVAL and "query:c1:q0@1" in check.inputs
    assert json.loads(graph.variable(expand.outputs[0]).value) == ["Alice Rome"]
    (retrieve,) = ops(graph, "retrieve_episodes")
    assert retrieve.kind == OpKind.RETRIEVAL and retrieve.stage == "retrieve" and retrieve.meta["rounds"] == 2
    assert retrieve.inputs[:3] == ("query:c1:q0@1", check.outputs[0], expand.outputs[0])
    assert {"episode:1@1", "event:1@1", "episode:2@1", "event:2@1"} <= set(retrieve.inputs)
    context = graph.variable(retrieve.outputs[0]).value
    assert "Memory: Alice lives in Rome. Time: 9 June 2023" in context and "Narrative: On 9 June" in context
    answer_op = graph.producer(outcome.answer_var)
    assert answer_op.stage == "respond" and answer_op.kind == OpKind.RESPONSE
    assert "turn:D2:1@1" in graph.ancestors(outcome.answer_var)


def test_sufficient_evidence_means_one_round():
    graph, _, _ = run_scripted(
        [{"starts_new_episode": False}, {"starts_new_episode": True}, *EPISODE_1, *EPISODE_2,
         {"sufficient": True}, {"answer": "Rome"}]
    )
    assert not ops(graph, "expand_queries") and ops(graph, "retrieve_episodes")[0].meta["rounds"] == 1


def test_without_multi_query_there_is_no_sufficiency_check():
    graph, _, outcome = run_scripted(
        [{"starts_new_episode": False}, {"starts_new_episode": True}, *EPISODE_1, *EPISODE_2, {"answer": "Rome"}],
        multi_query=False,
    )
    assert not ops(graph, "check_sufficiency") and outcome.text == "Rome"
    (retrieve,) = ops(graph, "retrieve_episodes")
    assert retrieve.inputs[0] == "query:c1:q0@1"
    assert all(v.startswith(("episode:", "event:")) for v in retrieve.inputs[1:])


def test_hard_limits_close_episodes_regardless_of_the_detector():
    answers = [*EPISODE_1, *EPISODE_2, *EPISODE_2, {"sufficient": True}, {"answer": "Rome"}]
    graph, state, _ = run_scripted(answers, max_episode_turns=1)  # every turn closes the episode before it
    assert len(state.episodes) == 3 and not ops(graph, "detect_boundary")
    limits = ops(graph, "episode_limit")
    assert len(limits) == 2 and all(op.kind == OpKind.OTHER and op.stage == "episode_limits" for op in limits)
    assert "turns 1 >= 1" in graph.variable(limits[0].outputs[0]).value

    # token limit: each rendered turn is ~10 approximate tokens, so two never fit in 12
    graph, state, _ = run_scripted(answers, max_episode_tokens=12)
    assert len(state.episodes) == 3 and all("tokens" in graph.variable(op.outputs[0]).value
                                            for op in ops(graph, "episode_limit"))


def test_a_failed_stage_call_is_a_failed_operation_and_the_run_goes_on():
    nonsense = {"nonsense": "not the field"}
    graph, state, outcome = run_scripted(
        [
            nonsense, nonsense,  # detect_boundary (chat adapter, then JSON fallback): no boundary
            {"starts_new_episode": True},
            EPISODE_1[0], nonsense, nonsense,  # write_episode of episode 1 fails: empty narrative
            *EPISODE_2,
            nonsense, nonsense,  # check_sufficiency fails: no second round
            {"answer": "Rome"},
        ]
    )
    failed = [op for op in graph.operations() if op.failed]
    assert [op.name for op in failed] == ["detect_boundary", "write_episode", "check_sufficiency"]
    assert all("AdapterParseError" in op.error for op in failed)
    assert graph.variable(failed[0].outputs[0]).value == "same episode"
    assert state.episodes[0].narrative == "" and graph.variable("episode:1@1").value == ""
    assert state.episodes[0].events and graph.variable(failed[2].outputs[0]).value == "unknown (check failed)"
    assert not ops(graph, "expand_queries") and outcome.text == "Rome"
