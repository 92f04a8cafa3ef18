"""Calling one of mem0's two LLM stages again, outside `add()`, exactly as mem0 1.0.x called it (replay).

`Mem0StagePredict` builds mem0's own messages from the stage's instruction (hint included) and the inputs,
sends them through the predictor's LM as the bridge does and reads the reply as mem0 does (`ValueError`
when mem0 could not); `recorded_inputs` rebuilds those inputs from a traced operation. No store re-run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import dspy
from memtrace_loop.memory_systems.base import ReplayUnsupportedError
from memtrace_loop.memory_systems.mem0.repair import read_turn
from memtrace_loop.memory_systems.mem0ai.bridge import EXTRACTION, UPDATE, call_stage_lm
from memtrace_loop.memory_systems.mem0ai.hooks import import_mem0, with_session_date
from memtrace_loop.memory_systems.mem0ai.trace import parse_reply
from memtrace_loop.memory_systems.signatures import render_turn
from memtrace_loop.pipeline.core.graph import ExecutionGraph, Operation

_JSON_OBJECT = {"type": "json_object"}  # what mem0 1.0.x sends with both calls


def memories_of(lines: str) -> list[dict[str, str]]:
    """The similar memories as mem0 showed them (`[{"id": "0", "text": ...}, ...]`) from the recorded
    `[0] text` lines (a line not starting the next id continues the text before it)."""
    memories: list[dict[str, str]] = []
    for line in lines.split("\n") if lines else []:
        head = f"[{len(memories)}] "
        if line.startswith(head):
            memories.append({"id": str(len(memories)), "text": line[len(head):]})
        elif memories:
            memories[-1]["text"] += "\n" + line
        else:
            raise ValueError(f"similar memories do not start with '[0] ': {lines[:80]!r}")
    return memories


def _reply_list(reply: str, key: str) -> list[Any]:
    """The list under `key` of a mem0 reply, read as mem0 reads it (an empty reply: nothing)."""
    if not import_mem0().memory.utils.remove_code_blocks(reply).strip():
        return []
    value = parse_reply(reply)
    items = value.get(key) if isinstance(value, dict) else None
    if not isinstance(items, list):
        raise ValueError(f'mem0 reply is not a JSON object with a "{key}" list: {reply[:200]!r}')
    return items


class Mem0StagePredict(dspy.Predict):
    """A mem0 stage as a predictor: called, it sends mem0's own messages around its instruction (the
    stage is told by the signature's output: `facts` for the extraction, else the update decision)."""

    def forward(self, **kwargs: Any) -> dspy.Prediction:
        mem0 = import_mem0()
        instruction = self.signature.instructions
        lm = self.lm or dspy.settings.lm
        if "facts" in self.signature.output_fields:
            system = with_session_date(instruction, str(kwargs.get("session_date", "")))
            system, user = mem0.memory.utils.ensure_json_instruction(system, str(kwargs["conversation"]))
            messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
            reply = call_stage_lm(EXTRACTION, lm, messages, _JSON_OBJECT)
            return dspy.Prediction(facts=mem0.memory.utils.normalize_facts(_reply_list(reply, "facts")))
        from mem0.configs.prompts import get_update_memory_messages  # mem0 is imported (import_mem0)

        memories = memories_of(str(kwargs.get("existing_memories", "")))
        message = get_update_memory_messages(memories, list(kwargs["new_facts"]), instruction)
        reply = call_stage_lm(UPDATE, lm, [{"role": "user", "content": message}], _JSON_OBJECT)
        return dspy.Prediction(actions=_reply_list(reply, "memory"))


def recorded_inputs(graph: ExecutionGraph, op: Operation) -> Mapping[str, Any]:
    """The keyword inputs of `Mem0StagePredict` that reproduce the recorded `op`'s mem0 call."""
    if op.stage == EXTRACTION and len(op.inputs) == 1:
        turn = read_turn(graph, op)
        speaker, time = str(turn.meta.get("speaker", "")), str(turn.meta.get("time", ""))
        text = turn.value.removeprefix(render_turn(speaker, time, ""))
        parsed = import_mem0().memory.utils.parse_messages([{"role": "user", "content": f"{speaker}: {text}"}])
        return {"conversation": f"Input:\n{parsed}", "session_date": str(op.meta.get("session_date", time[:10]))}
    if op.stage == UPDATE and len(op.inputs) == 2:
        facts, similar = (graph.variable(v) for v in op.inputs)
        return {"existing_memories": similar.value, "new_facts": json.loads(facts.value)}
    raise ReplayUnsupportedError(f"operation {op.id!r} ({op.stage}) is not a mem0 stage call this system recorded")

