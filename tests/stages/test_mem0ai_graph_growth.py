"""The graph of `memory_system=mem0ai` grows linearly with the conversation (the issue's "graphs stay
linear in conversation length"): twice the turns give twice the variables, operations and edges, within
bounds, on the real mem0 library with a scripted LM (no timing: experiments/lab/bench/mem0ai_bench.py
measures the time per add and the sizes at 20..160 turns). The script makes every turn a fact that is
added, and every later fact about the same topic an UPDATE of what mem0 shows, so the store, the
similarity searches and the history all grow with the conversation."""

from __future__ import annotations

import ast
import json
import re

from memtrace_loop.experiments.lab.bench.mem0ai_bench import GraphSize, graph_size
from memtrace_loop.memory_systems.mem0ai.system import Mem0aiMemory
from memtrace_loop.pipeline.backends.embeddings import HashingEmbedder
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.records import Conversation, Turn
from memtrace_loop.pipeline.core.tracing import Tracer

from tests.support.scripted_lm import scripted_lm

TOPICS = ("pottery", "cycling", "chess", "baking", "hiking")


def script(messages: list[dict[str, str]]) -> str:
    if messages[0]["role"] == "system":  # extraction: the turn's text is the fact
        return json.dumps({"facts": [messages[-1]["content"].split(": ", 2)[-1].strip()]})
    prompt = messages[0]["content"]
    blocks = [ast.literal_eval(b) for b in re.findall(r"```\s*(\[.*?\])\s*```", prompt, re.DOTALL)]
    shown = next((b for b in blocks if b and isinstance(b[0], dict)), [])
    facts = next((b for b in blocks if b and isinstance(b[0], str)), [])
    actions = []
    for fact in facts:
        same = next((m for m in shown if m["text"].split()[2:3] == fact.split()[2:3]), None)
        actions.append({"id": same["id"], "text": fact, "event": "UPDATE", "old_memory": same["text"]} if same
                       else {"id": str(len(shown) + len(actions)), "text": fact, "event": "ADD"})
    return json.dumps({"memory": actions})


def size_after(turns: int) -> GraphSize:
    conversation = Conversation("c1", ("Ada", "Bruno"), tuple(
        Turn(f"D1:{i}", "Ada", f"I like {TOPICS[i % len(TOPICS)]} number {i}.", 1, "2023-05-08T13:56")
        for i in range(1, turns + 1)
    ))
    system = Mem0aiMemory(HashingEmbedder())
    system.set_lm(scripted_lm(script)[0])
    graph = ExecutionGraph("c1")
    system.ingest(conversation, Tracer(graph))
    ops = list(graph.operations())
    assert {op.name for op in ops} >= {"memory_add", "memory_update"}  # both kinds of store writes happen
    return graph_size(graph)


def test_twice_the_turns_twice_the_graph():
    small, big = size_after(10), size_after(20)
    for field in ("variables", "operations", "edges"):
        ratio = getattr(big, field) / getattr(small, field)
        assert 1.8 <= ratio <= 2.3, (field, small, big)
