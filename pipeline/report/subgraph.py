"""The part of a conversation graph one failure's drawing shows: from the evidence turns to the answer.

`failure_subgraph(graph, case, attribution)` keeps (1) the nodes on a path from an evidence turn to
the case's answer (the answer's ancestors restricted to the evidence turns' lineage), (2) the blamed
operation and the other suspects with their inputs and outputs (a drop usually leads nowhere near the
answer), (3) the answering chain of the question (query, retrieval, context, answer, judge, gold,
verdict), (4) the evidence turns themselves and (5) every node the attribution's reason names
(`named_nodes`; memory units get `Role.NAMED`) with the evidence's path to it and the operation that
wrote it — for a missed retrieval: evidence turn → construction → the unit that held the answer, beside
the search that missed it. Memory units a drawn operation read that lie on no such path (a search's other
hits) are capped at `MAX_UNRELATED`, the rest counted as elided. When that is more than `max_nodes`, it
keeps the nodes nearest the must-keep ones (blamed operation, named nodes, evidence, answer) and counts
the rest by kind in `elided_by_kind`, so a LoCoMo-sized conversation still draws a small, readable graph.

The forward walk from the evidence never enters another question's answering side, never passes
the answer's own sequence number and does not follow the similar memories shown to a decision
(context, not the information's path: the unit's own versions carry it), so its cost is that of the
evidence's lineage, not of the whole graph. Pure: reads the graph, returns a record; drawing it is `report.layout`.
"""

from __future__ import annotations

import re
from collections import Counter, deque
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from memtrace_loop.pipeline.analysis.attribution.records import Attribution
from memtrace_loop.pipeline.core.conventions import (
    MEMORY_KINDS,
    QUESTION_SIDE_KINDS,
    OpKind,
    VarKind,
    answer_name,
    first_version,
    name_of,
    turn_name,
)
from memtrace_loop.pipeline.core.graph import ExecutionGraph, GraphError, Operation
from memtrace_loop.pipeline.core.records import CaseResult

OP_KIND = "op"  # the `kind` of an operation node (variables carry their VarKind)
MAX_EVIDENCE = 8  # evidence turns always drawn (more are elided like any other node)
MAX_UNRELATED = 2  # memory units read by a drawn operation but on no path of the failure (the rest elided)
_NAMED = re.compile(r"[A-Za-z_]+:[^\s,;()\"'\[\]]+")  # a node id (or variable name) as a reason writes it
_MEMORY = frozenset(str(k) for k in MEMORY_KINDS)


class Role:
    """Why a node is in the drawing (one per node, the strongest)."""

    BLAMED = "blamed"
    SUSPECT = "suspect"
    EVIDENCE = "evidence"
    ANSWER = "answer"
    NAMED = "named"  # a memory unit the attribution's reason names (e.g. the one a search missed)
    PATH = "path"


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


def _question_side(graph: ExecutionGraph, op: Operation) -> bool:
    if op.kind in (OpKind.RESPONSE, OpKind.JUDGE):
        return True
    return any(graph.variable(v).kind in QUESTION_SIDE_KINDS for v in op.outputs)


def _answering_chain(graph: ExecutionGraph, answer: str) -> set[str]:
    """The answer, the operations that produced it through question-side variables (retrieval,
    sufficiency, expansion), those variables, and the judge with its gold and verdict."""
    chain: set[str] = {answer}
    queue = deque([answer])
    while queue:
        node = queue.popleft()
        producer = graph.producer(node)
        if producer is None or producer.id in chain:
            continue
        chain.add(producer.id)
        for var_id in producer.inputs:
            if graph.variable(var_id).kind in QUESTION_SIDE_KINDS and var_id not in chain:
                chain.add(var_id)
                queue.append(var_id)
    for judge in graph.consumers(answer):
        if judge.kind == OpKind.JUDGE:
            chain.add(judge.id)
            chain.update(judge.inputs)
            chain.update(judge.outputs)
    return chain


