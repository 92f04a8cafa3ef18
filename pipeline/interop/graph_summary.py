"""What a graph file holds: the `GraphSummary` `memtrace graph show` prints.

Sizes (edges counted as ExecNetwork draws them), kinds, judged and wrong questions, MemTraceBench labels and
the document's record counts; texts are kept whole. It reads no files, prints nothing and attributes nothing.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
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
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.interop.exec_network.labels import BenchAnnotation
from memtrace_loop.pipeline.interop.graph_files import DocumentCounts, GraphFile

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
    edges: int
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
            "annotations": [annotation_dict(a) for a in self.annotations],
        }


def annotation_dict(annotation: BenchAnnotation) -> dict[str, Any]:
    """The parts of a MemTraceBench label a reader needs: which query, which error, blamed where, and
    the prediction against the golden answers."""
    return {"query_id": annotation.query_id, "error_type": annotation.final_error_type,
            "op_id": annotation.final_op_id, "query": annotation.query, "prediction": annotation.prediction,
            "golden_answers": list(annotation.golden_answers)}


def flow_edges(graph: ExecutionGraph) -> int:
    """Variable -> variable edges: one per (input or prompt) x output pair of every operation."""
    return sum((len(op.inputs) + (op.prompt is not None)) * len(op.outputs) for op in graph.operations())


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
    return GraphSummary(
        path=str(graph_file.path), format=str(graph_file.format), graph_id=graph.graph_id,
        variables=graph.n_variables, operations=graph.n_operations, edges=flow_edges(graph),
        failed_operations=sum(op.failed for op in graph.operations()),
        variable_kinds=ranked(Counter(str(v.kind) for v in graph.variables())),
        operation_kinds=ranked(Counter(str(op.kind) for op in graph.operations())),
        questions=len(judged_questions(graph)), failed_questions=failed_questions(graph),
        annotations=graph_file.annotations, document=graph_file.document,
    )
