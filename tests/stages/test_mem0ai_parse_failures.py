"""mem0's parse failures as the graph records them (memory_systems/mem0ai/trace.py) are what
`schemas.is_parse_failure` and the local-model benchmark count: a reply mem0 could not read (prose, JSON
under another key, empty) in either call is a failed operation whose error says so; a failing endpoint
is a failed operation that is not a parse failure. Scripted LM, the real mem0 library."""

from __future__ import annotations

import json

from memtrace_loop.memory_systems.mem0ai.schemas import is_parse_failure
from memtrace_loop.memory_systems.mem0ai.system import Mem0aiMemory
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.records import Conversation, Turn
from memtrace_loop.pipeline.core.tracing import Tracer

from tests.support.scripted_lm import scripted_lm

DAY = "2023-05-08T13:56"
# turn text -> the extraction reply; the update reply is read from the facts it gets
EXTRACTION_REPLIES = {
    "prose": "Sure! Ada paints.",
    "other key": json.dumps({"fact": ["Ada paints"]}),
    "empty": "",
    "good": json.dumps({"facts": ["Ada paints"]}),
    "bad update": json.dumps({"facts": ["Ada sings"]}),
    "endpoint down": None,
}
UPDATE_REPLIES = {
    "Ada paints": json.dumps({"memory": [{"id": "0", "text": "Ada paints", "event": "ADD"}]}),
    "Ada sings": "I would add that Ada sings.",
}


def script(messages: list[dict[str, str]]) -> str:
    if messages[0]["role"] == "system":
        turn = messages[-1]["content"].split("Ada: ", 1)[1].strip()
        if EXTRACTION_REPLIES[turn] is None:
            raise ConnectionError("endpoint went away")
        return EXTRACTION_REPLIES[turn]
    return next(reply for fact, reply in UPDATE_REPLIES.items() if fact in messages[0]["content"].rsplit("```", 2)[-2])


def test_parse_failures_of_both_calls_are_recognized_and_nothing_else():
    system = Mem0aiMemory(HashingEmbedder())
    system.set_lm(scripted_lm(script)[0])
    turns = tuple(Turn(f"D1:{i}", "Ada", text, 1, DAY) for i, text in enumerate(EXTRACTION_REPLIES, 1))
    graph = ExecutionGraph("c1")
    system.ingest(Conversation("c1", ("Ada", "Bruno"), turns), Tracer(graph))

    failed = {(op.stage, op.outputs[0].split("@")[0]): op.error for op in graph.operations() if op.failed}
    parse = {key for key, error in failed.items() if is_parse_failure(error)}
    assert parse == {("fact_extraction", "facts:D1:1"), ("fact_extraction", "facts:D1:2"),
                     ("fact_extraction", "facts:D1:3"), ("update_memory", "decision:D1:5")}, failed
    assert set(failed) - parse == {("fact_extraction", "facts:D1:6")}
    assert "endpoint went away" in failed[("fact_extraction", "facts:D1:6")]
