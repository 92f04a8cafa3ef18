"""Memory systems by config name: `memory_system.name` -> the `MemorySystemSpec` its folder exports.

`SYSTEMS` is a `Registry[MemorySystemSpec]` (the one registry shape, `pipeline.core.registry`): each
line maps a name to a system's folder, whose `__init__.py` exports `SPEC` (the contract:
`memory_systems.spec`). Adding a system is its folder, one line here and
`conf/memory_system/<name>.yaml`. Folders are imported on demand. It builds systems from their
config node and nothing else; `knobs_from_config` is the one parse of a system's knobs (DSPy-free, so
validating a config imports no system).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from memtrace_loop.memory_systems.spec import MemorySystemSpec
from memtrace_loop.pipeline.core.config import parse_config
from memtrace_loop.pipeline.core.registry import Registry, UnknownEntryError

if TYPE_CHECKING:
    from memtrace_loop.memory_systems.base import MemorySystem
    from memtrace_loop.pipeline.backends.embeddings import Embedder

__all__ = ["SYSTEMS", "UnknownSystemError", "build_memory_system", "knobs_from_config", "knobs_schema", "spec_of"]

KnobsT = TypeVar("KnobsT")

SYSTEMS: Registry[MemorySystemSpec[Any]] = Registry(
    "memory system",
    "memory_system.name",
    {
        "long_context": "memtrace_loop.memory_systems.long_context",
        "rag": "memtrace_loop.memory_systems.rag",
        "mem0": "memtrace_loop.memory_systems.mem0",
        "evermemos": "memtrace_loop.memory_systems.evermemos",
        "mem0ai": "memtrace_loop.memory_systems.mem0ai",
        "custom": "memtrace_loop.memory_systems.custom",
    },
)

UnknownSystemError = UnknownEntryError  # a config names a system no registry line provides


def spec_of(name: object) -> MemorySystemSpec[Any]:
    """The spec of the system called `name`; `UnknownSystemError` naming the choices."""
    return SYSTEMS.get(name)


def knobs_schema(name: object) -> type:
    """The knobs record of the system called `name` (its config schema)."""
    return spec_of(name).knobs


def knobs_from_config(schema: type[KnobsT], cfg: Mapping[str, Any] | KnobsT | None) -> KnobsT:
    """A system's knobs record from its `memory_system` config node (the `name` key is the registry's):
    unknown keys, wrong types and out-of-range values are a `ConfigError` naming `memory_system.<key>`."""
    if isinstance(cfg, Mapping):
        cfg = {key: value for key, value in cfg.items() if key != "name"}
    return parse_config(schema, cfg, "memory_system")


def build_memory_system(cfg: Mapping[str, Any], embedder: Embedder) -> MemorySystem:
    """The system its `memory_system` config node describes (`name` plus its knobs)."""
    spec = spec_of(cfg.get("name"))
    return spec.build(knobs_from_config(spec.knobs, cfg), embedder)
