"""The original records of a foreign ExecNetwork document, kept on the graph we import it as.

Under the meta key `ORIGINAL`: each variable's node record, each operation's record and edges (per `part`),
and the graph's header, sessions, unattached records and unknown `data` keys, all plain JSON.
`reexport` writes the document back with its original ids, records, edges and order; `is_foreign` says
whether a graph can be written back so. It translates nothing (`foreign`) and exports no graph of ours.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.interop.exec_network.document import ANNOTATIONS_KEY
from memtrace_loop.pipeline.interop.exec_network.names import ORIGINAL

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


def operation_original(op_id: str, part: int, edges: Sequence[tuple[int, Mapping[str, Any]]],
                       position: int | None = None, record: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The meta of part `part` of their operation `op_id` (its record and position on part 0 only)."""
    meta: dict[str, Any] = {"op_id": op_id, "part": part, "edges": [[p, dict(e)] for p, e in edges]}
    if part == 0 and record is not None:
        meta.update(position=position, record=dict(record))
    return meta


def graph_original(data: Mapping[str, Any], sessions: list[Any], unattached: Mapping[str, list[list[Any]]],
                   known_keys: frozenset[str]) -> dict[str, Any]:
    """The graph meta of an imported document `data` (see the module doc)."""
    body = data["data"]
    return {
        "header": {k: v for k, v in data.items() if k != "data"},
        "sessions": sessions,
        "unattached": {kind: list(records) for kind, records in unattached.items()},
        "data_extra": {k: v for k, v in body.items() if k not in known_keys},
        "labels_in_data": bool(body.get(ANNOTATIONS_KEY)),
    }


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
