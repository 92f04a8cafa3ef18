"""A user's own memory system through `memory_system=custom` on the simulated world: the target loader's
one-line errors, the tracing API's records (LLM operations with their prompt variable, a failed call
recorded not raised, what the code did not mark under `untraced`), the user's knobs validated and
applied, and lineage blame landing on the user's operations."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import memtrace_loop.memory_systems.custom.api as memtrace
import pytest
from memtrace_loop.memory_systems.base import KnobError
from memtrace_loop.memory_systems.custom.target import load_target
from memtrace_loop.memory_systems.registry import build_memory_system
from memtrace_loop.pipeline.analysis.attribution.lineage import LineageAttributor
from memtrace_loop.pipeline.analysis.judge import make_judge
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.core.config import ConfigError
from memtrace_loop.pipeline.core.conventions import OpStatus
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.tracing import Tracer
from memtrace_loop.pipeline.loop.runner import run_dataset

from tests.support.sim import sim_dataset, sim_lm

HERE = "tests.stages.test_custom_memory"
ODD = memtrace.LLMStage("summarize", "Summarize the context.", ("context",), ("gist",))  # no stage of the sim world
REPLY = memtrace.LLMStage("reply", "Answer from the context.", ("context", "question"), ("answer",))


@dataclass(frozen=True)
class Untraced:
    """Marks nothing but its LLM calls: keeps raw turns, answers with one LLM call (an odd stage the
    simulated world cannot answer for "when" questions) and returns the context it used."""

    depth: int = 3

    def stages(self):
        return (ODD, REPLY)

    def knobs(self) -> Mapping[str, memtrace.Knob]:
        return {"depth": self.depth}

    def with_knobs(self, changes):
        return replace(self, **changes)

    def new_memory(self, conversation_id: str) -> list[str]:
        return []

    def add_turn(self, memory: list[str], turn: memtrace.Turn, lm: memtrace.LM) -> None:
        memory.append(f"{turn.speaker}: {turn.text}")

    def answer(self, memory: list[str], question: str, lm: memtrace.LM) -> memtrace.Answer:
        context = "\n".join(memory[-self.depth:])
        with memtrace.op("answer_it") as op:  # the stage is the one `ask` names
            if question.startswith("When"):
                text = lm.ask("summarize", context=context)["gist"]
            else:
                text = lm.ask("reply", context=context, question=question)["answer"]
            op.reads_question()
        return memtrace.Answer(str(text), context)


def untraced() -> Untraced:
    return Untraced()


class Undeclared(Untraced):
    def add_turn(self, memory: list[str], turn: memtrace.Turn, lm: memtrace.LM) -> None:
        with memtrace.op("keep", stage="nowhere", kind="extraction") as op:
            op.reads_turn(turn.id)


def undeclared() -> Undeclared:
    return Undeclared()


def not_a_system() -> object:
    return object()


def broken() -> Untraced:
    raise RuntimeError("no index on disk")


NOT_CALLABLE = 3


@pytest.mark.parametrize(("target", "problem"), [
    ("tests.stages.test_custom_memory", "expected `package.module:function`"),
    ("no_such_pkg.mod:build", "cannot import module 'no_such_pkg.mod' (ModuleNotFoundError"),
    (f"{HERE}:nope", f"module '{HERE}' has no attribute 'nope'"),
    (f"{HERE}:NOT_CALLABLE", "int is not callable"),
    (f"{HERE}:broken", "build() raised RuntimeError: no index on disk"),
    (f"{HERE}:not_a_system", "build() returned a object without the methods ['stages', 'knobs'"),
])
def test_a_target_that_does_not_fit_is_one_line_naming_it(target: str, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_target(target)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"memory_system.target={target!r}: ") and problem in message


def test_ops_outside_a_session_record_nothing_and_undeclared_stages_are_refused() -> None:
    with memtrace.op("anything", stage="nowhere") as op:  # the user's code run on its own: no-op marks
        op.reads_question().writes_unit("k", "text")
    with pytest.raises(memtrace.TracingError, match="no operation is being recorded"):
        memtrace.current_op()
    system = build_memory_system({"name": "custom", "target": f"{HERE}:undeclared"}, HashingEmbedder())
    with pytest.raises(memtrace.TracingError, match=r"stage 'nowhere' is not declared"):
        system.ingest(sim_dataset(n_conversations=1).conversations[0], Tracer(ExecutionGraph("g")))


def test_a_failing_call_is_a_failed_operation_and_the_unmarked_answer_is_recorded() -> None:
    system = build_memory_system({"name": "custom", "target": f"{HERE}:untraced"}, HashingEmbedder())
    lm = sim_lm()
    system.set_lm(lm)
    result = run_dataset(system, make_judge(lm), sim_dataset(n_conversations=1), workers=1)
    (graph,) = result.graph_by_conversation.values()
    failed = [op for op in graph.operations() if op.name == "answer_it" and op.stage == "summarize"]
    assert failed and all(op.status == OpStatus.FAILED and "no handler for a stage" in op.error for op in failed)
    assert all(graph.variable(op.prompt).name == "prompt:summarize" for op in failed)
    replied = [op for op in graph.operations() if op.name == "answer_it" and op.stage == "reply"]
    assert replied and all(op.status == OpStatus.OK and op.usage.calls == 1 for op in replied)
    returned = [op for op in graph.operations() if op.stage == "untraced"]
    assert {op.name for op in returned} == {"returned_context", "returned_answer"}
    when = [case for case in result.results if case.question.text.startswith("When")]
    assert when and all(not case.correct and case.prediction == "" for case in when)


def test_the_users_knobs_are_validated_and_applied() -> None:
    system = build_memory_system({"name": "custom", "knobs": {"top_k": 3}}, HashingEmbedder())
    assert system.knob_values() == {"top_k": 3} and system.non_default_knobs() == {"top_k": 3}
    assert system.with_knobs({"top_k": 7}).knob_values() == {"top_k": 7}
    with pytest.raises(KnobError, match=r"knobs \['depth'\] are not knobs of custom system"):
        system.with_knobs({"depth": 2})
    with pytest.raises(KnobError, match=r"knob 'top_k' of custom system .* must be a int, got '7'"):
        system.with_knobs({"top_k": "7"})
    with pytest.raises(KnobError, match="top_k must be a positive integer"):
        system.with_knobs({"top_k": 0})
    with pytest.raises(ConfigError, match=r"^memory_system\.knobs: knob 'top_k' of custom system .* got 'eight'"):
        build_memory_system({"name": "custom", "knobs": {"top_k": "eight"}}, HashingEmbedder())


def test_lineage_blames_the_users_operations() -> None:
    system = build_memory_system({"name": "custom", "knobs": {"top_k": 2}}, HashingEmbedder())
    lm = sim_lm()
    system.set_lm(lm)
    result = run_dataset(system, make_judge(lm), sim_dataset(n_conversations=1), workers=2)
    (graph,) = result.graph_by_conversation.values()
    blamed = [LineageAttributor().attribute(graph, c) for c in result.results if not c.correct]
    assert blamed and all(a is not None for a in blamed)
    ops = {graph.operation(a.op).name for a in blamed if a is not None}
    assert "search_chunks" in ops and ops <= {"store_turn", "search_chunks", "generate_answer"}
    search = next(op for op in graph.operations() if op.name == "search_chunks")
    assert search.meta["k"] == 2 and search.meta["near_misses"]
