"""Another tool's graph files (smartcomment / ExecNetwork, or ours) as a run to attribute.

`memtrace attribute graphs=<file|folder>`: stages named after the operations (or `stage_map`), one judged
case per `query:<qid>` (gold from `gold:<qid>` or the file's annotations, verdict from `verdict:<qid>` or
normalized containment); a graph without any gold answer is a `GraphFileError`. `blame_rows` names each
blamed operation as the file has it. It does not attribute, print or replay.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from memtrace_loop.memory_systems.answering import conversation_from_graph
from memtrace_loop.pipeline.analysis.attribution.protocol import TracedRun
from memtrace_loop.pipeline.analysis.attribution.records import Attribution
from memtrace_loop.pipeline.backends.text import normalize_answer
from memtrace_loop.pipeline.core.conventions import (
    Namespace,
    answer_name,
    gold_name,
    is_in,
    prefix,
    turn_id_of,
    verdict_name,
)
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.graph_io import graph_from_dict, graph_to_dict
from memtrace_loop.pipeline.core.records import CaseResult, Conversation, Question, Scores
from memtrace_loop.pipeline.interop.exec_network import from_exec_network
from memtrace_loop.pipeline.interop.exec_network.labels import BenchAnnotation
from memtrace_loop.pipeline.interop.graph_files import (
    GraphFileError,
    GraphFormat,
    detect_format,
    graph_file_from_data,
    read_json,
)

EXEC_NETWORK_META = "exec_network"


@dataclass(frozen=True)
class ForeignGraph:
    """One graph file read for attribution: the graph (stages named), its cases and conversation."""

    path: Path
    graph: ExecutionGraph
    cases: tuple[CaseResult, ...]
    conversation: Conversation


def read_stage_map(value: Mapping[str, Any] | str | None, base_dir: Path) -> dict[str, str]:
    """`stage_map`: operation name -> stage, given inline or as a YAML/JSON file (relative to `base_dir`)."""
    if value is None:
        return {}
    if isinstance(value, str):
        path = Path(value) if Path(value).is_absolute() else base_dir / value
        try:
            value = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as error:
            raise GraphFileError(str(path), f"stage_map: cannot read ({type(error).__name__}: {error})") from error
        if not isinstance(value, Mapping):
            raise GraphFileError(str(path), "stage_map: expected a mapping of operation name -> stage")
    bad = [k for k, v in value.items() if not isinstance(v, str) or not v]
    if bad:
        raise GraphFileError("stage_map", f"the stage of operations {bad} must be a non-empty name")
    return {str(k): str(v) for k, v in value.items()}


def graph_paths(source: Path) -> tuple[Path, ...]:
    """`source` itself, or a folder's `*.json` files (sorted); an empty folder is an error naming it."""
    if not source.is_dir():
        return (source,)
    found = tuple(sorted(source.glob("*.json")))
    if not found:
        raise GraphFileError(str(source), "a folder without graph files (*.json)")
    return found


def restaged(graph: ExecutionGraph, stage_map: Mapping[str, str]) -> ExecutionGraph:
    """`graph` with every operation's stage set to `stage_map[name]`, else its name."""
    data = graph_to_dict(graph)
    for row in data["operations"]:  # [seq, name, stage, ...]: graph_io's row layout
        row[2] = stage_map.get(row[1], row[1])
    return graph_from_dict(data, graph.graph_id)


def _read(path: Path) -> tuple[ExecutionGraph, tuple[BenchAnnotation, ...], Mapping[str, str]]:
    data = read_json(path)
    if detect_format(data) is GraphFormat.EXEC_NETWORK:
        imported = from_exec_network(data, str(path))
        return imported.graph, imported.annotations, imported.node_id_map
    found = graph_file_from_data(data, path)
    return found.graph, found.annotations, {}


def _gold(graph: ExecutionGraph, qid: str, annotation: BenchAnnotation | None) -> str:
    var = graph.latest(gold_name(qid))
    if var is not None and var.value.strip():
        try:
            decoded = json.loads(var.value)
        except json.JSONDecodeError:
            return var.value.strip()
        if isinstance(decoded, list):
            return str(decoded[0]) if decoded else ""
        return str(decoded)
    return annotation.golden_answers[0] if annotation is not None and annotation.golden_answers else ""


