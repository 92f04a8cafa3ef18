"""The part of a conversation graph one failure's drawing shows: from the evidence turns to the answer.

`failure_subgraph(graph, case, attribution, max_nodes)` draws what `pipeline.analysis.failure_path`
selects (the one selector the MLflow traces use too): at most `max_nodes` nodes, the rest counted by
kind in `elided_by_kind` (capped memory units included), so a LoCoMo-sized conversation still draws a
small, readable graph. Each node gets its role, label, value and a sequence position: an operation at
its own, a variable just after its drawn producer, else just before its first drawn use (what an
operation reads stacks in one column beside it). `layout` places the drawing left to right: one packed
column per sequence position, nodes stacked by band (turns, derived values, operations, memory, the
question's side) then id. Pure and deterministic: reads the graph, returns records.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from memtrace_loop.pipeline.analysis.attribution.records import Attribution
from memtrace_loop.pipeline.analysis.failure_path import Role, failure_path
from memtrace_loop.pipeline.core.conventions import MEMORY_KINDS, QUESTION_SIDE_KINDS, VarKind
from memtrace_loop.pipeline.core.graph import ExecutionGraph, GraphError
from memtrace_loop.pipeline.core.records import CaseResult

__all__ = ["NODE_H", "NODE_W", "OP_KIND", "Layout", "Placed", "Role", "SubNode", "Subgraph", "failure_subgraph",
           "layout"]

OP_KIND = "op"  # the `kind` of an operation node (variables carry their VarKind)
NODE_W, NODE_H, COL_GAP, ROW_GAP, MARGIN = 132, 34, 40, 14, 16  # NODE_W, NODE_H: the page script's too
_MEMORY = {str(k) for k in MEMORY_KINDS}
_QUESTION = {str(k) for k in QUESTION_SIDE_KINDS}


@dataclass(frozen=True)
class SubNode:
    id: str
    kind: str  # OP_KIND or the variable's kind
    label: str  # op: its name; variable: its name (with the version when it has several)
    value: str  # variable: its value; op: stage, kind, status and error
    seq: float  # op: its sequence number; variable: just after its producer (turns: just before first use)
    role: str = Role.PATH
    failed: bool = False


@dataclass(frozen=True)
class Subgraph:
    """A failure's drawing: nodes, data-flow edges (source, target) and version edges (previous, next)."""

    nodes: tuple[SubNode, ...]
    edges: tuple[tuple[str, str], ...]
    version_edges: tuple[tuple[str, str], ...] = ()
    elided_by_kind: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    note: str = ""

    @property
    def elided(self) -> int:
        return sum(self.elided_by_kind.values())


def failure_subgraph(
    graph: ExecutionGraph, case: CaseResult, attribution: Attribution | None = None, max_nodes: int = 60
) -> Subgraph:
    """The drawing of one failure (see the module doc); at most `max_nodes` nodes."""
    if max_nodes < 1:
        raise ValueError(f"max_nodes must be at least 1, got {max_nodes}")
    path = failure_path(graph, case, attribution)
    kept = path.nodes(max_nodes)
    seq_by_var = _variable_seqs(graph, kept)
    ordered = sorted(kept, key=lambda n: (seq_by_var.get(n, 0.0) if not n.startswith("op:")
                                          else float(graph.operation(n).seq), n))
    nodes = tuple(_describe(graph, n, path.roles.get(n, Role.PATH), seq_by_var) for n in ordered)
    version_edges = tuple(
        (v.previous, v.id) for v in (graph.variable(n) for n in ordered if not n.startswith("op:"))
        if v.previous is not None and v.previous in kept
    )
    elided = Counter(
        OP_KIND if n.startswith("op:") else str(graph.variable(n).kind) for n in (path.candidates | path.capped) - kept
    )
    note = _note(path.answer, path.evidence, path.on_path)
    return Subgraph(nodes, tuple(_edges(graph, ordered, kept)), version_edges,
                    MappingProxyType(dict(sorted(elided.items()))), note)


