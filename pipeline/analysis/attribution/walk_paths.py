"""Where the needed information lives in a graph, for the LLM walk: its carriers, and what a search missed.

Targets (the gold answer's and each evidence turn's words), carriers, live units at question time, the
units a retrieval missed (near misses first: what a retrieval fault restores), the copy step crowding a
search and the context lines carrying a target. Pure over the graph, question, gold and evidence; no LM.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from memtrace_loop.pipeline.analysis.attribution.carrying import content_tokens, turn_text
from memtrace_loop.pipeline.analysis.attribution.information_flow import InformationFlow
from memtrace_loop.pipeline.core.conventions import (
    NEAR_MISSES,
    QUESTION_SIDE_KINDS,
    OpKind,
    VarKind,
)
from memtrace_loop.pipeline.core.graph import ExecutionGraph, Operation, Variable
from memtrace_loop.pipeline.core.records import Question


@dataclass(frozen=True)
class Target:
    """One piece of information the answer needs: its content words and the turns it comes from."""

    words: frozenset[str]
    sources: tuple[str, ...]
    is_gold: bool


def targets_of(flow: InformationFlow, question: Question, evidence: Sequence[str]) -> tuple[Target, ...]:
    """The gold answer (from the evidence turns holding it) and each evidence turn's asked-about words."""
    graph = flow.graph
    gold = content_tokens(question.gold)
    asked = content_tokens(f"{question.text} {question.gold}")
    speakers = content_tokens(" ".join(str(graph.variable(e).meta.get("speaker", "")) for e in evidence if e in graph))
    found: list[Target] = []
    holders = tuple(e for e in evidence if flow.carries(graph.variable(e), gold))
    if gold and holders:
        found.append(Target(gold, holders, True))
    for e in evidence:
        words = (content_tokens(turn_text(graph.variable(e).value)) - speakers) & asked
        if words and not (found and found[0].is_gold and e in found[0].sources and words <= gold):
            found.append(Target(frozenset(words), (e,), False))
    return tuple(found)


class InformationPath:
    """The carriers of one question's needed information in one graph (computed lazily, once); the
    graph's reading (tokens, live units, crowding copy steps) is the lineage attributor's `InformationFlow`."""

    def __init__(self, graph: ExecutionGraph, question: Question, evidence: Sequence[str]) -> None:
        self.graph = graph
        self.question = question
        self.flow = InformationFlow(graph)
        self.targets = targets_of(self.flow, question, evidence)

    def carries(self, var: Variable, target: Target) -> bool:
        return self.flow.carries(var, target.words)

    def _construction(self, op: Operation) -> bool:
        graph = self.graph
        return op.kind != OpKind.RETRIEVAL and not any(
            graph.variable(v).kind in QUESTION_SIDE_KINDS for v in (*op.inputs, *op.outputs)
        )

    def _carried(self, op: Operation, target: Target, live: set[str]) -> list[Variable]:
        outputs = [self.graph.variable(v) for v in op.outputs]
        if op.prompt is not None:
            return [v for v in outputs if self.carries(v, target)]
        copied = [turn_text(self.graph.variable(v).value).strip() for v in op.inputs if v in live]
        copies_turns = any(self.graph.variable(v).kind == VarKind.TURN for v in op.inputs if v in live)
        whole = [v for v in outputs if any(text and text in v.value for text in copied)]
        return whole if copies_turns else [*whole, *(v for v in outputs if v not in whole and self.carries(v, target))]

    @cached_property
    def _construction_ops(self) -> tuple[Operation, ...]:
        """The graph's construction operations (no retrieval, nothing question-side), in execution order."""
        return tuple(sorted((op for op in self.graph.operations() if self._construction(op)), key=lambda op: op.seq))

    def follow(self, target: Target) -> frozenset[str]:
        """The variables that carry `target`, reached from its source turns through construction (one pass
        in execution order: an operation reads only what earlier operations wrote)."""
        live = set(target.sources)
        for op in self._construction_ops:
            if any(v in live and v != op.prompt for v in op.inputs):
                live.update(var.id for var in self._carried(op, target, live))
        return frozenset(live)

    @cached_property
    def survivors(self) -> tuple[tuple[Target, tuple[Variable, ...]], ...]:
        """Per target, the live units that carry it (by lineage; else, for the gold answer, by content)."""
        found = []
        live = self.flow.live_memories
        for target in self.targets:
            reached = self.follow(target)
            units = tuple(u for u in live if u.id in reached)
            if not units and target.is_gold:  # by content: not a piece a copy step cut from the source turn
                units = tuple(
                    u for u in live if self.carries(u, target) and not self.flow.copied_from(u, target.sources)
                )
            found.append((target, units))
        return tuple(found)

    @cached_property
    def carriers(self) -> frozenset[str]:
        """Every variable on the information's path (all targets)."""
        return frozenset(v for target in self.targets for v in self.follow(target))

    def missed(self, retrieval: Operation) -> tuple[str, ...]:
        """The live units carrying a target of which the retrieval returned none: near misses first (in
        the order the search ranked them), then the rest. Empty when nothing in memory was missed."""
        returned = set(retrieval.inputs)
        units = [
            u.id for _, carried in self.survivors if carried and not any(u.id in returned for u in carried)
            for u in carried
        ]
        near = [v for v in retrieval.meta.get(NEAR_MISSES, ()) if isinstance(v, str)]
        ranked = [v for v in near if v in units]
        return tuple(dict.fromkeys([*ranked, *units]))

    def near_missed(self, retrieval: Operation) -> tuple[str, ...]:
        """The missed units the retrieval ranked just below its cut (a larger `top_k` would reach them)."""
        near = set(v for v in retrieval.meta.get(NEAR_MISSES, ()) if isinstance(v, str))
        return tuple(v for v in self.missed(retrieval) if v in near)

    def context_holders(self, answer: Operation) -> tuple[str, ...]:
        """The answer's inputs (its context) that carry some target: the answer stage had the information."""
        graph = self.graph
        return tuple(
            v for v in answer.inputs
            if graph.variable(v).kind == VarKind.CONTEXT
            and any(self.carries(graph.variable(v), t) for t in self.targets)
        )
