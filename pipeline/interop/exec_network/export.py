"""ExecNetwork export: one of our graphs as a document smartcomment's `ExecNetwork.import_graph` accepts.

Names are mapped through `NAME_TABLE` and split into `class_name` / `name`; one session per stage; one edge
per (prompt or input) x output pair, placeholder edges for an operation without inputs or outputs;
`created_at` from one clock (`timeline`: a distinct tick per record, operations in sequence order after their
inputs and before their outputs; `Clock` renders it). Everything of ours rides in `metadata["memtrace"]` (so
`native` rebuilds the graph exactly); labels go to `data.annotations` and the top-level
`metadata["annotations"]`. A graph imported from a foreign document is written back from its original records
(`foreign.reexport`). It reads nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from types import MappingProxyType
from typing import Any

import orjson
from memtrace_loop.pipeline.analysis.attribution.records import Attribution
from memtrace_loop.pipeline.core.conventions import first_version, query_name, turn_name
from memtrace_loop.pipeline.core.graph import ExecutionGraph, Operation, Variable
from memtrace_loop.pipeline.interop.exec_network.document import (
    ANNOTATIONS_KEY,
    DRIVER_TYPE,
    LABELS_META,
    MARK,
    NATIVE_FORMAT,
    NONE_NODE_ID,
    full_node_ids,
    labels_in,
    op_id_for,
    sentinel_node,
    sentinel_session,
    split_full_name,
    stable_hex,
    their_name,
)
from memtrace_loop.pipeline.interop.exec_network.foreign import is_foreign, reexport
from memtrace_loop.pipeline.interop.exec_network.labels import BenchAnnotation

DEFAULT_CREATED_AT = datetime(2000, 1, 1)
INPUTS_SESSION = "session-inputs"


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
        extra=MappingProxyType({"method": attribution.method, "confidence": attribution.confidence,
                                "check": attribution.check.value}),
    )


def to_exec_network(
    graph: ExecutionGraph, annotations: Iterable[BenchAnnotation | Attribution] = (), *, user_id: str | None = None,
    project_id: str | None = "memtrace-loop", created_at: datetime = DEFAULT_CREATED_AT,
) -> dict[str, Any]:
    """`graph` as an ExecNetwork document (plain JSON data); attributions become annotations."""
    full_ids = full_node_ids(graph)
    labels = [a if isinstance(a, BenchAnnotation) else annotation_from_attribution(a, graph, full_ids)
              for a in annotations] or list(labels_in(graph.meta))
    if is_foreign(graph):
        return reexport(graph, [label.to_dict() for label in labels])
    return _NativeExport(graph, full_ids, user_id, project_id, created_at).document(labels)


def document_bytes(document: Mapping[str, Any]) -> bytes:
    """An ExecNetwork document as UTF-8 JSON: orjson (an order of magnitude faster than `json` on the
    ~10 MB documents of a 600-turn run), `json` for what orjson refuses (e.g. integers over 64 bits)."""
    try:
        return orjson.dumps(document)
    except TypeError:
        return json.dumps(document, ensure_ascii=False).encode("utf-8")


def save_exec_network(graph: ExecutionGraph, path: str | Path, annotations: Iterable[BenchAnnotation | Attribution]
                      = (), **options: Any) -> Path:
    """Write `to_exec_network(graph, annotations, **options)` as UTF-8 JSON to `path`; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(document_bytes(to_exec_network(graph, annotations, **options)))
    return path


