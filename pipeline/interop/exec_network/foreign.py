"""Foreign ExecNetwork documents: a smartcomment / MemTraceBench document translated into one of our graphs,
and written back from it unchanged.

`import_foreign`: nodes become variables (kinds guessed from category, name prefix or keywords; smartcomment's
`repr()` of a string decoded; names mapped back, versions renumbered), edges grouped by `op_id` become
operations (a reused `op_id` is one operation per step, a link outside any operation its own `link`), ordered
by time then topologically; records carrying our mark keep our names and kinds. Every original record is kept
under the meta key `ORIGINAL` (each node's record, each operation's record and edges per part, the header,
sessions, unattached records and unknown `data` keys), so `reexport` writes the document back with its
original ids, records and order (`is_foreign`: whether a graph can be). A real cycle, an edge to an unknown
node or a duplicate id is an `ExecNetworkError`; it never guesses around them (a guess never raises).
"""

from __future__ import annotations

import graphlib
import heapq
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any, TypeVar

from memtrace_loop.pipeline.backends.text import alnum_words
from memtrace_loop.pipeline.core.conventions import Namespace, VarKind, is_in, name_of, prefix
from memtrace_loop.pipeline.core.graph import ExecutionGraph, OpKind, OpStatus
from memtrace_loop.pipeline.core.graph_io import FORMAT, FORMAT_VERSION, graph_from_dict
from memtrace_loop.pipeline.core.literals import literal_eval
from memtrace_loop.pipeline.interop.exec_network.document import (
    ANNOTATIONS_KEY,
    LABELS_META,
    MARK,
    NAME_TABLE,
    NONE_NODE_ID,
    NONE_OP_ID,
    ORIGINAL,
    ImportedNetwork,
    RawDocument,
    RawEdge,
    RawNode,
    RawOperation,
    full_id_of,
    our_name,
    parse_record,
    parse_records,
    unique_names,
)
from memtrace_loop.pipeline.interop.exec_network.labels import ExecNetworkError

_DATA_KEYS = frozenset({"nodes", "edges", "operations", "sessions", ANNOTATIONS_KEY})
_NO_RECORD: tuple[int, None, None] = (-1, None, None)  # an op id only edges name: no record of it to keep
LINK = "link"  # our name (and stage) of an edge smartcomment recorded outside any operation


@dataclass
class _Part:
    """One operation of ours: step `part` of their operation `op_id` (edges as (position, edge, record))."""

    op_id: str
    part: int
    edges: list[tuple[int, RawEdge, Mapping[str, Any]]] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    rank: tuple[Any, ...] = ()


def import_foreign(document: RawDocument) -> ImportedNetwork:
    """Their graph translated into ours (see the module doc); ids of theirs -> ours in the result."""
    data, source = document.data, document.source
    body = data["data"]
    by_id, unattached_nodes = _index(document.nodes, full_id_of, NONE_NODE_ID, "node", "full_node_id", source)
    records, unattached_ops = _index(document.operations, lambda op: op.op_id, NONE_OP_ID, "operation", "op_id",
                                     source)
    parts = _parts(records, body.get("edges"), by_id, source)
    order, conflicts = _order(parts, records, by_id, source)
    variables, kinds, node_map = _variables(by_id)
    operations, op_map = _operations(order, records, kinds, node_map)
    original: dict[str, Any] = {
        "header": {k: v for k, v in data.items() if k != "data"},
        "sessions": [item for _, item in parse_records(body.get("sessions"), "session_id", "data.sessions", source)],
        "unattached": {"nodes": unattached_nodes, "operations": unattached_ops},
        "data_extra": {k: v for k, v in body.items() if k not in _DATA_KEYS},
        "labels_in_data": bool(body.get(ANNOTATIONS_KEY)),
    }
    if conflicts:
        original["conflicts"] = conflicts
    meta: dict[str, Any] = {ORIGINAL: original}
    if document.annotations:
        meta[LABELS_META] = [label.to_dict() for label in document.annotations]
    doc = {"format": FORMAT, "format_version": FORMAT_VERSION, "graph_id": str(data.get("graph_id") or "graph"),
           "meta": meta, "variables": variables, "operations": operations}
    graph = graph_from_dict(doc, source)
    return ImportedNetwork(graph, document.annotations, MappingProxyType(op_map), MappingProxyType(node_map),
                           tuple(MappingProxyType(c) for c in conflicts))


