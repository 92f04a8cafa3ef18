"""Interop with the reference tooling's `ExecNetwork` JSON (smartcomment, MemTraceBench).

Their document is `{graph_id, user_id, project_id, strict, driver_type, created_at, metadata,
data: {sessions, nodes, operations, edges}}`: nodes are versioned variables keyed by `full_node_id`
(`[class_name:]name@version`), operations are records (`op_id` "op-<hex>") and edges run variable ->
variable carrying the `op_id` that induced them. MemTraceBench adds its labels as `data.annotations`.

What it does:

- `to_exec_network(graph, annotations=())` writes one of our `ExecutionGraph`s in that format.
  Names with a counterpart in their conventions are renamed through the one table `NAME_TABLE`
  (turns `U<sample>:<dia_id>`, memory units `memory-unit-<id>`, the Mem0 prompts, the answer and judge
  operations); everything of ours (names, kinds, meta, the operation's full input/output lists in
  order, prompt, status, error, usage, seq) rides in `metadata["memtrace"]`, so an operation without
  inputs or outputs - which no edge can express - survives, and ours -> theirs -> ours is exact.
  Every (input or prompt) x output pair of an operation becomes an edge. Lists are written as JSON
  lists; `created_at` stamps are synthetic (a base time plus one millisecond per variable, in
  insertion order), so a reader that orders by time sees our order.
- `from_exec_network(data)` reads such a document back. Ours (every node and operation carries our
  metadata) is rebuilt exactly. Theirs is translated: nodes -> variables (kind from category,
  class name and name; names mapped back through `NAME_TABLE`; versions renumbered 1..n per name in
  their version order, theirs kept in meta), edges grouped by `op_id` -> operations (inputs = distinct
  sources, outputs = distinct targets, a prompt-kind source becomes the operation's prompt, kind from
  name/category keywords), ordered by `created_at` and then topologically. A variable two operations
  claim to produce stays with the first and the conflict is recorded in graph and operation meta; a
  cycle raises `ExecNetworkError`. Unknown keys are ignored.
- `annotation_from_attribution` turns our attributions into MemTraceBench labels on the exported graph;
  the labels themselves (`BenchAnnotation`) and their scoring live in `pipeline.bench_annotations`.

What it does not do: no attribution, no network, no rendering; our own compact JSON is `graph_io`.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from types import MappingProxyType
from typing import Any

from memtrace_loop.pipeline.analysis.blame import Attribution
from memtrace_loop.pipeline.backends.text import alnum_words
from memtrace_loop.pipeline.core.graph import ExecutionGraph, OpKind
from memtrace_loop.pipeline.core.graph_io import FORMAT, FORMAT_VERSION, graph_from_dict
from memtrace_loop.pipeline.interop.bench_annotations import (
    BenchAnnotation,
    ExecNetworkError,
    parse_annotation,
)
from pydantic import BaseModel, ConfigDict, Field, ValidationError

logger = logging.getLogger(__name__)

MARK = "memtrace"  # our key inside their `metadata` fields
NATIVE_FORMAT = "memtrace-exec-network"
DEFAULT_CREATED_AT = datetime(2000, 1, 1)
INPUTS_SESSION = "session-inputs"


@dataclass(frozen=True, slots=True)
class NameRule:
    """One name correspondence. `what` is "operation", "variable" (exact) or "prefix"; a prefix's
    `theirs` may hold `{sample}` (the graph id) and `rest` is the regex the remainder must match when
    mapping their name back. `stage` is our stage of an operation imported under that name."""

    what: str
    ours: str
    theirs: str
    rest: str = ".+"
    stage: str = ""


NAME_TABLE: tuple[NameRule, ...] = (
    NameRule("operation", "question_answering", "question-answering", stage="respond"),
    NameRule("operation", "llm_judge", "llm-judge", stage="judge"),
    NameRule("variable", "prompt:extract", "fact-extraction-system-prompt"),
    NameRule("variable", "prompt:decide", "memory-update-decision-prompt"),
    NameRule("variable", "prompt:respond", "question-answering-prompt"),
    NameRule("prefix", "turn:", "U{sample}:", rest=r"D\d+:\d+"),
    NameRule("prefix", "memory:", "memory-unit-"),
    NameRule("prefix", "query:", "query:"),
)
_OUR_KINDS = ("turn", "facts", "retrieved", "decision", "memory", "query", "context", "answer", "gold", "verdict",
              "prompt")
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


def _rule_rest(rule: NameRule) -> re.Pattern[str]:
    head = re.escape(rule.theirs).replace(re.escape("{sample}"), "[^:]+")
    return re.compile(f"{head}({rule.rest})")


def their_name(ours: str, sample: str, what: str = "variable") -> str:
    """Our variable (or operation) name in their conventions; unchanged when the table has none."""
    for rule in NAME_TABLE:
        if rule.what == what and rule.ours == ours:
            return rule.theirs
        if what == "variable" and rule.what == "prefix" and ours.startswith(rule.ours):
            return rule.theirs.format(sample=sample) + ours[len(rule.ours):]
    return ours


def our_name(theirs: str, what: str = "variable") -> str:
    """Their variable (or operation) name in ours; unchanged when the table has none."""
    for rule in NAME_TABLE:
        if rule.what == what and rule.theirs == theirs:
            return rule.ours
        if what == "variable" and rule.what == "prefix" and (match := _rule_rest(rule).fullmatch(theirs)):
            return rule.ours + match.group(1)
    return theirs


def _hex(*parts: object) -> str:
    return hashlib.sha256(":".join(map(str, parts)).encode()).hexdigest()[:16]


def op_id_for(graph: ExecutionGraph, op_id: str) -> str:
    """The ExecNetwork `op_id` that `to_exec_network` gives our operation `op_id` (e.g. "op:12")."""
    return f"op-{_hex(graph.graph_id, graph.operation(op_id).seq)}"


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d}"


def _full_ids(graph: ExecutionGraph) -> dict[str, str]:
    """Our variable id -> their full node id (our name kept where the mapped name would collide)."""
    mapped = {name: their_name(name, graph.graph_id) for name in graph.names()}
    counts: dict[str, int] = {}
    for theirs in mapped.values():
        counts[theirs] = counts.get(theirs, 0) + 1
    names = {ours: theirs if counts[theirs] == 1 and (theirs == ours or theirs not in mapped) else ours
             for ours, theirs in mapped.items()}
    return {v.id: f"{names[v.name]}@{v.version}" for v in graph.variables()}


# --------------------------------------------------------------------------- annotations of ours


def annotation_from_attribution(
    attribution: Attribution, graph: ExecutionGraph, full_ids: Mapping[str, str] | None = None
) -> BenchAnnotation:
    """One of our attributions as a MemTraceBench label on the exported `graph` (ids in their naming)."""
    full_ids = full_ids if full_ids is not None else _full_ids(graph)
    question = attribution.case.question
    query = graph.latest(f"query:{question.id}")
    evidence = (full_ids.get(f"turn:{e}@1", f"{their_name(f'turn:{e}', graph.graph_id)}@1")
                for e in attribution.evidence)
    return BenchAnnotation(
        query_id=full_ids[query.id] if query else f"query:{question.id}@1",
        final_error_type=attribution.error_type.value,
        final_op_id=op_id_for(graph, attribution.op),
        query=question.text, golden_answers=(question.gold,), prediction=attribution.case.prediction,
        source_evidence_ids=tuple(evidence), reason=attribution.reason, error_type=attribution.error_type,
        extra=MappingProxyType({"method": attribution.method, "confidence": attribution.confidence}),
    )


# --------------------------------------------------------------------------- export


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
    full_ids = _full_ids(graph)
    session_by_stage: dict[str, str] = {}
    producer_stage: dict[str, str] = {}
    operations, edges = [], []
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
                    "edge_id": f"edge-{_hex(graph.graph_id, op.seq, len(edges))}",
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


# --------------------------------------------------------------------------- import


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


class _RawNode(_Raw):
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


class _RawOperation(_Raw):
    op_id: str
    op_name: str = ""
    comment: Any = None
    category: Any = None
    session_id: Any = None
    metadata: dict[str, Any] | None = None


class _RawEdge(_Raw):
    edge_id: Any = None
    source_full_node_id: str
    target_full_node_id: str
    op_id: str
    category: Any = None
    comment: Any = None


def _records(value: Any, key: str, where: str, source: str) -> list[tuple[str, Any]]:
    """A list of records, or a dict keyed by `key` (the key fills in a missing `key` field)."""
    if value is None:
        return []
    if isinstance(value, Mapping):
        return [(f"{where}[{k!r}]", {key: k, **v} if isinstance(v, Mapping) else v) for k, v in value.items()]
    if isinstance(value, list):
        return [(f"{where}[{i}]", v) for i, v in enumerate(value)]
    raise ExecNetworkError(source, f"expected a list or an object, got {type(value).__name__}", None, where)


def _parse(model: type[BaseModel], item: Any, where: str, source: str) -> Any:
    try:
        return model.model_validate(item)
    except ValidationError as error:
        first = error.errors()[0]
        raise ExecNetworkError(source, first["msg"], where, ".".join(map(str, first["loc"])) or None) from error


def _time(text: Any) -> datetime | None:
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


def _variable_kind(node: _RawNode, name: str) -> str:
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


def _op_kind(name: str, category: Any) -> OpKind:
    if str(category or "").lower() in {k.value for k in OpKind}:
        return OpKind(str(category).lower())
    for tokens in (_tokens(name), _tokens(category)):
        for kind, stems in _OP_KEYWORDS:
            if any(t.startswith(s) for t in tokens for s in stems):
                return kind
    return OpKind.OTHER


def from_exec_network(data: Any, source: str = "<exec-network>") -> ImportedNetwork:
    """Read an ExecNetwork document (decoded JSON): ours exactly, theirs translated (see the module doc)."""
    if not isinstance(data, Mapping) or not isinstance(data.get("data"), Mapping):
        raise ExecNetworkError(source, "not an ExecNetwork document (missing object 'data')")
    body = data["data"]
    nodes = [(w, _parse(_RawNode, item, w, source)) for w, item in _records(body.get("nodes"), "full_node_id",
                                                                             "data.nodes", source)]
    ops = [(w, _parse(_RawOperation, item, w, source)) for w, item in _records(body.get("operations"), "op_id",
                                                                                  "data.operations", source)]
    raw_annotations = body.get("annotations") or []
    if not isinstance(raw_annotations, list):
        raise ExecNetworkError(source, "expected a list", None, "data.annotations")
    annotations = tuple(parse_annotation(a, source, f"data.annotations[{i}]") for i, a in enumerate(raw_annotations))
    top = (data.get("metadata") or {}).get(MARK) if isinstance(data.get("metadata"), Mapping) else None
    native = (isinstance(top, Mapping) and top.get("format") == NATIVE_FORMAT
              and all(MARK in (n.metadata or {}) for _, n in nodes) and all(MARK in (o.metadata or {}) for _, o in ops))
    if isinstance(top, Mapping) and not native:
        logger.warning("%s: written by memtrace but edited (some records lack our metadata); importing generically",
                       source)
    build = _native if native else _foreign
    return build(data, nodes, ops, annotations, source)


def _native(data: Mapping[str, Any], nodes: list, ops: list, annotations: tuple, source: str) -> ImportedNetwork:
    try:
        ours = [(n.metadata[MARK], n) for _, n in nodes]
        ours.sort(key=lambda pair: pair[0]["order"])
        variables = [[m["name"], n.version, m["kind"], str(n.value), m["meta"]] for m, n in ours]
        op_rows = sorted(((o.metadata[MARK], o) for _, o in ops), key=lambda pair: pair[0]["seq"])
        operations = [[m["seq"], m["name"], m["stage"], m["kind"], m["inputs"], m["outputs"], m["prompt"],
                       m["status"], m["error"], m["usage"], m["meta"]] for m, _ in op_rows]
        meta = data["metadata"][MARK].get("graph_meta") or {}
    except (KeyError, TypeError) as error:
        raise ExecNetworkError(source, f"malformed memtrace metadata ({type(error).__name__}: {error})") from error
    doc = {"format": FORMAT, "format_version": FORMAT_VERSION, "graph_id": str(data.get("graph_id", "graph")),
           "meta": meta, "variables": variables, "operations": operations}
    graph = graph_from_dict(doc, source)
    node_map = {n.full_node_id or f"{n.name}@{n.version}": f"{m['name']}@{n.version}" for m, n in ours}
    op_map = {o.op_id: f"op:{m['seq']}" for m, o in op_rows}
    return ImportedNetwork(graph, annotations, MappingProxyType(op_map), MappingProxyType(node_map), native=True)


def _foreign(data: Mapping[str, Any], nodes: list, ops: list, annotations: tuple, source: str) -> ImportedNetwork:
    body = data["data"]
    by_id: dict[str, tuple[int, _RawNode]] = {}
    for position, (where, node) in enumerate(nodes):
        qualified = f"{node.class_name}:{node.name}" if node.class_name else node.name
        full_id = node.full_node_id or f"{qualified}@{node.version}"
        if full_id in by_id:
            raise ExecNetworkError(source, f"duplicate node {full_id!r}", where, "full_node_id")
        by_id[full_id] = (position, node)
    records: dict[str, _RawOperation] = {}
    for where, op in ops:
        if op.op_id in records:
            raise ExecNetworkError(source, f"duplicate operation {op.op_id!r}", where, "op_id")
        records[op.op_id] = op
    sources: dict[str, list[str]] = {op_id: [] for op_id in records}
    targets: dict[str, list[str]] = {op_id: [] for op_id in records}
    for where, item in _records(body.get("edges"), "edge_id", "data.edges", source):
        edge = _parse(_RawEdge, item, where, source)
        for key in ("source_full_node_id", "target_full_node_id"):
            if getattr(edge, key) not in by_id:
                raise ExecNetworkError(source, f"unknown node {getattr(edge, key)!r}", where, key)
        if edge.op_id not in records:
            records[edge.op_id] = _RawOperation(op_id=edge.op_id)
            sources[edge.op_id], targets[edge.op_id] = [], []
        src, dst = edge.source_full_node_id, edge.target_full_node_id
        if src == dst or src in targets[edge.op_id] or dst in sources[edge.op_id]:
            looped = dst if src == dst or dst in sources[edge.op_id] else src
            raise ExecNetworkError(source, f"cycle: operation {edge.op_id!r} consumes its own output {looped!r}",
                                   where, "op_id")
        for bucket, node_id in ((sources, edge.source_full_node_id), (targets, edge.target_full_node_id)):
            if node_id not in bucket[edge.op_id]:
                bucket[edge.op_id].append(node_id)

    def when(ids: list[str]) -> datetime | None:
        times = [t for t in (_time(by_id[i][1].created_at) for i in ids) if t is not None]
        return min(times) if times else None

    rank_key = {}
    for ordinal, op_id in enumerate(records):
        moment = when(targets[op_id]) or when(sources[op_id])
        rank_key[op_id] = (moment is None, moment or datetime.min, ordinal)
    ranked = sorted(records, key=rank_key.__getitem__)
    rank = {op_id: i for i, op_id in enumerate(ranked)}

    producer: dict[str, str] = {}
    conflicts: list[dict[str, str]] = []
    for op_id in ranked:
        kept = []
        for node_id in targets[op_id]:
            if node_id in producer:
                conflicts.append({"variable": node_id, "kept": producer[node_id], "dropped": op_id})
            else:
                producer[node_id] = op_id
                kept.append(node_id)
        targets[op_id] = kept

    dependents: dict[str, list[str]] = {op_id: [] for op_id in ranked}
    waiting = dict.fromkeys(ranked, 0)
    for op_id in ranked:
        for upstream in dict.fromkeys(producer[s] for s in sources[op_id] if s in producer):
            dependents[upstream].append(op_id)
            waiting[op_id] += 1
    ready = [rank[op_id] for op_id in ranked if not waiting[op_id]]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        op_id = ranked[heapq.heappop(ready)]
        order.append(op_id)
        for child in dependents[op_id]:
            waiting[child] -= 1
            if not waiting[child]:
                heapq.heappush(ready, rank[child])
    if len(order) < len(ranked):
        stuck = [op_id for op_id in ranked if waiting[op_id]]
        raise ExecNetworkError(source, f"cycle among operations {', '.join(map(repr, stuck[:8]))}"
                               + (" ..." if len(stuck) > 8 else ""), None, "data.edges")

    # variables: global order by created_at, version numbers per name in their version order
    qualified = {full_id: full_id.rsplit("@", 1)[0] for full_id in by_id}
    mapped = {q: our_name(q) for q in set(qualified.values())}
    sharing: dict[str, set[str]] = {}
    for q, ours in mapped.items():
        sharing.setdefault(ours, set()).add(q)
    # a mapped name must stay unique (turns of two samples, or a mapped name that is also a raw name)
    unique = {q: ours if len(sharing[ours]) == 1 and (ours == q or ours not in mapped) else q
              for q, ours in mapped.items()}
    names = {full_id: unique[q] for full_id, q in qualified.items()}
    by_time = sorted(by_id, key=lambda i: (_time(by_id[i][1].created_at) is None,
                                           _time(by_id[i][1].created_at) or datetime.min, by_id[i][0]))
    versions: dict[str, list[str]] = {}
    for full_id in sorted(by_id, key=lambda i: (by_id[i][1].version, by_id[i][0])):
        versions.setdefault(names[full_id], []).append(full_id)
    taken: dict[str, int] = {}
    node_map: dict[str, str] = {}
    variables, kinds = [], {}
    for slot in by_time:
        name = names[slot]
        taken[name] = taken.get(name, 0) + 1
        full_id = versions[name][taken[name] - 1]
        node = by_id[full_id][1]
        kinds[full_id] = _variable_kind(node, name)
        value = node.value if isinstance(node.value, str) else ("" if node.value is None else json.dumps(node.value))
        fields = {"full_node_id": full_id, "version": node.version, "comment": node.comment, "category": node.category,
                  "class_name": node.class_name, "session_id": node.session_id, "created_at": node.created_at,
                  "metadata": node.metadata}
        variables.append([name, taken[name], kinds[full_id], value,
                          {"exec_network": {k: v for k, v in fields.items() if v not in (None, "", {})}}])
        node_map[full_id] = f"{name}@{taken[name]}"

    dropped_by_op: dict[str, list[str]] = {}
    for conflict in conflicts:
        dropped_by_op.setdefault(conflict["dropped"], []).append(conflict["variable"])
    operations, op_map = [], {}
    for seq, op_id in enumerate(order):
        record = records[op_id]
        inputs = [node_map[s] for s in sources[op_id]]
        prompt = next((node_map[s] for s in sources[op_id] if kinds[s] == "prompt"), None)
        if prompt is not None:
            inputs.remove(prompt)
        name = our_name(record.op_name or op_id, "operation")
        rule_stage = next((r.stage for r in NAME_TABLE if r.what == "operation" and r.ours == name and r.stage), "")
        stage = prompt.split("@")[0].removeprefix("prompt:") if prompt else rule_stage or name
        fields = {"op_id": op_id, "op_name": record.op_name, "comment": record.comment, "category": record.category,
                  "session_id": record.session_id, "metadata": record.metadata,
                  "dropped_outputs": dropped_by_op.get(op_id)}
        meta = {"exec_network": {k: v for k, v in fields.items() if v not in (None, "", {}, [])}}
        operations.append([seq, name, stage, _op_kind(record.op_name, record.category).value, inputs,
                           [node_map[t] for t in targets[op_id]], prompt, "ok", None, [0, 0, 0, 0], meta])
        op_map[op_id] = f"op:{seq}"

    header = {k: data.get(k) for k in ("graph_id", "user_id", "project_id", "strict", "driver_type", "created_at",
                                       "metadata") if data.get(k) not in (None, "", {})}
    header["sessions"] = [item for _, item in _records(body.get("sessions"), "session_id", "data.sessions", source)]
    if conflicts:
        header["conflicts"] = conflicts
    doc = {"format": FORMAT, "format_version": FORMAT_VERSION, "graph_id": str(data.get("graph_id") or "graph"),
           "meta": {"exec_network": header}, "variables": variables, "operations": operations}
    graph = graph_from_dict(doc, source)
    return ImportedNetwork(graph, annotations, MappingProxyType(op_map), MappingProxyType(node_map),
                           tuple(MappingProxyType(c) for c in conflicts))


# --------------------------------------------------------------------------- files


def save_exec_network(graph: ExecutionGraph, path: str | Path, annotations: Iterable[BenchAnnotation | Attribution]
                      = (), **options: Any) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(to_exec_network(graph, annotations, **options), ensure_ascii=False), encoding="utf-8")
    return path


def load_exec_network(path: str | Path) -> ImportedNetwork:
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise ExecNetworkError(str(path), f"cannot read file ({type(error).__name__}: {error})") from error
    except json.JSONDecodeError as error:
        raise ExecNetworkError(str(path), f"invalid JSON at line {error.lineno} column {error.colno}: {error.msg}"
                               ) from error
    return from_exec_network(data, str(path))

