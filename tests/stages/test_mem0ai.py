"""`memory_system=mem0ai` on a scripted LM: the real mem0 library driven turn by turn through our
adapter, its steps traced with our graph conventions (extract, search, decide, store versions, dropped
actions and parse failures as failed operations), its calls counted once, no placeholder key anywhere."""

from __future__ import annotations

import ast
import json
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from memtrace_loop.memory_systems.mem0ai import hooks
from memtrace_loop.memory_systems.mem0ai.memory import PLACEHOLDER_KEY
from memtrace_loop.memory_systems.mem0ai.system import Mem0aiKnobs, Mem0aiMemory
from memtrace_loop.pipeline.backends.call_count import CallLedger
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.core.conventions import OpKind, OpStatus
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.graph_io import graph_to_json
from memtrace_loop.pipeline.core.records import Conversation, Question, Turn
from memtrace_loop.pipeline.core.tracing import Tracer
from memtrace_loop.pipeline.loop.runner import count_lm_calls

from tests.support.scripted_lm import ScriptedEngine, scripted_lm

CONVERSATION = Conversation(
    "c1",
    ("Alice", "Bob"),
    (
        Turn("D1:1", "Alice", "I moved to Paris last month and I adore my cat Tom.", 1, "2023-05-08T13:56"),
        Turn("D1:2", "Bob", "Nice weather today.", 1, "2023-05-08T13:56"),
        Turn("D2:1", "Alice", "I now live in Rome.", 2, "2023-06-09T10:00"),
        Turn("D2:2", "Alice", "Sadly Tom the cat ran away.", 2, "2023-06-09T10:00"),
    ),
)
QUESTION = Question("c1:q0", "c1", "Where does Alice live?", "Rome", 4, ("D2:1",))
FACTS = {
    "Paris": ["Alice moved to Paris", "Alice has a cat named Tom"],
    "Rome": ["Alice lives in Rome"],
    "ran away": ["Tom the cat ran away"],
}


def _facts_reply(user: str) -> str:
    if "Nice weather" in user:
        return "Sure! Here are the facts: none"  # no JSON at all: mem0 logs it and goes on
    for key, facts in FACTS.items():
        if key in user:
            return json.dumps({"facts": facts})
    return json.dumps({"facts": []})


def _listed(prompt: str) -> tuple[dict[str, str], list[str]]:
    """What mem0's update prompt lists: the memories shown (text -> id, a Python repr of
    [{'id': '0', 'text': ...}]) and the new facts (a Python repr of a list of strings)."""
    blocks = [ast.literal_eval(b) for b in re.findall(r"```\s*(\[.*?\])\s*```", prompt, re.DOTALL)]
    shown = next((b for b in blocks if b and isinstance(b[0], dict)), [])
    facts = next((b for b in blocks if b and isinstance(b[0], str)), [])
    return {m["text"]: m["id"] for m in shown}, facts


def _update_reply(prompt: str) -> str:
    shown, facts = _listed(prompt)
    if facts == ["Alice lives in Rome"]:
        return json.dumps({"memory": [
            {"id": shown["Alice moved to Paris"], "text": "Alice lives in Rome", "event": "UPDATE",
             "old_memory": "Alice moved to Paris"},
            {"id": "99", "text": "Alice likes Italian food", "event": "UPDATE"},  # an id mem0 never showed
            {"id": "0", "text": "", "event": "ADD"},  # no text: mem0 skips it
        ]})
    if facts == ["Tom the cat ran away"]:
        return json.dumps({"memory": [{"id": shown["Alice has a cat named Tom"], "text": "Alice has a cat named Tom",
                                       "event": "DELETE"}]})
    return json.dumps({"memory": [{"id": str(i), "text": t, "event": "ADD"} for i, t in enumerate(facts)]})


def script(messages: list[dict[str, str]]) -> str:
    if messages[0]["role"] == "system" and messages[-1]["content"].startswith("Input:"):
        return _facts_reply(messages[-1]["content"])
    if len(messages) == 1:
        return _update_reply(messages[0]["content"])
    return "[[ ## answer ## ]]\nRome\n\n[[ ## completed ## ]]"


