"""The Mem0-style system on a scripted LM (DSPy's DummyLM): stages, store versions, graph, failures."""

from __future__ import annotations

import json

import dspy
import pytest
from dspy.utils import DummyLM
from memtrace_loop.memory_systems.base import PromptSetError
from memtrace_loop.memory_systems.mem0.system import Mem0Knobs, Mem0Memory
from memtrace_loop.memory_systems.store import InMemoryVectorStore
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.core.graph import ExecutionGraph, OpKind
from memtrace_loop.pipeline.core.records import PromptSet
from memtrace_loop.pipeline.core.tracing import Tracer

from tests.support.sim import CONVERSATION, QUESTION, sim_dataset, sim_lm


def system_with(answers: list[dict]) -> Mem0Memory:
    system = Mem0Memory(HashingEmbedder(), Mem0Knobs(top_k=3, similar_k=2))
    system.set_lm(DummyLM(answers))
    return system


def ingest(system: Mem0Memory) -> tuple[ExecutionGraph, object]:
    graph = ExecutionGraph("c1")
    return graph, system.ingest(CONVERSATION, Tracer(graph))


def test_stage_names_are_the_predictor_paths():
    system = Mem0Memory(HashingEmbedder())
    assert system.stage_names() == ("extract", "decide", "respond")
    assert system.prompt_set()["extract"] == system.extract.signature.instructions


def test_add_then_update_builds_a_version_chain_from_the_turns():
    system = system_with(
        [
            {"facts": ["Alice lives in Paris."]},
            {"actions": [{"event": "ADD", "text": "Alice lives in Paris."}]},
            {"facts": []},
            {"facts": ["Alice lives in Rome."]},
            {"actions": [{"event": "UPDATE", "id": "m1", "text": "Alice lives in Rome."}]},
        ]
    )
    graph, state = ingest(system)
    graph.check()
    assert [u.text for u in state.store.history("m1")] == ["Alice lives in Paris.", "Alice lives in Rome."]
    assert [v.value for v in graph.versions("memory:m1")] == ["Alice lives in Paris.", "Alice lives in Rome."]
    assert [op.kind for op in graph.lineage("memory:m1")] == [OpKind.EXTRACTION, OpKind.UPDATE]
    up = graph.ancestors("memory:m1@2")
    assert {"turn:D1:1@1", "turn:D2:1@1", "memory:m1@1"} <= up
    # the update decision saw the old memory through the similarity search
    search = graph.producer("similar:D2:1@1")
    assert search.kind == OpKind.RETRIEVAL and "memory:m1@1" in search.inputs
    decide = graph.producer("decision:D2:1@1")
    assert decide.stage == "decide" and decide.prompt == "prompt:decide@1"
    assert graph.variable("prompt:decide@1").value == system.decide.signature.instructions


def test_delete_makes_a_tombstone_that_search_skips():
    system = system_with(
        [
            {"facts": ["Alice lives in Paris."]},
            {"actions": [{"event": "ADD", "text": "Alice lives in Paris."}]},
            {"facts": []},
            {"facts": ["Alice left Paris."]},
            {"actions": [{"event": "DELETE", "id": "m1"}]},
        ]
    )
    graph, state = ingest(system)
    assert state.store.search("Paris", 5) == []
    last = graph.latest("memory:m1")
    assert last.meta["deleted"] is True and graph.producer(last.id).kind == OpKind.DELETION


def test_unparsable_output_is_a_failed_operation_and_ingestion_goes_on():
    system = system_with(
        [
            {"nonsense": "this is not a facts field"},  # extract of D1:1: adapter cannot parse
            {"nonsense": "still nothing"},  # DSPy's JSON fallback attempt
            {"facts": []},
            {"facts": ["Alice lives in Rome."]},
            {"actions": [{"event": "ADD", "text": "Alice lives in Rome."}]},
        ]
    )
    graph, state = ingest(system)
    failed = [op for op in graph.operations() if op.failed]
    assert len(failed) == 1 and failed[0].name == "extract_facts" and failed[0].stage == "extract"
    assert "AdapterParseError" in failed[0].error and failed[0].usage.calls == 2
    assert json.loads(graph.latest("facts:D1:1").value) == []
    assert [u.text for u in state.store.current()] == ["Alice lives in Rome."]


def test_an_action_on_an_unknown_memory_is_recorded_not_applied():
    system = system_with(
        [
            {"facts": ["Alice lives in Paris."]},
            {"actions": [{"event": "UPDATE", "id": "m99", "text": "Alice lives in Paris."}]},
            {"facts": []},
            {"facts": []},
        ]
    )
    graph, state = ingest(system)
    failed = [op for op in graph.operations() if op.failed]
    assert [op.name for op in failed] == ["memory_update"] and "m99" in failed[0].error
    assert state.store.current() == []


