"""ExecNetwork documents as read, and the names both directions share.

`read_document` checks the envelope, parses nodes, operations and annotations and tells whether every record
carries our mark (`MARK`); every problem is an `ExecNetworkError` naming source, record and field.
`NAME_TABLE` with `their_name` / `our_name`, `split_full_name` (smartcomment's `class_name` and `name`),
`op_id_for` and `full_node_ids` (original ids of imported records kept) map our ids to theirs. It builds no
graph, writes nothing and touches no file.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memtrace_loop.pipeline.core.conventions import Namespace, prefix, prompt_name
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.interop.exec_network.labels import (
    BenchAnnotation,
    ExecNetworkError,
    parse_annotation,
)
from pydantic import BaseModel, ConfigDict, Field, ValidationError

MARK = "memtrace"  # our key inside their `metadata` fields
NATIVE_FORMAT = "memtrace-exec-network"
DRIVER_TYPE = "in_memory"  # the only driver smartcomment 0.1.2 has
ANNOTATIONS_KEY = "annotations"  # MemTraceBench labels: `data.annotations`, and top-level `metadata.annotations`
LABELS_META = "bench_annotations"  # the labels an imported graph carries in our `graph.meta` (as dicts)
# smartcomment's placeholders: the node of "no input" / "no output", the operation of a link made outside
# any operation, and the session of records made outside any session
NONE_NODE_ID = "COMMENT:NONE@1"
NONE_OP_ID = "__none_op__"
NONE_SESSION_ID = "__none__"
ORIGINAL = "exec_network"  # meta key of an imported variable's / operation's original ExecNetwork record


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


class RawNode(_Raw):  # the fields we read (a record keeps the rest)
    name: str
    version: int = Field(ge=1)
    value: Any = ""
    category: Any = None
    class_name: Any = None
    created_at: Any = None
    metadata: dict[str, Any] | None = None
    full_node_id: str | None = None


class RawOperation(_Raw):
    op_id: str
    op_name: str | None = ""
    category: Any = None
    created_at: Any = None
    metadata: dict[str, Any] | None = None


class RawEdge(_Raw):
    source_full_node_id: str
    target_full_node_id: str
    op_id: str
    category: Any = None
    created_at: Any = None


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
    """A checked ExecNetwork document: the decoded JSON, its parsed nodes and operations (each with where it was found
    and the record as found), its annotations, and whether it is ours (`native`) or merely claims to be (`marked`: our
    document-level mark without it on every record, i.e. edited by someone else)."""

    data: Mapping[str, Any]
    nodes: list[tuple[str, RawNode, Mapping[str, Any]]]
    operations: list[tuple[str, RawOperation, Mapping[str, Any]]]
    annotations: tuple[BenchAnnotation, ...]
    source: str
    native: bool
    marked: bool


def labels_in(meta: Mapping[str, Any]) -> tuple[BenchAnnotation, ...]:
    """The labels an imported graph carries in its `meta` (written by the importers)."""
    return tuple(parse_annotation(a, "graph meta", f"{LABELS_META}[{i}]")
                 for i, a in enumerate(meta.get(LABELS_META) or ()))


def sentinel_session(owner: Mapping[str, Any], created_at: str) -> dict[str, Any]:
    """smartcomment's session of records made outside any session (as it writes it)."""
    return {"created_at": created_at, "filename": "<sentinel>", "lineno": 0, "session_id": NONE_SESSION_ID,
            "session_name": "NONE sentinel", **owner, "comment": None, "category": "sentinel", "metadata": {},
            "trigger_point": "<sentinel>:0"}


def sentinel_node(owner: Mapping[str, Any], created_at: str) -> dict[str, Any]:
    """smartcomment's `COMMENT:NONE@1`, the placeholder end of an edge with no real input or output."""
    return {"created_at": created_at, "filename": "<sentinel>", "lineno": 0, "name": "COMMENT:NONE", "version": 1,
            "value": "NONE", "comment": None, "category": "sentinel", **owner, "class_name": None,
            "session_id": NONE_SESSION_ID, "metadata": {}, "trigger_point": "<sentinel>:0", "full_name": "COMMENT:NONE",
            "node_id": NONE_NODE_ID, "full_node_id": NONE_NODE_ID}


