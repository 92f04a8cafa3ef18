"""The one selector of what lies on a question's path through its conversation graph — what report.html
draws of a failure and what a question's MLflow trace shows as spans.

`failure_path` keeps the nodes on a path from an evidence turn to the answer, the blamed operation and the
other suspects with their inputs and outputs, the question's answering chain, the evidence turns, and every
node the attribution's reason names (`named_nodes`) with the evidence's path to it and its writer. Memory
units a kept operation read on no such path are capped at `MAX_UNRELATED`; prompts are left out.
`FailurePath.ranked` orders the must-keep nodes first, then the nodes nearest them; `nodes` and
`operations` take its front. The forward walk from the evidence never enters another question's answering
side, never passes the answer and does not follow the similar memories shown to a decision. Pure: reads the
graph; drawing is `pipeline.report`, tracing `pipeline.tracking.traces`.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
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
from memtrace_loop.pipeline.core.graph import ExecutionGraph, Operation
from memtrace_loop.pipeline.core.records import CaseResult

__all__ = ["MAX_EVIDENCE", "MAX_UNRELATED", "FailurePath", "Role", "failure_path", "named_nodes"]

MAX_EVIDENCE = 8  # evidence turns always kept (more are ranked like any other node)
MAX_UNRELATED = 2  # memory units read by a kept operation but on no path of the failure (the rest capped)
_NAMED = re.compile(r"[A-Za-z_]+:[^\s,;()\"'\[\]]+")  # a node id (or variable name) as a reason writes it
_MEMORY = frozenset(str(k) for k in MEMORY_KINDS)


class Role:
    """Why a node is on the path (one per node, the strongest)."""

    BLAMED = "blamed"
    SUSPECT = "suspect"
    EVIDENCE = "evidence"
    ANSWER = "answer"
    NAMED = "named"  # a memory unit the attribution's reason names (e.g. the one a search missed)
    PATH = "path"


@dataclass(frozen=True)
class FailurePath:
    """What lies on one question's path (see the module doc)."""

    answer: str | None  # the answer variable (None: the graph holds no answer for the question)
    evidence: tuple[str, ...]  # the evidence turns' variables in the graph
    on_path: frozenset[str]  # the nodes on a path from an evidence turn to the answer
    candidates: frozenset[str]  # every node kept
    capped: frozenset[str]  # memory units left out by `MAX_UNRELATED`
    ranked: tuple[str, ...]  # candidates by priority (those reachable from the must-keep nodes)
    roles: Mapping[str, str]  # the nodes with a role other than `Role.PATH`

    def nodes(self, max_nodes: int) -> frozenset[str]:
        """At most `max_nodes` of the candidates: all when they fit, else the front of the priority."""
        return self.candidates if len(self.candidates) <= max_nodes else frozenset(self.ranked[:max_nodes])

    def operations(self, graph: ExecutionGraph, max_ops: int) -> tuple[tuple[Operation, ...], int]:
        """At most `max_ops` of the path's operations by priority, in sequence order, and how many more
        there were (none without an answer)."""
        if self.answer is None:
            return (), 0
        ranked = [n for n in self.ranked if n.startswith("op:")]
        unranked = sorted((n for n in self.candidates - set(ranked) if n.startswith("op:")),
                          key=lambda n: graph.operation(n).seq)
        every = [*ranked, *unranked]
        chosen = sorted((graph.operation(n) for n in every[:max_ops]), key=lambda op: op.seq)
        return tuple(chosen), len(every) - len(chosen)


def failure_path(graph: ExecutionGraph, case: CaseResult, attribution: Attribution | None = None) -> FailurePath:
    """What lies on `case`'s path through `graph` (see the module doc)."""
    answer_var = graph.latest(answer_name(case.question.id))
    evidence = _evidence_ids(graph, case, attribution)
    blamed = _blamed_ops(graph, attribution)
    named = named_nodes(graph, attribution.reason) if attribution is not None else []
    answer = None if answer_var is None else answer_var.id
    chain: set[str] = set()
    max_seq = graph.n_operations
    producer = None if answer is None else graph.producer(answer)
    if answer is not None:
        chain = _answering_chain(graph, answer)
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
    if producer is not None:
        must.append(producer.id)
    roles = _roles(blamed, attribution, evidence, answer)
    for node in named:
        if not node.startswith("op:") and str(graph.variable(node).kind) in _MEMORY:
            roles.setdefault(node, Role.NAMED)
    return FailurePath(answer, tuple(evidence), frozenset(on_path), frozenset(candidates), frozenset(capped),
                       _rank(graph, candidates, must), MappingProxyType(roles))


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


