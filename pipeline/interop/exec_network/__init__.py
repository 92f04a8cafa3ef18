"""Interop with the reference tooling's `ExecNetwork` JSON (smartcomment, MemTraceBench): the entry point.

Their document is `{graph_id, user_id, project_id, strict, driver_type, created_at, metadata,
data: {sessions, nodes, operations, edges}}`: nodes are versioned variables keyed by `full_node_id`
(`[class_name:]name@version`), operations are records (`op_id` "op-<hex>") and edges run variable ->
variable carrying the `op_id` that induced them. MemTraceBench adds its labels as `data.annotations`.

What it does: `from_exec_network(data)` / `load_exec_network(path)` read a document and hand it to
the right importer - ours (every record carries our mark, `exec_network.native`: rebuilt exactly) or
theirs (`exec_network.foreign`: translated, kinds guessed by `exec_network.guess`, every original record kept so that
`to_exec_network` writes the same document back); a document of ours edited by someone else is
imported as theirs, with a warning. Both directions are checked against the real smartcomment 0.1.2
(tests/interop). It re-exports the public API of the pieces: `to_exec_network` /
`save_exec_network` / `annotation_from_attribution` (`exec_network.export`, `exec_network.timeline`),
the name table and id helpers (`exec_network.names`), `ImportedNetwork`, `MARK`, the placeholder ids
and `labels_in` (`exec_network.document`), `is_foreign` (`exec_network.originals`).

What it does not do: no attribution, no network, no rendering; the labels themselves
(`BenchAnnotation`) and their scoring are `exec_network.labels`; our own compact JSON is `graph_io`.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from memtrace_loop.pipeline.interop.exec_network.document import (
    LABELS_META,
    MARK,
    NATIVE_FORMAT,
    NONE_NODE_ID,
    NONE_OP_ID,
    ImportedNetwork,
    labels_in,
    read_document,
)
from memtrace_loop.pipeline.interop.exec_network.export import (
    DEFAULT_CREATED_AT,
    INPUTS_SESSION,
    annotation_from_attribution,
    document_bytes,
    save_exec_network,
    to_exec_network,
)
from memtrace_loop.pipeline.interop.exec_network.foreign import import_foreign
from memtrace_loop.pipeline.interop.exec_network.labels import ExecNetworkError
from memtrace_loop.pipeline.interop.exec_network.names import (
    NAME_TABLE,
    NameRule,
    full_node_ids,
    op_id_for,
    our_name,
    their_name,
)
from memtrace_loop.pipeline.interop.exec_network.native import import_native
from memtrace_loop.pipeline.interop.exec_network.originals import is_foreign

__all__ = [
    "DEFAULT_CREATED_AT",
    "INPUTS_SESSION",
    "LABELS_META",
    "MARK",
    "NAME_TABLE",
    "NATIVE_FORMAT",
    "NONE_NODE_ID",
    "NONE_OP_ID",
    "ExecNetworkError",
    "ImportedNetwork",
    "NameRule",
    "annotation_from_attribution",
    "document_bytes",
    "from_exec_network",
    "full_node_ids",
    "is_foreign",
    "labels_in",
    "load_exec_network",
    "op_id_for",
    "our_name",
    "save_exec_network",
    "their_name",
    "to_exec_network",
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
