"""One case's LLM walk: its state (`Walk`) and what a repair of a faulty step restores (`restore_of`).

It reads the graph and the walk's records; no LM call, no rendering.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

from memtrace_loop.memory_systems.spec import WalkPrior
from memtrace_loop.pipeline.analysis.attribution.records import ErrorType
from memtrace_loop.pipeline.analysis.attribution.walk_paths import InformationPath
from memtrace_loop.pipeline.core.conventions import (
    CONSTRUCTION_OP_KINDS,
    MEMORY_KINDS,
    QUESTION_SIDE_KINDS,
    OpKind,
    VarKind,
)
from memtrace_loop.pipeline.core.graph import ExecutionGraph, Operation
from memtrace_loop.pipeline.core.records import CaseResult

# Output kinds that hold a decision label, not content taken from the inputs.
LABEL_KINDS = frozenset({VarKind.BOUNDARY, VarKind.SUFFICIENCY})


@dataclass(frozen=True)
class StepVerdict:
    """The LM's verdict on one walk step: did the operation keep the information, and if not, why."""

    kept: bool
    error_type: ErrorType | None
    reason: str
    judged: bool  # False when the LM call failed or its reply could not be parsed


@dataclass
class WalkSpend:
    """Per-case tally (local to one `attribute` call)."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    unjudged: list[str] = field(default_factory=list)


@dataclass
class Walk:
    """The state of one walk (one case): the frontier (a heap ranked by the prior), the operations seen
    and judged, the variables on the information's path, and the steps and calls spent."""

    graph: ExecutionGraph
    case: CaseResult
    prior: WalkPrior
    upstream: frozenset[str]
    evidence: tuple[str, ...]
    needed: str
    on_path: set[str]
    path: InformationPath
    pseudo: bool = False
    started: float = 0.0
    spend: WalkSpend = field(default_factory=lambda: WalkSpend())
    heap: list[tuple[int, int, str]] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)
    labelled_stages: set[str] = field(default_factory=set)  # stages queued with an op that only writes labels
    kept_by_op: dict[str, bool] = field(default_factory=dict)
    faulty: dict[str, StepVerdict] = field(default_factory=dict)  # every operation judged faulty, by id
    steps: int = 0

    def relevant(self, op: Operation) -> bool:
        if op.kind == OpKind.JUDGE or op.stage in self.prior.skip_stages:
            return False
        question_side = any(self.graph.variable(v).kind in QUESTION_SIDE_KINDS for v in (*op.inputs, *op.outputs))
        return not question_side or op.id in self.upstream

    def push(self, op: Operation) -> None:
        if op.id in self.seen or not self.relevant(op):
            return
        if op.outputs and all(self.graph.variable(v).kind in LABEL_KINDS for v in op.outputs):
            # a decision that writes only a label (a boundary) carries no content: the first one per stage
            # stands for the rest (a buffer re-read by a decision per turn would use up every step)
            if op.stage in self.labelled_stages:
                return
            self.labelled_stages.add(op.stage)
        self.seen.add(op.id)
        heapq.heappush(self.heap, (self.prior.rank(op), op.seq, op.id))

    def seed(self, context_ops: Sequence[Operation]) -> None:
        """The first frontier: the readers of the evidence (and the question's retrieval, if the prior says so)."""
        for var_id in self.evidence:
            for op in self.graph.consumers(var_id):
                if op.prompt != var_id:
                    self.push(op)
        if self.prior.seed_retrieval:
            for op in context_ops:
                self.push(op)

    def advance(self, op: Operation) -> None:
        """`op` kept the information: its outputs join the path and their readers the frontier."""
        for out in op.outputs:
            self.on_path.add(out)
            for consumer in self.graph.consumers(out):
                if consumer.prompt != out:
                    self.push(consumer)


def restore_of(walk: Walk, op: Operation) -> tuple[str, ...]:
    """What a repair of faulty `op` puts back: for a retrieval the units it missed (else the evidence
    turns); for the answer step the context lines that held the information; for a construction step its
    stored units on the path it destroyed, else the evidence turns its information came from (what a
    replay puts back in memory; never an intermediate such as extracted facts)."""
    graph, path = walk.graph, walk.path
    if op.kind == OpKind.RETRIEVAL:
        return path.missed(op) or walk.evidence
    if op.kind == OpKind.RESPONSE and (held := path.context_holders(op)):
        return held
    if op.kind in CONSTRUCTION_OP_KINDS:
        return _stored_carriers(walk, op) or tuple(e for e in walk.evidence if e in graph.ancestors(op.id)) or (
            walk.evidence
        )
    on_path = walk.on_path | path.carriers
    return tuple(v for v in op.inputs if v in on_path) or tuple(
        v for v in op.inputs if graph.variable(v).kind not in (VarKind.QUERY, VarKind.PROMPT)
    )


def _stored_carriers(walk: Walk, op: Operation) -> tuple[str, ...]:
    """The stored units on the information's path that a construction step (or the writes executing its
    decision) read, i.e. destroyed: an update's or deletion's old value."""
    graph, on_path = walk.graph, walk.on_path | walk.path.carriers
    readers = [op, *(c for v in op.outputs for c in graph.consumers(v) if c.prompt is None)]
    return tuple(dict.fromkeys(
        v for reader in readers for v in reader.inputs if v in on_path and graph.variable(v).kind in MEMORY_KINDS
    ))


def retrieval_note(path: InformationPath, op: Operation, restore: Sequence[str]) -> str:
    """What a retrieval fault's reason adds: the unit it missed, and whether `top_k` cut it off."""
    k = op.meta.get("k", "?")
    near = path.near_missed(op)
    if near:
        return (f" It missed {near[0]}, which holds the needed information and was ranked just below the cut "
                f"(k={k}): top_k is too small for this question.")
    missed = [v for v in restore if v in path.carriers]
    if missed:
        return f" It missed {missed[0]}, which was in memory and holds the needed information."
    return ""
