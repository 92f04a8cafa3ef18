"""Graph files in either format (our `graph_io` JSON or ExecNetwork), told apart by content, and what they hold.

`read_graph_file` reads either kind into a `GraphFile` (graph, MemTraceBench annotations, format, document
counts); `write_graph_file` writes either format atomically. Every problem is a one-line `GraphFileError`
naming the file. `summarize` gives the `GraphSummary` `memtrace graph show` prints: sizes (edges counted as
ExecNetwork draws them), kinds, judged and wrong questions (texts whole), labels and the document's record
counts. It does no conversion beyond choosing the writer, no attribution, no printing.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from memtrace_loop.pipeline.core.conventions import (
    Namespace,
    answer_name,
    gold_name,
    key_of,
    prefix,
    query_name,
    verdict_name,
)
from memtrace_loop.pipeline.core.files import write_atomically
from memtrace_loop.pipeline.core.graph import ExecutionGraph, GraphError
from memtrace_loop.pipeline.core.graph_io import FORMAT as MEMTRACE_FORMAT_KEY
from memtrace_loop.pipeline.core.graph_io import graph_from_dict, graph_to_json
from memtrace_loop.pipeline.data.reader import DataError
from memtrace_loop.pipeline.interop.exec_network import document_bytes, from_exec_network, labels_in, to_exec_network
from memtrace_loop.pipeline.interop.exec_network.labels import BenchAnnotation


class GraphFormat(StrEnum):
    MEMTRACE = "memtrace"  # ours: pipeline.core.graph_io
    EXEC_NETWORK = "exec-network"  # smartcomment / MemTraceBench: pipeline.interop.exec_network


class GraphFileError(DataError):
    """A graph file that cannot be read or written: `<path>: <problem>` (record and field when known)."""


@dataclass(frozen=True)
class DocumentCounts:
    """What an ExecNetwork document itself holds (before import): records as written."""

    sessions: int
    nodes: int
    operations: int
    edges: int


@dataclass(frozen=True)
class GraphFile:
    """A graph read from `path`: the graph, the MemTraceBench annotations of an ExecNetwork document (in
    their ids; none for ours), the format found and, for an ExecNetwork document, its own counts."""

    path: Path
    format: GraphFormat
    graph: ExecutionGraph
    annotations: tuple[BenchAnnotation, ...] = ()
    document: DocumentCounts | None = None


def detect_format(data: Any) -> GraphFormat | None:
    """The format of a decoded JSON document: ours has `"format": "memtrace-graph"`, an ExecNetwork
    document an object `data`; None for anything else."""
    if not isinstance(data, Mapping):
        return None
    if data.get("format") == MEMTRACE_FORMAT_KEY:
        return GraphFormat.MEMTRACE
    if isinstance(data.get("data"), Mapping):
        return GraphFormat.EXEC_NETWORK
    return None


def read_json(path: Path) -> Any:
    """The decoded JSON of `path`; a missing, unreadable or invalid file is a `GraphFileError`."""
    if path.is_dir():
        raise GraphFileError(str(path), "is a directory, not a graph file")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise GraphFileError(str(path), "no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise GraphFileError(str(path), f"cannot read file ({type(error).__name__}: {error})") from error
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise GraphFileError(str(path), f"invalid JSON at line {error.lineno} column {error.colno}: {error.msg}"
                             ) from error


def graph_file_from_data(data: Any, path: Path) -> GraphFile:
    """A decoded document read as a `GraphFile` (its format detected from the content)."""
    found = detect_format(data)
    if found is GraphFormat.MEMTRACE:
        try:
            graph = graph_from_dict(data, str(path))
        except GraphError as error:
            message = str(error).removeprefix(f"{path}: ")
            raise GraphFileError(str(path), f"not a valid memtrace graph: {message}") from error
        return GraphFile(path, found, graph, labels_in(graph.meta))
    if found is GraphFormat.EXEC_NETWORK:
        try:
            imported = from_exec_network(data, str(path))  # ExecNetworkError names file, record and field
        except GraphError as error:  # a document whose records break a graph invariant
            message = str(error).removeprefix(f"{path}: ")
            raise GraphFileError(str(path), f"not a valid ExecNetwork graph: {message}") from error
        return GraphFile(path, found, imported.graph, imported.annotations, document_counts(data["data"]))
    raise GraphFileError(str(path), f"neither a memtrace graph (\"format\": \"{MEMTRACE_FORMAT_KEY}\") nor an "
                                    "ExecNetwork document (an object 'data' with nodes, operations and edges)")


def read_graph_file(path: str | Path) -> GraphFile:
    """Read the graph file at `path` in whichever format its content is (see the module doc)."""
    path = Path(path)
    return graph_file_from_data(read_json(path), path)


def document_counts(body: Mapping[str, Any]) -> DocumentCounts:
    def count(key: str) -> int:
        value = body.get(key)
        return len(value) if isinstance(value, list | Mapping) else 0

    return DocumentCounts(count("sessions"), count("nodes"), count("operations"), count("edges"))


def write_graph_file(graph: ExecutionGraph, path: str | Path, target: GraphFormat,
                     annotations: Iterable[BenchAnnotation] = ()) -> Path:
    """Write `graph` to `path` in `target` format, atomically (the folder is created); returns the path.
    `annotations`, else the labels `graph.meta` carries, go into an ExecNetwork document (our own JSON
    keeps the meta and so the labels)."""
    path = Path(path)
    if target is GraphFormat.MEMTRACE:  # a failure here leaves nothing behind
        content = graph_to_json(graph).encode("utf-8")
    else:
        content = document_bytes(to_exec_network(graph, tuple(annotations)))
    try:
        return write_atomically(path, content)
    except OSError as error:
        raise GraphFileError(str(path), f"cannot write file ({type(error).__name__}: {error})") from error


# ------------------------------------------------------------------ what a file holds


CORRECT = "CORRECT"  # the judge's label of a right answer (`verdict:<qid>`)


@dataclass(frozen=True)
class FailedQuestion:
    """A question the graph's judge did not mark CORRECT (verdict WRONG, or FAILED when judging failed)."""

    question_id: str
    verdict: str
    question: str
    prediction: str
    gold: str


