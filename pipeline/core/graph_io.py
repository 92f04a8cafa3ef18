"""Saving and loading execution graphs as our own compact, lossless JSON (`format: memtrace-graph`).

Variables as rows `[name, version, kind, value, meta]`, operations as rows `[seq, name, stage, kind, inputs,
outputs, prompt, status, error, usage, meta]`; loading re-checks every graph invariant.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import MappingProxyType
from typing import Any

from memtrace_loop.pipeline.core.graph import ExecutionGraph, GraphError, Operation, OpKind, OpStatus, Usage

FORMAT = "memtrace-graph"
FORMAT_VERSION = 1


def graph_to_dict(graph: ExecutionGraph) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "graph_id": graph.graph_id,
        "meta": graph.meta,
        "variables": [[v.name, v.version, str(v.kind), v.value, dict(v.meta)] for v in graph.variables()],
        "operations": [
            [
                op.seq, op.name, op.stage, op.kind.value, list(op.inputs), list(op.outputs), op.prompt,
                op.status.value, op.error,
                [op.usage.prompt_tokens, op.usage.completion_tokens, op.usage.calls, op.usage.cached_calls],
                dict(op.meta),
            ]
            for op in graph.operations()
        ],
    }


def graph_to_json(graph: ExecutionGraph) -> str:
    return json.dumps(graph_to_dict(graph), ensure_ascii=False, separators=(",", ":"))


def graph_from_dict(data: Any, source: str = "<graph>") -> ExecutionGraph:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise GraphError(f"{source}: not a {FORMAT} document (missing or wrong 'format')")
    if data.get("format_version") != FORMAT_VERSION:
        raise GraphError(f"{source}: unsupported format_version {data.get('format_version')!r}")
    graph = ExecutionGraph(str(data.get("graph_id", "graph")), data.get("meta") or {})
    try:
        for index, (name, version, kind, value, meta) in enumerate(data["variables"]):
            var = graph.add_variable(name, kind, value, meta or None)
            if var.version != version:
                raise GraphError(f"{source}: variables[{index}] {name!r} has version {version}, expected {var.version}")
        last_seq = -1
        for index, row in enumerate(data["operations"]):
            seq, name, stage, kind, inputs, outputs, prompt, status, error, usage, meta = row
            if not isinstance(seq, int) or seq <= last_seq:
                raise GraphError(f"{source}: operations[{index}] has non-increasing seq {seq!r}")
            last_seq = seq
            op = Operation(
                f"op:{seq}", seq, name, stage, OpKind(kind), tuple(inputs), tuple(outputs), prompt,
                OpStatus(status), error, Usage(*usage), MappingProxyType(meta) if meta else MappingProxyType({}),
            )
            graph._store_operation(op)
        graph._next_seq = last_seq + 1
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, GraphError):
            raise
        raise GraphError(f"{source}: malformed graph document: {type(exc).__name__}: {exc}") from exc
    graph.check()
    return graph


def graph_from_json(text: str, source: str = "<graph>") -> ExecutionGraph:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GraphError(f"{source}: invalid JSON: {exc}") from exc
    return graph_from_dict(data, source)


def save_graph(graph: ExecutionGraph, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(graph_to_json(graph), encoding="utf-8")
    return path


def load_graph(path: str | Path) -> ExecutionGraph:
    path = Path(path)
    return graph_from_json(path.read_text(encoding="utf-8"), str(path))
