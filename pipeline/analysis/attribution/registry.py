"""Attributors by config name: `ATTRIBUTORS` (`lineage`, `llm`), `attributor_settings`, `build_attributor`.

Each line names its spec in `attribution.specs` (DSPy-free, each builder importing its attributor).
`build_attributor` wraps the attributor in `VerifyingAttributor` when `verify` is on. It does not run
attribution, configure DSPy or build LMs and systems: they are passed in.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from memtrace_loop.pipeline.analysis.attribution.protocol import Attributor, AttributorSpec
from memtrace_loop.pipeline.analysis.attribution.settings import (
    LineageSettings,
    LLMSettings,
    ReplayConfig,
)
from memtrace_loop.pipeline.core.config import ConfigError, parse_config
from memtrace_loop.pipeline.core.registry import Registry

if TYPE_CHECKING:
    import dspy
    from memtrace_loop.memory_systems.base import MemorySystem
    from memtrace_loop.pipeline.backends.embeddings import Embedder
    from memtrace_loop.pipeline.backends.lm import LMSet

__all__ = [
    "ATTRIBUTORS", "LLMSettings", "LineageSettings", "ReplayConfig", "attributor_from_settings", "attributor_settings",
    "build_attributor"
]

ATTRIBUTORS: Registry[AttributorSpec] = Registry(
    "attributor",
    "attributor.name",
    {
        "lineage": "memtrace_loop.pipeline.analysis.attribution.specs:LINEAGE",
        "llm": "memtrace_loop.pipeline.analysis.attribution.specs:LLM",
    },
    unknown="{key}: unknown {what} {name!r}; choose one of {choices}",
)


def attributor_settings(node: object) -> Any:
    """The validated settings record of the `attributor` config node (its `name` selects the schema)."""
    node = node if node is not None else {"name": "lineage"}
    if not isinstance(node, Mapping):
        raise ConfigError(f"attributor: must be a mapping, got {type(node).__name__}")
    spec = ATTRIBUTORS.get(node.get("name", "lineage"))
    return parse_config(spec.schema, {k: v for k, v in node.items() if k != "name"}, "attributor")


def build_attributor(
    node: Mapping[str, Any] | None, lms: LMSet | None = None, system: MemorySystem | None = None,
    judge: dspy.Predict | None = None, embedder: Embedder | None = None,
) -> Attributor:
    """The attributor the `attributor` config node selects; with `verify`, each verdict is checked by a
    replay on `system` and `judge` (both needed then)."""
    name = (node or {}).get("name", "lineage")
    return attributor_from_settings(name, attributor_settings(node), lms, system, judge, embedder)


def attributor_from_settings(
    name: str, settings: LineageSettings | LLMSettings, lms: LMSet | None = None, system: MemorySystem | None = None,
    judge: dspy.Predict | None = None, embedder: Embedder | None = None,
) -> Attributor:
    """The attributor `name` from its validated settings record (see `build_attributor`)."""
    inner = ATTRIBUTORS.get(name).build(settings, lms, embedder)
    if not settings.verify:
        return inner
    if system is None or judge is None:
        raise ConfigError("attributor.verify: replay verification needs the memory system and the judge")
    from memtrace_loop.pipeline.analysis.attribution.verification import Verifier, VerifyingAttributor  # DSPy

    return VerifyingAttributor(inner, Verifier(system, judge, settings.replay))
