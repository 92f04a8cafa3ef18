"""A real DSPy LM whose replies a test scripts: a custom engine calling `reply(messages) -> str`.

Unlike `dspy.utils.DummyLM` (which answers in DSPy's adapter format), it returns whatever text the
script gives, so a test can drive a library that parses its own JSON replies (mem0) and our DSPy stages
in one run. It is a `dspy.LM` with a custom engine (like the `sim` backend), so DSPy's LM layer, our
`CallLedger` and the tracer see its calls as any other; uncached. A script that raises makes the call
fail as an endpoint error would.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import dspy
from dspy.lm15 import Message, Response, TextPart, Usage, response_to_events
from memtrace_loop.pipeline.sim.engine import request_messages

Script = Callable[[list[dict[str, str]]], str]


class ScriptedEngine:
    """A DSPy custom engine answering each request with `script(messages)`; `requests` keeps them."""

    model_name = "scripted"

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[list[dict[str, str]]] = []

    def complete(self, request: Any) -> Response:
        messages = request_messages(request)
        self.requests.append(messages)
        text = self.script(messages)
        words = sum(len(m["content"].split()) for m in messages)
        return Response(
            id=None, model=self.model_name, message=Message.assistant([TextPart(text)]), finish_reason="stop",
            usage=Usage(input_tokens=words, output_tokens=len(text.split()), total_tokens=words + len(text.split())),
        )

    def stream(self, request: Any) -> Iterator[Any]:
        return iter(response_to_events(self.complete(request)))

    def close(self) -> None:
        return None

    def dump_state(self) -> dict[str, Any]:
        return {}

    @classmethod
    def load_state(cls, state: dict[str, Any]) -> ScriptedEngine:
        raise TypeError("a scripted engine is built by its test")


def scripted_lm(script: Script) -> tuple[dspy.LM, ScriptedEngine]:
    """An uncached DSPy LM answering with `script`, and its engine (to read the requests it got)."""
    engine = ScriptedEngine(script)
    return dspy.LM("scripted/lm", engine=engine, cache=False), engine
