"""ExecNetwork export: one of our `ExecutionGraph`s as the reference tooling's (smartcomment)
`ExecNetwork` JSON, our attributions as MemTraceBench labels on it.

What it does: `to_exec_network(graph, annotations=())` writes the document (plain JSON data;
`save_exec_network` writes it to a file). Names with a counterpart in their conventions are renamed
through `NAME_TABLE`; everything of ours (names, kinds, meta, the operation's full input/output lists
in order, prompt, status, error, usage, seq) rides in `metadata["memtrace"]`, so an operation without
inputs or outputs - which no edge can express - survives and `exec_network_native` rebuilds the graph
exactly. Every (input or prompt) x output pair of an operation becomes an edge. `created_at` stamps
are synthetic (a base time plus one millisecond per variable, in insertion order), so a reader that
orders by time sees our order. `annotation_from_attribution` turns one of our attributions into a label.

What it does not do: no reading (`exec_network_native`, `exec_network_foreign`), no attribution, no
scoring of labels (`bench_annotations`); our own compact JSON is `graph_io`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from types import MappingProxyType
from typing import Any

from memtrace_loop.pipeline.analysis.blame import Attribution
from memtrace_loop.pipeline.core.conventions import first_version, query_name, turn_name
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.interop.bench_annotations import BenchAnnotation
from memtrace_loop.pipeline.interop.exec_network_document import MARK, NATIVE_FORMAT
from memtrace_loop.pipeline.interop.exec_network_names import full_node_ids, op_id_for, stable_hex, their_name

DEFAULT_CREATED_AT = datetime(2000, 1, 1)
INPUTS_SESSION = "session-inputs"


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d}"



def annotation_from_attribution(
    attribution: Attribution, graph: ExecutionGraph, full_ids: Mapping[str, str] | None = None
) -> BenchAnnotation:
    """One of our attributions as a MemTraceBench label on the exported `graph` (ids in their naming)."""
    full_ids = full_ids if full_ids is not None else full_node_ids(graph)
    question = attribution.case.question
    query = graph.latest(query_name(question.id))
    evidence = (full_ids.get(first_version(turn_name(e)), first_version(their_name(turn_name(e), graph.graph_id)))
                for e in attribution.evidence)
    return BenchAnnotation(
        query_id=full_ids[query.id] if query else first_version(query_name(question.id)),
        final_error_type=attribution.error_type.value,
        final_op_id=op_id_for(graph, attribution.op),
        query=question.text, golden_answers=(question.gold,), prediction=attribution.case.prediction,
        source_evidence_ids=tuple(evidence), reason=attribution.reason, error_type=attribution.error_type,
        extra=MappingProxyType({"method": attribution.method, "confidence": attribution.confidence}),
    )


def to_exec_network(
    graph: ExecutionGraph,
    annotations: Iterable[BenchAnnotation | Attribution] = (),
    *,
    user_id: str = "memtrace",
    project_id: str = "memtrace-loop",
    driver_type: str = "memtrace",
    created_at: datetime = DEFAULT_CREATED_AT,
) -> dict[str, Any]:
    """`graph` as an ExecNetwork document (plain JSON data); attributions become annotations."""
    full_ids = full_node_ids(graph)
    session_by_stage: dict[str, str] = {}
    producer_stage: dict[str, str] = {}
    operations: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []
    for op in graph.operations():
        session = session_by_stage.setdefault(op.stage, f"session-{op.stage}")
        their_op = op_id_for(graph, op.id)
        producer_stage.update(dict.fromkeys(op.outputs, session))
        operations.append({
            "op_id": their_op, "op_name": their_name(op.name, graph.graph_id, "operation"), "comment": op.error or "",
            "category": op.kind.value, "session_id": session,
            "metadata": {MARK: {
                "seq": op.seq, "name": op.name, "stage": op.stage, "kind": op.kind.value, "inputs": list(op.inputs),
                "outputs": list(op.outputs), "prompt": op.prompt, "status": op.status, "error": op.error,
                "usage": [op.usage.prompt_tokens, op.usage.completion_tokens, op.usage.calls, op.usage.cached_calls],
                "meta": dict(op.meta),
            }},
        })
        sources = [*((op.prompt,) if op.prompt else ()), *op.inputs]
        for source in sources:
            for target in op.outputs:
                edges.append({
                    "edge_id": f"edge-{stable_hex(graph.graph_id, op.seq, len(edges))}",
                    "source_full_node_id": full_ids[source], "target_full_node_id": full_ids[target],
                    "op_id": their_op, "category": "prompt" if source == op.prompt else "data", "comment": "",
                })
    nodes = []
    for order, var in enumerate(graph.variables()):
        full_id = full_ids[var.id]
        nodes.append({
            "full_node_id": full_id, "name": full_id.rsplit("@", 1)[0], "version": var.version, "value": var.value,
            "comment": "", "category": var.kind, "class_name": "",
            "session_id": producer_stage.get(var.id, INPUTS_SESSION),
            "created_at": _stamp(created_at + timedelta(milliseconds=order)),
            "metadata": {MARK: {"name": var.name, "kind": var.kind, "meta": dict(var.meta), "order": order}},
        })
    sessions = [{"session_id": INPUTS_SESSION, "session_name": "inputs", "category": "inputs", "metadata": {}}]
    sessions += [{"session_id": sid, "session_name": stage, "category": "stage", "metadata": {MARK: {"stage": stage}}}
                 for stage, sid in session_by_stage.items()]
    labels = [a if isinstance(a, BenchAnnotation) else annotation_from_attribution(a, graph, full_ids)
              for a in annotations]
    data: dict[str, Any] = {"sessions": sessions, "nodes": nodes, "operations": operations, "edges": edges}
    if labels:
        data["annotations"] = [label.to_dict() for label in labels]
    return {
        "graph_id": graph.graph_id, "user_id": user_id, "project_id": project_id, "strict": True,
        "driver_type": driver_type, "created_at": _stamp(created_at),
        "metadata": {MARK: {"format": NATIVE_FORMAT, "format_version": 1, "graph_meta": graph.meta}},
        "data": data,
    }



def save_exec_network(graph: ExecutionGraph, path: str | Path, annotations: Iterable[BenchAnnotation | Attribution]
                      = (), **options: Any) -> Path:
    """Write `to_exec_network(graph, annotations, **options)` as UTF-8 JSON to `path`; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(to_exec_network(graph, annotations, **options), ensure_ascii=False), encoding="utf-8")
    return path