class _NativeExport:
    """The records of one export of our own graph (one use: `document`)."""

    def __init__(self, graph: ExecutionGraph, full_ids: Mapping[str, str], user_id: str | None,
                 project_id: str | None, created_at: datetime) -> None:
        self.graph, self.full_ids = graph, full_ids
        self.owner = {"graph_id": graph.graph_id, "user_id": user_id, "project_id": project_id}
        self.clock = timeline(graph)
        self.when = Clock(created_at).stamp

    def record(self, created_at: str, filename: str, **fields: Any) -> dict[str, Any]:
        """A record with the fields smartcomment requires and the computed `trigger_point` it writes."""
        return {"created_at": created_at, "filename": filename, "lineno": 0, **self.owner, **fields,
                "trigger_point": f"{filename}:0"}

    def document(self, labels: list[BenchAnnotation]) -> dict[str, Any]:
        graph = self.graph
        session_by_stage: dict[str, str] = {}
        session_by_variable: dict[str, str] = {}
        first_tick_by_session: dict[str, int] = {}
        operations: list[dict[str, Any]] = []
        edges: list[dict[str, Any]] = []
        uses_sentinel = False
        for op in graph.operations():
            session = session_by_stage.setdefault(op.stage, f"session-{op.stage}")
            tick = self.clock.tick_by_operation[op.id]
            first_tick_by_session.setdefault(session, tick)
            session_by_variable.update(dict.fromkeys(op.outputs, session))
            operations.append(self.operation(op, session, tick))
            uses_sentinel |= self.edges_of(op, session, edges)
        nodes = [self.node(order, var, session_by_variable.get(var.id, INPUTS_SESSION))
                 for order, var in enumerate(graph.variables())]
        input_ticks = [self.clock.tick_by_variable[v.id] for v in graph.variables() if v.id not in session_by_variable]
        sessions = []
        if input_ticks:
            sessions.append(self.record(self.when(min(input_ticks)), "<memtrace inputs>", session_id=INPUTS_SESSION,
                                        session_name="inputs", comment="What no operation produced: turns, "
                                        "queries, gold answers, prompts.", category="inputs", metadata={}))
        sessions += [self.record(self.when(first_tick_by_session[sid]), f"<memtrace {stage}>", session_id=sid,
                                 session_name=stage, comment=None, category="stage", metadata={MARK: {"stage": stage}})
                     for stage, sid in session_by_stage.items()]
        if uses_sentinel:
            sessions.append(sentinel_session(self.owner, self.when(0)))
            nodes.append(sentinel_node(self.owner, self.when(0)))
        data: dict[str, Any] = {"nodes": nodes, "edges": edges, "operations": operations, "sessions": sessions}
        graph_meta = {k: v for k, v in graph.meta.items() if k != LABELS_META}  # the labels are written apart
        metadata: dict[str, Any] = {MARK: {"format": NATIVE_FORMAT, "format_version": 2, "graph_meta": graph_meta}}
        if labels:
            data[ANNOTATIONS_KEY] = [label.to_dict() for label in labels]
            metadata[ANNOTATIONS_KEY] = [label.to_dict() for label in labels]
        return {**self.owner, "storage_path": None, "strict": False, "driver_type": DRIVER_TYPE,
                "created_at": self.when(0), "metadata": metadata, "data": data}

    def operation(self, op: Operation, session: str, tick: int) -> dict[str, Any]:
        return self.record(
            self.when(tick), f"<memtrace {op.stage}>", op_id=op_id_for(self.graph, op.id),
            op_name=their_name(op.name, self.graph.graph_id, "operation"), comment=op.error, category=op.kind.value,
            session_id=session, metadata={MARK: {
                "seq": op.seq, "name": op.name, "stage": op.stage, "kind": op.kind.value, "inputs": list(op.inputs),
                "outputs": list(op.outputs), "prompt": op.prompt, "status": op.status.value, "error": op.error,
                "usage": [op.usage.prompt_tokens, op.usage.completion_tokens, op.usage.calls, op.usage.cached_calls],
                "meta": dict(op.meta),
            }},
        )

    def edges_of(self, op: Operation, session: str, edges: list[dict[str, Any]]) -> bool:
        """Append the edges of `op` (placeholder ones for a side it lacks); whether it used the placeholder."""
        full_ids = self.full_ids
        sources = [full_ids[s] for s in (*((op.prompt,) if op.prompt else ()), *op.inputs)]
        targets = [full_ids[t] for t in op.outputs]
        if not sources and not targets:
            return False
        placeholder = not sources or not targets
        tick = self.clock.tick_by_operation[op.id]
        stamps = [self.when(self.clock.tick_by_variable[t]) for t in op.outputs] or [self.when(tick)]
        # the records of a large run are mostly edges: one dict literal each, constants bound once
        filename = f"<memtrace {op.stage}>"
        trigger, owner = f"{filename}:0", self.owner
        graph_id, user_id, project_id = owner["graph_id"], owner["user_id"], owner["project_id"]
        their_op, category = op_id_for(self.graph, op.id), op.kind.value
        edge_prefix = f"edge-{stable_hex(self.graph.graph_id, op.seq)}-"
        append, count = edges.append, len(edges)
        for source in sources or [NONE_NODE_ID]:
            for target, created_at in zip(targets or [NONE_NODE_ID], stamps, strict=True):
                append({"created_at": created_at, "filename": filename, "lineno": 0, "graph_id": graph_id,
                        "user_id": user_id, "project_id": project_id, "session_id": session, "op_id": their_op,
                        "category": category, "comment": None, "trigger_point": trigger,
                        "edge_id": f"{edge_prefix}{count}", "source_full_node_id": source,
                        "target_full_node_id": target, "metadata": {}})
                count += 1
        return placeholder

    def node(self, order: int, var: Variable, session: str) -> dict[str, Any]:
        full_id = self.full_ids[var.id]
        full_name = full_id.rsplit("@", 1)[0]
        class_name, name = split_full_name(full_name)
        return self.record(
            self.when(self.clock.tick_by_variable[var.id]), f"<memtrace {session.removeprefix('session-')}>",
            name=name, version=var.version, value=var.value, comment=None, category=str(var.kind),
            class_name=class_name, session_id=session,
            metadata={MARK: {"name": var.name, "kind": str(var.kind), "meta": dict(var.meta), "order": order}},
            full_name=full_name, node_id=f"{name}@{var.version}", full_node_id=full_id,
        )


