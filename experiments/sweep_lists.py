"""Sweep lists generated from the registries: `${memtrace.compared:<group>}` in a sweep config.

A Hydra sweep names its values in `hydra.sweeper.params` (`memory_system: a,b,c`). The default sweeps
take them from the registry instead of keeping a list beside it: the resolver `memtrace.compared`
expands a registry's config group to the comma-separated names whose spec says `compare = True`
(`Registry.compared()`), so a new registry line is swept without touching the sweep. It registers the
resolver (once, when `memtrace_loop.conf` is imported); it does not run sweeps.
"""

from __future__ import annotations

from typing import Any

from memtrace_loop.memory_systems.registry import SYSTEMS
from memtrace_loop.optimizers.registry import OPTIMIZERS
from memtrace_loop.pipeline.core.config import ConfigError
from memtrace_loop.pipeline.core.registry import Registry
from omegaconf import OmegaConf

__all__ = ["COMPARED_RESOLVER", "compared", "register_sweep_resolvers"]

COMPARED_RESOLVER = "memtrace.compared"


def compared(group: str) -> str:
    """The compared names of the registry behind config group `group`, comma-separated."""
    registries: dict[str, Registry[Any]] = {"memory_system": SYSTEMS, "optimizer": OPTIMIZERS}
    if group not in registries:
        raise ConfigError(f"${{{COMPARED_RESOLVER}:{group}}}: no registry for group {group!r} "
                          f"(available: {', '.join(registries)})")
    return ",".join(registries[group].compared())


def register_sweep_resolvers() -> None:
    if not OmegaConf.has_resolver(COMPARED_RESOLVER):
        OmegaConf.register_new_resolver(COMPARED_RESOLVER, compared)
