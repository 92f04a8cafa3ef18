"""A memory system's knobs record read from its `memory_system` config node: `knobs_from_config`.

The one parse of a system's knobs (strict: `pipeline.core.config.parse_config`), shared by the config
validation at start, the registry's `build_memory_system` and the systems' own builders. DSPy-free, so
validating a config imports no system. It knows no system's knobs (each folder's `schema.py` does).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from memtrace_loop.pipeline.core.config import parse_config

__all__ = ["knobs_from_config"]

KnobsT = TypeVar("KnobsT")


def knobs_from_config(schema: type[KnobsT], cfg: Mapping[str, Any] | KnobsT | None) -> KnobsT:
    """A system's knobs record from its `memory_system` config node (the `name` key is the registry's):
    unknown keys, wrong types and out-of-range values are a `ConfigError` naming `memory_system.<key>`."""
    if isinstance(cfg, Mapping):
        cfg = {key: value for key, value in cfg.items() if key != "name"}
    return parse_config(schema, cfg, "memory_system")