R = TypeVar("R", RawNode, RawOperation)


def _index(
    items: list[tuple[str, R, Mapping[str, Any]]], id_of: Callable[[R], str], placeholder: str, what: str,
    key: str, source: str,
) -> tuple[dict[str, tuple[int, R, Mapping[str, Any]]], list[list[Any]]]:
    """Their id -> (position, record parsed, record); smartcomment's `placeholder` apart. A duplicate raises."""
    by_id: dict[str, tuple[int, R, Mapping[str, Any]]] = {}
    unattached: list[list[Any]] = []
    for position, (where, item, record) in enumerate(items):
        item_id = id_of(item)
        if item_id == placeholder:
            unattached.append([position, dict(record)])
            continue
        if item_id in by_id:
            raise ExecNetworkError(source, f"duplicate {what} {item_id!r}", where, key)
        by_id[item_id] = (position, item, record)
    return by_id, unattached


def _parts(
    records: Mapping[str, tuple[int, RawOperation, Mapping[str, Any]]], edges: Any,
    by_id: Mapping[str, tuple[int, RawNode, Mapping[str, Any]]], source: str,
) -> list[_Part]:
    """Every operation of ours: the steps of each operation of theirs (by edge depth) and one per link."""
    edges_by_op: dict[str, list[tuple[int, RawEdge, Mapping[str, Any]]]] = {op_id: [] for op_id in records}
    links: list[_Part] = []
    for position, (where, item) in enumerate(parse_records(edges, "edge_id", "data.edges", source)):
        edge = parse_record(RawEdge, item, where, source)
        for key in ("source_full_node_id", "target_full_node_id"):
            if getattr(edge, key) not in by_id and getattr(edge, key) != NONE_NODE_ID:
                raise ExecNetworkError(source, f"unknown node {getattr(edge, key)!r}", where, key)
        if edge.source_full_node_id == edge.target_full_node_id != NONE_NODE_ID:
            raise ExecNetworkError(source, f"cycle: edge of operation {edge.op_id!r} from {edge.source_full_node_id!r} "
                                   "to itself", where, "target_full_node_id")
        if edge.op_id == NONE_OP_ID:
            links.append(_Part(NONE_OP_ID, len(links), [(position, edge, item)]))
            continue
        edges_by_op.setdefault(edge.op_id, []).append((position, edge, item))  # an op id only edges name: no record
    parts = [part for op_id, op_edges in edges_by_op.items() for part in _layers(op_id, op_edges, source)]
    for part in (*parts, *links):
        for _, edge, _ in part.edges:
            if edge.source_full_node_id != NONE_NODE_ID and edge.source_full_node_id not in part.inputs:
                part.inputs.append(edge.source_full_node_id)
            if edge.target_full_node_id != NONE_NODE_ID and edge.target_full_node_id not in part.outputs:
                part.outputs.append(edge.target_full_node_id)
    return parts + links


def _layers(op_id: str, edges: list[tuple[int, RawEdge, Mapping[str, Any]]], source: str) -> list[_Part]:
    """The steps of one operation: edges grouped by the depth of their target inside the operation (a
    plain operation is one step; operation reuse `a -> b -> c` is two). A cycle inside it raises."""
    if not edges:
        return [_Part(op_id, 0)]
    incoming: dict[str, list[str]] = {}
    for _, edge, _ in edges:
        if edge.target_full_node_id != NONE_NODE_ID:
            incoming.setdefault(edge.target_full_node_id, []).append(edge.source_full_node_id)
    try:
        order = list(graphlib.TopologicalSorter(incoming).static_order())
    except graphlib.CycleError as error:
        raise ExecNetworkError(source, f"cycle: operation {op_id!r} consumes its own output {error.args[1][0]!r}",
                               None, "data.edges") from None
    depth: dict[str, int] = {}
    for node_id in order:  # a node nothing inside the operation produces (the placeholder too) is at depth 0
        depth[node_id] = 1 + max((depth[s] for s in incoming.get(node_id, ())), default=-1)

    by_layer: dict[int, _Part] = {}
    for position, edge, record in edges:
        target = edge.target_full_node_id
        layer = depth[target] if target != NONE_NODE_ID else depth.get(edge.source_full_node_id, 0) + 1
        by_layer.setdefault(layer, _Part(op_id, 0)).edges.append((position, edge, record))
    parts = [by_layer[layer] for layer in sorted(by_layer)]
    for index, part in enumerate(parts):
        part.part = index
    return parts


