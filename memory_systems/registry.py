"""Memory systems by config name: `memory_system.name` -> (knobs schema, builder).

Each system module exports its knobs record (a frozen dataclass: the schema and the defaults of its
`memory_system` config node, and the construction part of its memory key) and
`from_config(cfg: Mapping, embedder: Embedder) -> MemorySystem`. Adding a system is one line here plus
its own module and `conf/memory_system/<name>.yaml`. Modules are imported on demand.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from memtrace_loop.memory_systems.base import MemorySystem
from memtrace_loop.pipeline.backends.embeddings import Embedder
from memtrace_loop.pipeline.core.config import ConfigError


@dataclass(frozen=True)
class SystemEntry:
    module: str  # exports `from_config` and the knobs record named `knobs`
    knobs: str


ENTRY_BY_SYSTEM: Mapping[str, SystemEntry] = MappingProxyType(
    {
        "long_context": SystemEntry("memtrace_loop.memory_systems.long_context", "LongContextKnobs"),
        "rag": SystemEntry("memtrace_loop.memory_systems.rag", "RagKnobs"),
        "mem0": SystemEntry("memtrace_loop.memory_systems.mem0.system", "Mem0Knobs"),
        "evermemos": SystemEntry("memtrace_loop.memory_systems.evermemos.system", "EverMemOSKnobs"),
    }
)
MODULE_BY_SYSTEM: Mapping[str, str] = MappingProxyType({n: e.module for n, e in ENTRY_BY_SYSTEM.items()})


class UnknownSystemError(ConfigError):
    pass


def _entry(name: object) -> SystemEntry:
    if not isinstance(name, str) or name not in ENTRY_BY_SYSTEM:
        raise UnknownSystemError(
            f"memory_system.name: unknown memory system {name!r} (available: {', '.join(ENTRY_BY_SYSTEM)})"
        )
    return ENTRY_BY_SYSTEM[str(name)]


def knobs_schema(name: object) -> type:
    """The knobs record of the system called `name` (its config schema); `UnknownSystemError` for
    anything that names no system (a config node's value, not yet known to be a string)."""
    entry = _entry(name)
    return getattr(importlib.import_module(entry.module), entry.knobs)


def system_builder(name: str) -> Callable[[Mapping[str, Any], Embedder], MemorySystem]:
    return importlib.import_module(_entry(name).module).from_config


def build_memory_system(cfg: Mapping[str, Any], embedder: Embedder) -> MemorySystem:
    return system_builder(cfg.get("name"))(cfg, embedder)  # type: ignore[arg-type]
