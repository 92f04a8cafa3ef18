"""`RedactingTracker`: a `Tracker` wrapper through which no secret reaches the tracking store.

Every string handed to the wrapped tracker passes `pipeline.core.redaction.redact` (the run's secret
values masked, URL credentials scrubbed): run names, tags, params, table cells, texts, the prompt
registry's prompts, commit message and tags. Files and folders are checked too: a text file (JSON,
YAML, text, diff, CSV, Markdown, log) holding something to redact is logged as a redacted copy (same
name, in a temporary folder); anything else is logged as it is. Reading (`get_run`, `run_status`,
`metric_history`, `search_run_ids`, `download_artifact`) passes straight through. Every method is the
`Tracker` protocol's: nothing else of the wrapped tracker is reachable through it.

Entry points wrap their tracker once they know the secrets: `RedactingTracker(MlflowTracker(uri), secrets)`.
It does not decide what is logged and does not know MLflow.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from memtrace_loop.pipeline.core.records import PromptSet
from memtrace_loop.pipeline.core.redaction import redact
from memtrace_loop.pipeline.tracking.tracker import DatasetInput, TrackedRun, Tracker

TEXT_SUFFIXES = frozenset({".json", ".yaml", ".yml", ".txt", ".diff", ".csv", ".md", ".log", ".jsonl", ".py", ".html"})


class RedactingTracker:
    """A `Tracker` that redacts everything it writes before the wrapped `inner` tracker stores it."""

    def __init__(self, inner: Tracker, secrets: Iterable[str]) -> None:
        self.inner = inner
        self.secrets = tuple(secrets)

    def _r(self, text: str) -> str:
        return redact(text, self.secrets)

    def _strings(self, mapping: Mapping[str, Any]) -> dict[str, Any]:
        return {self._r(k): self._r(v) if isinstance(v, str) else v for k, v in mapping.items()}

    # -------------------------------------------------------------- writing
    def open_experiment(self, name: str) -> str:
        return self.inner.open_experiment(name)

    def start_run(
        self, run_name: str | None = None, *, run_id: str | None = None, nested: bool = False,
        start_time: float | None = None,
    ) -> AbstractContextManager[str]:
        return self.inner.start_run(None if run_name is None else self._r(run_name), run_id=run_id, nested=nested,
                                    start_time=start_time)

    def set_tags(self, tags: Mapping[str, str]) -> None:
        self.inner.set_tags(self._strings(tags))

    def log_params(self, params: Mapping[str, str | int | float]) -> None:
        self.inner.log_params(self._strings(params))

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        self.inner.log_metrics(metrics, step=step)

    def log_text(self, text: str, artifact_file: str) -> None:
        self.inner.log_text(self._r(text), artifact_file)

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        with self._redacted(Path(path)) as clean:
            self.inner.log_artifact(clean, artifact_path)

    def log_artifacts(self, directory: Path, artifact_path: str | None = None) -> None:
        with self._redacted(Path(directory)) as clean:
            self.inner.log_artifacts(clean, artifact_path)

    def log_table(self, columns: Mapping[str, list[str]], artifact_file: str) -> None:
        clean = {self._r(k): [self._r(v) if isinstance(v, str) else v for v in values] for k, values in columns.items()}
        self.inner.log_table(clean, artifact_file)

    def log_dataset(self, dataset: DatasetInput) -> None:
        self.inner.log_dataset(replace(dataset, name=self._r(dataset.name), source=self._r(dataset.source)))

    def register_prompts(
        self, system_name: str, prompts: PromptSet, commit_message: str, tags: Mapping[str, str],
        alias: str | None = None, knobs: Mapping[str, Any] | None = None,
    ) -> Mapping[str, str]:
        clean = PromptSet({stage: self._r(text) for stage, text in prompts.instruction_by_stage.items()})
        return self.inner.register_prompts(
            system_name, clean, self._r(commit_message), self._strings(tags), alias, knobs
        )

    # -------------------------------------------------------------- reading
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

    # -------------------------------------------------------------- into an existing run
    def log_artifact_to(self, run_id: str, path: Path, artifact_path: str | None = None) -> None:
        with self._redacted(Path(path)) as clean:
            self.inner.log_artifact_to(run_id, clean, artifact_path)

    def delete_children(self, parent_id: str, tag: str, above: int) -> list[str]:
        return self.inner.delete_children(parent_id, tag, above)

    def end_stale_run(self, run_id: str, status: str) -> None:
        self.inner.end_stale_run(run_id, status)

    # -------------------------------------------------------------- files
    def _needs_redaction(self, path: Path) -> bool:
        if path.suffix.lower() not in TEXT_SUFFIXES:
            return False
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return False
        return self._r(text) != text

    @contextmanager
    def _redacted(self, path: Path) -> Iterator[Path]:
        """`path` itself when nothing in it needs redacting, else a redacted copy (same name)."""
        files = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path]
        dirty = [p for p in files if self._needs_redaction(p)]
        if not dirty:
            yield path
            return
        with tempfile.TemporaryDirectory(prefix="memtrace-redacted-") as tmp:
            copy = Path(tmp) / path.name
            if path.is_dir():
                shutil.copytree(path, copy)
                targets = [copy / p.relative_to(path) for p in dirty]
            else:
                shutil.copy2(path, copy)
                targets = [copy]
            for target in targets:
                target.write_text(self._r(target.read_text(encoding="utf-8")), encoding="utf-8")
            yield copy
