"""`InMemoryTracker`: a `Tracker` that keeps every run in memory, for tests of what gets logged.

Runs form a tree (a nested run's parent is the run active when it started); each keeps its tags,
params, metric points (key, value, step), artifacts (path -> text or bytes), tables and the prompt
sets registered while it was active. Not thread-safe; reading back supports what the export
command needs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memtrace_loop.pipeline.core.records import PromptSet
from memtrace_loop.pipeline.tracking.tracker import DatasetInput, RunNotFoundError, TrackedRun


@dataclass
class MemoryRun:
    run_id: str
    name: str | None
    experiment: str
    parent: str | None
    tags: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    metrics: list[tuple[str, float, int | None]] = field(default_factory=list)
    artifacts: dict[str, str | bytes] = field(default_factory=dict)
    registered: list[tuple[str, PromptSet, str, dict[str, str]]] = field(default_factory=list)
    datasets: list[DatasetInput] = field(default_factory=list)
    start_time: float | None = None  # as given to `start_run` (None: now)

    def metric(self, key: str) -> list[tuple[float, int | None]]:
        return [(value, step) for name, value, step in self.metrics if name == key]

    def text(self, path: str) -> str:
        value = self.artifacts[path]
        return value if isinstance(value, str) else value.decode("utf-8")


class InMemoryTracker:
    def __init__(self) -> None:
        self.runs: dict[str, MemoryRun] = {}
        self.experiment = "Default"
        self._active: list[str] = []

    # ------------------------------------------------------------------ writing

    def open_experiment(self, name: str) -> str:
        self.experiment = name
        return name

    @contextmanager
    def start_run(
        self, run_name: str | None = None, *, run_id: str | None = None, nested: bool = False,
        start_time: float | None = None,
    ) -> Iterator[str]:
        if self._active and not nested:
            raise RuntimeError(f"run {self._active[-1]} is still active; start a nested run")
        if run_id is None:
            run_id = f"run-{len(self.runs)}"
            parent = self._active[-1] if nested else None
            self.runs[run_id] = MemoryRun(run_id, run_name, self.experiment, parent, start_time=start_time)
        elif run_id not in self.runs:
            raise RunNotFoundError(run_id)
        self._active.append(run_id)
        try:
            yield run_id
        finally:
            self._active.pop()

    @property
    def active(self) -> MemoryRun:
        if not self._active:
            raise RuntimeError("no active run")
        return self.runs[self._active[-1]]

    def children(self, run_id: str) -> list[MemoryRun]:
        return [run for run in self.runs.values() if run.parent == run_id]

    def set_tags(self, tags: Mapping[str, str]) -> None:
        self.active.tags.update(tags)

    def log_params(self, params: Mapping[str, str | int | float]) -> None:
        self.active.params.update({k: str(v) for k, v in params.items()})

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        self.active.metrics.extend((k, float(v), step) for k, v in metrics.items())

    def log_text(self, text: str, artifact_file: str) -> None:
        self.active.artifacts[artifact_file] = text

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        name = f"{artifact_path}/{Path(path).name}" if artifact_path else Path(path).name
        self.active.artifacts[name] = Path(path).read_bytes()

    def log_artifacts(self, directory: Path, artifact_path: str | None = None) -> None:
        for path in sorted(Path(directory).rglob("*")):
            if path.is_file():
                relative = path.relative_to(directory).as_posix()
                self.active.artifacts[f"{artifact_path}/{relative}" if artifact_path else relative] = path.read_bytes()

    def log_table(self, columns: Mapping[str, list[str]], artifact_file: str) -> None:
        self.active.artifacts[artifact_file] = json.dumps({k: list(v) for k, v in columns.items()})

    def log_dataset(self, dataset: DatasetInput) -> None:
        self.active.datasets.append(dataset)

    def register_prompts(
        self, system_name: str, prompts: PromptSet, commit_message: str, tags: Mapping[str, str],
        alias: str | None = None, knobs: Mapping[str, Any] | None = None,
    ) -> Mapping[str, str]:
        self.active.registered.append((system_name, prompts, commit_message, dict(tags)))
        version = sum(len(run.registered) for run in self.runs.values())
        return {stage: f"prompts:/memtrace-{system_name}-{stage}/{version}" for stage in prompts}

    # ------------------------------------------------------------------ reading

    def get_run(self, run_id: str) -> TrackedRun:
        run = self.runs.get(run_id)
        if run is None:
            raise RunNotFoundError(f"no run {run_id}")
        last = {name: value for name, value, _ in run.metrics}
        return TrackedRun(
            run_id, dict(run.tags), last, tuple(sorted({p.split("/")[0] for p in run.artifacts})), dict(run.params)
        )

    def metric_history(self, run_id: str, key: str) -> list[tuple[int, float]]:
        """(step, value) points of a metric in logging order, the unstepped ones as step 0 (as MLflow does)."""
        return [(step or 0, value) for value, step in self.runs[run_id].metric(key)]

    def download_artifact(self, run_id: str, path: str, directory: Path) -> Path:
        value = self.runs[run_id].artifacts[path]
        target = Path(directory) / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(value.encode("utf-8") if isinstance(value, str) else value)
        return target
