"""Reading back a run that `memtrace run` saved or logged: its judged cases, graphs, prompts, config.

`read_saved_run(directory)` reads what `run_logging.save_run` wrote (cases.json, graphs/*.json, and
prompts.json / config.json when present) into a `SavedRun`; `download_saved_run(tracker, run_id,
directory)` first copies those artifacts of a tracked run into `directory`. A missing cases file or
graph folder is a `FileNotFoundError` naming what is missing (a run logged before cases were logged
cannot be attributed). This module does not attribute anything and does not rebuild systems.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from memtrace_loop.pipeline.core.case_io import cases_from_json
from memtrace_loop.pipeline.core.graph import ExecutionGraph
from memtrace_loop.pipeline.core.graph_io import load_graph
from memtrace_loop.pipeline.core.records import CaseResult, PromptSet
from memtrace_loop.pipeline.core.run_folder import RunFolder
from memtrace_loop.pipeline.tracking.run_logging import ARTIFACTS_DIR, CASES_FILE, CONFIG_FILE, GRAPHS_DIR
from memtrace_loop.pipeline.tracking.tracker import Tracker

logger = logging.getLogger(__name__)

PROMPTS_FILE = RunFolder.PROMPTS


@dataclass(frozen=True)
class SavedRun:
    """A finished run as saved: cases in result order, one graph per conversation, and (when saved)
    the prompt set it ran with and its composed config."""

    results: tuple[CaseResult, ...]
    graph_by_conversation: Mapping[str, ExecutionGraph]
    prompts: PromptSet | None = None
    config: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    source: str = ""


def read_saved_run(directory: str | Path) -> SavedRun:
    """The run saved in `directory` (or in its `artifacts/` folder: a `memtrace run` output directory)."""
    folder = Path(directory)
    if not (folder / CASES_FILE).is_file() and (folder / ARTIFACTS_DIR / CASES_FILE).is_file():
        folder = folder / ARTIFACTS_DIR
    cases_path = folder / CASES_FILE
    graphs_dir = folder / GRAPHS_DIR
    if not cases_path.is_file():
        raise FileNotFoundError(f"{folder}: no {CASES_FILE} (saved by `memtrace run`)")
    if not graphs_dir.is_dir():
        raise FileNotFoundError(f"{folder}: no {GRAPHS_DIR}/ folder of graph JSON files")
    results = cases_from_json(cases_path.read_text(encoding="utf-8"), str(cases_path))
    graphs = [load_graph(path) for path in sorted(graphs_dir.glob("*.json"))]
    graph_by_conversation = {graph.graph_id: graph for graph in graphs}  # file names are safe stems, not ids
    prompts_path = folder / PROMPTS_FILE
    prompts = PromptSet(json.loads(prompts_path.read_text(encoding="utf-8"))) if prompts_path.is_file() else None
    config_path = folder / CONFIG_FILE
    config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
    return SavedRun(results, MappingProxyType(graph_by_conversation), prompts, MappingProxyType(config), str(folder))


def download_saved_run(tracker: Tracker, run_id: str, directory: str | Path) -> SavedRun:
    """The run `run_id` of `tracker`, its artifacts copied into `directory` first (`RunNotFoundError`
    for an unknown id, `FileNotFoundError` when it has no cases or graphs)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    available = set(tracker.get_run(run_id).artifacts)
    for name in (CASES_FILE, GRAPHS_DIR, PROMPTS_FILE, CONFIG_FILE):
        if name in available:
            tracker.download_artifact(run_id, name, directory)
        elif name in (CASES_FILE, GRAPHS_DIR):
            raise FileNotFoundError(f"run {run_id} has no {name} artifact (logged before cases were saved?)")
    saved = read_saved_run(directory)
    return SavedRun(saved.results, saved.graph_by_conversation, saved.prompts, saved.config, f"run {run_id}")
