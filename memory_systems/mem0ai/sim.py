"""The simulated world's answers to the real `mem0ai` library's two LLM requests (`STAGES`).

Both rows recognize mem0 1.0.x's message structure (never our wording) and answer in mem0's JSON shapes with
the world's own extract and decide behaviour; the `{"facts": ...}` shape only when the prompt states it.
Part of the simulated world (reached through `SPEC.sim`); it imports neither mem0 nor the adapter.
"""

from __future__ import annotations

import json
import re
from typing import Any

from memtrace_loop.pipeline.core.literals import literal_eval
from memtrace_loop.pipeline.sim.dates import human, parse_date
from memtrace_loop.pipeline.sim.handlers import decide_actions, extract_facts
from memtrace_loop.pipeline.sim.hints import quotes_in
from memtrace_loop.pipeline.sim.protocol import StageRequest
from memtrace_loop.pipeline.sim.rules import RULES, rules_in
from memtrace_loop.pipeline.sim.stages import ForeignFormat, SimStage

# mem0 1.0.x's fixed structure (mem0/memory/main.py `_add_to_vector_store`, mem0/configs/prompts.py)
INPUT_HEAD = "Input:\n"
FACTS_MARKER = "The new retrieved facts are mentioned in the triple backticks."
SCHEMA_MARKER = "You must return your response in the following JSON structure only"
MEMORY_MARKERS = (
    "Below is the current content of my memory which I have collected till now.", "Current memory is empty.",
)
FENCE = "```"
_ROLE_LINE = re.compile(r"^(?P<role>user|assistant|system): ?(?P<text>.*)$")
_DATE_LINE = re.compile(r"today's date is\s*(?P<date>[^\n]*)", re.IGNORECASE)
_BRACKETED = re.compile(r"^\s*\[[^\]]*\]")
_NAMES_FACTS = re.compile(r"\bfacts\b", re.IGNORECASE)
_NAMES_JSON = re.compile(r"\bjson\b", re.IGNORECASE)
OTHER_KEY = "memories"  # where a model puts the facts when the prompt never names mem0's "facts" key


def _stage_rules(text: str, stage: str) -> frozenset[str]:
    ids = {rule.id for rule in RULES if rule.stage == stage}
    return rules_in(text) & ids


def _content(message: dict[str, Any]) -> str:
    content = message.get("content", "")
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content or "")


# ---------------------------------------------------------------------------------------------- extraction


def _role_lines(body: str) -> list[tuple[str, str]] | None:
    """parse_messages lines as (role, text); a line without a role prefix continues the previous one."""
    lines: list[tuple[str, str]] = []
    for raw in body.splitlines():
        match = _ROLE_LINE.match(raw)
        if match:
            lines.append((match.group("role"), match.group("text")))
        elif lines:
            role, text = lines[-1]
            lines[-1] = (role, f"{text}\n{raw}")
        elif raw.strip():
            return None
    return lines or None


def read_extraction(messages: list[dict[str, Any]]) -> StageRequest | None:
    """mem0's extraction request (a system prompt, then "Input:\\n" + parse_messages lines), or None."""
    if len(messages) != 2 or [m.get("role") for m in messages] != ["system", "user"]:
        return None
    system, user = _content(messages[0]), _content(messages[1])
    if not user.startswith(INPUT_HEAD):
        return None
    lines = _role_lines(user[len(INPUT_HEAD):])
    if lines is None:
        return None
    dated = _DATE_LINE.search(system)
    day = parse_date(dated.group("date")) if dated else None
    turns = [text.strip() for role, text in lines if role == "user" and text.strip()]
    return StageRequest(
        instruction=system, output_types={"facts": "list[str]"},
        inputs={"turns": json.dumps(turns), "session_date": human(day) if day else ""}, json_mode=True,
    )


def _rendered_turn(turn: str, session_date: str) -> str:
    """A turn as `extract_facts` reads it: "[<session date>] <Speaker>: <text>" (a turn that carries its
    own bracketed date keeps it)."""
    if not session_date or _BRACKETED.match(turn):
        return turn
    return f"[{session_date}] {turn}"


def extraction_handler(request: StageRequest) -> dict[str, Any]:
    """`{"facts": [...]}`: every user turn read under the extract rules the prompt states."""
    rules, quotes = _stage_rules(request.instruction, "extract"), quotes_in(request.instruction)
    session_date = request.inputs.get("session_date", "")
    facts: list[str] = []
    for turn in json.loads(request.inputs.get("turns", "[]")):
        facts.extend(extract_facts(_rendered_turn(str(turn), session_date), rules, quotes))
    return {"facts": list(dict.fromkeys(facts))}


def write_extraction(request: StageRequest, values: dict[str, Any]) -> str:
    """mem0's reply shape when the prompt states it; else what a model writes without knowing it."""
    facts = [str(fact) for fact in values.get("facts", [])]
    prompt = request.instruction
    if _NAMES_FACTS.search(prompt) and _NAMES_JSON.search(prompt):
        return json.dumps({"facts": facts}, ensure_ascii=False)
    if _NAMES_JSON.search(prompt):
        return json.dumps({OTHER_KEY: facts}, ensure_ascii=False)
    return "\n".join(f"- {fact}" for fact in facts) or "Nothing worth remembering."


