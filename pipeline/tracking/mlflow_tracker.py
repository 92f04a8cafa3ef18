"""`MlflowTracker`: the `Tracker` protocol on MLflow (a local SQLite file by default, any server alike).

For a SQLite store, artifacts go to `mlartifacts/` beside the database (so `mlflow ui` finds them); the
first connection (MLflow creates / migrates the tables) and an experiment's creation hold the store's
file lock (`store_access.store_lock`), and every write is retried while SQLite answers `database is
locked`. Runs are MLflow's fluent runs (nested: children of the active one); reads go through an
`MlflowClient`; prompts through `prompt_registry`. With `prompt_registry`, the only importer of MLflow;
it does not scrub secrets or decide what is logged.
"""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import mlflow
from memtrace_loop.pipeline.core.records import PromptSet
from memtrace_loop.pipeline.core.stop import Interrupted
from memtrace_loop.pipeline.tracking.prompt_registry import register_prompt_set
from memtrace_loop.pipeline.tracking.store_access import retry_when_locked, sqlite_path, store_lock
from memtrace_loop.pipeline.tracking.tracker import DatasetInput, RunNotFoundError, TrackedRun
from mlflow.data.code_dataset_source import CodeDatasetSource
from mlflow.data.dataset_source import DatasetSource
from mlflow.data.dataset_source_registry import resolve_dataset_source
from mlflow.data.meta_dataset import MetaDataset
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import RESOURCE_ALREADY_EXISTS, ErrorCode
from mlflow.tracking import MlflowClient
from mlflow.tracking.context.registry import resolve_tags
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

T = TypeVar("T")
logger = logging.getLogger(__name__)


def _artifact_root(tracking_uri: str) -> str | None:
    """For a SQLite store, the artifact folder beside the database file (so `mlflow ui` finds it)."""
    db_path = sqlite_path(tracking_uri)
    return None if db_path is None else (db_path.resolve().parent / "mlartifacts").as_uri()


class _ProfiledDataset(MetaDataset):
    """A metadata-only MLflow dataset with a profile (MLflow shows it beside the digest)."""

    def __init__(self, source: DatasetSource, profile: Mapping[str, object], *, name: str, digest: str) -> None:
        self._profile = dict(profile)
        super().__init__(source, name=name, digest=digest)

    @property
    def profile(self) -> Any | None:
        return self._profile

    def to_dict(self) -> dict[str, str]:
        return {**super().to_dict(), "profile": json.dumps(self._profile)}