def _order(
    parts: list[_Part], records: Mapping[str, tuple[int, RawOperation, Mapping[str, Any]]],
    by_id: Mapping[str, tuple[int, RawNode, Mapping[str, Any]]], source: str,
) -> tuple[list[_Part], list[dict[str, str]]]:
    """Operations ranked by the earliest `created_at` of their edges (else of the operation, else of what
    they produce or consume, else last), then ordered topologically (ties by rank); a variable stays
    with its first producer by rank. Returns the order and the conflicts; a cycle raises."""

    def earliest(texts: list[Any]) -> datetime | None:
        times = [t for t in map(parse_time, texts) if t is not None]
        return min(times) if times else None

    for ordinal, part in enumerate(parts):
        _, op, _ = records.get(part.op_id, _NO_RECORD)
        moment = (earliest([e.created_at for _, e, _ in part.edges]) or earliest([op.created_at if op else None])
                  or earliest([by_id[n][1].created_at for n in part.outputs])
                  or earliest([by_id[n][1].created_at for n in part.inputs]))
        part.rank = (moment is None, moment or datetime.min, ordinal)
    ranked = sorted(parts, key=lambda p: p.rank)
    producer: dict[str, int] = {}
    conflicts: list[dict[str, str]] = []
    for index, part in enumerate(ranked):
        kept = []
        for node_id in part.outputs:
            if node_id in producer:
                conflicts.append({"variable": node_id, "kept": ranked[producer[node_id]].op_id, "dropped": part.op_id})
                part.dropped.append(node_id)
            else:
                producer[node_id] = index
                kept.append(node_id)
        part.outputs = kept

    dependents: list[list[int]] = [[] for _ in ranked]
    waiting = [0] * len(ranked)
    for index, part in enumerate(ranked):
        for upstream in dict.fromkeys(producer[s] for s in part.inputs if s in producer):
            if upstream == index:
                raise ExecNetworkError(source, f"cycle: operation {part.op_id!r} consumes its own output",
                                       None, "data.edges")
            dependents[upstream].append(index)
            waiting[index] += 1
    ready = [i for i in range(len(ranked)) if not waiting[i]]
    heapq.heapify(ready)
    order: list[_Part] = []
    while ready:
        index = heapq.heappop(ready)
        order.append(ranked[index])
        for child in dependents[index]:
            waiting[child] -= 1
            if not waiting[child]:
                heapq.heappush(ready, child)
    if len(order) < len(ranked):
        stuck = list(dict.fromkeys(ranked[i].op_id for i in range(len(ranked)) if waiting[i]))
        raise ExecNetworkError(source, f"cycle among operations {', '.join(map(repr, stuck[:8]))}"
                               + (" ..." if len(stuck) > 8 else ""), None, "data.edges")
    return order, conflicts


