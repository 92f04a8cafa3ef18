"""The attributors' settings records: the schema and single home of the defaults of each `attributor` option.

`LineageSettings` (`attributor=lineage`) and `LLMSettings` (`attributor=llm`), each with `verify` and its
`replay` bounds (`ReplayConfig`, also the verifier's record). Records only, DSPy-free: the config tree
and its validation read them without importing an attributor (`attribution.specs` names them with their
builders). Nothing here attributes or replays.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memtrace_loop.pipeline.core.config import require

__all__ = ["LLMSettings", "LineageSettings", "ReplayConfig"]


@dataclass(frozen=True)
class ReplayConfig:
    """`attributor.replay`: the replay check's bounds."""

    max_joint: int = 3  # the largest decisive error set tried when no single repair rescues a case
    max_replays: int = 8  # replays per case, at most (each counted like any LM call)

    def __post_init__(self) -> None:
        require(self, max_joint=(1, None), max_replays=(1, None))


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

