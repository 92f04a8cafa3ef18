"""The MemTraceBench labels a graph of a saved run carries when `memtrace graph convert` exports it.

A graph file `memtrace run` saved (`<run>/artifacts/graphs/<conversation>.json`) belongs to a run whose
failures were attributed. `run_labels(path)` finds that run (the folder above `graphs/`, holding
cases.json), the attribution the user made last for it (`pipeline.report.attribution_record`: the
latest `memtrace attribute`, else the run's own attributions.json) and returns it as `RunLabels`: the
attributions per conversation, turned into labels for a graph (`annotations_for`), with the record
saying which attribution they are. `graphs_folder(path)` reads a run folder given as IN as its
`graphs/` folder. A graph outside a saved run, or a run without attributions, has no labels (None).

It neither attributes nor writes: the export is `pipeline.interop.exec_network`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from memtrace_loop.pipeline.analysis.attribution.records import Attribution
from memtrace_loop.pipeline.core.case_io import cases_from_json
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.run_folder import RunFolder
from memtrace_loop.pipeline.data.reader import DataError
from memtrace_loop.pipeline.interop.exec_network import annotation_from_attribution
from memtrace_loop.pipeline.interop.exec_network.labels import BenchAnnotation
from memtrace_loop.pipeline.report.attribution_record import AttributionRecord, latest_attributions


@dataclass(frozen=True)
class RunLabels:
    """A saved run's latest attributions, per conversation, and the record saying which they are."""

    record: AttributionRecord
    by_conversation: Mapping[str, tuple[Attribution, ...]]

    def annotations_for(self, graph: ExecutionGraph) -> tuple[BenchAnnotation, ...]:
        """The labels of the failures of `graph`'s conversation (its `graph_id`), in the graph's ids."""
        return tuple(annotation_from_attribution(a, graph) for a in self.by_conversation.get(graph.graph_id, ()))

    @property
    def total(self) -> int:
        return sum(len(found) for found in self.by_conversation.values())


def saved_run_folder(path: Path) -> Path | None:
    """The folder of the saved run a graph file (or a `graphs/` folder) belongs to; None outside one."""
    folder = path if path.is_dir() else path.parent
    if folder.name == RunFolder.GRAPHS and (folder.parent / RunFolder.CASES).is_file():
        return folder.parent
    return None


def graphs_folder(path: Path) -> Path:
    """`path`, or its `graphs/` folder when it is a run folder (`<run>` or `<run>/artifacts`)."""
    for saved in (path, path / RunFolder.ARTIFACTS):
        if (saved / RunFolder.CASES).is_file() and (saved / RunFolder.GRAPHS).is_dir():
            return saved / RunFolder.GRAPHS
    return path


def _json_file(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise DataError(str(path), f"cannot read ({type(error).__name__}: {error})") from error


def run_labels(path: Path) -> RunLabels | None:
    """The labels of the saved run `path` (a graph file or a `graphs/` folder) belongs to (see the module doc)."""
    saved = saved_run_folder(path)
    if saved is None:
        return None
    cases = saved / RunFolder.CASES
    results = cases_from_json(cases.read_text(encoding="utf-8"), str(cases))
    config_path = saved / RunFolder.CONFIG
    config = _json_file(config_path) if config_path.is_file() else {}
    chosen = latest_attributions(saved, results, config if isinstance(config, Mapping) else {})
    if chosen is None:
        return None
    grouped: defaultdict[str, list[Attribution]] = defaultdict(list)
    for attribution in chosen.attributions:
        grouped[attribution.case.question.conversation_id].append(attribution)
    return RunLabels(chosen.record, MappingProxyType({k: tuple(v) for k, v in grouped.items()}))
