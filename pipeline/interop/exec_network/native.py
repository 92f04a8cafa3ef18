"""Native ExecNetwork import: a document `to_exec_network` wrote, rebuilt as exactly the exported graph.

`import_native` reads our mark (`metadata["memtrace"]`) on every record through `graph_io`, so ours ->
ExecNetwork -> ours is exact; labels ride in `graph.meta["bench_annotations"]`. It ignores edges, sessions
and the placeholder node, and does not decide whether a document is native (`document.read_document`).
"""

from __future__ import annotations

from types import MappingProxyType

from memtrace_loop.pipeline.core.graph_io import FORMAT, FORMAT_VERSION, graph_from_dict
from memtrace_loop.pipeline.interop.exec_network.document import (
    LABELS_META,
    MARK,
    NONE_NODE_ID,
    ImportedNetwork,
    RawDocument,
    full_id_of,
)
from memtrace_loop.pipeline.interop.exec_network.labels import ExecNetworkError


def import_native(document: RawDocument) -> ImportedNetwork:
    """Our graph exactly as exported, from a native `document` (see the module doc)."""
    data, source = document.data, document.source
    try:
        ours = [((n.metadata or {})[MARK], n) for _, n, _ in document.nodes if full_id_of(n) != NONE_NODE_ID]
        ours.sort(key=lambda pair: pair[0]["order"])
        variables = [[m["name"], n.version, m["kind"], str(n.value), m["meta"]] for m, n in ours]
        op_rows = sorted((((o.metadata or {})[MARK], o) for _, o, _ in document.operations),
                         key=lambda pair: pair[0]["seq"])
        operations = [[m["seq"], m["name"], m["stage"], m["kind"], m["inputs"], m["outputs"], m["prompt"],
                       m["status"], m["error"], m["usage"], m["meta"]] for m, _ in op_rows]
        meta = dict(data["metadata"][MARK].get("graph_meta") or {})
    except (KeyError, TypeError) as error:
        raise ExecNetworkError(source, f"malformed memtrace metadata ({type(error).__name__}: {error})") from error
    if document.annotations:
        meta[LABELS_META] = [label.to_dict() for label in document.annotations]
    doc = {"format": FORMAT, "format_version": FORMAT_VERSION, "graph_id": str(data.get("graph_id", "graph")),
           "meta": meta, "variables": variables, "operations": operations}
    graph = graph_from_dict(doc, source)
    node_map = {full_id_of(n): f"{m['name']}@{n.version}" for m, n in ours}
    op_map = {o.op_id: f"op:{m['seq']}" for m, o in op_rows}
    return ImportedNetwork(graph, document.annotations, MappingProxyType(op_map), MappingProxyType(node_map),
                           native=True)