def build(
    script_fn: Callable[[list[dict[str, str]]], str] = script, **knobs: int
) -> tuple[Mem0aiMemory, ScriptedEngine]:
    system = Mem0aiMemory(HashingEmbedder(), Mem0aiKnobs(**knobs))
    lm, engine = scripted_lm(script_fn)
    system.set_lm(lm)
    return system, engine


def run(system: Mem0aiMemory) -> tuple[ExecutionGraph, object]:
    graph = ExecutionGraph("c1")
    state = system.ingest(CONVERSATION, Tracer(graph))
    system.answer(QUESTION, state, Tracer(graph))
    graph.check()
    return graph, state


@pytest.fixture(scope="module")
def traced() -> tuple[ExecutionGraph, object, ScriptedEngine, Mem0aiMemory]:
    system, engine = build(top_k=3)
    graph, state = run(system)
    return graph, state, engine, system


def ops(graph: ExecutionGraph, name: str) -> list:
    return [op for op in graph.operations() if op.name == name]


def test_each_turn_is_one_add_whose_steps_are_operations_of_the_mem0_stages(traced):
    graph, _, _, system = traced
    assert system.stage_names() == ("fact_extraction", "update_memory", "respond")
    extract = ops(graph, "extract_facts")
    assert [op.inputs for op in extract] == [(f"turn:{t.id}@1",) for t in CONVERSATION.turns]
    assert {op.stage for op in extract} == {"fact_extraction"} and extract[0].kind == OpKind.EXTRACTION
    assert json.loads(graph.variable("facts:D1:1@1").value) == FACTS["Paris"]
    # the search of D2:1 saw the Paris memory; the decision read facts + what the search showed
    search = graph.producer("similar:D2:1@1")
    assert search.stage == "search_similar" and "memory:m1@1" in search.inputs and search.meta["k"] == 5
    decide = graph.producer("decision:D2:1@1")
    assert decide.stage == "update_memory" and decide.kind == OpKind.UPDATE
    assert decide.inputs == ("facts:D2:1@1", "similar:D2:1@1")
    assert graph.variable(decide.prompt).value == system.prompt_set()["update_memory"]


def test_store_effects_are_unit_versions_named_in_creation_order(traced):
    graph, state, _, _ = traced
    assert [v.value for v in graph.versions("memory:m1")] == ["Alice moved to Paris", "Alice lives in Rome"]
    assert [op.kind for op in graph.lineage("memory:m1")] == [OpKind.EXTRACTION, OpKind.UPDATE]
    assert graph.producer("memory:m1@2").inputs == ("decision:D2:1@1", "memory:m1@1")
    tomb = graph.latest("memory:m2")
    assert tomb.meta["deleted"] is True and tomb.value == "" and graph.producer(tomb.id).name == "memory_delete"
    assert tomb.meta["time"] == "2023-06-09T10:00" and tomb.meta["turn"] == "D2:2"
    assert [u.name for u in state.units] == ["m1"] and state.units[0].var == "memory:m1@2"
    assert all(not n.split(":", 1)[1].count("-") for n in graph.names("memory:"))  # never mem0's uuid4s


def test_actions_that_never_reached_the_store_are_failed_store_operations(traced):
    graph, _, _, _ = traced
    failed = [op for op in graph.operations() if op.stage == "store" and op.failed]
    assert len(failed) == 2 and all(op.inputs == ("decision:D2:1@1",) for op in failed)
    hallucinated, empty = failed
    assert "'99' is not one of the" in hallucinated.error and "Error processing memory action" in hallucinated.error
    assert "without text" in empty.error
    assert (hallucinated.kind, empty.kind) == (OpKind.UPDATE, OpKind.EXTRACTION)  # the write each would have been


def test_an_unparsable_reply_is_a_failed_extraction_with_its_raw_output(traced):
    graph, _, _, _ = traced
    op = graph.producer("facts:D1:2@1")
    assert op.status == OpStatus.FAILED and op.meta["raw_output"].startswith("Sure!")
    assert graph.variable("facts:D1:2@1").value == "[]" and graph.latest("decision:D1:2") is None


