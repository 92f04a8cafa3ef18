"""mem0's two reply shapes as JSON schemas, the `response_format` each mem0 call sends, parse failures.

An LM asking for JSON-schema output gets the stage's schema; every other LM gets mem0's own request.
`is_parse_failure` reads the error texts `trace` writes. It calls no LM.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from memtrace_loop.pipeline.backends.structured_output import asks_for_json_schema

FACTS_SCHEMA: Mapping[str, Any] = MappingProxyType({
    "type": "object",
    "properties": {"facts": {"type": "array", "items": {"type": "string"}}},
    "required": ["facts"],
    "additionalProperties": False,
})
_ACTION = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "text": {"type": "string"},
        "event": {"type": "string", "enum": ["ADD", "UPDATE", "DELETE", "NONE"]},
        "old_memory": {"type": "string"},
    },
    "required": ["id", "text", "event"],
    "additionalProperties": False,
}
ACTIONS_SCHEMA: Mapping[str, Any] = MappingProxyType({
    "type": "object",
    "properties": {"memory": {"type": "array", "items": _ACTION}},
    "required": ["memory"],
    "additionalProperties": False,
})
# stage -> (the schema's name on the wire, the schema)
SCHEMA_BY_STAGE: Mapping[str, tuple[str, Mapping[str, Any]]] = MappingProxyType({
    "fact_extraction": ("mem0_facts", FACTS_SCHEMA),
    "update_memory": ("mem0_memory_actions", ACTIONS_SCHEMA),
})

# the error texts of a failed mem0 LLM operation whose reply mem0 could not read (trace._judge_call;
# mem0's own log lines for that case start with the last four)
PARSE_FAILURE_MARKS = (
    "empty reply", "reply is not JSON", "reply is not a JSON object",
    "Error in new_retrieved_facts", "Invalid JSON response", "Empty response from LLM",
    "Error in new memory actions response",
)


def _plain(value: Any) -> Any:
    """A JSON-ready copy (plain dicts and lists) of a schema held in read-only mappings."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def response_format_for(stage: str, lm: Any, mem0_format: Any) -> Any:
    """What the call of `stage` sends as `response_format`: the stage's JSON schema when `lm` asks for
    JSON-schema output, else `mem0_format` (mem0's own `{"type": "json_object"}`, or None) as is."""
    if not asks_for_json_schema(lm):
        return mem0_format
    name, schema = SCHEMA_BY_STAGE[stage]
    return {"type": "json_schema", "json_schema": {"name": name, "schema": _plain(schema)}}


def is_parse_failure(error: str | None) -> bool:
    """Whether a failed mem0 operation's `error` says its reply did not parse (empty, not JSON, wrong shape)."""
    return error is not None and error.startswith(PARSE_FAILURE_MARKS)
