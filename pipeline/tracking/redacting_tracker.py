"""`RedactingTracker`: a `Tracker` wrapper through which no secret reaches the tracking store.

Every string it hands on passes `pipeline.core.redaction.redact` (run names, tags, params, metric names, table cells,
texts, dataset names, registered prompts with their message and tags); a file or folder holding a text
file to redact is logged as a redacted copy (`redaction.redacted_copy`). Reading passes straight through.
Its methods are exactly the `Tracker` protocol's: nothing is forwarded by name. It does not decide what
is logged and does not know MLflow.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import replace
from pathlib import Path
from typing import Any

from memtrace_loop.pipeline.core.records import PromptSet
from memtrace_loop.pipeline.core.redaction import redact, redacted_copy
from memtrace_loop.pipeline.tracking.tracker import DatasetInput, TrackedRun, Tracker


class RedactingTracker:
    """A `Tracker` that redacts everything it writes before the wrapped `inner` tracker stores it."""

    def __init__(self, inner: Tracker, secrets: Iterable[str]) -> None:
        self.inner, self.secrets = inner, tuple(secrets)

    def _r(self, value: Any) -> Any:
        return redact(value, self.secrets) if isinstance(value, str) else value

    def _map(self, mapping: Mapping[str, Any]) -> dict[str, Any]:
        return {self._r(k): self._r(v) for k, v in mapping.items()}

    def open_experiment(self, name: str) -> str:
        return self.inner.open_experiment(name)

    def start_run(
        self, run_name: str | None = None, *, run_id: str | None = None, nested: bool = False,
        start_time: float | None = None,
    ) -> AbstractContextManager[str]:
        return self.inner.start_run(self._r(run_name), run_id=run_id, nested=nested, start_time=start_time)

    def set_tags(self, tags: Mapping[str, str]) -> None:
        self.inner.set_tags(self._map(tags))

    def log_params(self, params: Mapping[str, str | int | float]) -> None:
        self.inner.log_params(self._map(params))

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        self.inner.log_metrics(self._map(metrics), step=step)

    def log_text(self, text: str, artifact_file: str) -> None:
        self.inner.log_text(self._r(text), artifact_file)

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        with redacted_copy(Path(path), self.secrets) as clean:
            self.inner.log_artifact(clean, artifact_path)

    def log_artifacts(self, directory: Path, artifact_path: str | None = None) -> None:
        with redacted_copy(Path(directory), self.secrets) as clean:
            self.inner.log_artifacts(clean, artifact_path)

    def log_table(self, columns: Mapping[str, list[str]], artifact_file: str) -> None:
        self.inner.log_table({self._r(k): [self._r(v) for v in values] for k, values in columns.items()}, artifact_file)

    def log_dataset(self, dataset: DatasetInput) -> None:
        self.inner.log_dataset(replace(dataset, name=self._r(dataset.name), source=self._r(dataset.source)))

    def register_prompts(
        self, system_name: str, prompts: PromptSet, commit_message: str, tags: Mapping[str, str],
        alias: str | None = None, knobs: Mapping[str, Any] | None = None,
    ) -> Mapping[str, str]:
        clean = PromptSet({stage: self._r(text) for stage, text in prompts.instruction_by_stage.items()})
        return self.inner.register_prompts(system_name, clean, self._r(commit_message), self._map(tags), alias, knobs)

    def get_run(self, run_id: str) -> TrackedRun:
        return self.inner.get_run(run_id)

    def download_artifact(self, run_id: str, path: str, directory: Path) -> Path:
        return self.inner.download_artifact(run_id, path, directory)

    def run_status(self, run_id: str) -> str:
        return self.inner.run_status(run_id)

    def metric_history(self, run_id: str, key: str) -> list[tuple[int, float]]:
        return self.inner.metric_history(run_id, key)

    def search_run_ids(self, experiment: str, filter_string: str = "") -> list[str]:
        return self.inner.search_run_ids(experiment, filter_string)

    def log_artifact_to(self, run_id: str, path: Path, artifact_path: str | None = None) -> None:
        with redacted_copy(Path(path), self.secrets) as clean:
            self.inner.log_artifact_to(run_id, clean, artifact_path)

    def delete_children(self, parent_id: str, tag: str, above: int) -> list[str]:
        return self.inner.delete_children(parent_id, tag, above)

    def end_stale_run(self, run_id: str, status: str) -> None:
        self.inner.end_stale_run(run_id, status)