class MlflowTracker:
    """A `Tracker` on the MLflow tracking store at `tracking_uri`; a write finding a SQLite store locked is
    tried `lock_attempts` times, pausing `lock_backoff_s`, then twice that, ... (`retry_when_locked`)."""

    def __init__(self, tracking_uri: str, *, lock_attempts: int = 4, lock_backoff_s: float = 1.0) -> None:
        self.tracking_uri, self.lock_attempts, self.lock_backoff_s = tracking_uri, lock_attempts, lock_backoff_s
        self.experiment_name: str | None = None  # the experiment last opened (names its registry prompts)
        self.experiment_id: str | None = None

    def _write(self, call: Callable[[], T], what: str) -> T:
        return retry_when_locked(call, attempts=self.lock_attempts, backoff_s=self.lock_backoff_s, what=what)

    def _get_or_create_experiment(self, name: str) -> str:
        found = mlflow.get_experiment_by_name(name)
        if found is not None:
            return str(found.experiment_id)
        try:
            return str(mlflow.create_experiment(name, artifact_location=_artifact_root(self.tracking_uri)))
        except MlflowException as exc:  # another process created it since we looked
            if exc.error_code != ErrorCode.Name(RESOURCE_ALREADY_EXISTS):
                raise
            found = mlflow.get_experiment_by_name(name)
            if found is None:
                raise
            return str(found.experiment_id)

    def open_experiment(self, name: str) -> str:
        mlflow.set_tracking_uri(self.tracking_uri)
        with store_lock(self.tracking_uri):  # MLflow creates / migrates a fresh store on first contact
            experiment_id = self._write(lambda: self._get_or_create_experiment(name), f"experiment {name!r}")
        self._write(lambda: mlflow.set_experiment(experiment_id=experiment_id), f"experiment {name!r}")
        self.experiment_name, self.experiment_id = name, experiment_id
        return experiment_id

    def _create_run(self, run_name: str | None, nested: bool, start_time: float) -> str:
        """A new run of the current experiment started at `start_time`, with the tags MLflow's fluent
        `start_run` gives (source, user; parent when `nested`): only its client can date a run back."""
        active = mlflow.active_run()
        experiment_id = active.info.experiment_id if active is not None else self.experiment_id
        if experiment_id is None:
            raise ValueError("a run dated back with start_time needs an experiment: call open_experiment first")
        tags = resolve_tags({MLFLOW_PARENT_RUN_ID: active.info.run_id} if nested and active is not None else {})
        created = self._client().create_run(experiment_id, start_time=int(start_time * 1000), tags=tags,
                                            run_name=run_name)
        return str(created.info.run_id)

    @contextmanager
    def start_run(
        self, run_name: str | None = None, *, run_id: str | None = None, nested: bool = False,
        start_time: float | None = None,
    ) -> Iterator[str]:
        """The run ends FINISHED when the block completes, KILLED when an interruption (`Interrupted`,
        `KeyboardInterrupt`) leaves it and FAILED on any other exception (never left RUNNING)."""
        if run_id is None and start_time is not None:
            run_id = self._write(lambda: self._create_run(run_name, nested, start_time), "create run")
        active = self._write(lambda: mlflow.start_run(run_id=run_id, run_name=run_name, nested=nested), "start run")
        try:
            yield active.info.run_id
        except BaseException as exc:
            status = "KILLED" if isinstance(exc, Interrupted | KeyboardInterrupt) else "FAILED"
            try:
                self._write(lambda: mlflow.end_run(status), "end run")
            except Exception as end_error:  # the store is gone too: report the work's own error, not this one
                logger.warning("could not mark MLflow run %s %s: %s", active.info.run_id, status, end_error)
            raise
        self._write(lambda: mlflow.end_run("FINISHED"), "end run")

    def run_status(self, run_id: str) -> str:
        try:
            return str(self._client().get_run(run_id).info.status)
        except MlflowException as exc:
            raise RunNotFoundError(exc.message) from exc

    def end_stale_run(self, run_id: str, status: str) -> None:
        client = self._client()
        self._write(lambda: client.set_terminated(run_id, status), "end run")

    def delete_children(self, parent_id: str, tag: str, above: int) -> list[str]:
        client = self._client()
        parent = client.get_run(parent_id)
        children = client.search_runs(
            [parent.info.experiment_id], f"tags.mlflow.parentRunId = '{parent_id}'", max_results=50_000
        )
        deleted = []
        for child in children:
            value = child.data.tags.get(tag, "")
            if value.lstrip("-").isdigit() and int(value) > above:
                if child.info.status == "RUNNING":
                    client.set_terminated(child.info.run_id, "KILLED")
                client.delete_run(child.info.run_id)
                deleted.append(child.info.run_id)
        return deleted

    def set_tags(self, tags: Mapping[str, str]) -> None:
        self._write(lambda: mlflow.set_tags(dict(tags)), "set tags")

    def log_params(self, params: Mapping[str, str | int | float]) -> None:
        self._write(lambda: mlflow.log_params(dict(params)), "log params")

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        self._write(lambda: mlflow.log_metrics(dict(metrics), step=step), "log metrics")

    def log_text(self, text: str, artifact_file: str) -> None:
        self._write(lambda: mlflow.log_text(text, artifact_file), f"log {artifact_file}")

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        self._write(lambda: mlflow.log_artifact(str(path), artifact_path), f"log {Path(path).name}")

    def log_artifacts(self, directory: Path, artifact_path: str | None = None) -> None:
        self._write(lambda: mlflow.log_artifacts(str(directory), artifact_path), f"log {directory}")

    def log_table(self, columns: Mapping[str, list[str]], artifact_file: str) -> None:
        self._write(lambda: mlflow.log_table(data=dict(columns), artifact_file=artifact_file), f"log {artifact_file}")

    def log_dataset(self, dataset: DatasetInput) -> None:
        """An MLflow dataset input of the active run: source a local file when `dataset.source` is one,
        else a code source naming how the data was made; profile its split and size."""
        if Path(dataset.source).is_file():
            with warnings.catch_warnings():  # MLflow registers its local-file source twice and says so
                warnings.simplefilter("ignore", UserWarning)
                source: DatasetSource = resolve_dataset_source(dataset.source)
        else:
            source = CodeDatasetSource({"source": dataset.source})
        profile = {"split": dataset.split, "conversations": dataset.n_conversations, "questions": dataset.n_questions}
        logged = _ProfiledDataset(source, profile, name=dataset.name, digest=dataset.digest)
        what = f"log dataset {dataset.name}"
        try:
            self._write(lambda: mlflow.log_input(logged, context=dataset.context), what)
        except MlflowException as exc:
            # MLflow looks the dataset up, then inserts it: a sweep job in another process that logged the
            # same data in between wins the insert; the dataset exists now, so a second try only links it
            text = str(exc)
            if "datasets" not in text or ("UNIQUE constraint failed" not in text and "duplicate key" not in text):
                raise
            logger.info("%s: logged by another process at the same time; linking it", what)
            self._write(lambda: mlflow.log_input(logged, context=dataset.context), what)

    def register_prompts(
        self, system_name: str, prompts: PromptSet, commit_message: str, tags: Mapping[str, str],
        alias: str | None = None, knobs: Mapping[str, Any] | None = None,
    ) -> Mapping[str, str]:
        active = mlflow.active_run()
        return self._write(
            lambda: register_prompt_set(
                system_name, prompts, commit_message=commit_message, tags=tags,
                run_id=active.info.run_id if active is not None else None, experiment=self.experiment_name,
                alias=alias, knobs=knobs,
            ),
            "register prompts",
        )

    def _client(self) -> MlflowClient:
        client = MlflowClient(tracking_uri=self.tracking_uri)
        if sqlite_path(self.tracking_uri) is not None:  # the first contact may create / migrate a fresh store
            with store_lock(self.tracking_uri):
                self._write(lambda: client.search_experiments(max_results=1), "open the store")
        return client

    def get_run(self, run_id: str) -> TrackedRun:
        client = self._client()
        try:
            run = client.get_run(run_id)
        except MlflowException as exc:
            raise RunNotFoundError(exc.message) from exc
        return TrackedRun(
            run_id, dict(run.data.tags), dict(run.data.metrics), tuple(a.path for a in client.list_artifacts(run_id)),
            dict(run.data.params),
        )

    def metric_history(self, run_id: str, key: str) -> list[tuple[int, float]]:
        """In (step, time) order: the last value logged at a step (an iteration redone after a resume) last."""
        history = sorted(self._client().get_metric_history(run_id, key), key=lambda m: (m.step, m.timestamp))
        return [(int(m.step), float(m.value)) for m in history]

    def search_run_ids(self, experiment: str, filter_string: str = "") -> list[str]:
        client = self._client()
        found = client.get_experiment_by_name(experiment)
        if found is None:
            return []
        runs = client.search_runs(
            [found.experiment_id], filter_string, order_by=["attributes.start_time ASC"], max_results=50_000
        )
        return [run.info.run_id for run in runs]

    def log_artifact_to(self, run_id: str, path: Path, artifact_path: str | None = None) -> None:
        self._client().log_artifact(run_id, str(path), artifact_path)

    def download_artifact(self, run_id: str, path: str, directory: Path) -> Path:
        return Path(self._client().download_artifacts(run_id, path, str(directory)))