def _variables(
    by_id: Mapping[str, tuple[int, RawNode, Mapping[str, Any]]],
) -> tuple[list[list[Any]], dict[str, str], dict[str, str]]:
    """Our variable rows (graph_io layout, global order by `created_at`, version numbers per name in their
    version order), the kind of each of their nodes and their full node id -> our variable id."""
    qualified = {full_id: full_id.rsplit("@", 1)[0] for full_id in by_id}
    mapped = {q: our_name(q) for q in set(qualified.values())}
    for full_id, (_, node, _) in by_id.items():  # a record of ours (an export of ours edited elsewhere)
        ours = (node.metadata or {}).get(MARK)
        if isinstance(ours, Mapping) and isinstance(ours.get("name"), str):
            mapped[qualified[full_id]] = ours["name"]
    unique = unique_names(mapped)
    names = {full_id: unique[q] for full_id, q in qualified.items()}
    times = {full_id: parse_time(entry[1].created_at) for full_id, entry in by_id.items()}
    by_time = sorted(by_id, key=lambda i: (times[i] is None, times[i] or datetime.min, by_id[i][0]))
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
        position, node, record = by_id[full_id]
        ours = (node.metadata or {}).get(MARK)
        kinds[full_id] = (ours["kind"] if isinstance(ours, Mapping) and isinstance(ours.get("kind"), str)
                          else variable_kind(node, name))
        value = decode_value(node.value)
        variables.append([name, taken[name], kinds[full_id], value,
                          {ORIGINAL: node_original(full_id, position, record, value)}])
        node_map[full_id] = f"{name}@{taken[name]}"
    return variables, kinds, node_map


def _marked(ours: Any) -> tuple[str, str, str, str, Any, list[int], dict[str, Any]] | None:
    """The name, stage, kind, status, error, usage and meta our own mark records on an operation (an
    export of ours edited elsewhere); None when there is no (readable) mark."""
    if not isinstance(ours, Mapping):
        return None
    try:
        return (str(ours["name"]), str(ours["stage"]), OpKind(ours["kind"]).value, OpStatus(ours["status"]).value,
                ours.get("error"), [int(n) for n in ours["usage"]], dict(ours.get("meta") or {}))
    except (KeyError, TypeError, ValueError):
        return None


def _operations(
    order: list[_Part], records: Mapping[str, tuple[int, RawOperation, Mapping[str, Any]]], kinds: Mapping[str, str],
    node_map: Mapping[str, str],
) -> tuple[list[list[Any]], dict[str, str]]:
    """Our operation rows (graph_io layout) in `order` and their op id -> ours (its first step)."""
    operations: list[list[Any]] = []
    op_map: dict[str, str] = {}
    for seq, part in enumerate(order):
        position, record, raw = records.get(part.op_id, _NO_RECORD)
        inputs = [node_map[s] for s in part.inputs]
        prompt = next((node_map[s] for s in part.inputs if kinds[s] == "prompt"), None)
        if prompt is not None:
            inputs.remove(prompt)
        their = record.op_name if record and record.op_name else part.op_id
        name = LINK if part.op_id == NONE_OP_ID else our_name(their, "operation")
        rule_stage = next((r.stage for r in NAME_TABLE if r.what == "operation" and r.ours == name and r.stage), "")
        stage = (name_of(prompt).removeprefix(prefix(Namespace.PROMPT)) if prompt and is_in(prompt, Namespace.PROMPT)
                 else rule_stage or name)
        edge_categories = [e.category for _, e, _ in part.edges]
        kind = op_kind(their, record.category if record else None, *edge_categories)
        # its edges; its record and position on part 0 only
        original: dict[str, Any] = {"op_id": part.op_id, "part": part.part,
                                    "edges": [[p, dict(r)] for p, _, r in part.edges]}
        if part.part == 0 and raw is not None:
            original.update(position=position, record=dict(raw))
        if part.dropped:
            original["dropped_outputs"] = part.dropped
        # our own mark wins over the guesses; inputs and outputs stay what the (maybe edited) edges say
        marked = _marked((record.metadata or {}).get(MARK)) if record else None
        name, stage, kind_value, status, error, usage, meta = marked or (
            name, stage, kind.value, "ok", None, [0, 0, 0, 0], {})
        operations.append([seq, name, stage, kind_value, inputs, [node_map[t] for t in part.outputs], prompt,
                           status, error, usage, {**meta, ORIGINAL: original}])
        op_map.setdefault(part.op_id, f"op:{seq}")
    return operations, op_map


# ------------------------------------------------------------------ guesses


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


