"""Foreign ExecNetwork import: a document from the reference tooling or MemTraceBench (no mark of
ours) translated into one of our graphs, guessing what their records do not say.

What it does (`import_foreign`): nodes -> variables (kind from category, class name and name
keywords; names mapped back through `NAME_TABLE`, kept raw where two would collide; versions
renumbered 1..n per name in their version order, theirs kept in meta, ordered by `created_at`);
edges grouped by `op_id` -> operations (inputs = distinct sources, outputs = distinct targets, a
prompt-kind source becomes the operation's prompt and names its stage, kind from name/category
keywords), ordered by `created_at` and then topologically. A variable two operations claim to
produce stays with the first; the conflict is recorded in graph and operation meta. Everything of
theirs we have no field for rides in `meta["exec_network"]`; unknown keys are ignored.

What it does not do: no exact rebuild of our own exports (`exec_network_native`), no writing
(`exec_network_export`). A cycle, an edge to an unknown node or a duplicate id raises
`ExecNetworkError`; it never guesses around broken structure.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Mapping
from datetime import datetime
from types import MappingProxyType
from typing import Any

from memtrace_loop.pipeline.backends.text import alnum_words
from memtrace_loop.pipeline.core.conventions import Namespace, VarKind, name_of, prefix
from memtrace_loop.pipeline.core.graph import OpKind
from memtrace_loop.pipeline.core.graph_io import FORMAT, FORMAT_VERSION, graph_from_dict
from memtrace_loop.pipeline.interop.bench_annotations import ExecNetworkError
from memtrace_loop.pipeline.interop.exec_network_document import (
    ImportedNetwork,
    RawDocument,
    RawEdge,
    RawNode,
    RawOperation,
    parse_record,
    parse_records,
)
from memtrace_loop.pipeline.interop.exec_network_names import NAME_TABLE, our_name

# the kinds a foreign node's category or name prefix is taken as directly (the rest are guessed by keywords)
_OUR_KINDS: tuple[VarKind, ...] = (
    VarKind.TURN, VarKind.FACTS, VarKind.RETRIEVED, VarKind.DECISION, VarKind.MEMORY, VarKind.QUERY,
    VarKind.CONTEXT, VarKind.ANSWER, VarKind.GOLD, VarKind.VERDICT, VarKind.PROMPT,
)
_VARIABLE_KEYWORDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("prompt", ("prompt", "instruction")),
    ("turn", ("turn", "message", "utterance", "dialog")),
    ("memory", ("memory", "mem")),
    ("query", ("query", "question")),
    ("gold", ("gold", "golden", "reference")),
    ("verdict", ("verdict", "judge", "judgement", "label")),
    ("answer", ("answer", "prediction", "response")),
    ("context", ("context", "retrieved", "retrieval", "chunk")),
    ("facts", ("fact", "facts")),
    ("decision", ("decision", "action")),
)
_OP_KEYWORDS: tuple[tuple[OpKind, tuple[str, ...]], ...] = (
    (OpKind.JUDGE, ("judge", "grade")),
    (OpKind.RESPONSE, ("answer", "respond", "response")),
    (OpKind.DELETION, ("delet", "remov", "forget")),
    (OpKind.UPDATE, ("updat", "decision", "decide", "merg", "trim", "overwrit")),
    (OpKind.EXTRACTION, ("extract", "add", "chunk", "insert", "segment", "episode", "narrat", "summar")),
    (OpKind.RETRIEVAL, ("retriev", "search", "recall", "rerank", "fusion", "query", "fetch")),
)



def _time(text: Any) -> datetime | None:
    if not isinstance(text, str) or not text.strip():
        return None
    for fmt in ("%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S"):
        try:
            return datetime.strptime(text.strip(), fmt)
        except ValueError:
            pass
    try:
        return datetime.fromisoformat(text.strip()).replace(tzinfo=None)
    except ValueError:
        return None


def _tokens(*texts: Any) -> list[str]:
    return [t for text in texts if text for t in alnum_words(str(text))]


def _variable_kind(node: RawNode, name: str) -> str:
    category = str(node.category or "").strip().lower()
    if category in _OUR_KINDS:
        return category
    if ":" in name and name.split(":", 1)[0] in _OUR_KINDS:
        return name.split(":", 1)[0]
    tokens = _tokens(node.category, node.class_name, node.name)
    for kind, words in _VARIABLE_KEYWORDS:
        if any(t == w for t in tokens for w in words):
            return kind
    return category or "value"


def _op_kind(name: str, category: Any) -> OpKind:
    if str(category or "").lower() in {k.value for k in OpKind}:
        return OpKind(str(category).lower())
    for tokens in (_tokens(name), _tokens(category)):
        for kind, stems in _OP_KEYWORDS:
            if any(t.startswith(s) for t in tokens for s in stems):
                return kind
    return OpKind.OTHER


def import_foreign(document: RawDocument) -> ImportedNetwork:
    """Their graph translated into ours (see the module doc); ids of theirs -> ours in the result."""
    data, source = document.data, document.source
    body = data["data"]
    by_id = _index_nodes(document.nodes, source)
    records, sources, targets = _flows(document.operations, body.get("edges"), by_id, source)
    order, targets, conflicts = _order_operations(records, sources, targets, by_id, source)
    variables, kinds, node_map = _variables(by_id)
    operations, op_map = _operations(order, records, sources, targets, kinds, node_map, conflicts)
    header = {k: data.get(k) for k in ("graph_id", "user_id", "project_id", "strict", "driver_type", "created_at",
                                       "metadata") if data.get(k) not in (None, "", {})}
    header["sessions"] = [item for _, item in parse_records(body.get("sessions"), "session_id", "data.sessions",
                                                            source)]
    if conflicts:
        header["conflicts"] = conflicts
    doc = {"format": FORMAT, "format_version": FORMAT_VERSION, "graph_id": str(data.get("graph_id") or "graph"),
           "meta": {"exec_network": header}, "variables": variables, "operations": operations}
    graph = graph_from_dict(doc, source)
    return ImportedNetwork(graph, document.annotations, MappingProxyType(op_map), MappingProxyType(node_map),
                           tuple(MappingProxyType(c) for c in conflicts))


def _index_nodes(nodes: list[tuple[str, RawNode]], source: str) -> dict[str, tuple[int, RawNode]]:
    """Their full node id -> (position in the document, node); a duplicate id raises."""
    by_id: dict[str, tuple[int, RawNode]] = {}
    for position, (where, node) in enumerate(nodes):
        qualified = f"{node.class_name}:{node.name}" if node.class_name else node.name
        full_id = node.full_node_id or f"{qualified}@{node.version}"
        if full_id in by_id:
            raise ExecNetworkError(source, f"duplicate node {full_id!r}", where, "full_node_id")
        by_id[full_id] = (position, node)
    return by_id


def _flows(
    ops: list[tuple[str, RawOperation]], edges: Any, by_id: Mapping[str, tuple[int, RawNode]], source: str
) -> tuple[dict[str, RawOperation], dict[str, list[str]], dict[str, list[str]]]:
    """Operation records (one made up for an `op_id` only edges name) and, per operation, its distinct
    edge sources and targets in edge order. Unknown nodes, duplicate operations and self-loops raise."""
    records: dict[str, RawOperation] = {}
    for where, op in ops:
        if op.op_id in records:
            raise ExecNetworkError(source, f"duplicate operation {op.op_id!r}", where, "op_id")
        records[op.op_id] = op
    sources: dict[str, list[str]] = {op_id: [] for op_id in records}
    targets: dict[str, list[str]] = {op_id: [] for op_id in records}
    for where, item in parse_records(edges, "edge_id", "data.edges", source):
        edge = parse_record(RawEdge, item, where, source)
        for key in ("source_full_node_id", "target_full_node_id"):
            if getattr(edge, key) not in by_id:
                raise ExecNetworkError(source, f"unknown node {getattr(edge, key)!r}", where, key)
        if edge.op_id not in records:
            records[edge.op_id] = RawOperation(op_id=edge.op_id)
            sources[edge.op_id], targets[edge.op_id] = [], []
        src, dst = edge.source_full_node_id, edge.target_full_node_id
        if src == dst or src in targets[edge.op_id] or dst in sources[edge.op_id]:
            looped = dst if src == dst or dst in sources[edge.op_id] else src
            raise ExecNetworkError(source, f"cycle: operation {edge.op_id!r} consumes its own output {looped!r}",
                                   where, "op_id")
        for bucket, node_id in ((sources, edge.source_full_node_id), (targets, edge.target_full_node_id)):
            if node_id not in bucket[edge.op_id]:
                bucket[edge.op_id].append(node_id)
    return records, sources, targets


def _order_operations(
    records: Mapping[str, RawOperation],
    sources: Mapping[str, list[str]],
    targets: Mapping[str, list[str]],
    by_id: Mapping[str, tuple[int, RawNode]],
    source: str,
) -> tuple[list[str], dict[str, list[str]], list[dict[str, str]]]:
    """Operations ranked by the earliest `created_at` of what they produce (else consume, else last, in
    document order), then ordered topologically (ties by rank). Returns the order, the targets each
    operation keeps (a variable stays with its first producer by rank) and the conflicts; a cycle raises."""

    def when(ids: list[str]) -> datetime | None:
        times = [t for t in (_time(by_id[i][1].created_at) for i in ids) if t is not None]
        return min(times) if times else None

    rank_key = {}
    for ordinal, op_id in enumerate(records):
        moment = when(targets[op_id]) or when(sources[op_id])
        rank_key[op_id] = (moment is None, moment or datetime.min, ordinal)
    ranked = sorted(records, key=rank_key.__getitem__)
    rank = {op_id: i for i, op_id in enumerate(ranked)}

    producer: dict[str, str] = {}
    conflicts: list[dict[str, str]] = []
    kept_targets: dict[str, list[str]] = dict(targets)
    for op_id in ranked:
        kept = []
        for node_id in targets[op_id]:
            if node_id in producer:
                conflicts.append({"variable": node_id, "kept": producer[node_id], "dropped": op_id})
            else:
                producer[node_id] = op_id
                kept.append(node_id)
        kept_targets[op_id] = kept

    dependents: dict[str, list[str]] = {op_id: [] for op_id in ranked}
    waiting = dict.fromkeys(ranked, 0)
    for op_id in ranked:
        for upstream in dict.fromkeys(producer[s] for s in sources[op_id] if s in producer):
            dependents[upstream].append(op_id)
            waiting[op_id] += 1
    ready = [rank[op_id] for op_id in ranked if not waiting[op_id]]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        op_id = ranked[heapq.heappop(ready)]
        order.append(op_id)
        for child in dependents[op_id]:
            waiting[child] -= 1
            if not waiting[child]:
                heapq.heappush(ready, rank[child])
    if len(order) < len(ranked):
        stuck = [op_id for op_id in ranked if waiting[op_id]]
        raise ExecNetworkError(source, f"cycle among operations {', '.join(map(repr, stuck[:8]))}"
                               + (" ..." if len(stuck) > 8 else ""), None, "data.edges")
    return order, kept_targets, conflicts


def _variables(
    by_id: Mapping[str, tuple[int, RawNode]],
) -> tuple[list[list[Any]], dict[str, str], dict[str, str]]:
    """Our variable rows (graph_io layout, global order by `created_at`, version numbers per name in their
    version order), the kind of each of their nodes and their full node id -> our variable id."""
    qualified = {full_id: full_id.rsplit("@", 1)[0] for full_id in by_id}
    mapped = {q: our_name(q) for q in set(qualified.values())}
    sharing: dict[str, set[str]] = {}
    for q, ours in mapped.items():
        sharing.setdefault(ours, set()).add(q)
    # a mapped name must stay unique (turns of two samples, or a mapped name that is also a raw name)
    unique = {q: ours if len(sharing[ours]) == 1 and (ours == q or ours not in mapped) else q
              for q, ours in mapped.items()}
    names = {full_id: unique[q] for full_id, q in qualified.items()}
    by_time = sorted(by_id, key=lambda i: (_time(by_id[i][1].created_at) is None,
                                           _time(by_id[i][1].created_at) or datetime.min, by_id[i][0]))
    versions: dict[str, list[str]] = {}
    for full_id in sorted(by_id, key=lambda i: (by_id[i][1].version, by_id[i][0])):
        versions.setdefault(names[full_id], []).append(full_id)
    taken: dict[str, int] = {}
    node_map: dict[str, str] = {}
    variables: list[list[Any]] = []
    kinds: dict[str, str] = {}
    for slot in by_time:
        name = names[slot]
        taken[name] = taken.get(name, 0) + 1
        full_id = versions[name][taken[name] - 1]
        node = by_id[full_id][1]
        kinds[full_id] = _variable_kind(node, name)
        value = node.value if isinstance(node.value, str) else ("" if node.value is None else json.dumps(node.value))
        fields = {"full_node_id": full_id, "version": node.version, "comment": node.comment, "category": node.category,
                  "class_name": node.class_name, "session_id": node.session_id, "created_at": node.created_at,
                  "metadata": node.metadata}
        variables.append([name, taken[name], kinds[full_id], value,
                          {"exec_network": {k: v for k, v in fields.items() if v not in (None, "", {})}}])
        node_map[full_id] = f"{name}@{taken[name]}"
    return variables, kinds, node_map


def _operations(
    order: list[str],
    records: Mapping[str, RawOperation],
    sources: Mapping[str, list[str]],
    targets: Mapping[str, list[str]],
    kinds: Mapping[str, str],
    node_map: Mapping[str, str],
    conflicts: list[dict[str, str]],
) -> tuple[list[list[Any]], dict[str, str]]:
    """Our operation rows (graph_io layout) in `order` and their op id -> ours. A prompt-kind input becomes
    the prompt and names the stage (else the name table's stage, else the operation's name)."""
    dropped_by_op: dict[str, list[str]] = {}
    for conflict in conflicts:
        dropped_by_op.setdefault(conflict["dropped"], []).append(conflict["variable"])
    operations: list[list[Any]] = []
    op_map: dict[str, str] = {}
    for seq, op_id in enumerate(order):
        record = records[op_id]
        inputs = [node_map[s] for s in sources[op_id]]
        prompt = next((node_map[s] for s in sources[op_id] if kinds[s] == "prompt"), None)
        if prompt is not None:
            inputs.remove(prompt)
        name = our_name(record.op_name or op_id, "operation")
        rule_stage = next((r.stage for r in NAME_TABLE if r.what == "operation" and r.ours == name and r.stage), "")
        stage = name_of(prompt).removeprefix(prefix(Namespace.PROMPT)) if prompt else rule_stage or name
        fields = {"op_id": op_id, "op_name": record.op_name, "comment": record.comment, "category": record.category,
                  "session_id": record.session_id, "metadata": record.metadata,
                  "dropped_outputs": dropped_by_op.get(op_id)}
        meta = {"exec_network": {k: v for k, v in fields.items() if v not in (None, "", {}, [])}}
        operations.append([seq, name, stage, _op_kind(record.op_name, record.category).value, inputs,
                           [node_map[t] for t in targets[op_id]], prompt, "ok", None, [0, 0, 0, 0], meta])
        op_map[op_id] = f"op:{seq}"
    return operations, op_map
