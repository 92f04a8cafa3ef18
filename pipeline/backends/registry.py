"""LM backends by config name: `lm.<role>.backend` -> (schema, builder).

`sim` is the simulated world's deterministic stand-in (this registry and the dataset registry are the
only modules that import `pipeline.sim`); `openai` is any OpenAI-compatible endpoint (built in
`pipeline.backends.lm`). Both read an `LMConfig`. Adding a backend is one builder and one line here.
It does not parse configs (see `LMConfig.from_mapping`) and runs nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import dspy
from memtrace_loop.pipeline.backends.lm import LMConfig, build_openai_lm
from memtrace_loop.pipeline.core.config import ConfigError


class AsyncSimEngine:
    """The async face of the sim engine (DSPy needs one for `acall`): runs the sync stand-in inline."""

    def __init__(self, sync: Any | None = None) -> None:
        if sync is None:
            from memtrace_loop.pipeline.sim.engine import SimEngine

            sync = SimEngine()
        self._sync = sync

    async def complete(self, request: Any) -> Any:
        return self._sync.complete(request)

    async def stream(self, request: Any) -> AsyncIterator[Any]:
        for event in self._sync.stream(request):
            yield event

    async def aclose(self) -> None:
        self._sync.close()

    def dump_state(self) -> dict[str, Any]:
        return {}

    @classmethod
    def load_state(cls, state: dict[str, Any]) -> AsyncSimEngine:
        return cls()


def build_sim_lm(config: LMConfig) -> dspy.LM:
    """`dspy.LM("sim/<model>")` on the deterministic stand-in engine (plus its async twin). Offline."""
    from memtrace_loop.pipeline.sim.engine import SimEngine

    engine = SimEngine()
    return dspy.LM(
        f"sim/{config.model}",
        engine=engine,
        async_engine=AsyncSimEngine(engine),
        cache=config.cache,
        temperature=config.temperature,
        max_tokens=config.max_tokens,
        num_retries=config.num_retries,
    )


@dataclass(frozen=True)
class BackendEntry:
    schema: type[LMConfig]
    build: Callable[[LMConfig], dspy.LM]
    keys: tuple[str, ...]  # the schema's keys this backend reads (what a config of it shows)


ENTRY_BY_BACKEND: Mapping[str, BackendEntry] = MappingProxyType(
    {
        "sim": BackendEntry(LMConfig, build_sim_lm, ("temperature", "max_tokens", "num_retries", "cache")),
        "openai": BackendEntry(LMConfig, build_openai_lm, tuple(LMConfig.model_fields)),
    }
)


def backend_entry(name: str) -> BackendEntry:
    if name not in ENTRY_BY_BACKEND:
        raise ConfigError(f"lm backend: unknown backend {name!r} (available: {list(ENTRY_BY_BACKEND)})")
    return ENTRY_BY_BACKEND[name]
