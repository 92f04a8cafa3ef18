"""ExecNetwork documents as read: the pydantic records, the parsed document and the import result.

What it does: `read_document` checks the envelope of a decoded ExecNetwork document, parses its
nodes and operations (a list, or an object keyed by id) with the pydantic models `RawNode`,
`RawOperation` (edges: `RawEdge`, parsed by the foreign import, the only one that needs them) and its
MemTraceBench annotations, and tells whether the document carries our lossless mark (`MARK`:
`metadata["memtrace"]` on the document, on every node and on every operation). `ImportedNetwork` is
what an import returns. Every problem is an `ExecNetworkError` naming source, record and field.

What it does not do: no graph building (`exec_network_native`, `exec_network_foreign`), no writing
(`exec_network_export`), no file access (`exec_network`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.interop.bench_annotations import (
    BenchAnnotation,
    ExecNetworkError,
    parse_annotation,
)
from pydantic import BaseModel, ConfigDict, Field, ValidationError

MARK = "memtrace"  # our key inside their `metadata` fields
NATIVE_FORMAT = "memtrace-exec-network"


@dataclass(frozen=True)
class ImportedNetwork:
    """A read ExecNetwork: our graph, its annotations (in their ids) and the id maps their -> ours."""

    graph: ExecutionGraph
    annotations: tuple[BenchAnnotation, ...]
    op_id_map: Mapping[str, str]
    node_id_map: Mapping[str, str]
    conflicts: tuple[Mapping[str, str], ...] = ()
    native: bool = False  # written by `to_exec_network` and rebuilt exactly


class _Raw(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class RawNode(_Raw):
    name: str
    version: int = Field(ge=1)
    value: Any = ""
    comment: Any = None
    category: Any = None
    class_name: Any = None
    session_id: Any = None
    created_at: Any = None
    metadata: dict[str, Any] | None = None
    full_node_id: str | None = None


class RawOperation(_Raw):
    op_id: str
    op_name: str = ""
    comment: Any = None
    category: Any = None
    session_id: Any = None
    metadata: dict[str, Any] | None = None


class RawEdge(_Raw):
    edge_id: Any = None
    source_full_node_id: str
    target_full_node_id: str
    op_id: str
    category: Any = None
    comment: Any = None


def parse_records(value: Any, key: str, where: str, source: str) -> list[tuple[str, Any]]:
    """A list of records, or a dict keyed by `key` (the key fills in a missing `key` field)."""
    if value is None:
        return []
    if isinstance(value, Mapping):
        return [(f"{where}[{k!r}]", {key: k, **v} if isinstance(v, Mapping) else v) for k, v in value.items()]
    if isinstance(value, list):
        return [(f"{where}[{i}]", v) for i, v in enumerate(value)]
    raise ExecNetworkError(source, f"expected a list or an object, got {type(value).__name__}", None, where)


def parse_record(model: type[BaseModel], item: Any, where: str, source: str) -> Any:
    """`item` validated as `model`; the first validation error becomes an `ExecNetworkError` at `where`."""
    try:
        return model.model_validate(item)
    except ValidationError as error:
        first = error.errors()[0]
        raise ExecNetworkError(source, first["msg"], where, ".".join(map(str, first["loc"])) or None) from error



@dataclass(frozen=True)
class RawDocument:
    """A checked ExecNetwork document: the decoded JSON, its parsed nodes and operations (each with
    where it was found), its annotations, and whether it is ours (`native`) or merely claims to be
    (`marked`: our document-level mark without it on every record, i.e. edited by someone else)."""

    data: Mapping[str, Any]
    nodes: list[tuple[str, RawNode]]
    operations: list[tuple[str, RawOperation]]
    annotations: tuple[BenchAnnotation, ...]
    source: str
    native: bool
    marked: bool


def read_document(data: Any, source: str) -> RawDocument:
    """Parse the envelope, nodes, operations and annotations of decoded ExecNetwork JSON `data`."""
    if not isinstance(data, Mapping) or not isinstance(data.get("data"), Mapping):
        raise ExecNetworkError(source, "not an ExecNetwork document (missing object 'data')")
    body = data["data"]
    nodes = [(w, parse_record(RawNode, item, w, source))
             for w, item in parse_records(body.get("nodes"), "full_node_id", "data.nodes", source)]
    ops = [(w, parse_record(RawOperation, item, w, source))
           for w, item in parse_records(body.get("operations"), "op_id", "data.operations", source)]
    raw_annotations = body.get("annotations") or []
    if not isinstance(raw_annotations, list):
        raise ExecNetworkError(source, "expected a list", None, "data.annotations")
    annotations = tuple(parse_annotation(a, source, f"data.annotations[{i}]") for i, a in enumerate(raw_annotations))
    top = (data.get("metadata") or {}).get(MARK) if isinstance(data.get("metadata"), Mapping) else None
    native = (isinstance(top, Mapping) and top.get("format") == NATIVE_FORMAT
              and all(MARK in (n.metadata or {}) for _, n in nodes) and all(MARK in (o.metadata or {}) for _, o in ops))
    return RawDocument(data, nodes, ops, annotations, source, native, isinstance(top, Mapping) and not native)
