"""Read and write the text protocol of DSPy's adapters, for the simulated stand-in LM.

`parse_request` turns the OpenAI-style chat messages that DSPy's `ChatAdapter` (or its
`JSONAdapter` fallback) produces into a `StageRequest`: the instruction (the text after "your
objective is:"), the declared input and output fields with their type strings, and the input values
of the *last* user message (earlier user/assistant pairs are few-shot demos and are ignored).
`format_reply` writes output values back in the format the adapter expects.

It does not decide anything about a stage: that is `pipeline.sim.stand_in` and its handlers.
It does not support DSPy's XML adapter or native function calling.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

_FIELD_LINE = re.compile(r"^\s*\d+\.\s+`(?P<name>[A-Za-z_][A-Za-z0-9_]*)`\s*\((?P<type>.*?)\)(?::|\s*$)")
_MARKER = re.compile(r"\[\[ ## (?P<name>[A-Za-z_][A-Za-z0-9_]*) ## \]\]")
_OBJECTIVE = re.compile(r"your objective is:\s*", re.IGNORECASE)
_TRAILERS = ("\n\nRespond with the corresponding output fields", "\n\nRespond with a JSON object")


@dataclass(frozen=True)
class StageRequest:
    """One LM request as the stand-in sees it."""

    instruction: str
    input_types: dict[str, str] = field(default_factory=dict)
    output_types: dict[str, str] = field(default_factory=dict)
    inputs: dict[str, str] = field(default_factory=dict)
    json_mode: bool = False

    @property
    def output_names(self) -> frozenset[str]:
        return frozenset(self.output_types)


def _section(system: str, start: str, stop: str) -> str:
    begin = system.find(start)
    if begin < 0:
        return ""
    begin += len(start)
    end = system.find(stop, begin)
    return system[begin:] if end < 0 else system[begin:end]


def _declared_fields(block: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in block.splitlines():
        match = _FIELD_LINE.match(line)
        if match:
            found[match.group("name")] = match.group("type").strip()
    return found


def _instruction(system: str) -> str:
    matches = list(_OBJECTIVE.finditer(system))
    if not matches:
        return ""
    match = matches[-1]
    lines = [line.strip() for line in system[match.end() :].splitlines()]
    return " ".join(line for line in lines if line)


def _input_values(text: str, names: dict[str, str]) -> dict[str, str]:
    for trailer in _TRAILERS:
        cut = text.rfind(trailer)
        if cut >= 0:
            text = text[:cut]
    markers = [m for m in _MARKER.finditer(text) if not names or m.group("name") in names]
    values: dict[str, str] = {}
    for index, marker in enumerate(markers):
        end = markers[index + 1].start() if index + 1 < len(markers) else len(text)
        values[marker.group("name")] = text[marker.end() : end].strip("\n")
    return values


def _content(message: dict[str, Any]) -> str:
    content = message.get("content", "")
    if isinstance(content, list):  # multi-part content: keep the text parts
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content or "")


def parse_request(messages: list[dict[str, Any]]) -> StageRequest:
    """Parse DSPy adapter messages; fields that cannot be found are simply empty."""
    system = "\n".join(_content(m) for m in messages if m.get("role") in ("system", "developer"))
    users = [m for m in messages if m.get("role") == "user"]
    last_user = _content(users[-1]) if users else ""
    input_types = _declared_fields(_section(system, "Your input fields are:", "Your output fields are:"))
    output_types = _declared_fields(_section(system, "Your output fields are:", "All interactions"))
    json_mode = "Outputs will be a JSON object" in system or "Respond with a JSON object" in last_user
    return StageRequest(
        instruction=_instruction(system),
        input_types=input_types,
        output_types=output_types,
        inputs=_input_values(last_user, input_types),
        json_mode=json_mode,
    )


def _chat_value(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def format_reply(request: StageRequest, values: dict[str, Any]) -> str:
    """Write `values` in the adapter's format (declared output order first, then any extras)."""
    order = [name for name in request.output_types if name in values]
    order += [name for name in values if name not in request.output_types]
    if request.json_mode:
        return json.dumps({name: values[name] for name in order}, ensure_ascii=False)
    blocks = [f"[[ ## {name} ## ]]\n{_chat_value(values[name])}" for name in order]
    blocks.append("[[ ## completed ## ]]")
    return "\n\n".join(blocks)


def decode_list(raw: str) -> list[Any]:
    """An input list field as DSPy renders it (JSON); a non-JSON value becomes a one-item list."""
    raw = raw.strip()
    if not raw:
        return []
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return [raw]
    return value if isinstance(value, list) else [value]


FALLBACK_CHARS = 240


def trim(text: str, limit: int = FALLBACK_CHARS) -> str:
    """`text` with whitespace folded, cut at a word boundary to at most `limit` characters (plus " ...")."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " ..."
