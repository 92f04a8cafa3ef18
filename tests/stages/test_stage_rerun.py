"""Replay's stage repair contract, per registered system, on a real traced run in the simulated world.

`recorded_call(graph, op)` must rebuild the exact keyword inputs an LLM operation called its stage
with: calling the stage's predictor on them with the recorded instruction (no hint) sends a request
the run itself sent, word for word, and gives back the operation's recorded output, for every LLM
operation kind of the run. `repaired_units(graph, op,
prediction)` must return what a re-run adds to memory and nothing else: () for the recorded output
itself, exactly the added fact / event / sentence / ADD for a scripted output adding one, and exactly
the old version a recorded DELETE removed when the re-run decision drops that DELETE. A system whose
spec says it has no repair hooks (`Replay.NONE`: a user's custom system; `Replay.MEMORY`: none for its
own stages, the answer stage is the shared one) says so for each such operation.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Callable, Iterator
from functools import cache
from typing import Any

import dspy
import pytest
from memtrace_loop.memory_systems.base import MemorySystem, RecordedCall, ReplayUnsupportedError, RestoredUnit
from memtrace_loop.memory_systems.evermemos.signatures import EpisodeEvent, episode_value, event_value
from memtrace_loop.memory_systems.mem0ai.recall import memories_of
from memtrace_loop.memory_systems.registry import SYSTEMS, build_memory_system, spec_of
from memtrace_loop.memory_systems.signatures import MemoryAction
from memtrace_loop.memory_systems.spec import Replay
from memtrace_loop.pipeline.analysis.judge import make_judge
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.core.conventions import Namespace, OpStatus, is_in
from memtrace_loop.pipeline.core.graph import ExecutionGraph, Operation
from memtrace_loop.pipeline.core.records import PromptSet
from memtrace_loop.pipeline.core.tracing import Tracer
from memtrace_loop.pipeline.data.locomo import parse_locomo
from memtrace_loop.pipeline.loop.runner import run_dataset
from memtrace_loop.pipeline.sim.world import generate_locomo

from tests.support.sim import CONVERSATION, sim_lm

pytestmark = pytest.mark.usefixtures("lm_history")  # the requests a run sent are read from `lm.history`

SEED = 37  # a world no other replay test uses; its mem0 runs delete memories
SAMPLE = 4  # operations re-called per operation kind (spread over the run)
NEW = "Zed keeps a red kayak in his garage."
NEW_DATE = "3 March 2023"
UNSUPPORTED = {"detect_boundary", "check_sufficiency", "expand_queries"}  # no units of their own (documented)


@cache
def run_of(name: str) -> tuple[MemorySystem, ExecutionGraph, dspy.LM, frozenset[str]]:
    """The traced run, its LM and every request the run sent (messages, as JSON)."""
    lm = sim_lm()
    system = build_memory_system({"name": name}, HashingEmbedder())
    system.set_lm(lm)
    data = parse_locomo(generate_locomo(seed=SEED, n_conversations=1, sessions_per_conversation=3), "sim")
    result = run_dataset(system, make_judge(lm), data, workers=1)
    sent = frozenset(request_key(entry) for entry in lm.history)
    return system, next(iter(result.graph_by_conversation.values())), lm, sent


def traced(name: str) -> tuple[MemorySystem, ExecutionGraph]:
    system, graph, _, _ = run_of(name)
    return system, graph


def request_key(entry: dict[str, Any]) -> str:
    return json.dumps(entry["messages"], sort_keys=True, default=str)


def llm_ops(system: MemorySystem, graph: ExecutionGraph) -> dict[tuple[str, str], list[Operation]]:
    """(stage, operation name) -> the run's OK operations of that kind, for every LLM stage."""
    kinds: dict[tuple[str, str], list[Operation]] = collections.defaultdict(list)
    for op in graph.operations():
        if op.stage in system.stage_names() and op.status == OpStatus.OK:
            kinds[(op.stage, op.name)].append(op)
    return kinds