def _forward(graph: ExecutionGraph, starts: Iterable[str], allowed_ops: set[str], max_seq: int) -> set[str]:
    """Descendants of `starts` through construction operations (and the `allowed_ops` of this
    question's answering side) up to sequence number `max_seq`."""
    starts_set = set(starts)
    seen: set[str] = set(starts_set)
    queue = deque(sorted(starts_set))
    while queue:
        var_id = queue.popleft()
        if graph.variable(var_id).kind == VarKind.RETRIEVED and var_id not in starts_set:
            continue  # memories shown to a decision as context: not where the information flows
        for op in graph.consumers(var_id):
            if op.id in seen or op.seq > max_seq:
                continue
            if op.id not in allowed_ops and _question_side(graph, op):
                continue
            seen.add(op.id)
            for out in op.outputs:
                if out not in seen:
                    seen.add(out)
                    queue.append(out)
    return seen


def _backward_within(graph: ExecutionGraph, target: str, allowed: set[str]) -> set[str]:
    """The ancestors of `target` (itself included) reachable through nodes of `allowed` only."""
    if target not in allowed:
        return set()
    found = {target}
    queue = deque([target])
    while queue:
        node = queue.popleft()
        if node.startswith("op:"):
            parents: Iterable[str] = graph.operation(node).inputs
        else:
            producer = graph.producer(node)
            parents = () if producer is None else (producer.id,)
        for parent in parents:
            if parent in allowed and parent not in found:
                found.add(parent)
                queue.append(parent)
    return found


def _evidence_ids(graph: ExecutionGraph, case: CaseResult, attribution: Attribution | None) -> list[str]:
    turn_ids = (attribution.evidence if attribution is not None and attribution.evidence else ()) or (
        case.question.evidence
    )
    found = []
    for turn_id in turn_ids:
        var_id = first_version(turn_name(turn_id))
        if var_id in graph and var_id not in found:
            found.append(var_id)
    return found


def _io(graph: ExecutionGraph, op_id: str, needed: Collection[str]) -> tuple[set[str], set[str]]:
    """(drawn, capped): the operation with its inputs and outputs, except the memory units beyond the first
    `MAX_UNRELATED` that are on no path of the failure (`needed`), which are capped (a search's other hits)."""
    op = graph.operation(op_id)
    drawn, capped, unrelated = {op_id}, set(), 0
    for var_id in (*op.inputs, *op.outputs):
        if var_id in needed or str(graph.variable(var_id).kind) not in _MEMORY:
            drawn.add(var_id)
        elif unrelated < MAX_UNRELATED:
            unrelated += 1
            drawn.add(var_id)
        else:
            capped.add(var_id)
    return drawn, capped - drawn


def _pick(graph: ExecutionGraph, candidates: set[str], must: list[str], max_nodes: int) -> set[str]:
    """`must` (in order, up to the cap) then the candidates nearest them (BFS over data-flow edges)."""
    kept: set[str] = set()
    queue: deque[str] = deque()
    for node in must:
        if len(kept) >= max_nodes:
            return kept
        if node in candidates and node not in kept:
            kept.add(node)
            queue.append(node)
    while queue and len(kept) < max_nodes:
        node = queue.popleft()
        if node.startswith("op:"):
            op = graph.operation(node)
            neighbours: list[str] = [*op.inputs, *op.outputs]
        else:
            producer = graph.producer(node)
            neighbours = [*(() if producer is None else (producer.id,)), *(o.id for o in graph.consumers(node))]
        for neighbour in neighbours:
            if neighbour in candidates and neighbour not in kept:
                kept.add(neighbour)
                queue.append(neighbour)
                if len(kept) >= max_nodes:
                    break
    return kept


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


