"""The LM-backend registry's contract: what a backend's module exports as `SPEC`.

A `BackendSpec` holds the backend's own LM record (`pipeline.backends.lm`: the schema and single home
of the defaults of its `lm.<role>` config node, the keys it reads) and its engines builder,
`engines(config) -> (engine, scrubbed endpoint)`, the engine doing one attempt per call (retries,
stop token and failure guard are wrapped around it by `pipeline.backends.registry`).
Backends are not swept (`compare=False`). It does not list the backends (`pipeline.backends.registry`
does), parse configs or build anything itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memtrace_loop.pipeline.backends.lm import LMConfig

__all__ = ["BackendSpec", "Engines"]

# (sync engine doing one attempt per call, scrubbed endpoint)
Engines = tuple[Any, str]


@dataclass(frozen=True)
class BackendSpec:
    """An LM backend: its config record and its engines builder."""

    schema: type[LMConfig]  # the backend's own record: the keys it reads (and shows in its config node)
    engines: Callable[[Any], Engines]
    compare: bool = False  # LM backends are not swept by default