def parse_time(text: Any) -> datetime | None:
    """A record's `created_at` as a datetime (None when missing or unreadable)."""
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


def variable_kind(node: RawNode, name: str) -> str:
    """Our kind of their node `node` (our name `name`); a category we do not know is kept."""
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


def op_kind(*texts: Any) -> OpKind:
    """Our kind of an operation from its texts, in order of trust (name, category, edge categories)."""
    for text in texts:
        if str(text or "").lower() in {k.value for k in OpKind}:
            return OpKind(str(text).lower())
    for text in texts:
        tokens = _tokens(text)
        for kind, stems in _OP_KEYWORDS:
            if any(t.startswith(s) for t in tokens for s in stems):
                return kind
    return OpKind.OTHER


def decode_value(value: Any) -> str:
    """Our string for their stored value: smartcomment's `repr()` of a string (`"'Rome'"`) becomes the
    string itself; any other string stays; non-strings become JSON."""
    if isinstance(value, str):
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            try:
                decoded = literal_eval(value)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                return value
            if isinstance(decoded, str) and repr(decoded) == value:
                return decoded
        return value
    return "" if value is None else json.dumps(value, ensure_ascii=False)


# ------------------------------------------------------------------ the original records


SAME, REPR = "same", "repr"  # how an imported variable's value reproduces the original one


def node_original(full_id: str, position: int, record: Mapping[str, Any], value: str) -> dict[str, Any]:
    """The meta of a variable imported from node `record` whose value became `value` (see module doc)."""
    original = record.get("value")
    if original == value:
        how: str | None = SAME
    elif isinstance(original, str) and repr(value) == original:
        how = REPR
    else:
        how = None
    kept = {k: v for k, v in record.items() if k != "value"} if how else dict(record)
    return {"full_node_id": full_id, "position": position, "record": kept, "value": how}


def is_foreign(graph: ExecutionGraph) -> bool:
    """Whether `graph` was imported from a foreign document and can be written back from its records."""
    return (isinstance(graph.meta.get(ORIGINAL), Mapping) and "header" in graph.meta[ORIGINAL]
            and all(isinstance(v.meta.get(ORIGINAL), Mapping) for v in graph.variables())
            and all(isinstance(o.meta.get(ORIGINAL), Mapping) for o in graph.operations()))


def reexport(graph: ExecutionGraph, labels: list[dict[str, Any]]) -> dict[str, Any]:
    """The document `graph` was imported from, rebuilt from its original records (see module doc)."""
    kept = graph.meta[ORIGINAL]
    nodes: list[tuple[int, dict[str, Any]]] = [(p, r) for p, r in kept["unattached"].get("nodes", [])]
    operations: list[tuple[int, dict[str, Any]]] = [(p, r) for p, r in kept["unattached"].get("operations", [])]
    edges: list[tuple[int, dict[str, Any]]] = []
    for var in graph.variables():
        original = var.meta[ORIGINAL]
        record = dict(original["record"])
        if original.get("value") == SAME:
            record["value"] = var.value
        elif original.get("value") == REPR:
            record["value"] = repr(var.value)
        nodes.append((original["position"], record))
    for op in graph.operations():
        original = op.meta[ORIGINAL]
        if "record" in original:
            operations.append((original["position"], original["record"]))
        edges.extend((p, e) for p, e in original["edges"])
    data: dict[str, Any] = {
        "nodes": [r for _, r in sorted(nodes, key=lambda pair: pair[0])],
        "edges": [r for _, r in sorted(edges, key=lambda pair: pair[0])],
        "operations": [r for _, r in sorted(operations, key=lambda pair: pair[0])],
        "sessions": list(kept["sessions"]),
        **kept["data_extra"],
    }
    header = dict(kept["header"])
    metadata = dict(header.get("metadata") or {})
    if labels:
        if kept.get("labels_in_data") or ANNOTATIONS_KEY not in metadata:
            data[ANNOTATIONS_KEY] = labels
        metadata[ANNOTATIONS_KEY] = labels
        header["metadata"] = metadata
    return {**header, "data": data}