def failure_subgraph(
    graph: ExecutionGraph, case: CaseResult, attribution: Attribution | None = None, max_nodes: int = 60
) -> Subgraph:
    """The drawing of one failure (see the module doc); at most `max_nodes` nodes."""
    if max_nodes < 1:
        raise ValueError(f"max_nodes must be at least 1, got {max_nodes}")
    answer_var = graph.latest(answer_name(case.question.id))
    evidence = _evidence_ids(graph, case, attribution)
    blamed = _blamed_ops(graph, attribution)
    named = named_nodes(graph, attribution.reason) if attribution is not None else []
    if answer_var is None:
        chain: set[str] = set()
        max_seq = graph.n_operations
        answer = None
    else:
        answer = answer_var.id
        chain = _answering_chain(graph, answer)
        producer = graph.producer(answer)
        max_seq = producer.seq if producer is not None else graph.n_operations
    lineage = _forward(graph, evidence, chain, max_seq)
    on_path = _backward_within(graph, answer, lineage) if answer is not None else set()
    needed = on_path | chain | set(evidence) | _paths_to(graph, named, lineage)
    candidates, capped = set(needed), set()
    for op_id in [*blamed, *(n for n in named if n.startswith("op:"))]:
        io, unrelated = _io(graph, op_id, needed)
        candidates |= io
        capped |= unrelated
    candidates -= capped
    prompts = {op.prompt for op in (graph.operation(n) for n in candidates if n.startswith("op:")) if op.prompt}
    candidates -= prompts - set(evidence)

    must = [*blamed[:1], *named, *evidence[:MAX_EVIDENCE], *([answer] if answer else []), *blamed[1:]]
    if answer is not None and (producer := graph.producer(answer)) is not None:
        must.append(producer.id)
    kept = candidates if len(candidates) <= max_nodes else _pick(graph, candidates, must, max_nodes)

    role_by_node = _roles(blamed, attribution, evidence, answer)
    for node in named:
        if not node.startswith("op:") and str(graph.variable(node).kind) in _MEMORY:
            role_by_node.setdefault(node, Role.NAMED)
    seq_by_var = _variable_seqs(graph, kept)
    ordered = sorted(kept, key=lambda n: (seq_by_var.get(n, 0.0) if not n.startswith("op:")
                                          else float(graph.operation(n).seq), n))
    nodes = tuple(_describe(graph, n, role_by_node.get(n, Role.PATH), seq_by_var) for n in ordered)
    edges = _edges(graph, ordered, kept)
    version_edges = tuple(
        (v.previous, v.id) for v in (graph.variable(n) for n in ordered if not n.startswith("op:"))
        if v.previous is not None and v.previous in kept
    )
    elided = Counter(
        OP_KIND if n.startswith("op:") else str(graph.variable(n).kind) for n in (candidates | capped) - kept
    )
    note = _note(answer, evidence, on_path)
    return Subgraph(nodes, tuple(edges), version_edges, MappingProxyType(dict(sorted(elided.items()))), note)


def named_nodes(graph: ExecutionGraph, text: str) -> list[str]:
    """The nodes of `graph` that `text` (an attribution's reason) names, in order, each once: operation and
    variable ids, and variable names (version 1, or the latest when there is no version 1)."""
    found: list[str] = []
    for match in _NAMED.finditer(text):
        token = match.group(0)
        for candidate in (token, token.rstrip(".:")):
            node = _resolve(graph, candidate)
            if node is not None:
                if node not in found:
                    found.append(node)
                break
    return found


def _resolve(graph: ExecutionGraph, token: str) -> str | None:
    if token in graph:
        return token
    if token.startswith("op:") or name_of(token) != token:
        return None
    versions = graph.versions(token)
    if not versions:
        return None
    first = first_version(token)
    return first if first in graph else versions[-1].id


def _paths_to(graph: ExecutionGraph, named: Iterable[str], lineage: set[str]) -> set[str]:
    """Each named variable, the evidence's path to it (within `lineage`) and the operation that wrote it."""
    found: set[str] = set()
    for node in named:
        if node.startswith("op:"):
            found.add(node)
            continue
        found |= _backward_within(graph, node, lineage | {node})
        producer = graph.producer(node)
        if producer is not None:
            found.add(producer.id)
    return found


def _blamed_ops(graph: ExecutionGraph, attribution: Attribution | None) -> list[str]:
    """The blamed operation, then the joint set and the suspects, each once and only if in the graph."""
    blamed: list[str] = []
    if attribution is not None:
        for op_id in (attribution.op, *(f.op for f in attribution.joint), *(f.op for f in attribution.suspects)):
            if op_id in graph and op_id.startswith("op:") and op_id not in blamed:
                blamed.append(op_id)
    return blamed


def _roles(
    blamed: Sequence[str], attribution: Attribution | None, evidence: Sequence[str], answer: str | None
) -> dict[str, str]:
    role_by_node: dict[str, str] = {}
    for op_id in blamed:
        role_by_node[op_id] = Role.SUSPECT
    if blamed and attribution is not None and attribution.op == blamed[0]:
        role_by_node[blamed[0]] = Role.BLAMED
    for var_id in evidence:
        role_by_node.setdefault(var_id, Role.EVIDENCE)
    if answer is not None:
        role_by_node.setdefault(answer, Role.ANSWER)
    return role_by_node


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
