"""The `openai` LM backend (`lm.<role>.backend: openai`) as `SPEC`: any OpenAI-compatible endpoint.

Its record is `OpenAILMConfig`; its engines are the native ones of `pipeline.backends.openai_engine`
(the API key is read from the environment when they are built). It does not retry or guard calls
(`pipeline.backends.registry.build_lm` wraps every backend's engines). The engine module (DSPy's lm15)
is imported when engines are first built, so the config tree reads the record without DSPy.
"""

from __future__ import annotations

from memtrace_loop.pipeline.backends.lm import OpenAILMConfig
from memtrace_loop.pipeline.backends.spec import BackendSpec, Engines

__all__ = ["SPEC", "openai_engines"]


def openai_engines(config: OpenAILMConfig) -> Engines:
    """The native engines of an OpenAI-compatible endpoint (the key is read from the environment now)."""
    from memtrace_loop.pipeline.backends.openai_engine import AsyncOpenAIEngine, OpenAIEngine, openai_endpoint

    return OpenAIEngine(config), AsyncOpenAIEngine(config), openai_endpoint(config)


SPEC = BackendSpec(OpenAILMConfig, openai_engines)
