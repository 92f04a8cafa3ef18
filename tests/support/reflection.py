"""A scripted reflection LM for GEPA tests (the sim world's own reflection handler is another helper's).

It answers DSPy's `ProposeInstruction` requests: the new instruction is the current one with a fixed
sentence appended (or `rewrite(current, prompt)` when given). Deterministic; it counts its calls and
keeps the prompts it saw, so tests can check what GEPA's reflection was shown.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import dspy
from dspy.clients.engines.base import validate_request
from dspy.lm15 import Message, Response, TextPart, Usage
from memtrace_loop.pipeline.sim.engine import request_messages

_HEADER = "[[ ## current_instruction ## ]]\n"
_NEXT = "\n\n[[ ## examples_with_feedback ## ]]"


def current_instruction(prompt: str) -> str:
    """The current instruction of a `ProposeInstruction` request (the last filled-in field)."""
    start = prompt.rfind(_HEADER)
    if start < 0:
        return ""
    start += len(_HEADER)
    end = prompt.find(_NEXT, start)
    return prompt[start:end if end >= 0 else None].strip()


class ScriptedReflectionEngine:
    def __init__(self, rewrite: Callable[[str, str], str] | None = None) -> None:
        self.rewrite = rewrite or (lambda current, _prompt: f"{current} Always answer with the exact date.")
        self.prompts: list[str] = []
        self._lock = threading.Lock()

    def complete(self, request: Any) -> Response:
        validate_request(request)
        prompt = "\n\n".join(m["content"] for m in request_messages(request))
        with self._lock:
            self.prompts.append(prompt)
        text = json.dumps({"new_instruction": self.rewrite(current_instruction(prompt), prompt)})
        return Response(id=None, model="scripted", message=Message.assistant([TextPart(text)]), finish_reason="stop",
                        usage=Usage(input_tokens=1, output_tokens=1, total_tokens=2))

    def close(self) -> None:
        return None


def reflection_lm(rewrite: Callable[[str, str], str] | None = None) -> tuple[dspy.LM, ScriptedReflectionEngine]:
    engine = ScriptedReflectionEngine(rewrite)
    return dspy.LM("sim/scripted-reflection", engine=engine, cache=False), engine
