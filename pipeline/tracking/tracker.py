"""The `Tracker` protocol: every call the apps and the loop observer make on an experiment tracker, typed.

Writing into the active run (tags, params, metrics with a step, texts, files, folders, tables, the data
used as `DatasetInput`, a prompt set registered under an alias such as `CHAMPION`); into an existing run
without reopening it (`log_artifact_to`, `delete_children`, `end_stale_run`); reading a finished run
(`TrackedRun`, status, a metric's history, artifacts, `search_run_ids`). `MlflowTracker` implements it,
`RedactingTracker` wraps one; no wrapper forwards unknown names. A tracker stores what it is given:
scrubbing secrets is the caller's job.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

from memtrace_loop.pipeline.core.records import PromptSet

CHAMPION = "champion"  # the prompt-registry alias of the accepted prompt set's versions


class RunNotFoundError(LookupError):
    """The tracker has no run with that id."""


@dataclass(frozen=True)
class DatasetInput:
    """The data a run used (an MLflow dataset input): `digest` hashes the content, `source` is a file path
    or how the data was generated, `context` what the run did with it (train, dev, test or eval)."""

    name: str
    digest: str
    source: str
    context: str
    split: str
    n_conversations: int
    n_questions: int


@dataclass(frozen=True)
class TrackedRun:
    """What a tracker tells about a finished run."""

    run_id: str
    tags: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    metrics: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    artifacts: tuple[str, ...] = ()  # top-level artifact names (files and folders)
    params: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


class Tracker(Protocol):
    def open_experiment(self, name: str) -> str:
        """Make `name` (created if needed) the experiment of the runs started next; returns its id."""
        ...

    def start_run(
        self, run_name: str | None = None, *, run_id: str | None = None, nested: bool = False,
        start_time: float | None = None,
    ) -> AbstractContextManager[str]:
        """A run that is active inside the `with` block and ended after it; yields its id. `run_id`
        continues an existing run; `nested` starts a child of the active run; `start_time` (seconds since
        the epoch, `time.time()`) dates a new run's start back to when its work began (default: now)."""
        ...

    def set_tags(self, tags: Mapping[str, str]) -> None: ...

    def log_params(self, params: Mapping[str, str | int | float]) -> None: ...

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None: ...

    def log_text(self, text: str, artifact_file: str) -> None: ...

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None: ...

    def log_artifacts(self, directory: Path, artifact_path: str | None = None) -> None: ...

    def log_table(self, columns: Mapping[str, list[str]], artifact_file: str) -> None: ...

    def log_dataset(self, dataset: DatasetInput) -> None: ...

    def register_prompts(
        self, system_name: str, prompts: PromptSet, commit_message: str, tags: Mapping[str, str],
        alias: str | None = None, knobs: Mapping[str, Any] | None = None,
    ) -> Mapping[str, str]:
        """Register `prompts` with their `knobs` in the current experiment's prompt registry, linked to the
        active run (`prompt_registry.register_prompt_set`); returns stage -> prompt URI."""
        ...

    def get_run(self, run_id: str) -> TrackedRun:
        """Raises `RunNotFoundError` for an unknown id (so does `run_status`)."""
        ...

    def run_status(self, run_id: str) -> str: ...

    def metric_history(self, run_id: str, key: str) -> list[tuple[int, float]]:
        """Every logged (step, value) of a metric, in (step, time) order; empty when never logged."""
        ...

    def search_run_ids(self, experiment: str, filter_string: str = "") -> list[str]:
        """Ids of the runs of an experiment (by name) matching a filter, oldest first; [] when the
        experiment does not exist."""
        ...

    def log_artifact_to(self, run_id: str, path: Path, artifact_path: str | None = None) -> None:
        """Log one file into an existing run without reopening it (its status stays as it was)."""
        ...

    def end_stale_run(self, run_id: str, status: str) -> None:
        """End a run that is not active in this process (its process died) with `status` (FAILED, KILLED)."""
        ...

    def delete_children(self, parent_id: str, tag: str, above: int) -> list[str]:
        """Soft-delete the nested runs of `parent_id` whose integer tag `tag` is above `above`; their ids."""
        ...

    def download_artifact(self, run_id: str, path: str, directory: Path) -> Path: ...