def read_document(data: Any, source: str) -> RawDocument:
    """Parse the envelope, nodes, operations and annotations of decoded ExecNetwork JSON `data`."""
    if not isinstance(data, Mapping) or not isinstance(data.get("data"), Mapping):
        raise ExecNetworkError(source, "not an ExecNetwork document (missing object 'data')")
    body = data["data"]
    nodes = [(w, parse_record(RawNode, item, w, source), item)
             for w, item in parse_records(body.get("nodes"), "full_node_id", "data.nodes", source)]
    ops = [(w, parse_record(RawOperation, item, w, source), item)
           for w, item in parse_records(body.get("operations"), "op_id", "data.operations", source)]
    metadata: Mapping[str, Any] = data["metadata"] if isinstance(data.get("metadata"), Mapping) else {}
    where = f"data.{ANNOTATIONS_KEY}" if body.get(ANNOTATIONS_KEY) else f"metadata.{ANNOTATIONS_KEY}"
    raw_annotations = body.get(ANNOTATIONS_KEY) or metadata.get(ANNOTATIONS_KEY) or []
    if not isinstance(raw_annotations, list):
        raise ExecNetworkError(source, "expected a list", None, where)
    annotations = tuple(parse_annotation(a, source, f"{where}[{i}]") for i, a in enumerate(raw_annotations))
    top = metadata.get(MARK)
    native = (isinstance(top, Mapping) and top.get("format") == NATIVE_FORMAT
              and all(MARK in (n.metadata or {}) for _, n, _ in nodes if full_id_of(n) != NONE_NODE_ID)
              and all(MARK in (o.metadata or {}) for _, o, _ in ops))
    return RawDocument(data, nodes, ops, annotations, source, native, isinstance(top, Mapping) and not native)


def full_id_of(node: RawNode) -> str:
    """A node's full node id: as written, else computed as smartcomment does (`[class_name:]name@version`;
    an empty class name counts as none here, where smartcomment would write a bare colon)."""
    if node.full_node_id:
        return node.full_node_id
    qualified = f"{node.class_name}:{node.name}" if node.class_name else node.name
    return f"{qualified}@{node.version}"


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
    NameRule("variable", prompt_name("extract"), "fact-extraction-system-prompt"),
    NameRule("variable", prompt_name("decide"), "memory-update-decision-prompt"),
    NameRule("variable", prompt_name("respond"), "question-answering-prompt"),
    NameRule("prefix", prefix(Namespace.TURN), "U{sample}:", rest=r"D\d+:\d+"),
    NameRule("prefix", prefix(Namespace.MEMORY), "memory-unit-"), NameRule("prefix", prefix(Namespace.QUERY), "query:"),
    NameRule("prefix", prefix(Namespace.ANSWER), "prediction:"),
    NameRule("prefix", prefix(Namespace.GOLD), "golden_answers:"),
    NameRule("prefix", prefix(Namespace.VERDICT), "judge_verdict:"),
    NameRule("variable", prompt_name("judge"), "judge_prompt:llm-judge"),
)

# the class names of an export: every namespace of ours, and the class of each name the table maps to
CLASS_NAMES: frozenset[str] = frozenset(
    {str(namespace) for namespace in Namespace}
    | {rule.theirs.split(":", 1)[0] for rule in NAME_TABLE if ":" in rule.theirs and "{" not in rule.theirs}
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


def split_full_name(full_name: str) -> tuple[str | None, str]:
    """smartcomment's (`class_name`, `name`) of an exported full name (`query:q1` -> ("query", "q1"); no class: None,
    never "")."""
    head, sep, rest = full_name.partition(":")
    if sep and head in CLASS_NAMES and any(c.isalnum() for c in rest):
        return head, rest
    return None, full_name


def stable_hex(*parts: object) -> str:
    """16 hex digits of the SHA-256 of `parts` joined by ":" (deterministic ids)."""
    return hashlib.sha256(":".join(map(str, parts)).encode()).hexdigest()[:16]


def op_id_for(graph: ExecutionGraph, op_id: str) -> str:
    """The ExecNetwork `op_id` that `to_exec_network` gives our operation `op_id` (e.g. "op:12"): the
    original id of an operation imported from ExecNetwork, else a deterministic one."""
    op = graph.operation(op_id)
    original = op.meta.get(ORIGINAL)
    if isinstance(original, dict) and isinstance(original.get("op_id"), str):
        return original["op_id"]
    return f"op-{stable_hex(graph.graph_id, op.seq)}"


def full_node_ids(graph: ExecutionGraph) -> dict[str, str]:
    """Our variable id -> their full node id: the original id of a variable imported from ExecNetwork,
    else our name mapped through the table (our name kept where the mapped name would collide)."""
    originals = {v.id: v.meta[ORIGINAL]["full_node_id"] for v in graph.variables()
                 if isinstance(v.meta.get(ORIGINAL), dict) and "full_node_id" in v.meta[ORIGINAL]}
    if originals:
        return {v.id: originals.get(v.id, v.id) for v in graph.variables()}
    names = unique_names({name: their_name(name, graph.graph_id) for name in graph.names()})
    return {v.id: f"{names[v.name]}@{v.version}" for v in graph.variables()}


def unique_names(mapped: Mapping[str, str]) -> dict[str, str]:
    """Each name's mapped name, or the name itself where that would collide (another name maps to it too,
    or it is one of the names: e.g. turns of two samples)."""
    counts = Counter(mapped.values())
    return {name: new if counts[new] == 1 and (new == name or new not in mapped) else name
            for name, new in mapped.items()}
