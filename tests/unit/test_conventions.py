"""The graph conventions: name builders and parsers round-trip, every namespace has a kind, typed
kinds and statuses in the graph and through JSON, and the one-call LLM stage of the tracer."""

from __future__ import annotations

import dspy
import pytest
from memtrace_loop.pipeline.core import conventions as cv
from memtrace_loop.pipeline.core.conventions import (
    KIND_BY_NAMESPACE,
    MEMORY_KINDS,
    QUESTION_SIDE_KINDS,
    Namespace,
    OpKind,
    OpStatus,
    VarKind,
)
from memtrace_loop.pipeline.core.graph import ExecutionGraph, GraphError
from memtrace_loop.pipeline.core.graph_io import graph_from_json, graph_to_json
from memtrace_loop.pipeline.core.tracing import Tracer

BUILDERS = {
    Namespace.TURN: (cv.turn_name, "D3:7"),
    Namespace.FACTS: (cv.facts_name, "D3:7"),
    Namespace.SIMILAR: (cv.similar_name, "D3:7"),
    Namespace.DECISION: (cv.decision_name, "D3:7"),
    Namespace.MEMORY: (cv.memory_name, "m17"),
    Namespace.ENTRY: (cv.entry_name, "D3:7"),
    Namespace.CHUNK: (cv.chunk_name, 4),
    Namespace.BOUNDARY: (cv.boundary_name, "D3:7"),
    Namespace.EVENT: (cv.event_name, 12),
    Namespace.EPISODE: (cv.episode_name, 3),
    Namespace.QUERY: (cv.query_name, "conv-26:q4"),
    Namespace.SUFFICIENCY: (cv.sufficiency_name, "conv-26:q4"),
    Namespace.EXPANDED: (cv.expanded_name, "conv-26:q4"),
    Namespace.RETRIEVED: (cv.retrieved_name, "conv-26:q4"),
    Namespace.ANSWER: (cv.answer_name, "conv-26:q4"),
    Namespace.GOLD: (cv.gold_name, "conv-26:q4"),
    Namespace.VERDICT: (cv.verdict_name, "conv-26:q4"),
    Namespace.PROMPT: (cv.prompt_name, "extract"),
}


def test_every_namespace_has_a_builder_a_kind_and_a_row_in_the_written_table():
    assert set(BUILDERS) | {Namespace.CONTEXT} == set(Namespace)
    assert set(KIND_BY_NAMESPACE) == set(Namespace)
    assert set(KIND_BY_NAMESPACE.values()) == set(VarKind)  # no kind without a name that carries it
    for namespace in Namespace:
        assert f"`{namespace}:" in cv.__doc__, f"{namespace} is not in the conventions table"
    assert {"memory", "chunk", "buffer", "episode", "event"} == MEMORY_KINDS
    assert not MEMORY_KINDS & QUESTION_SIDE_KINDS


@pytest.mark.parametrize("namespace", list(BUILDERS))
def test_builders_and_parsers_round_trip(namespace):
    build, key = BUILDERS[namespace]
    name = build(key)
    assert name == f"{namespace.value}:{key}"
    var_id = cv.first_version(name)
    for node in (name, var_id, f"{name}@12"):
        assert cv.split_name(node) == (namespace, str(key))
        assert cv.key_of(node, namespace) == str(key)
        assert cv.kind_of(node) == KIND_BY_NAMESPACE[namespace]
        assert cv.is_in(node, namespace) and cv.name_of(node) == name
    other = next(n for n in Namespace if n != namespace)
    assert not cv.is_in(name, other)
    with pytest.raises(ValueError):
        cv.key_of(name, other)


