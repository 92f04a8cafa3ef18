"""The LM-backend registry's contract: what a backend's module exports as `SPEC`.

A `BackendSpec` holds the backend's own LM record (`pipeline.backends.lm`: the schema and single home
of the defaults of its `lm.<role>` config node, the keys it reads) and its engines builder,
`engines(config) -> (engine, scrubbed endpoint)`, the engine doing one attempt per call (retries,
stop token and failure guard are wrapped around it by `pipeline.backends.registry`).
Backends are not swept (`compare=False`). `OPENAI` is the `openai` backend's spec, here so the
registry reads it without DSPy (its builder imports `pipeline.backends.openai_engine` when called).
It does not list the backends (`pipeline.backends.registry`
does), parse configs or build anything itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memtrace_loop.pipeline.backends.lm import LMConfig, OpenAILMConfig

__all__ = ["OPENAI", "BackendSpec", "Engines"]

# (sync engine doing one attempt per call, scrubbed endpoint)
Engines = tuple[Any, str]


@dataclass(frozen=True)
class BackendSpec:
    """An LM backend: its config record and its engines builder."""

    schema: type[LMConfig]  # the backend's own record: the keys it reads (and shows in its config node)
    engines: Callable[[Any], Engines]
    compare: bool = False  # LM backends are not swept by default


def _openai_engines(config: OpenAILMConfig) -> Engines:
    from memtrace_loop.pipeline.backends.openai_engine import openai_engines  # DSPy's lm15, when engines are built

    return openai_engines(config)


OPENAI = BackendSpec(OpenAILMConfig, _openai_engines)