# ------------------------------------------------------------------------------------------ the clock


SECOND_FORMAT = "%Y-%m-%d %H:%M:%S"  # then ".mmm"


@dataclass(frozen=True)
class Timeline:
    """The tick of each variable id and each operation id (distinct, consistent; see the module doc)."""

    tick_by_variable: dict[str, int]
    tick_by_operation: dict[str, int]


def timeline(graph: ExecutionGraph) -> Timeline:
    """Ticks for every variable and operation of `graph` (see the module doc)."""
    tick_by_variable: dict[str, int] = {}
    tick_by_operation: dict[str, int] = {}
    operations = list(graph.operations())
    next_op = 0

    def mark(var_id: str) -> None:
        if var_id not in tick_by_variable:
            tick_by_variable[var_id] = len(tick_by_variable) + len(tick_by_operation)

    def run_operations_through(seq_position: int) -> None:
        nonlocal next_op
        while next_op <= seq_position:
            op = operations[next_op]
            for var_id in (*((op.prompt,) if op.prompt else ()), *op.inputs):
                mark(var_id)
            tick_by_operation[op.id] = len(tick_by_variable) + len(tick_by_operation)
            for var_id in op.outputs:
                mark(var_id)
            next_op += 1

    position_by_op = {op.id: i for i, op in enumerate(operations)}
    for var in graph.variables():
        if var.id in tick_by_variable:
            continue
        producer = graph.producer(var.id)
        if producer is None:
            mark(var.id)
        else:
            run_operations_through(position_by_op[producer.id])
    run_operations_through(len(operations) - 1)
    return Timeline(tick_by_variable, tick_by_operation)


class Clock:
    """Ticks rendered as smartcomment writes `created_at`: `base` plus `tick` milliseconds."""

    def __init__(self, base: datetime) -> None:
        self._base_second = base.replace(microsecond=0)
        self._base_milliseconds = base.microsecond // 1000
        self._text_by_second: dict[int, str] = {}

    def stamp(self, tick: int) -> str:
        second, milliseconds = divmod(self._base_milliseconds + tick, 1000)
        text = self._text_by_second.get(second)
        if text is None:
            text = (self._base_second + timedelta(seconds=second)).strftime(SECOND_FORMAT)
            self._text_by_second[second] = text
        return f"{text}.{milliseconds:03d}"