def test_parsing_names_outside_the_conventions_and_the_fixed_names():
    assert cv.BUFFER_CONTEXT_NAME == "context:buffer" and cv.kind_of(cv.BUFFER_CONTEXT_NAME) == VarKind.CONTEXT
    assert cv.kind_of("similar:D1:1@1") == VarKind.RETRIEVED and cv.kind_of("retrieved:q1") == VarKind.CONTEXT
    assert cv.kind_of("expanded:q1") == VarKind.QUERY and cv.kind_of("entry:D1:1") == VarKind.BUFFER
    assert cv.turn_id_of("turn:D1:2@1") == "D1:2" and cv.turn_id_of("U26:D1:2@1") == "U26:D1:2"
    assert cv.prefix(Namespace.ANSWER) == "answer:"
    for bad in ("answer", "nonsense:x@1", ""):
        with pytest.raises(ValueError):
            cv.split_name(bad)


def test_graph_types_kinds_and_statuses_and_json_keeps_the_same_strings():
    graph = ExecutionGraph("g")
    turn = graph.add_variable(cv.turn_name("D1:1"), "turn", "[8 May 2023] Alice: hi")
    foreign = graph.add_variable("x", "judgement", "?")  # another tool's kind stays a plain string
    facts = graph.add_variable(cv.facts_name("D1:1"), VarKind.FACTS, "[]")
    ok = graph.add_operation("extract_facts", "extract", OpKind.EXTRACTION, [turn.id], [facts.id])
    failed = graph.add_operation("memory_add", "store", OpKind.OTHER, [facts.id], [], status="failed", error="no")
    assert type(turn.kind) is VarKind and turn.kind == VarKind.TURN == "turn"
    assert type(foreign.kind) is str and foreign.kind == "judgement"
    assert ok.status is OpStatus.OK and not ok.failed
    assert failed.status is OpStatus.FAILED and failed.failed
    with pytest.raises(ValueError):
        graph.add_operation("bad", "x", OpKind.OTHER, [], [], status="maybe")
    text = graph_to_json(graph)
    assert '"turn","[8 May 2023]' in text and '"failed","no"' in text and "VarKind" not in text
    loaded = graph_from_json(text)
    assert graph_to_json(loaded) == text
    assert loaded.variable(turn.id).kind is VarKind.TURN and loaded.operation(failed.id).status is OpStatus.FAILED
    broken = text.replace('"failed","no"', '"exploded","no"')
    with pytest.raises(GraphError, match="malformed"):
        graph_from_json(broken)


class Echo(dspy.Signature):
    """Repeat the text."""

    text: str = dspy.InputField()
    echo: str = dspy.OutputField()


def test_one_call_llm_stage_records_outputs_prompt_and_failure():
    graph = ExecutionGraph("g")
    tracer = Tracer(graph)
    turn = tracer.variable(cv.turn_name("D1:1"), VarKind.TURN, "hello")
    lm = dspy.utils.DummyLM([{"echo": "hello"}])
    with (
        dspy.context(lm=lm),
        tracer.stage(
            dspy.Predict(Echo), "echo", op="echo_turn", kind=OpKind.EXTRACTION, inputs=[turn], meta={"n": 1},
            text="hello",
        ) as call,
    ):
        assert call.ok and call.prediction.echo == "hello"
        out = call.output(cv.facts_name("D1:1"), VarKind.FACTS, call.prediction.echo)

    def broken(**kwargs):
        raise RuntimeError("LM down")

    with tracer.stage(broken, "echo", op="echo_turn", kind=OpKind.EXTRACTION, inputs=[turn], text="x") as failed:
        assert not failed.ok and failed.prediction is None and "LM down" in failed.error
        failed.output(cv.facts_name("D1:1"), VarKind.FACTS, "")
    first, second = graph.operations()
    assert first.outputs == (out,) and first.prompt == "prompt:echo@1" and first.status is OpStatus.OK
    assert first.meta == {"n": 1} and first.usage.calls == 1
    assert graph.variable(first.prompt).value == Echo.instructions
    assert second.status is OpStatus.FAILED and "RuntimeError: LM down" in second.error
    assert second.prompt == "prompt:echo@2" and graph.variable(second.prompt).value == ""  # no signature

    with (  # the body's own bug propagates and records nothing
        pytest.raises(KeyError),
        tracer.stage(broken, "echo", op="echo_turn", kind=OpKind.EXTRACTION, inputs=[turn], text="x"),
    ):
        raise KeyError("bug in the system")
    assert graph.n_operations == 2
