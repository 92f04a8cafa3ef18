"""mem0's `llm` and `embedding_model`, served by our LM layer and our embedder.

`LMBridge.generate_response` sends mem0's exact messages through a stage predictor's DSPy LM (counted,
retried, cached, redacted), under the caller's context (`bind`); an `Exception` is recorded and answered
with "", a `BaseException` propagates. `EmbedderBridge.embed` is our embedder's vector. No key, no logging.
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import dspy
from dspy.clients import _deprecation as _dspy_deprecation
from memtrace_loop.memory_systems.mem0ai.observers import AddRecorder, LMCall
from memtrace_loop.memory_systems.mem0ai.schema import EXTRACTION, UPDATE
from memtrace_loop.memory_systems.mem0ai.schemas import response_format_for
from memtrace_loop.pipeline.backends.embeddings import Embedder

MAX_ERROR_CHARS = 500


def _adapter_call(lm: Any, messages: list[dict[str, str]]) -> AbstractContextManager[Any]:
    marker = getattr(_dspy_deprecation, "adapter_message_call", None)
    return marker(lm, messages) if marker is not None else nullcontext()


def stage_of(messages: Sequence[Mapping[str, Any]]) -> str:
    """The stage one mem0 1.0.x LLM call serves: extraction (system + user) or update (one user message)."""
    roles = [str(m.get("role", "")) for m in messages]
    return EXTRACTION if roles[:1] == ["system"] else UPDATE


def _text_of(output: Any) -> str:
    if isinstance(output, dict):
        return str(output.get("text") or "")
    return "" if output is None else str(output)


class LMBridge:
    """mem0's `llm`: its calls through the predictors' DSPy LMs (set by `bind` before each add)."""

    def __init__(self, recorder: AddRecorder) -> None:
        self.recorder = recorder
        self._lm_by_stage: dict[str, Any] = {}
        self._context: contextvars.Context | None = None

    def bind(self, lm_by_stage: Mapping[str, Any]) -> None:
        """The LMs to use (stage -> DSPy LM, captured on the calling thread) and that thread's context."""
        self._lm_by_stage = dict(lm_by_stage)
        self._context = contextvars.copy_context()

    def generate_response(
        self, messages: list[dict[str, Any]], response_format: Any = None, tools: Any = None,
        tool_choice: str = "auto", **kwargs: Any,
    ) -> str:
        self.recorder.enter()
        stage = stage_of(messages)
        reply, error = "", None
        try:
            reply = self._call(stage, messages, response_format)
        except Exception as exc:  # one failing call is recorded and scored, never a crash of the run
            error = f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]
        self.recorder.note(LMCall(stage, tuple(dict(m) for m in messages), reply, error))
        return reply

    def _call(self, stage: str, messages: list[dict[str, Any]], response_format: Any) -> str:
        lm = self._lm_by_stage.get(stage) or dspy.settings.lm
        if self._context is not None:
            return self._context.copy().run(call_stage_lm, stage, lm, messages, response_format)
        return call_stage_lm(stage, lm, messages, response_format)


def call_stage_lm(stage: str, lm: Any, messages: Sequence[Mapping[str, Any]], response_format: Any) -> str:
    """One mem0 call of `stage` through the DSPy LM `lm`: mem0's `messages` as they are, its
    `response_format` (or the stage's JSON schema when `lm` asks for one); the reply's text."""
    if lm is None:
        raise RuntimeError(f"mem0ai stage {stage!r} has no LM (call system.set_lm first)")
    response_format = response_format_for(stage, lm, response_format)  # schemas.py: JSON schema or mem0's
    call_kwargs = {"response_format": response_format} if response_format is not None else {}
    plain = [{"role": str(m.get("role")), "content": str(m.get("content", ""))} for m in messages]
    # like DSPy's own adapters, the bridge hands the LM finished chat messages (mem0's): marked as
    # such, DSPy 3.4 does not warn that user code passes messages= (its public form until 3.5)
    with _adapter_call(lm, plain):
        outputs = lm(messages=plain, **call_kwargs)
    return _text_of(outputs[0]) if outputs else ""


class EmbedderBridge:
    """mem0's `embedding_model`: our embedder's vectors as lists of floats."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self.config = None

    def embed(self, text: str, memory_action: str | None = None) -> list[float]:
        return [float(x) for x in self.embedder.embed([text])[0]]
