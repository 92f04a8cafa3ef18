"""Interop with smartcomment's / MemTraceBench's `ExecNetwork` JSON: the entry point and public API.

`from_exec_network` / `load_exec_network` hand a document to the right importer: ours (`import_native`: our
mark on every record read back through `graph_io`, so ours -> ExecNetwork -> ours is exact) or theirs
(`foreign`: translated with every original record kept, so `to_exec_network` writes it back unchanged); an
edited document of ours is imported as theirs, with a warning. Both directions are checked against the real
smartcomment (tests/interop). No attribution, no network, no rendering.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import MappingProxyType
from typing import Any

from memtrace_loop.pipeline.core.graph_io import FORMAT, FORMAT_VERSION, graph_from_dict
from memtrace_loop.pipeline.interop.exec_network.document import (
    LABELS_META,
    MARK,
    NAME_TABLE,
    NONE_NODE_ID,
    NONE_OP_ID,
    ImportedNetwork,
    RawDocument,
    full_id_of,
    full_node_ids,
    labels_in,
    op_id_for,
    our_name,
    read_document,
    their_name,
)
from memtrace_loop.pipeline.interop.exec_network.export import (
    annotation_from_attribution,
    document_bytes,
    save_exec_network,
    to_exec_network,
)
from memtrace_loop.pipeline.interop.exec_network.foreign import import_foreign
from memtrace_loop.pipeline.interop.exec_network.labels import ExecNetworkError

__all__ = [
    "LABELS_META", "MARK", "NAME_TABLE", "NONE_NODE_ID", "NONE_OP_ID", "ExecNetworkError", "ImportedNetwork",
    "annotation_from_attribution", "document_bytes", "from_exec_network", "full_node_ids", "labels_in",
    "load_exec_network", "op_id_for", "our_name", "save_exec_network", "their_name", "to_exec_network",
]

logger = logging.getLogger(__name__)


def from_exec_network(data: Any, source: str = "<exec-network>") -> ImportedNetwork:
    """Read an ExecNetwork document (decoded JSON): ours exactly, theirs translated (see the module doc)."""
    document = read_document(data, source)
    if document.marked:
        logger.warning("%s: written by memtrace but edited (some records lack our metadata); importing generically",
                       source)
    return import_native(document) if document.native else import_foreign(document)


def load_exec_network(path: str | Path) -> ImportedNetwork:
    """Read the ExecNetwork JSON file at `path` (see `from_exec_network`); unreadable files raise
    `ExecNetworkError` naming the path."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise ExecNetworkError(str(path), f"cannot read file ({type(error).__name__}: {error})") from error
    except json.JSONDecodeError as error:
        raise ExecNetworkError(str(path), f"invalid JSON at line {error.lineno} column {error.colno}: {error.msg}"
                               ) from error
    return from_exec_network(data, str(path))


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