def test_answer_retrieves_top_k_and_is_traced_back_to_the_turn():
    system = system_with(
        [
            {"facts": ["Alice lives in Rome."]},
            {"actions": [{"event": "ADD", "text": "Alice lives in Rome."}]},
            {"facts": []},
            {"facts": []},
            {"answer": "Rome"},
        ]
    )
    graph, state = ingest(system)
    tracer = Tracer(graph, buffered=True)
    outcome = system.answer(QUESTION, state, tracer)
    assert graph.latest("answer:c1:q0") is None  # buffered until commit
    tracer.commit()
    assert outcome.text == "Rome" and outcome.error is None
    retrieve = graph.producer("retrieved:c1:q0@1")
    assert retrieve.meta["k"] == 3 and "memory:m1@1" in retrieve.inputs
    assert "Memory: Alice lives in Rome. Time: 8 May 2023" in graph.variable("retrieved:c1:q0@1").value
    assert "turn:D1:1@1" in graph.ancestors(outcome.answer_var)


def test_with_prompts_changes_only_the_copy_and_rejects_unknown_stages():
    system = Mem0Memory(HashingEmbedder())
    original = system.prompt_set()
    changed = system.with_prompts(PromptSet({"extract": "Extract everything, keep dates."}))
    assert changed.prompt_set()["extract"] == "Extract everything, keep dates."
    assert system.prompt_set() == original
    assert changed.prompt_set()["decide"] == original["decide"]
    with pytest.raises(PromptSetError, match="nope"):
        system.with_prompts(PromptSet({"nope": "x"}))


def test_store_search_is_deterministic_and_versions_are_kept():
    store = InMemoryVectorStore(HashingEmbedder())
    a = store.add("Alice likes jazz.", "t1")
    store.add("Alice likes jazz.", "t2")
    hits = store.search("jazz", 2)
    assert [h.unit.id for h in hits] == [a.id, "m2"]  # equal scores: older unit first
    store.update(a.id, "Alice likes rock.", "t3")
    assert [u.version for u in store.history(a.id)] == [1, 2]
    with pytest.raises(KeyError):
        store.update("m42", "x", "t")


def test_prompts_are_dspy_signatures_with_the_default_instruction():
    system = Mem0Memory(HashingEmbedder())
    for _, predictor in system.named_predictors():
        assert isinstance(predictor, dspy.Predict)
        assert predictor.signature.instructions.strip()


# ---------------------------------------------------------------- the same stages on the sim stand-in LM


def sim_ingest(prompts: PromptSet | None = None):

    dataset = sim_dataset(seed=5, n_conversations=1)
    system = Mem0Memory(HashingEmbedder())
    if prompts is not None:
        system = system.with_prompts(prompts)
    system.set_lm(sim_lm())
    graph = ExecutionGraph("sim")
    state = system.ingest(dataset.conversations[0], Tracer(graph))
    return system, dataset, graph, state


def ops_named(graph: ExecutionGraph, name: str) -> list:
    return [op for op in graph.operations() if op.name == name]


def test_sim_stages_fail_for_the_planted_reasons_and_rules_fix_them():
    from memtrace_loop.pipeline.sim.rules import with_rules

    system, _dataset, graph, state = sim_ingest()
    graph.check()
    assert not any(op.failed for op in graph.operations())
    assert ops_named(graph, "memory_delete"), "without keep_compatible the decide stage deletes compatible facts"
    facts = [f for v in graph.versions("facts:D1:1") for f in json.loads(v.value)]
    assert all("last" not in f and "ago" not in f for f in facts)

    base = system.prompt_set()
    fixed = base.replace(
        extract=with_rules(base["extract"], ["resolve_dates", "third_party"]),
        decide=with_rules(base["decide"], ["newest_wins", "keep_compatible"]),
    )
    _, _, fixed_graph, fixed_state = sim_ingest(fixed)
    assert not ops_named(fixed_graph, "memory_delete")
    assert len(ops_named(fixed_graph, "memory_update")) > len(ops_named(graph, "memory_update"))
    assert len(fixed_state.store.current()) > len(state.store.current())  # third-party facts kept too
    assert fixed_graph.variable("prompt:extract@1").value == fixed["extract"]


def test_sim_answer_stage_answers_from_retrieved_memories():
    system, dataset, graph, state = sim_ingest()
    answered = 0
    for question in dataset.questions[:20]:
        tracer = Tracer(graph, buffered=True)
        outcome = system.answer(question, state, tracer)
        tracer.commit()
        answered += bool(outcome.text)
        assert graph.producer(outcome.answer_var).stage == "respond"
    assert answered >= 15
