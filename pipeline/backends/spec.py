"""The LM-backend registry's contract: what a backend's module exports as `SPEC`, and `OPENAI`.

`OPENAI`, the `openai` backend's spec, is here so the registry reads it without DSPy (its builder imports
`pipeline.backends.openai_engine` when called). It lists no backends and builds nothing itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memtrace_loop.pipeline.backends.lm import LMConfig, OpenAILMConfig

__all__ = ["OPENAI", "BackendSpec", "Engines"]

Engines = tuple[Any, str]  # (sync engine doing one attempt per call, scrubbed endpoint)


@dataclass(frozen=True)
class BackendSpec:
    """An LM backend (its module's `SPEC`): its own record and its engines builder (the guarded engine is
    wrapped around the engine by `pipeline.backends.registry`). Backends are not swept (`compare`)."""

    schema: type[LMConfig]
    engines: Callable[[Any], Engines]
    compare: bool = False


def _openai_engines(config: OpenAILMConfig) -> Engines:
    from memtrace_loop.pipeline.backends.openai_engine import OpenAIEngine, openai_endpoint  # imports DSPy

    return OpenAIEngine(config), openai_endpoint(config)


OPENAI = BackendSpec(OpenAILMConfig, _openai_engines)