def _verdict(graph: ExecutionGraph, qid: str, gold: str, prediction: str) -> str:
    var = graph.latest(verdict_name(qid))
    if var is not None and var.value.strip().upper() in ("CORRECT", "WRONG"):
        return var.value.strip().upper()
    return "CORRECT" if normalize_answer(gold) and normalize_answer(gold) in normalize_answer(prediction) else "WRONG"


def _evidence(annotation: BenchAnnotation | None, node_ids: Mapping[str, str]) -> tuple[str, ...]:
    if annotation is None:
        return ()
    ours = (node_ids.get(e, e) for e in annotation.source_evidence_ids)
    return tuple(turn_id_of(v) for v in ours if is_in(v, Namespace.TURN))


def graph_cases(graph: ExecutionGraph, annotations: Iterable[BenchAnnotation], node_ids: Mapping[str, str],
                path: Path) -> tuple[CaseResult, ...]:
    """The judged cases `graph` holds (see the module docstring); no gold answer at all is an error."""
    by_query = {node_ids.get(a.query_id, a.query_id): a for a in annotations}
    cases = []
    for name in graph.names(prefix(Namespace.QUERY)):
        query = graph.latest(name)
        if query is None:
            continue
        qid = name.removeprefix(prefix(Namespace.QUERY))
        annotation = by_query.get(query.id)
        gold = _gold(graph, qid, annotation)
        if not gold:
            continue
        answer = graph.latest(answer_name(qid))
        prediction = answer.value if answer is not None else ""
        verdict = _verdict(graph, qid, gold, prediction)
        question = Question(qid, graph.graph_id, query.value, gold, 0, _evidence(annotation, node_ids))
        cases.append(CaseResult(question, prediction, verdict, Scores(float(verdict == "CORRECT"), 0.0, 0.0)))
    if not cases:
        raise GraphFileError(str(path), "no gold answers (no `gold:<question>` variable and no annotation "
                                        "with golden_answers): nothing to attribute")
    return tuple(cases)


def read_foreign_graphs(source: str | Path, stage_map: Mapping[str, str]) -> tuple[ForeignGraph, ...]:
    """Every graph file `source` names, ready to attribute (see the module docstring)."""
    graphs = []
    for path in graph_paths(Path(source)):
        graph, annotations, node_ids = _read(path)
        cases = graph_cases(graph, annotations, node_ids, path)
        graph = restaged(graph, stage_map)
        graphs.append(ForeignGraph(path, graph, cases, conversation_from_graph(graph)))
    ids = [g.graph.graph_id for g in graphs]
    if len(set(ids)) != len(ids):
        raise GraphFileError(str(source), f"two files hold the same graph id: {sorted(ids)}")
    return tuple(graphs)


def foreign_run(graphs: Sequence[ForeignGraph]) -> TracedRun:
    """The graphs as one traced run (one conversation per graph)."""
    return TracedRun(
        tuple(c for g in graphs for c in g.cases), {g.graph.graph_id: g.graph for g in graphs},
        {g.graph.graph_id: g.conversation for g in graphs},
    )


def blame_rows(attributions: Iterable[Attribution], graphs: Sequence[ForeignGraph]) -> list[dict[str, Any]]:
    """Per attribution: the file, question, error type, stage, and the blamed operation as the file names it."""
    by_id = {g.graph.graph_id: g for g in graphs}
    rows = []
    for a in attributions:
        found = by_id[a.case.question.conversation_id]
        op = found.graph.operation(a.op)
        original = op.meta.get(EXEC_NETWORK_META)
        rows.append({
            "file": str(found.path), "question_id": a.question_id, "error_type": str(a.error_type),
            "stage": a.stage, "operation": op.name, "op": a.op,
            "source_op_id": original.get("op_id") if isinstance(original, Mapping) else None, "reason": a.reason,
        })
    return rows