def _question_side(graph: ExecutionGraph, op: Operation) -> bool:
    if op.kind in (OpKind.RESPONSE, OpKind.JUDGE):
        return True
    return any(graph.variable(v).kind in QUESTION_SIDE_KINDS for v in op.outputs)


def _answering_chain(graph: ExecutionGraph, answer: str) -> set[str]:
    """The answer, its producers through question-side variables, those variables, and its judge's nodes."""
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
    """Descendants of `starts` through construction (and `allowed_ops`) up to sequence number `max_seq`."""
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


def _parents(graph: ExecutionGraph, node: str) -> Iterable[str]:
    if node.startswith("op:"):
        return graph.operation(node).inputs
    producer = graph.producer(node)
    return () if producer is None else (producer.id,)


def _backward_within(graph: ExecutionGraph, target: str, allowed: set[str]) -> set[str]:
    """The ancestors of `target` (itself included) reachable through nodes of `allowed` only."""
    if target not in allowed:
        return set()
    found = {target}
    queue = deque([target])
    while queue:
        for parent in _parents(graph, queue.popleft()):
            if parent in allowed and parent not in found:
                found.add(parent)
                queue.append(parent)
    return found


def _evidence_ids(graph: ExecutionGraph, case: CaseResult, attribution: Attribution | None) -> list[str]:
    turn_ids = (attribution.evidence if attribution is not None and attribution.evidence else ()) or (
        case.question.evidence
    )
    return list(dict.fromkeys(v for v in (first_version(turn_name(t)) for t in turn_ids) if v in graph))


def _io(graph: ExecutionGraph, op_id: str, needed: Collection[str]) -> tuple[set[str], set[str]]:
    """(kept, capped): the operation and its inputs and outputs, but memory units off `needed` past `MAX_UNRELATED`."""
    op = graph.operation(op_id)
    kept, capped, unrelated = {op_id}, set(), 0
    for var_id in (*op.inputs, *op.outputs):
        if var_id in needed or str(graph.variable(var_id).kind) not in _MEMORY:
            kept.add(var_id)
        elif unrelated < MAX_UNRELATED:
            unrelated += 1
            kept.add(var_id)
        else:
            capped.add(var_id)
    return kept, capped - kept


def _rank(graph: ExecutionGraph, candidates: set[str], must: list[str]) -> tuple[str, ...]:
    """`must` (in order) then the candidates nearest them (BFS over data-flow edges)."""
    ranked: dict[str, None] = {}
    queue: deque[str] = deque()
    for node in must:
        if node in candidates and node not in ranked:
            ranked[node] = None
            queue.append(node)
    while queue:
        node = queue.popleft()
        if node.startswith("op:"):
            op = graph.operation(node)
            neighbours: list[str] = [*op.inputs, *op.outputs]
        else:
            neighbours = [*_parents(graph, node), *(o.id for o in graph.consumers(node))]
        for neighbour in neighbours:
            if neighbour in candidates and neighbour not in ranked:
                ranked[neighbour] = None
                queue.append(neighbour)
    return tuple(ranked)


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
    if attribution is None:
        return []
    ops = (attribution.op, *(f.op for f in attribution.joint), *(f.op for f in attribution.suspects))
    return list(dict.fromkeys(op for op in ops if op in graph and op.startswith("op:")))


def _roles(
    blamed: list[str], attribution: Attribution | None, evidence: list[str], answer: str | None
) -> dict[str, str]:
    role_by_node = dict.fromkeys(blamed, Role.SUSPECT)
    if blamed and attribution is not None and attribution.op == blamed[0]:
        role_by_node[blamed[0]] = Role.BLAMED
    for var_id in evidence:
        role_by_node.setdefault(var_id, Role.EVIDENCE)
    if answer is not None:
        role_by_node.setdefault(answer, Role.ANSWER)
    return role_by_node
