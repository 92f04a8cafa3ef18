"""Where each node of a failure's drawing goes: a left-to-right layout in sequence order.

One packed column per sequence position, nodes stacked by kind then id. Pure and deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass

from memtrace_loop.pipeline.core.conventions import MEMORY_KINDS, QUESTION_SIDE_KINDS, VarKind
from memtrace_loop.pipeline.report.subgraph import OP_KIND, Subgraph

NODE_W = 132
NODE_H = 34
COL_GAP = 40
ROW_GAP = 14
MARGIN = 16

_MEMORY = {str(k) for k in MEMORY_KINDS}
_QUESTION = {str(k) for k in QUESTION_SIDE_KINDS}


@dataclass(frozen=True)
class Placed:
    id: str
    x: int  # left edge
    y: int  # top edge
    column: int


@dataclass(frozen=True)
class Layout:
    width: int
    height: int
    node_w: int
    node_h: int
    placed: tuple[Placed, ...]

    def position(self, node_id: str) -> Placed:
        for placed in self.placed:
            if placed.id == node_id:
                return placed
        raise KeyError(node_id)


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
    placed = []
    rows = 0
    for column in sorted(members):
        for row, (_, node_id) in enumerate(sorted(members[column])):
            placed.append(
                Placed(node_id, MARGIN + column * (NODE_W + COL_GAP), MARGIN + row * (NODE_H + ROW_GAP), column)
            )
        rows = max(rows, len(members[column]))
    width = 2 * MARGIN + max(len(seqs), 1) * (NODE_W + COL_GAP) - COL_GAP
    height = 2 * MARGIN + max(rows, 1) * (NODE_H + ROW_GAP) - ROW_GAP
    return Layout(width, height, NODE_W, NODE_H, tuple(placed))