@dataclass(frozen=True)
class GraphSummary:
    path: str
    format: str
    graph_id: str
    variables: int
    operations: int
    edges: int  # variable -> variable: one per (input or prompt) x output pair of every operation
    failed_operations: int
    variable_kinds: tuple[tuple[str, int], ...]  # most frequent first
    operation_kinds: tuple[tuple[str, int], ...]
    questions: int  # judged questions (`verdict:<qid>` variables)
    failed_questions: tuple[FailedQuestion, ...]
    annotations: tuple[BenchAnnotation, ...]
    document: DocumentCounts | None  # an ExecNetwork document's own records

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path, "format": self.format, "graph_id": self.graph_id,
            "counts": {"variables": self.variables, "operations": self.operations, "edges": self.edges,
                       "failed_operations": self.failed_operations, "questions": self.questions,
                       "failed_questions": len(self.failed_questions), "annotations": len(self.annotations)},
            "document": None if self.document is None else asdict(self.document),
            "variable_kinds": dict(self.variable_kinds),
            "operation_kinds": dict(self.operation_kinds),
            "failed_questions": [asdict(q) for q in self.failed_questions],
            "annotations": [  # what a reader needs: which query, which error, blamed where, against what
                {"query_id": a.query_id, "error_type": a.final_error_type, "op_id": a.final_op_id, "query": a.query,
                 "prediction": a.prediction, "golden_answers": list(a.golden_answers)}
                for a in self.annotations
            ],
        }


def ranked(counts: Counter[str]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def judged_questions(graph: ExecutionGraph) -> tuple[str, ...]:
    """The question ids that have a `verdict:<qid>` variable, in the graph's order."""
    return tuple(key_of(name, Namespace.VERDICT) for name in graph.names(prefix(Namespace.VERDICT)))


def failed_questions(graph: ExecutionGraph) -> tuple[FailedQuestion, ...]:
    """Every judged question whose latest verdict is not CORRECT, with its texts ("" when absent)."""

    def text(name: str) -> str:
        variable = graph.latest(name)
        return "" if variable is None else variable.value

    failed = []
    for qid in judged_questions(graph):
        verdict = text(verdict_name(qid))
        if verdict.strip().upper() != CORRECT:
            failed.append(FailedQuestion(qid, verdict, text(query_name(qid)), text(answer_name(qid)),
                                         text(gold_name(qid))))
    return tuple(failed)


def summarize(graph_file: GraphFile) -> GraphSummary:
    """The summary of a read graph file."""
    graph = graph_file.graph
    edges = sum((len(op.inputs) + (op.prompt is not None)) * len(op.outputs) for op in graph.operations())
    return GraphSummary(
        path=str(graph_file.path), format=str(graph_file.format), graph_id=graph.graph_id,
        variables=graph.n_variables, operations=graph.n_operations, edges=edges,
        failed_operations=sum(op.failed for op in graph.operations()),
        variable_kinds=ranked(Counter(str(v.kind) for v in graph.variables())),
        operation_kinds=ranked(Counter(str(op.kind) for op in graph.operations())),
        questions=len(judged_questions(graph)), failed_questions=failed_questions(graph),
        annotations=graph_file.annotations, document=graph_file.document,
    )
