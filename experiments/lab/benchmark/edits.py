"""Faults injected into LM calls: a DSPy engine wrapper that alters the reply of ONE targeted call.

`FaultInjectingEngine` forwards every request and lets a `ReplyEdit` rewrite the first reply it targets
(by its output fields and the request text); `injected_lm` wraps an LM's engine. The edits drop the
evidence turn's facts, events or narrative sentences, change or delete its units at a later decision,
or answer wrongly, in DSPy's chat or JSON reply format. It picks no case (`benchmark.injection`).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import dspy
from dspy.lm15 import Message, Response, TextPart, response_to_events
from memtrace_loop.pipeline.core.literals import literal_eval

WRONG_ANSWER = "It is not mentioned in the conversation."
UNRELATED_MEMORY = "Enjoys quiet evenings at home."


# the reply protocol
_MARKER = re.compile(r"\[\[ ## (?P<name>[A-Za-z_][A-Za-z0-9_]*) ## \]\]")


def reply_fields(reply: str) -> dict[str, str] | None:
    """The output fields of a DSPy adapter reply (chat markers or a JSON object), as raw strings."""
    text = reply.strip()
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            return None
        if not isinstance(data, dict):
            return None
        return {k: v if isinstance(v, str) else json.dumps(v) for k, v in data.items()}
    markers = list(_MARKER.finditer(text))
    if not markers:
        return None
    fields: dict[str, str] = {}
    for index, marker in enumerate(markers):
        end = markers[index + 1].start() if index + 1 < len(markers) else len(text)
        fields[marker.group("name")] = text[marker.end() : end].strip()
    fields.pop("completed", None)
    return fields


def render_reply(fields: Mapping[str, str], json_mode: bool) -> str:
    if json_mode:
        return json.dumps({k: _json_or_text(v) for k, v in fields.items()}, ensure_ascii=False)
    blocks = [f"[[ ## {name} ## ]]\n{value}" for name, value in fields.items()]
    return "\n\n".join([*blocks, "[[ ## completed ## ]]"])


def _json_or_text(value: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def _words(text: str) -> frozenset[str]:
    return frozenset(w for w in re.findall(r"[a-z0-9]+", text.lower()) if len(w) > 2)


def _overlap(a: str, b: str) -> float:
    left, right = _words(a), _words(b)
    return len(left & right) / len(left) if left else 0.0


# the engine wrapper
# An edit sees (request text, reply fields) and returns new fields for the targeted call, else None.
ReplyEdit = Callable[[str, dict[str, str]], dict[str, str] | None]


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return "".join(getattr(part, "text", None) or "" for part in value)


class FaultInjectingEngine:
    """A DSPy custom engine around another: forwards every request, and lets `edit` alter the reply of
    the first call it targets (only one: later matches are forwarded untouched). `fired` holds the
    request text of the altered call. Thread-safe; no cache of its own."""

    def __init__(self, inner: Any, edit: ReplyEdit) -> None:
        self.inner = inner
        self.edit = edit
        self.fired: list[str] = []
        self._lock = threading.Lock()
        self.model_name = getattr(inner, "model_name", "fault-injected")

    def complete(self, request: Any) -> Response:
        response = self.inner.complete(request)
        with self._lock:
            if self.fired:
                return response
            prompt = "\n".join([_text(request.system), *((m.text or "") for m in request.messages)])
            reply = (response.message.text or "") if response.message is not None else ""
            fields = reply_fields(reply)
            if fields is None:
                return response
            changed = self.edit(prompt, dict(fields))
            if changed is None:
                return response
            self.fired.append(prompt)
        new_text = render_reply(changed, reply.strip().startswith("{"))
        return Response(
            id=response.id, model=response.model, message=Message.assistant([TextPart(new_text)]),
            finish_reason=response.finish_reason, usage=response.usage,
        )

    def stream(self, request: Any) -> Iterator[Any]:
        return iter(response_to_events(self.complete(request)))

    def close(self) -> None:
        return None

    def dump_state(self) -> dict[str, Any]:
        return {}

    @classmethod
    def load_state(cls, state: dict[str, Any]) -> FaultInjectingEngine:
        raise TypeError("a fault-injecting engine is built per case, not restored")


def injected_lm(lm: dspy.LM, edit: ReplyEdit) -> tuple[dspy.LM, FaultInjectingEngine]:
    """A copy of `lm` (uncached) whose engine is wrapped by a `FaultInjectingEngine`."""
    engine = FaultInjectingEngine(lm.engine, edit)
    return lm.copy(engine=engine, cache=False), engine


def _at_turn(turn_text: str, field: str, change: Callable[[dict[str, str]], dict[str, str] | None]) -> ReplyEdit:
    """`change` of the replies with `field` to a request holding the evidence turn."""

    def edit(prompt: str, fields: dict[str, str]) -> dict[str, str] | None:
        return change(fields) if field in fields and turn_text in prompt else None

    return edit


def drop_facts(turn_text: str) -> ReplyEdit:
    """Mem0 extraction of the evidence turn: no facts."""
    return _at_turn(turn_text, "facts", lambda f: {**f, "facts": "[]"} if _json_or_text(f["facts"]) else None)


def _without_carriers(turn_text: str, parts: list[Any], text: Callable[[Any], str]) -> list[Any] | None:
    """`parts` without those carrying the turn (overlap at least half the best one's); None when none does."""
    scores = [_overlap(turn_text, text(part)) for part in parts]
    best = max(scores, default=0.0)
    return None if best <= 0 else [part for part, score in zip(parts, scores, strict=True) if score < best * 0.5]


def drop_events(turn_text: str) -> ReplyEdit:
    """EverMemOS event extraction of the episode holding the evidence turn: the events carrying it left out."""

    def change(fields: dict[str, str]) -> dict[str, str] | None:
        events = _json_or_text(fields["events"])
        kept = _without_carriers(turn_text, events, lambda e: str(e.get("text", "") if isinstance(e, dict) else e)) \
            if isinstance(events, list) else None
        return None if kept is None else {**fields, "events": json.dumps(kept, ensure_ascii=False)}

    return _at_turn(turn_text, "events", change)


def drop_narrative(turn_text: str) -> ReplyEdit:
    """EverMemOS episode writing of the episode holding the evidence turn: the sentences carrying it left out."""

    def change(fields: dict[str, str]) -> dict[str, str] | None:
        kept = _without_carriers(turn_text, re.split(r"(?<=[.!?])\s+", fields["narrative"]), str)
        return None if kept is None else {**fields, "narrative": " ".join(kept)}

    return _at_turn(turn_text, "narrative", change)


def _later_decision(turn_text: str, field: str, change: ReplyEdit) -> ReplyEdit:
    """`change` at the decisions (replies with `field`) after the evidence turn's own one (which adds its units)."""
    state = {"extracted": False, "decided": 0}

    def edit(prompt: str, fields: dict[str, str]) -> dict[str, str] | None:
        if "facts" in fields and turn_text in prompt:
            state["extracted"] = True
            return None
        if field not in fields or not state["extracted"]:
            return None
        state["decided"] += 1
        return change(prompt, fields) if state["decided"] >= 2 else None

    return edit


def change_units_after(turn_text: str, unit_ids: Sequence[str], event: str) -> ReplyEdit:
    """Mem0 update decision: at the first decision after the evidence turn's own one, `event` (UPDATE
    with unrelated text, or DELETE) every unit the evidence turn added."""

    def change(prompt: str, fields: dict[str, str]) -> dict[str, str]:
        actions = _json_or_text(fields["actions"])
        text = UNRELATED_MEMORY if event == "UPDATE" else ""
        added = [{"event": event, "id": unit, "text": text} for unit in unit_ids]
        return {**fields, "actions": json.dumps([*(actions if isinstance(actions, list) else []), *added],
                                                ensure_ascii=False)}

    return _later_decision(turn_text, "actions", change)


_MEM0_MEMORY_MARKER = "Below is the current content of my memory"


def shown_memories(prompt: str) -> dict[str, str]:
    """mem0 1.0.x's update request: the memories it shows the decision, text -> id ("0", "1", ...),
    read from the fenced Python list after its "Below is the current content of my memory" line."""
    _, marker, rest = prompt.partition(_MEM0_MEMORY_MARKER)
    found = re.search(r"```\s*(\[.*?\])\s*```", rest, re.DOTALL) if marker else None
    try:
        listed = literal_eval(found.group(1)) if found else []
    except (ValueError, SyntaxError):
        return {}
    return {str(m.get("text")): str(m.get("id")) for m in listed if isinstance(m, dict)}


def _mem0_actions(fields: Mapping[str, str]) -> list[Any]:
    actions = _json_or_text(fields["memory"])
    return actions if isinstance(actions, list) else []


def change_shown_units_after(turn_text: str, unit_texts: Sequence[str], event: str) -> ReplyEdit:
    """mem0 1.0.x's update decision (`{"memory": [...]}`): at the first later decision shown an evidence
    unit (mem0 only applies ids it showed), `event` (UPDATE with unrelated text, or DELETE) that unit
    under the id mem0 shows it as."""

    def change(prompt: str, fields: dict[str, str]) -> dict[str, str] | None:
        shown = shown_memories(prompt)
        targets = [(shown[text], text) for text in unit_texts if text in shown]
        changed = [
            {"id": unit_id, "text": UNRELATED_MEMORY, "event": event, "old_memory": text} if event == "UPDATE"
            else {"id": unit_id, "text": text, "event": event}  # mem0 skips an action without text
            for unit_id, text in targets
        ]
        return {**fields, "memory": json.dumps([*_mem0_actions(fields), *changed], ensure_ascii=False)} \
            if targets else None

    return _later_decision(turn_text, "memory", change)


def drop_added_actions(turn_text: str) -> ReplyEdit:
    """mem0 1.0.x's update decision of the evidence turn: each ADD given an id mem0 never showed (as an
    UPDATE of it), so mem0 drops the action ("Error processing memory action") and the fact is lost."""
    state = {"extracted": False}

    def edit(prompt: str, fields: dict[str, str]) -> dict[str, str] | None:
        if "facts" in fields:  # only the decision right after the evidence turn's extraction is its own
            state["extracted"] = turn_text in prompt
            return None
        if "memory" not in fields or not state["extracted"]:
            return None
        actions = _mem0_actions(fields)
        if not any(isinstance(a, dict) and a.get("event") == "ADD" for a in actions):
            return None
        unknown = str(len(shown_memories(prompt)) + 99)
        dropped = [
            {**a, "id": unknown, "event": "UPDATE"} if isinstance(a, dict) and a.get("event") == "ADD" else a
            for a in actions
        ]
        return {**fields, "memory": json.dumps(dropped, ensure_ascii=False)}

    return edit


def wrong_answer(question_text: str) -> ReplyEdit:
    """The answer to the question: a wrong one, whatever the context held."""
    return _at_turn(question_text, "answer", lambda f: None if "label" in f else {**f, "answer": WRONG_ANSWER})
