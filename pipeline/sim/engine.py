"""`SimEngine`: the dspy 3.4 custom-engine adapter around the deterministic stand-in LM.

Use it as `dspy.LM("sim/stand-in", engine=SimEngine())` (the guarded engine gives it its async face).
It converts a canonical `dspy.lm15.Request` into OpenAI-style messages, asks
`pipeline.sim.stand_in.respond` for the text, and wraps the text in a `dspy.lm15.Response` whose token
usage is approximated by whitespace word counts. It keeps no state between calls (so
`dump_state`/`load_state` are trivial) and does no caching or retrying: those belong to DSPy's LM layer.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dspy.clients.engines.base import validate_request
from dspy.lm15 import Message, Request, Response, TextPart, Usage, response_to_events
from memtrace_loop.pipeline.sim.stand_in import (
    foreign_rows,
    paraphrasing_handlers,
    paraphrasing_rows,
    respond,
    world_handlers,
)
from memtrace_loop.pipeline.sim.system_stages import system_stages


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return "".join(getattr(part, "text", None) or "" for part in value)


def request_messages(request: Request) -> list[dict[str, str]]:
    """The request as OpenAI-style chat messages (system first, if any)."""
    messages: list[dict[str, str]] = []
    system = _text(request.system)
    if system:
        messages.append({"role": "system", "content": system})
    messages.extend({"role": m.role, "content": m.text or ""} for m in request.messages)
    return messages


def _words(text: str) -> int:
    return len(text.split())


class SimEngine:
    """Deterministic, offline engine that answers every request with the rule-based stand-in (with
    `paraphrase`, its construction stages write paraphrased memories: `pipeline.sim.paraphrase`)."""

    model_name = "sim/stand-in"

    def __init__(self, paraphrase: bool = False) -> None:
        self.paraphrase = paraphrase
        extra = system_stages()  # the stages memory systems add to the world's table
        handlers = world_handlers(extra)
        self._handlers = paraphrasing_handlers(handlers, extra) if paraphrase else handlers
        foreign = foreign_rows(extra)  # rows answering a library's own requests (the real mem0's)
        self._foreign = paraphrasing_rows(foreign) if paraphrase else foreign

    def reply(self, messages: list[dict[str, str]]) -> str:
        """The world's reply to chat `messages` (what `complete` answers; also a responder for a local
        OpenAI-protocol test server, so a library's own requests there meet the systems' rows too)."""
        return respond(messages, self._handlers, self._foreign)

    def complete(self, request: Request) -> Response:
        validate_request(request)
        messages = request_messages(request)
        output = self.reply(messages)
        prompt_tokens = sum(_words(m["content"]) for m in messages)
        output_tokens = _words(output)
        return Response(
            id=None,
            model=self.model_name,
            message=Message.assistant([TextPart(output)]),
            finish_reason="stop",
            usage=Usage(
                input_tokens=prompt_tokens,
                output_tokens=output_tokens,
                total_tokens=prompt_tokens + output_tokens,
            ),
        )

    def stream(self, request: Request) -> Iterator[Any]:
        return iter(response_to_events(self.complete(request)))

    def close(self) -> None:
        return None

    def dump_state(self) -> dict[str, Any]:
        return {"paraphrase": self.paraphrase}

    @classmethod
    def load_state(cls, state: dict[str, Any]) -> SimEngine:
        return cls(bool(state.get("paraphrase", False)))

    def __repr__(self) -> str:
        return "SimEngine(paraphrase=True)" if self.paraphrase else "SimEngine()"
