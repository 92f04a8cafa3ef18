"""The seam between the loop and failure attribution: the `Attributor` protocol and its input.

An attributor gets a `TracedRun` (the judged cases of one evaluation, the execution graph of every
conversation, the conversations themselves and the categories left out) and returns one
`Attribution` per failed case it can explain, in result order. `LineageAttributor` is the default:
the pure graph-lineage analysis of `pipeline.analysis.attribution`. Other attributors (e.g. one that
asks an LLM to walk the graph) get what they need — an LM — through their constructor. This module
neither aggregates blame (`pipeline.analysis.blame`) nor runs anything.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from memtrace_loop.pipeline.analysis.attribution import METHOD, attribute_failures
from memtrace_loop.pipeline.analysis.blame import Attribution
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.records import CaseResult, Conversation


@dataclass(frozen=True)
class TracedRun:
    """The cases of one evaluation with their traces: what an attributor looks at."""

    results: tuple[CaseResult, ...]
    graph_by_conversation: Mapping[str, ExecutionGraph]
    conversation_by_id: Mapping[str, Conversation] = field(default_factory=lambda: MappingProxyType({}))
    exclude_categories: tuple[int, ...] = ()

    def failures(self) -> tuple[CaseResult, ...]:
        """The failed cases outside the excluded categories, in result order."""
        return tuple(r for r in self.results if not r.correct and r.question.category not in self.exclude_categories)


class Attributor(Protocol):
    """Explains failed cases: which operation (and stage) is to blame, and why."""

    name: str

    def attribute(self, run: TracedRun) -> Sequence[Attribution]: ...


class LineageAttributor:
    """The default attributor: follows the evidence through each conversation graph (no LLM)."""

    name = METHOD

    def attribute(self, run: TracedRun) -> tuple[Attribution, ...]:
        return attribute_failures(
            run.results, run.graph_by_conversation, run.conversation_by_id, run.exclude_categories
        )
