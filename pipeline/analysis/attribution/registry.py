"""Attributors by config name: `attributor.name` -> (settings schema, builder).

The `attributor` config group selects how failures are attributed (`lineage`: no LLM, the default;
`llm`: an LM walks the graph) and whether each verdict is checked by a replay (`verify`, off by
default so the default behaviour is unchanged; `replay.max_joint` bounds the decisive error set).
Each option's frozen settings record is the schema and the single home of its defaults (the Hydra
tree is composed from them, `conf/__init__.py`). `attributor_settings(node)` validates a config node
(a `ConfigError` naming `attributor.<key>` otherwise); `build_attributor(node, lms, system, judge,
embedder)` returns the `Attributor`, wrapped in `VerifyingAttributor` when `verify` is on.

It does not run attribution, configure DSPy or build LMs and systems: they are passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import dspy
from memtrace_loop.memory_systems.base import MemorySystem
from memtrace_loop.pipeline.analysis.attribution.lineage import LineageAttributor
from memtrace_loop.pipeline.analysis.attribution.llm import LLMAttributor, LLMAttributorSettings
from memtrace_loop.pipeline.analysis.attribution.protocol import Attributor
from memtrace_loop.pipeline.analysis.attribution.replay import Replayer, ReplaySettings, VerifyingAttributor
from memtrace_loop.pipeline.backends.embeddings import Embedder
from memtrace_loop.pipeline.backends.lm import LMSet
from memtrace_loop.pipeline.core.config import ConfigError, parse_config, require

__all__ = [
    "ATTRIBUTOR_NAMES",
    "ENTRY_BY_ATTRIBUTOR",
    "LLMSettings",
    "LineageSettings",
    "ReplayConfig",
    "attributor_from_settings",
    "attributor_settings",
    "build_attributor",
]


@dataclass(frozen=True)
class ReplayConfig:
    """`attributor.replay`: the replay check's bounds (defaults: `ReplaySettings`)."""

    max_joint: int = ReplaySettings.max_joint  # the largest decisive error set tried

    def __post_init__(self) -> None:
        require(self, max_joint=(1, None))


@dataclass(frozen=True)
class LineageSettings:
    """`attributor=lineage`: follow the evidence through the graph by token (and, with `use_embedder`,
    by meaning: the embedder's cosine at least `semantic_threshold`)."""

    verify: bool = False  # check every verdict by replay
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    use_embedder: bool = False  # also match carriers by meaning where tokens do not
    semantic_threshold: float = 0.8  # cosine a paraphrased carrier needs (with use_embedder)

    def __post_init__(self) -> None:
        require(self, semantic_threshold=(0, 1))


@dataclass(frozen=True)
class LLMSettings:
    """`attributor=llm`: an LM (the `attributor` role) walks the graph from the evidence."""

    verify: bool = False
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    max_steps: int = 12  # operations shown to the LM before it gives up
    max_chars_per_step: int = 2400  # the bound on one step's context (inputs, outputs, prompt)

    def __post_init__(self) -> None:
        require(self, max_steps=(1, None), max_chars_per_step=(400, None))


Builder = Callable[[Any, LMSet | None, Embedder | None], Attributor]


@dataclass(frozen=True)
class AttributorEntry:
    schema: type
    build: Builder


def _lineage(settings: LineageSettings, lms: LMSet | None, embedder: Embedder | None) -> Attributor:
    if not settings.use_embedder:
        return LineageAttributor()
    if embedder is None:
        raise ConfigError("attributor.use_embedder: no embedder was given to match carriers by meaning")
    return LineageAttributor(embedder=embedder, semantic_threshold=settings.semantic_threshold)


def _llm(settings: LLMSettings, lms: LMSet | None, embedder: Embedder | None) -> Attributor:
    lm = getattr(lms, "attributor", None) if lms is not None else None
    if lm is None:
        raise ConfigError("attributor.name: the llm attributor needs an `attributor` LM (lm.attributor)")
    llm_settings = LLMAttributorSettings(max_steps=settings.max_steps, max_chars_per_step=settings.max_chars_per_step)
    return LLMAttributor(lm=lm, settings=llm_settings)


ENTRY_BY_ATTRIBUTOR: Mapping[str, AttributorEntry] = MappingProxyType(
    {"lineage": AttributorEntry(LineageSettings, _lineage), "llm": AttributorEntry(LLMSettings, _llm)}
)
ATTRIBUTOR_NAMES: tuple[str, ...] = tuple(ENTRY_BY_ATTRIBUTOR)


def _entry(name: object) -> AttributorEntry:
    if not isinstance(name, str) or name not in ENTRY_BY_ATTRIBUTOR:
        raise ConfigError(f"attributor.name: unknown attributor {name!r}; choose one of {list(ATTRIBUTOR_NAMES)}")
    return ENTRY_BY_ATTRIBUTOR[str(name)]


def attributor_settings(node: Mapping[str, Any] | None) -> LineageSettings | LLMSettings:
    """The validated settings record of the `attributor` config node (its `name` selects the schema)."""
    node = node if node is not None else {"name": "lineage"}
    if not isinstance(node, Mapping):
        raise ConfigError(f"attributor: must be a mapping, got {type(node).__name__}")
    entry = _entry(node.get("name", "lineage"))
    return parse_config(entry.schema, {k: v for k, v in node.items() if k != "name"}, "attributor")


def build_attributor(
    node: Mapping[str, Any] | None,
    lms: LMSet | None = None,
    system: MemorySystem | None = None,
    judge: dspy.Predict | None = None,
    embedder: Embedder | None = None,
) -> Attributor:
    """The attributor the `attributor` config node selects; with `verify`, each verdict is checked by a
    replay on `system` and `judge` (both needed then)."""
    name = (node or {}).get("name", "lineage")
    return attributor_from_settings(name, attributor_settings(node), lms, system, judge, embedder)


def attributor_from_settings(
    name: str,
    settings: LineageSettings | LLMSettings,
    lms: LMSet | None = None,
    system: MemorySystem | None = None,
    judge: dspy.Predict | None = None,
    embedder: Embedder | None = None,
) -> Attributor:
    """The attributor `name` from its validated settings record (see `build_attributor`)."""
    inner = _entry(name).build(settings, lms, embedder)
    if not settings.verify:
        return inner
    if system is None or judge is None:
        raise ConfigError("attributor.verify: replay verification needs the memory system and the judge")
    return VerifyingAttributor(inner, Replayer(system, judge, ReplaySettings(max_joint=settings.replay.max_joint)))
