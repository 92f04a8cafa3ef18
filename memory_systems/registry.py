"""Memory systems by config name: `memory_system.name` -> the module that builds it.

Each system module exports `from_config(cfg: Mapping, embedder: Embedder) -> MemorySystem`, reading
its knobs from its Hydra config (`conf/memory_system/<name>.yaml`). Modules are imported on demand.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from memtrace_loop.memory_systems.base import MemorySystem
from memtrace_loop.pipeline.backends.embeddings import Embedder

MODULE_BY_SYSTEM: Mapping[str, str] = MappingProxyType(
    {
        "long_context": "memtrace_loop.memory_systems.long_context",
        "rag": "memtrace_loop.memory_systems.rag",
        "mem0": "memtrace_loop.memory_systems.mem0.system",
        "evermemos": "memtrace_loop.memory_systems.evermemos.system",
    }
)


class UnknownSystemError(ValueError):
    pass


def build_memory_system(cfg: Mapping[str, Any], embedder: Embedder) -> MemorySystem:
    name = cfg.get("name")
    if name not in MODULE_BY_SYSTEM:
        raise UnknownSystemError(
            f"memory_system.name: unknown memory system {name!r} (available: {', '.join(MODULE_BY_SYSTEM)})"
        )
    module = importlib.import_module(MODULE_BY_SYSTEM[str(name)])
    return module.from_config(cfg, embedder)
