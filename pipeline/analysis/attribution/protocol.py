"""The seam between the loop and failure attribution: the `Attributor` protocol, `attribute_run`, `AttributorSpec`.

An attributor explains one failed case (graph, judged case, conversation) as an `Attribution`, or None when
the graph does not hold it; what it needs comes through its constructor. A `RunAttributor` also sees the
whole run. It finds nothing itself and does not aggregate blame.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from memtrace_loop.pipeline.analysis.attribution.records import Attribution
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.records import CaseResult, Conversation

if TYPE_CHECKING:
    from memtrace_loop.pipeline.backends.embeddings import Embedder
    from memtrace_loop.pipeline.backends.lm import LMSet


@dataclass(frozen=True)
class TracedRun:
    """The cases of one evaluation with their traces: what the attribution of a run looks at."""

    results: tuple[CaseResult, ...]
    graph_by_conversation: Mapping[str, ExecutionGraph]
    conversation_by_id: Mapping[str, Conversation] = field(default_factory=lambda: MappingProxyType({}))
    exclude_categories: tuple[int, ...] = ()

    def failures(self) -> tuple[CaseResult, ...]:
        """The failed cases outside the excluded categories, in result order."""
        return tuple(r for r in self.results if not r.correct and r.question.category not in self.exclude_categories)


class Attributor(Protocol):
    """Explains a failed case: which operation (and stage) is to blame, and why."""

    name: str

    def attribute(
        self, graph: ExecutionGraph, case: CaseResult, conversation: Conversation | None = None
    ) -> Attribution | None: ...


@dataclass(frozen=True)
class AttributorSpec:
    """What an attributor module exports as `SPEC`: its settings record (the `attributor` node's schema) and
    `build(settings, lms, embedder)`, the bare attributor (the registry adds the replay check)."""

    schema: type
    build: Callable[[Any, LMSet | None, Embedder | None], Attributor]
    compare: bool = False  # attributors are not swept by default


@runtime_checkable
class RunAttributor(Protocol):
    """An attributor that looks at a run's failures together before deciding on each (the replay check
    verifies a sample of them); `attribute_run` calls it instead of `attribute` case by case."""

    def attribute_run(
        self, run: TracedRun, on_case: Callable[[CaseResult], None] | None = None, max_checked: int | None = None
    ) -> tuple[Attribution, ...]: ...


def attribute_run(
    attributor: Attributor, run: TracedRun, on_case: Callable[[CaseResult], None] | None = None,
    max_checked: int | None = None,
) -> tuple[Attribution, ...]:
    """Attributions of every failure of `run` whose graph is present, in result order (`on_case` after each);
    a replay check verifies at most `max_checked` of them (None: all)."""
    if isinstance(attributor, RunAttributor):
        return attributor.attribute_run(run, on_case, max_checked)
    return tuple(a for _, a in attributed_cases(attributor, run, on_case))


def attributed_cases(
    attributor: Attributor, run: TracedRun, on_case: Callable[[CaseResult], None] | None = None
) -> tuple[tuple[ExecutionGraph, Attribution], ...]:
    """`attributor`'s verdict on every failure of `run` whose graph is present, with that graph."""
    found = []
    for case in run.failures():
        graph = run.graph_by_conversation.get(case.question.conversation_id)
        if graph is None:
            continue
        attribution = attributor.attribute(graph, case, run.conversation_by_id.get(case.question.conversation_id))
        if attribution is not None:
            found.append((graph, attribution))
        if on_case is not None:
            on_case(case)
    return tuple(found)