def _describe(graph: ExecutionGraph, node_id: str, role: str, seq_by_var: Mapping[str, float]) -> SubNode:
    if node_id.startswith("op:"):
        op = graph.operation(node_id)
        value = f"{op.name} — stage {op.stage}, {op.kind.value}, seq {op.seq}, {op.status.value}"
        if op.error:
            value += f"\nerror: {op.error}"
        return SubNode(op.id, OP_KIND, op.name, value, float(op.seq), role, op.failed)
    var = graph.variable(node_id)
    several = var.version > 1 or len(graph.versions(var.name)) > 1
    label = var.id if several else var.name
    return SubNode(var.id, str(var.kind), label, var.value, seq_by_var[var.id], role)


def _edges(graph: ExecutionGraph, ordered: Sequence[str], kept: Collection[str]) -> list[tuple[str, str]]:
    """The input and output edges of the kept operations, between kept nodes."""
    edges: list[tuple[str, str]] = []
    for node in ordered:
        if node.startswith("op:"):
            op = graph.operation(node)
            edges.extend((i, op.id) for i in op.inputs if i in kept)
            edges.extend((op.id, o) for o in op.outputs if o in kept)
    return edges


def _note(answer: str | None, evidence: Sequence[str], on_path: Collection[str]) -> str:
    if answer is None:
        return "the graph holds no answer for this question"
    if not evidence:
        return "no evidence turn of this question is in the graph"
    if not on_path:
        return "no path from the evidence turns reaches the answer: the information was lost on the way"
    return ""


def _variable_seqs(graph: ExecutionGraph, nodes: Collection[str]) -> dict[str, float]:
    """A variable sits just after its producer when that is drawn; else (a turn, a memory unit a search
    read) just before its first drawn use, so what an operation reads stacks in one column beside it."""
    seq_by_var: dict[str, float] = {}
    for node in nodes:
        if node.startswith("op:"):
            continue
        try:
            producer = graph.producer(node)
        except GraphError:
            continue
        users = graph.consumers(node)
        drawn_users = [op for op in users if op.id in nodes]
        if producer is not None and (producer.id in nodes or not drawn_users):
            seq_by_var[node] = producer.seq + 0.5
        else:
            first = min((op.seq for op in (drawn_users or users)), default=None)
            seq_by_var[node] = first - 0.5 if first is not None else -1.0
    return seq_by_var


@dataclass(frozen=True)
class Placed:
    id: str
    x: int  # left edge
    y: int  # top edge


@dataclass(frozen=True)
class Layout:
    width: int
    height: int
    placed: tuple[Placed, ...]


def _band(kind: str) -> int:
    if kind == str(VarKind.TURN):
        return 0
    if kind == OP_KIND:
        return 2
    if kind in _MEMORY:
        return 3
    if kind in _QUESTION:
        return 4
    return 1  # facts, decisions, similar memories, another tool's kinds


def layout(subgraph: Subgraph) -> Layout:
    """The boxes of `subgraph`'s nodes (see the module doc)."""
    seqs = sorted({node.seq for node in subgraph.nodes})
    column_by_seq = {seq: i for i, seq in enumerate(seqs)}
    members: dict[int, list[tuple[int, str]]] = {}
    for node in subgraph.nodes:
        members.setdefault(column_by_seq[node.seq], []).append((_band(node.kind), node.id))
    placed = [
        Placed(node_id, MARGIN + column * (NODE_W + COL_GAP), MARGIN + row * (NODE_H + ROW_GAP))
        for column in sorted(members) for row, (_, node_id) in enumerate(sorted(members[column]))
    ]
    rows = max((len(m) for m in members.values()), default=0)
    width = 2 * MARGIN + max(len(seqs), 1) * (NODE_W + COL_GAP) - COL_GAP
    height = 2 * MARGIN + max(rows, 1) * (NODE_H + ROW_GAP) - ROW_GAP
    return Layout(width, height, tuple(placed))
