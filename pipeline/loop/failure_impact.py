"""What failed operations did to one evaluation's scores: `FailureImpact` and `failure_impact`.

A scored question (excluded categories left out) is **touched** when a failed operation (an LM call that
finally failed, or an unusable output) lies on the path to its verdict in its conversation's graph, when
one worked on one of its evidence turns (upstream of its inputs, not through a retrieval: a failed
extraction leaves no memory to retrieve; the turn is the link), or when its `CaseResult` carries an error.
Hence the score without them and its bounds: every touched wrong one right (`accuracy_high`), every
touched right one wrong (`accuracy_low`). Impacts add up (`+`). Pure; it does not decide what a run with
failures exits with (`pipeline.backends.failure_guard.failed_calls_outcome`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from memtrace_loop.pipeline.core.conventions import Namespace, OpKind, name_of, prefix, turn_name, verdict_name
from memtrace_loop.pipeline.core.graph import ExecutionGraph, Operation
from memtrace_loop.pipeline.core.records import CaseResult
from memtrace_loop.pipeline.loop.runner import RunResult

__all__ = ["FailureImpact", "failure_impact", "touched_questions"]


@dataclass(frozen=True)
class FailureImpact:
    """Counts over the scored questions (or verdicts, summed over several evaluations)."""

    scored: int = 0
    correct: int = 0
    touched: int = 0
    touched_wrong: int = 0  # touched and not scored correct

    def __add__(self, other: FailureImpact) -> FailureImpact:
        return FailureImpact(self.scored + other.scored, self.correct + other.correct,
                             self.touched + other.touched, self.touched_wrong + other.touched_wrong)

    @property
    def touched_correct(self) -> int:
        return self.touched - self.touched_wrong

    @property
    def accuracy(self) -> float:
        return self.correct / self.scored if self.scored else math.nan

    @property
    def accuracy_untouched(self) -> float:
        """The judge accuracy over the questions no failed operation touched (nan when all were)."""
        untouched = self.scored - self.touched
        return (self.correct - self.touched_correct) / untouched if untouched else math.nan

    @property
    def accuracy_high(self) -> float:
        """The accuracy had every touched question scored wrong been right."""
        return (self.correct + self.touched_wrong) / self.scored if self.scored else math.nan

    @property
    def accuracy_low(self) -> float:
        """The accuracy had every touched question scored right been wrong."""
        return (self.correct - self.touched_correct) / self.scored if self.scored else math.nan

    def to_dict(self) -> dict[str, float]:
        """Counts and the three accuracies (nan ones left out), for records and metrics."""
        values = {
            "scored": float(self.scored), "touched": float(self.touched), "touched_wrong": float(self.touched_wrong),
            "judge_accuracy_untouched": self.accuracy_untouched, "judge_accuracy_low": self.accuracy_low,
            "judge_accuracy_high": self.accuracy_high,
        }
        return {k: v for k, v in values.items() if not math.isnan(v)}


def _worked_on(graph: ExecutionGraph, op: Operation) -> set[str]:
    """The turn names `op` worked on: upstream of its inputs, not through a retrieval (what was
    retrieved from memory comes from other turns)."""
    turn_prefix = prefix(Namespace.TURN)
    seen: set[str] = set()
    queue = list(op.inputs)
    while queue:
        var_id = queue.pop()
        if var_id in seen:
            continue
        seen.add(var_id)
        producer = graph.producer(var_id)
        if producer is not None and producer.kind != OpKind.RETRIEVAL:
            queue.extend(producer.inputs)
    return {name for name in map(name_of, seen) if name.startswith(turn_prefix)}


def _reach_of_failures(graph: ExecutionGraph) -> tuple[set[str], set[str]]:
    """What the failed operations of `graph` reach: node ids downstream, turn names upstream."""
    downstream: set[str] = set()
    turns: set[str] = set()
    for op in graph.operations():
        if op.failed:
            downstream.add(op.id)
            downstream.update(graph.descendants(op.id))
            turns.update(_worked_on(graph, op))
    return downstream, turns


def touched_questions(results: Iterable[CaseResult], graph_by_conversation: Mapping[str, ExecutionGraph]) -> set[str]:
    """The ids of the questions a failed operation touched (see the module doc)."""
    reach_by_conversation: dict[str, tuple[set[str], set[str]]] = {}
    touched: set[str] = set()
    for result in results:
        question = result.question
        graph = graph_by_conversation.get(question.conversation_id)
        if graph is not None and question.conversation_id not in reach_by_conversation:
            reach_by_conversation[question.conversation_id] = _reach_of_failures(graph)
        downstream, turns = reach_by_conversation.get(question.conversation_id, (set(), set()))
        verdicts = graph.versions(verdict_name(question.id)) if graph is not None else ()
        if (result.error is not None or any(v.id in downstream for v in verdicts)
                or any(turn_name(turn) in turns for turn in question.evidence)):
            touched.add(question.id)
    return touched


def failure_impact(result: RunResult) -> FailureImpact:
    """The impact of the failed operations of one evaluation on its overall score."""
    excluded = set(result.report.excluded_categories)
    scored = [r for r in result.results if r.question.category not in excluded]
    touched = touched_questions(scored, result.graph_by_conversation)
    return FailureImpact(
        scored=len(scored), correct=sum(r.correct for r in scored), touched=len(touched),
        touched_wrong=sum(1 for r in scored if r.question.id in touched and not r.correct),
    )