# ---------------------------------------------------------------------------------------------- update


def _fenced(text: str, start: int) -> tuple[str, int, int] | None:
    """(inside, begin, end) of the first ``` block at or after `start` (end: just past its closing fence)."""
    begin = text.find(FENCE, start)
    if begin < 0:
        return None
    close = text.find(FENCE, begin + len(FENCE))
    if close < 0:
        return None
    return text[begin + len(FENCE):close], begin, close + len(FENCE)


def _literal(raw: str) -> Any:
    try:
        return literal_eval(raw.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


def _memories(raw: str) -> list[dict[str, str]]:
    value = _literal(raw)
    if not isinstance(value, list):
        return []
    return [
        {"id": str(item.get("id", "")), "text": str(item.get("text", ""))}
        for item in value
        if isinstance(item, dict)
    ]


def _memory_block(text: str, facts_at: int) -> tuple[list[dict[str, str]], int, int]:
    """The memory list before the facts marker and the span of its block ((-1, -1): none shown)."""
    marker_at = max(text.rfind(marker, 0, facts_at) for marker in MEMORY_MARKERS)
    if marker_at < 0 or text.startswith(MEMORY_MARKERS[1], marker_at):
        return [], -1, -1
    block = _fenced(text, marker_at)
    if block is None or block[2] > facts_at:
        return [], -1, -1
    return _memories(block[0]), block[1], block[2]


def read_update(messages: list[dict[str, Any]]) -> StageRequest | None:
    """mem0's update request (one user message ending in mem0's fixed appended text), or None."""
    if len(messages) != 1 or messages[0].get("role") != "user":
        return None
    text = _content(messages[0])
    facts_at = text.rfind(FACTS_MARKER)
    if facts_at < 0 or text.find(SCHEMA_MARKER, facts_at) < 0:
        return None
    facts_block = _fenced(text, facts_at)
    if facts_block is None:
        return None
    memories, mem_begin, mem_end = _memory_block(text, facts_at)
    facts = _literal(facts_block[0])
    facts = [str(fact) for fact in facts] if isinstance(facts, list) else []
    instruction = text[: facts_block[1]] + text[facts_block[2]:]  # the message without its facts ...
    if mem_begin >= 0:  # ... and without its memories: the rules are in the words around the data
        instruction = text[:mem_begin] + text[mem_end: facts_block[1]] + text[facts_block[2]:]
    return StageRequest(
        instruction=instruction, output_types={"actions": "list[dict]"},
        inputs={"memories": json.dumps(memories), "new_facts": json.dumps(facts)}, json_mode=True,
    )


def update_handler(request: StageRequest) -> dict[str, Any]:
    """`{"actions": [...]}` in the world's decide form (event, id, text) for mem0's memories and facts."""
    rules, quotes = _stage_rules(request.instruction, "decide"), quotes_in(request.instruction)
    memories = json.loads(request.inputs.get("memories", "[]"))
    existing = "\n".join(f"[{m['id']}] {m['text']}" for m in memories)
    new_facts = json.loads(request.inputs.get("new_facts", "[]"))
    return {"actions": decide_actions(existing, new_facts, rules, quotes)}


def _mem0_action(action: dict[str, Any], text_by_id: dict[str, str], new_id: str) -> dict[str, str]:
    event = str(action.get("event", "NONE"))
    if event == "ADD":
        return {"id": new_id, "text": str(action.get("text", "")), "event": "ADD"}
    memory_id = str(action.get("id", ""))
    old = text_by_id.get(memory_id, "")
    if event == "UPDATE":
        return {"id": memory_id, "text": str(action.get("text", "")), "event": "UPDATE", "old_memory": old}
    return {"id": memory_id, "text": old, "event": event}


def write_update(request: StageRequest, values: dict[str, Any]) -> str:
    """The actions in mem0's reply shape: `{"memory": [{"id", "text", "event", "old_memory"?}]}`."""
    memories = json.loads(request.inputs.get("memories", "[]"))
    text_by_id = {m["id"]: m["text"] for m in memories}
    taken = {m["id"] for m in memories}
    out: list[dict[str, str]] = []
    next_id = len(memories)
    for action in values.get("actions", []):
        if not isinstance(action, dict):
            continue
        while str(next_id) in taken:
            next_id += 1
        out.append(_mem0_action(action, text_by_id, str(next_id)))
        if out[-1]["event"] == "ADD":
            taken.add(str(next_id))
    return json.dumps({"memory": out}, ensure_ascii=False)


STAGES: tuple[SimStage, ...] = (
    SimStage(
        "fact_extraction", frozenset({"facts"}), extraction_handler,
        tuple(r for r in RULES if r.stage == "extract"), construction=True,
        foreign=ForeignFormat(read_extraction, write_extraction),
    ),
    SimStage(
        "update_memory", frozenset({"actions"}), update_handler,
        tuple(r for r in RULES if r.stage == "decide"), construction=True,
        foreign=ForeignFormat(read_update, write_update),
    ),
)
