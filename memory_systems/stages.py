"""A memory system's stage table: `StageSpec` (LLM or not, construction, knobs) and `StageRepair`.

Replay and the memory key read it; `construction_stages` and `reset_knobs` are derived here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

RESPOND_STAGE = "respond"  # every system's answer stage (`memory_systems.answering.respond`)


class StageRepair(StrEnum):
    """How replay repairs a stage's output when the stage is blamed (`pipeline.analysis.attribution.replay`)."""

    RERUN = "rerun"  # an LLM stage called again with a hint; what it writes goes into memory (a non-LLM one: none)
    RESET_KNOBS = "reset_knobs"  # memory rebuilt from the graph's turns with the stage's knobs at defaults
    WIDEN = "widen"  # the retrieval's `top_k` raised to reach the missed unit
    STEER = "steer"  # the steering output replaced by the missed unit's text as a query
    ANSWER = "answer"  # the answer stage called again with a hint quoting its context's evidence lines
    NONE = "none"  # no repair of its own (its output carries no information)


@dataclass(frozen=True)
class StageSpec:
    """One stage: `llm` (a DSPy predictor at that attribute path) or not; `construction` (it builds
    memory, so it is part of the memory key); `knobs` replay may reset to their defaults; `repair`."""

    name: str
    llm: bool
    repair: StageRepair
    construction: bool = False
    knobs: tuple[str, ...] = ()


def construction_stages(stages: tuple[StageSpec, ...]) -> tuple[str, ...]:
    """The LLM stages that build memory (the rest only answer), in pipeline order."""
    return tuple(s.name for s in stages if s.construction and s.llm)


def reset_knobs(stages: tuple[StageSpec, ...]) -> Mapping[str, tuple[str, ...]]:
    """Non-LLM stage -> its knob fields a replay may reset to their defaults when rebuilding memory."""
    return MappingProxyType({s.name: s.knobs for s in stages if s.repair == StageRepair.RESET_KNOBS})
