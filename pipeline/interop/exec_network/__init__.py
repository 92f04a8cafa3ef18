"""Interop with smartcomment's / MemTraceBench's `ExecNetwork` JSON: the entry point and public API.

`from_exec_network` / `load_exec_network` hand a document to the right importer: ours (`native`, rebuilt
exactly) or theirs (`foreign`, translated with every original record kept, so `to_exec_network` writes it
back unchanged); an edited document of ours is imported as theirs, with a warning. Both directions are
checked against the real smartcomment (tests/interop). No attribution, no network, no rendering.
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
    "DEFAULT_CREATED_AT", "INPUTS_SESSION", "LABELS_META", "MARK", "NAME_TABLE", "NATIVE_FORMAT", "NONE_NODE_ID",
    "NONE_OP_ID", "ExecNetworkError", "ImportedNetwork", "NameRule", "annotation_from_attribution", "document_bytes",
    "from_exec_network", "full_node_ids", "is_foreign", "labels_in", "load_exec_network", "op_id_for", "our_name",
    "save_exec_network", "their_name", "to_exec_network"
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