def sample(ops: list[Operation]) -> list[Operation]:
    step = max(1, len(ops) // SAMPLE)
    return ops[::step][:SAMPLE]


def recall(system: MemorySystem, graph: ExecutionGraph, op: Operation) -> tuple[RecordedCall, Any]:
    """The stage called again on its recorded inputs with the instruction it ran with (no hint); the
    one request it sends must be one the run sent."""
    _, _, lm, sent = run_of(system.name)
    call = system.recorded_call(graph, op.id)
    assert op.prompt is not None
    recorded = system.with_prompts(PromptSet({call.stage: graph.variable(op.prompt).value}))
    before = len(lm.history)
    prediction = dict(recorded.named_predictors())[call.stage](**call.inputs)
    requests = [request_key(entry) for entry in lm.history[before:]]
    assert len(requests) == 1 and requests[0] in sent, (op.id, requests[-1][:500])
    return call, prediction


def _words(text: Any) -> str:
    return " ".join(str(text).split())


def _expanded(prediction: Any, call: RecordedCall) -> list[str]:
    cleaned = dict.fromkeys(_words(q) for q in prediction.queries)
    return [json.dumps([q for q in cleaned if q and q != call.inputs["question"]][:3])]


# how each stage's tracing records a prediction: the values of the operation's output variables
RECORDED: dict[str, Callable[[Any, RecordedCall], list[str]]] = {
    "extract": lambda p, _: [json.dumps([f.strip() for f in p.facts if f and f.strip()])],
    "decide": lambda p, _: [json.dumps([a.model_dump() for a in p.actions])],
    "fact_extraction": lambda p, _: [json.dumps(list(p.facts))],
    "update_memory": lambda p, _: [json.dumps(list(p.actions))],
    "write_events": lambda p, _: [event_value(_words(e.text), _words(e.time)) for e in p.events if _words(e.text)],
    "write_episode": lambda p, _: [episode_value(_words(p.title), _words(p.narrative))],
    "detect_boundary": lambda p, _: ["new episode" if p.starts_new_episode else "same episode"],
    "check_sufficiency": lambda p, _: ["sufficient" if p.sufficient else "insufficient"],
    "expand_queries": _expanded,
    "respond": lambda p, _: [str(p.answer).strip()],
}


def turn_times(graph: ExecutionGraph, op: Operation) -> set[str]:
    return {graph.variable(v).meta["time"] for v in graph.ancestors(op.id) if is_in(v, Namespace.TURN)}


@pytest.mark.parametrize("name", SYSTEMS.names)
def test_recorded_inputs_reproduce_every_llm_operation(name: str) -> None:
    system, graph = traced(name)
    kinds = llm_ops(system, graph)
    replay = spec_of(name).replay
    unhooked = {op.id for (stage, _), ops in kinds.items() for op in ops
                if replay == Replay.NONE or (replay == Replay.MEMORY and stage in system.construction_stages)}
    for op in (op for ops in kinds.values() for op in ops if op.id in unhooked):  # said plainly, system named
        with pytest.raises(ReplayUnsupportedError, match=r"system .* (no repair hooks|cannot)"):
            system.recorded_call(graph, op.id)
        with pytest.raises(ReplayUnsupportedError, match=r"system .* (no repair hooks|cannot)"):
            system.repaired_units(graph, op.id, dspy.Prediction())
    if replay == Replay.NONE:
        return
    assert {stage for stage, _ in kinds} == set(system.stage_names())  # the run exercised every LLM stage
    for (stage, _), ops in kinds.items():
        for op in (op for op in sample(ops) if op.id not in unhooked):
            call, prediction = recall(system, graph, op)
            assert call.stage == stage
            assert RECORDED[stage](prediction, call) == [graph.variable(v).value for v in op.outputs], op.id
            if stage in system.construction_stages:  # the time units it writes carry: a turn it read
                assert call.time in turn_times(graph, op), op.id
            else:
                assert call.time == ""


def construction_ops(name: str) -> Iterator[tuple[MemorySystem, ExecutionGraph, Operation]]:
    system, graph = traced(name)
    for (stage, _), ops in llm_ops(system, graph).items():
        if stage in system.construction_stages:
            yield from ((system, graph, op) for op in sample(ops))


REPAIRED = [n for n, spec in SYSTEMS.items() if spec.construction_stages and spec.replay == Replay.FULL]


@pytest.mark.parametrize("name", REPAIRED)
def test_a_rerun_that_writes_what_was_recorded_adds_nothing(name: str) -> None:
    checked: collections.Counter[str] = collections.Counter()
    for system, graph, op in construction_ops(name):
        _, prediction = recall(system, graph, op)
        if op.stage in UNSUPPORTED:
            with pytest.raises(ReplayUnsupportedError, match=op.stage):
                system.repaired_units(graph, op.id, prediction)
            continue
        assert system.repaired_units(graph, op.id, prediction) == (), op.id
        checked[op.stage] += 1
    assert set(checked) == set(SYSTEMS.get(name).construction_stages) - UNSUPPORTED


# a scripted re-run output: the recorded one plus ONE new piece of information, and the unit it must give
def _plus_one(stage: str, p: Any) -> tuple[dspy.Prediction, str, str]:
    """(the prediction, the unit's text, the unit's time: "" for the time of the turn read)."""
    if stage in ("extract", "fact_extraction"):
        return dspy.Prediction(facts=[*p.facts, NEW]), NEW, ""
    if stage == "decide":
        return dspy.Prediction(actions=[*p.actions, MemoryAction(event="ADD", text=NEW)]), NEW, ""
    if stage == "update_memory":
        return dspy.Prediction(actions=[*p.actions, {"id": "99", "text": NEW, "event": "ADD"}]), NEW, ""
    if stage == "write_events":
        return dspy.Prediction(events=[*p.events, EpisodeEvent(text=NEW, time=NEW_DATE)]), NEW, NEW_DATE
    assert stage == "write_episode", stage
    return dspy.Prediction(title=p.title, narrative=f"{p.narrative} {NEW}"), NEW, ""


@pytest.mark.parametrize("name", REPAIRED)
def test_a_rerun_that_adds_one_fact_restores_exactly_that_fact(name: str) -> None:
    checked = set()
    for system, graph, op in construction_ops(name):
        if op.stage in UNSUPPORTED or not op.outputs:
            continue
        call, recorded = recall(system, graph, op)
        prediction, text, time = _plus_one(op.stage, recorded)
        expected = RestoredUnit(text, time or call.time, op.outputs[0])
        assert system.repaired_units(graph, op.id, prediction) == (expected,), op.id
        checked.add(op.stage)
    assert checked == set(SYSTEMS.get(name).construction_stages) - UNSUPPORTED


def deleting_decisions(graph: ExecutionGraph) -> Iterator[tuple[Operation, Operation]]:
    """(decision operation, the one store DELETE it caused) for decisions that deleted one memory."""
    for op in graph.operations():
        if op.name != "decide_updates" or op.failed:
            continue
        writes = [s for s in graph.consumers(op.outputs[0]) if s.status == OpStatus.OK and len(s.inputs) == 2]
        if len(writes) == 1 and writes[0].name == "memory_delete":
            yield op, writes[0]


DECIDING = [n for n in REPAIRED if {"decide", "update_memory"} & set(SYSTEMS.get(n).construction_stages)]


@pytest.mark.parametrize("name", DECIDING)
def test_a_rerun_decision_that_keeps_a_deleted_memory_restores_its_old_version(name: str) -> None:
    system, graph = traced(name)
    found = list(deleting_decisions(graph))
    assert found, "the world of this seed deletes a memory"
    for op, delete in found:
        _, recorded = recall(system, graph, op)
        assert system.repaired_units(graph, op.id, recorded) == ()  # the same decision keeps nothing deleted
        kept = [a for a in recorded.actions if (a.event if isinstance(a, MemoryAction) else a["event"]) != "DELETE"]
        assert len(kept) == len(recorded.actions) - 1
        old = graph.variable(delete.inputs[1])
        assert old.value
        assert system.repaired_units(graph, op.id, dspy.Prediction(actions=kept)) == (
            RestoredUnit(old.value, old.meta["time"], old.id),
        )


HINT = ('Make sure your output keeps this information: "Zed keeps a red kayak" '
        '(a later question is answered by "kayak").')


@pytest.mark.parametrize("name", [n for n, spec in SYSTEMS.items() if spec.replay == Replay.FULL])
def test_the_hint_added_to_the_instruction_reaches_the_request_of_every_stage(name: str) -> None:
    system, graph = traced(name)
    lm = run_of(name)[2]
    for (stage, _), ops in llm_ops(system, graph).items():
        op = ops[0]
        call = system.recorded_call(graph, op.id)
        assert op.prompt is not None
        hinted = system.with_prompts(PromptSet({stage: f"{graph.variable(op.prompt).value}\n{HINT}"}))
        before = len(lm.history)
        dict(hinted.named_predictors())[stage](**call.inputs)
        (request,) = lm.history[before:]
        assert any(HINT in str(m.get("content", "")) for m in request["messages"]), (name, stage)


def test_mem0s_memory_list_is_read_back_from_the_recorded_lines_even_across_line_breaks() -> None:
    assert memories_of("") == []
    assert memories_of("[0] Alice lives in Rome.\n[1] Bob said:\n[3] not an id\n[2] Bob runs.") == [
        {"id": "0", "text": "Alice lives in Rome."},
        {"id": "1", "text": "Bob said:\n[3] not an id"},
        {"id": "2", "text": "Bob runs."},
    ]
    with pytest.raises(ValueError, match="do not start with"):
        memories_of("Alice lives in Rome.")


def test_a_rerun_decision_that_applies_an_action_the_store_rejected_restores_its_text() -> None:
    """The recorded decision named a memory that does not exist (the store rejected it: nothing written);
    a re-run that ADDs the same text writes it, so it is a repaired unit although the decision held it."""
    text = "Alice moved to Paris last month."
    rejected = [{"event": "UPDATE", "id": "m99", "text": text}]
    lm = dspy.utils.DummyLM([{"facts": [text]}, {"actions": rejected}, {"facts": []}, {"facts": []}])
    system = build_memory_system({"name": "mem0"}, HashingEmbedder())
    system.set_lm(lm)
    graph = ExecutionGraph(CONVERSATION.id)
    system.ingest(CONVERSATION, Tracer(graph))
    (decide,) = [op for op in graph.operations() if op.name == "decide_updates"]
    assert [op.status for op in graph.consumers(decide.outputs[0])] == [OpStatus.FAILED]
    same = dspy.Prediction(actions=[MemoryAction(**rejected[0])])
    assert system.repaired_units(graph, decide.id, same) == ()  # the same rejected action writes nothing
    applied = dspy.Prediction(actions=[MemoryAction(event="ADD", text=text)])
    assert system.repaired_units(graph, decide.id, applied) == (
        RestoredUnit(text, CONVERSATION.turns[0].time, decide.outputs[0]),
    )
