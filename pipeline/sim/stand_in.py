"""The deterministic stand-in LM: `respond(messages) -> str`.

It parses a DSPy adapter request (`pipeline.sim.protocol`), identifies the stage by the names of
its output fields (a `reasoning` field added by ChainOfThought is ignored for dispatch and answered
with a fixed sentence), runs the registered handler and formats the handler's values back in the
adapter's format. New stages are added with `register_stage`. A request for an unknown stage gets
empty values of plausible types rather than an error.

It does not hold any stage behaviour itself: the handlers live in `pipeline.sim.handlers`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from pipeline.sim.handlers import DEFAULT_HANDLERS
from pipeline.sim.protocol import StageRequest, format_reply, parse_request

Handler = Callable[[StageRequest], dict[str, Any]]

REASONING_FIELD = "reasoning"
_REASONING_TEXT = "I followed the rules stated in my instructions."
_REGISTRY: dict[frozenset[str], Handler] = {}


def register_stage(output_fields: Iterable[str], handler: Handler) -> None:
    """Register (or replace) the handler for requests whose output fields are `output_fields`."""
    key = frozenset(output_fields) - {REASONING_FIELD}
    if not key:
        raise ValueError("a stage needs at least one output field besides 'reasoning'")
    _REGISTRY[key] = handler


def registered_stages() -> frozenset[frozenset[str]]:
    return frozenset(_REGISTRY)


def _empty_value(type_name: str) -> Any:
    lowered = type_name.lower()
    if lowered.startswith(("list", "tuple")):
        return []
    if lowered.startswith("dict"):
        return {}
    if lowered == "bool":
        return False
    if lowered in ("int", "float"):
        return 0
    if lowered.startswith("literal["):  # the first allowed value
        return type_name[len("literal[") :].split(",")[0].strip().strip("'\"]")
    return ""


def _unknown_stage(request: StageRequest) -> dict[str, Any]:
    return {name: _empty_value(kind) for name, kind in request.output_types.items()}


def answer(request: StageRequest) -> dict[str, Any]:
    """The output values for one parsed request (the dispatch step of `respond`)."""
    key = request.output_names - {REASONING_FIELD}
    handler = _REGISTRY.get(key, _unknown_stage)
    values = dict(handler(request))
    if REASONING_FIELD in request.output_names and not values.get(REASONING_FIELD):
        values[REASONING_FIELD] = _REASONING_TEXT
    return values


def respond(messages: list[dict[str, str]]) -> str:
    """Answer one DSPy-formatted chat request with the stand-in's rule-based behaviour."""
    request = parse_request(messages)
    return format_reply(request, answer(request))


for _fields, _handler in DEFAULT_HANDLERS.items():
    register_stage(_fields, _handler)