def test_the_question_is_answered_from_mem0s_search(traced):
    graph, _, _, _ = traced
    retrieval = graph.producer("retrieved:c1:q0@1")
    assert retrieval.inputs == ("query:c1:q0@1", "memory:m1@2")
    assert graph.variable("retrieved:c1:q0@1").value == "Memory: Alice lives in Rome Time: 9 June 2023"
    assert graph.variable("answer:c1:q0@1").value == "Rome"


def test_mem0_sends_the_stage_texts_with_the_session_date(traced):
    _, _, engine, system = traced
    extraction, update = engine.requests[0], engine.requests[1]
    prompts = system.prompt_set()
    assert "Today's date is {session_date}." in prompts["fact_extraction"]
    assert extraction[0]["content"] == hooks.with_session_date(prompts["fact_extraction"], "2023-05-08")
    assert extraction[1]["content"] == "Input:\nuser: Alice: I moved to Paris last month and I adore my cat Tom.\n"
    assert update[0]["content"].startswith(prompts["update_memory"])


def test_every_call_is_counted_once_and_no_placeholder_key_leaks(traced):
    graph, _, engine, _ = traced
    ledger = CallLedger(("task",))
    system, counted_engine = build()
    system.set_lm(ledger.count("task", system.respond.lm))
    other, _ = run(system)
    assert ledger.tally().role("task").made == len(counted_engine.requests) == count_lm_calls([other]).calls
    assert PLACEHOLDER_KEY not in graph_to_json(graph)
    assert not any(PLACEHOLDER_KEY in m["content"] for request in engine.requests for m in request)


def test_an_llm_exception_is_a_failed_operation_not_a_crash():
    def failing(messages: list[dict[str, str]]) -> str:
        if "Rome" in messages[-1]["content"] and messages[0]["role"] == "system":
            raise ConnectionError("endpoint went away")
        return script(messages)

    graph, _ = run(build(failing)[0])
    op = graph.producer("facts:D2:1@1")
    assert op.failed and "endpoint went away" in op.error
    assert graph.producer("facts:D2:2@1").status == OpStatus.OK  # the next turn goes on


def test_results_do_not_depend_on_the_day_mem0_was_imported(monkeypatch):
    from mem0.configs import prompts

    before = Mem0aiMemory(HashingEmbedder())
    for other_day in ("1999-12-31", "2031-02-03"):
        dated = hooks.with_session_date(prompts.USER_MEMORY_EXTRACTION_PROMPT, other_day)
        monkeypatch.setattr(prompts, "USER_MEMORY_EXTRACTION_PROMPT", dated)
        after = Mem0aiMemory(HashingEmbedder())
        assert after.prompt_set() == before.prompt_set()
        assert after.memory_key(CONVERSATION) == before.memory_key(CONVERSATION)


def test_replay_rebuilds_the_store_and_adds_units_without_touching_the_original(traced):
    graph, state, _, system = traced
    restored = system.restore(graph)
    assert [u.var for u in restored.units] == [u.var for u in state.units]
    found = system.retrieve(QUESTION, restored, Tracer(graph, buffered=True))
    assert found.context == graph.variable("retrieved:c1:q0@1").value
    from memtrace_loop.memory_systems.base import RestoredUnit

    tracer = Tracer(graph.copy())
    bigger = system.with_units(restored, [RestoredUnit("Alice has a cat named Tom", "2023-05-08", "turn:D1:1@1")],
                               tracer)
    assert [u.name for u in bigger.units] == ["m1", "m3"] and len(restored.units) == 1
    assert "cat named Tom" in system.retrieve(QUESTION, bigger, Tracer(graph.copy(), buffered=True)).context
    assert bigger.folder != restored.folder != state.folder


def test_a_stop_inside_mems_own_try_block_stops_the_ingest_and_removes_its_folder():
    from memtrace_loop.pipeline.core.stop import Interrupted

    def stopping(messages: list[dict[str, str]]) -> str:
        if len(messages) == 1:  # the update call, which mem0 wraps in `except Exception`
            raise Interrupted("Ctrl-C")
        return script(messages)

    system, _ = build(stopping)
    root = Path(os.environ["MEM0_DIR"]) / "memtrace-mem0ai"
    before = set(root.iterdir()) if root.exists() else set()
    with pytest.raises(Interrupted):
        system.ingest(CONVERSATION, Tracer(ExecutionGraph("c1")))
    assert set(root.iterdir()) == before
