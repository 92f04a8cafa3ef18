"""Replay verification: does repairing the blamed operation's output rescue the case? (being built)"""

from __future__ import annotations

from dataclasses import dataclass

import dspy
from memtrace_loop.memory_systems.base import MemorySystem
from memtrace_loop.pipeline.analysis.attribution.protocol import Attributor
from memtrace_loop.pipeline.analysis.blame import Attribution
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.records import CaseResult, Conversation


@dataclass(frozen=True)
class ReplaySettings:
    max_joint: int = 3  # the largest decisive error set tried when no single repair rescues a case


class Replayer:
    """Repairs what a blamed operation produced and re-runs only what lies downstream of it."""

    def __init__(self, system: MemorySystem, judge: dspy.Predict, settings: ReplaySettings | None = None) -> None:
        self.system = system
        self.judge = judge
        self.settings = settings or ReplaySettings()

    def verify(self, graph: ExecutionGraph, attribution: Attribution) -> Attribution:
        raise NotImplementedError("replay verification is being built")


class VerifyingAttributor:
    """Another attributor's verdicts, each checked by a replay."""

    def __init__(self, inner: Attributor, replayer: Replayer) -> None:
        self.inner = inner
        self.replayer = replayer
        self.name = f"{inner.name}+replay"

    def attribute(
        self, graph: ExecutionGraph, case: CaseResult, conversation: Conversation | None = None
    ) -> Attribution | None:
        found = self.inner.attribute(graph, case, conversation)
        return None if found is None else self.replayer.verify(graph, found)
