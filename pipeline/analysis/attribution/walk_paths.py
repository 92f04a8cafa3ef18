"""Where the needed information lives in a graph, for the LLM walk: its carriers, and what a search missed.

Targets (the gold answer's and each evidence turn's words), carriers, live units at question time, the
units a retrieval missed (near misses first: what a retrieval fault restores), the copy step crowding a
search and the context lines carrying a target. Pure over the graph, question, gold and evidence; no LM.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from memtrace_loop.pipeline.analysis.attribution.carrying import content_tokens, coverage_needed, turn_text
from memtrace_loop.pipeline.core.conventions import (
    MEMORY_KINDS,
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


def targets_of(graph: ExecutionGraph, question: Question, evidence: Sequence[str]) -> tuple[Target, ...]:
    """The gold answer (from the evidence turns holding it) and each evidence turn's asked-about words."""
    gold = content_tokens(question.gold)
    asked = content_tokens(f"{question.text} {question.gold}")
    speakers = content_tokens(" ".join(str(graph.variable(e).meta.get("speaker", "")) for e in evidence if e in graph))
    found: list[Target] = []
    holders = tuple(e for e in evidence if _holds(content_tokens(graph.variable(e).value), gold))
    if gold and holders:
        found.append(Target(gold, holders, True))
    for e in evidence:
        words = (content_tokens(turn_text(graph.variable(e).value)) - speakers) & asked
        if words and not (found and found[0].is_gold and e in found[0].sources and words <= gold):
            found.append(Target(frozenset(words), (e,), False))
    return tuple(found)


def _holds(tokens: frozenset[str], target: frozenset[str]) -> bool:
    return bool(target) and len(tokens & target) >= coverage_needed(target)


class InformationPath:
    """The carriers of one question's needed information in one graph (computed lazily, once)."""

    def __init__(self, graph: ExecutionGraph, question: Question, evidence: Sequence[str]) -> None:
        self.graph = graph
        self.question = question
        self.targets = targets_of(graph, question, evidence)
        self._tokens: dict[str, frozenset[str]] = {}

    def carries(self, var: Variable, target: Target) -> bool:
        tokens = self._tokens.get(var.id)
        if tokens is None:
            tokens = self._tokens[var.id] = content_tokens(var.value)
        return _holds(tokens, target.words)

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
    def live_units(self) -> tuple[Variable, ...]:
        """The memory units at question time: latest version of each, not deleted, not empty."""
        units = []
        for name in self.graph.names():
            latest = self.graph.latest(name)
            if latest is not None and latest.kind in MEMORY_KINDS and latest.value and not latest.meta.get("deleted"):
                units.append(latest)
        return tuple(units)

    @cached_property
    def survivors(self) -> tuple[tuple[Target, tuple[Variable, ...]], ...]:
        """Per target, the live units that carry it (by lineage; else, for the gold answer, by content)."""
        found = []
        for target in self.targets:
            reached = self.follow(target)
            units = tuple(u for u in self.live_units if u.id in reached)
            if not units and target.is_gold:  # by content: not a piece a copy step cut from the source turn
                units = tuple(
                    u for u in self.live_units if self.carries(u, target) and not self._copied_from(u, target)
                )
            found.append((target, units))
        return tuple(found)

    def _copied_from(self, unit: Variable, target: Target) -> bool:
        producer = self.graph.producer(unit.id)
        return producer is not None and producer.prompt is None and any(s in producer.inputs for s in target.sources)

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

    def crowding_step(self, retrieval: Operation) -> Operation | None:
        """The copy step (no prompt) that made at least half of what `retrieval` returned out of pieces of
        turns it cut apart (no piece holds a whole turn), if any: units too small crowd the search."""
        graph = self.graph
        returned = [graph.variable(v) for v in retrieval.inputs if graph.variable(v).kind in MEMORY_KINDS]
        makers = [graph.producer(u.id) for u in returned]
        pieces = [
            maker for unit, maker in zip(returned, makers, strict=True)
            if maker is not None and maker.prompt is None and not any(
                graph.variable(t).kind == VarKind.TURN and turn_text(graph.variable(t).value).strip() in unit.value
                for t in maker.inputs
            ) and any(graph.variable(t).kind == VarKind.TURN for t in maker.inputs)
        ]
        return pieces[0] if pieces and 2 * len(pieces) >= len(returned) else None

    def context_holders(self, answer: Operation) -> tuple[str, ...]:
        """The answer's inputs (its context) that carry some target: the answer stage had the information."""
        graph = self.graph
        return tuple(
            v for v in answer.inputs
            if graph.variable(v).kind == VarKind.CONTEXT
            and any(self.carries(graph.variable(v), t) for t in self.targets)
        )
