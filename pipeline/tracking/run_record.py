"""A run's MLflow bookkeeping outside the tracker: the write-ahead record, its upload, and stale runs.

- `RunRecord`: everything a run logs besides its artifact folder (name, experiment, tags, scrubbed params,
  metrics, tables, `DatasetInput`s); `write_run_record` saves it atomically as `<out_dir>/run_record.json`
  beside `artifacts/` before MLflow is called; `log_record` logs it into the active run, tagged
  `memtrace.record_id` first and `memtrace.logged=complete` last.
- `upload_saved_run` (`memtrace upload`) logs a saved run later as it would have been logged live
  (+ `memtrace.uploaded_from|host|pid`), idempotent through the record id: a complete run of it is
  returned as is, an incomplete one continued, else a run is created. The folder is locked meanwhile (a
  second upload: `RunLocked`), a run of it still being logged by a live process here is `RunLocked` too,
  one from another machine or folder is `AlreadyInStore` (exit 2). `unreachable_message` is the one line
  printed when live logging failed (`NotLoggedError`).
- Stale runs: a run holding a folder's lock (`memtrace optimize`) is tagged with `folder_tags`
  (`memtrace.run_dir` and `process_tags`: this machine and pid). A process killed hard cannot end its
  run, but its lock dies with it, so `end_stale_runs` ends FAILED (with its RUNNING nested runs) every
  RUNNING run of this machine whose folder's lock is free, and `end_runs_of_folder` those of one folder
  whose lock the caller holds (`resume=` without a checkpoint). Runs of another machine, or naming no
  folder, are left alone.

It does not decide what a run logs and reads no MLflow state besides runs' tags and statuses.
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pydantic
from memtrace_loop.pipeline.core.command_line import command_line
from memtrace_loop.pipeline.core.config import ConfigError
from memtrace_loop.pipeline.core.files import write_atomically
from memtrace_loop.pipeline.core.run_folder import RunFolder
from memtrace_loop.pipeline.core.run_lock import RunLocked, hold_run_lock, lock_is_free, pid_alive
from memtrace_loop.pipeline.tracking.store_access import failure_cause
from memtrace_loop.pipeline.tracking.tracker import DatasetInput, Tracker

RECORD_FILE = RunFolder.RECORD
ARTIFACTS_DIR = RunFolder.ARTIFACTS
RECORD_TAG = "memtrace.record_id"
LOGGED_TAG = "memtrace.logged"
LOGGED_COMPLETE = "complete"
UPLOADED_FROM_TAG = "memtrace.uploaded_from"
UPLOADED_HOST_TAG = "memtrace.uploaded_host"
UPLOADED_PID_TAG = "memtrace.uploaded_pid"
RUN_DIR_TAG = "memtrace.run_dir"
HOST_TAG = "memtrace.host"
PID_TAG = "memtrace.pid"
PARENT_TAG = "mlflow.parentRunId"
RUNNING = "attributes.status = 'RUNNING'"


def new_record_id() -> str:
    return uuid.uuid4().hex


def _frozen(mapping: Mapping) -> MappingProxyType:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class RunRecord:
    """Everything a run logs except its artifact folder. `params` are as stored (scrubbed, cut);
    `tables` maps an artifact file (e.g. results_table.json) to its string columns."""

    experiment: str
    run_name: str | None = None
    tags: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    params: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    metrics: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    tables: Mapping[str, Mapping[str, list[str]]] = field(default_factory=lambda: MappingProxyType({}))
    record_id: str = field(default_factory=new_record_id)
    datasets: tuple[DatasetInput, ...] = ()  # the data the run used

    def __post_init__(self) -> None:
        for name in ("tags", "params", "metrics", "tables"):
            object.__setattr__(self, name, _frozen(getattr(self, name)))

    def to_json(self) -> str:
        return json.dumps(
            {"record_id": self.record_id, "experiment": self.experiment, "run_name": self.run_name,
             "tags": dict(self.tags), "params": dict(self.params), "metrics": dict(self.metrics),
             "tables": {name: dict(columns) for name, columns in self.tables.items()},
             "datasets": [asdict(dataset) for dataset in self.datasets]},
            indent=1, ensure_ascii=False,
        )


class _RecordFile(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    record_id: str
    experiment: str
    run_name: str | None = None
    tags: dict[str, str] = {}
    params: dict[str, str] = {}
    metrics: dict[str, float] = {}
    tables: dict[str, dict[str, list[str]]] = {}
    datasets: list[dict[str, Any]] = []


def record_dir(directory: str | Path) -> Path:
    """The output directory holding `run_record.json`: `directory` itself or, when given its
    `artifacts/` folder, the folder above."""
    folder = Path(directory)
    in_parent = folder.name == ARTIFACTS_DIR and (folder.parent / RECORD_FILE).is_file()
    if in_parent and not (folder / RECORD_FILE).is_file():
        return folder.parent
    return folder


def write_run_record(out_dir: Path, record: RunRecord) -> Path:
    return write_atomically(out_dir / RECORD_FILE, record.to_json())  # never a half-written record


def read_run_record(directory: str | Path) -> RunRecord:
    """The record saved in `directory` (or in the output directory above its `artifacts/` folder);
    `FileNotFoundError` / `ValueError` naming the file when it is missing or malformed."""
    path = record_dir(directory) / RECORD_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no run record (written by `memtrace run` since results are saved first)")
    try:
        parsed = _RecordFile.model_validate_json(path.read_text(encoding="utf-8"))
    except pydantic.ValidationError as exc:
        raise ValueError(f"{path}: not a run record: {exc}") from exc
    try:
        datasets = tuple(DatasetInput(**dataset) for dataset in parsed.datasets)
    except TypeError as exc:
        raise ValueError(f"{path}: not a run record: datasets: {exc}") from exc
    return RunRecord(parsed.experiment, parsed.run_name, parsed.tags, parsed.params, parsed.metrics, parsed.tables,
                     parsed.record_id, datasets)


def log_record(
    tracker: Tracker, record: RunRecord, artifacts: Path | None, extra_tags: Mapping[str, str] | None = None
) -> None:
    """Log `record` (and the `artifacts` folder's files at the run's root) into the active run; the
    run is tagged with the record id first and `memtrace.logged=complete` last."""
    tracker.set_tags({**record.tags, **(extra_tags or {}), RECORD_TAG: record.record_id})
    if record.params:
        tracker.log_params(dict(record.params))
    for dataset in record.datasets:
        tracker.log_dataset(dataset)
    if record.metrics:
        tracker.log_metrics(dict(record.metrics))
    if artifacts is not None and artifacts.is_dir():
        tracker.log_artifacts(artifacts)
    for artifact_file, columns in record.tables.items():
        tracker.log_table({k: list(v) for k, v in columns.items()}, artifact_file)
    tracker.set_tags({LOGGED_TAG: LOGGED_COMPLETE})


@dataclass(frozen=True)
class Upload:
    """What `upload_saved_run` did: the run holding the saved run, and whether it was `created`,
    `continued` (an incomplete run of the same record) or neither (already complete: nothing logged)."""

    run_id: str
    experiment: str
    created: bool
    continued: bool

    @property
    def logged(self) -> bool:
        return self.created or self.continued


class AlreadyInStore(ConfigError):
    """The store holds the saved run already, uploaded from another folder or machine: nothing uploaded."""


def _check_not_elsewhere(tracker: Tracker, existing: list[str], out_dir: Path, record: RunRecord, target: str) -> None:
    """`AlreadyInStore` when a run of the record came from another machine or folder; `RunLocked` when
    one is RUNNING in a live process of this machine (a `memtrace run` still logging it)."""
    here = socket.gethostname()
    for run_id in existing:
        tags = tracker.get_run(run_id).tags  # the machine and folder it came from: an upload's, else the live run's
        host, folder = tags.get(UPLOADED_HOST_TAG, tags.get(HOST_TAG, "")), tags.get(UPLOADED_FROM_TAG)
        if (host and host != here) or (folder is not None and folder != str(out_dir)):
            raise AlreadyInStore(
                f"{out_dir}: the store already holds this run (record {record.record_id}) as MLflow run {run_id} "
                f"in experiment {target!r}, from {folder or 'a live run'} on {host or 'another machine'}; "
                "nothing uploaded")
        pid = tags.get(UPLOADED_PID_TAG, tags.get(PID_TAG, ""))
        if tracker.run_status(run_id) == "RUNNING" and tags.get(LOGGED_TAG) != LOGGED_COMPLETE and pid_alive(pid):
            raise RunLocked(f"{out_dir}: MLflow run {run_id} of this run is being logged by pid {pid} on {here}; "
                            "wait for it to end and try again")


def upload_saved_run(tracker: Tracker, directory: str | Path, experiment: str | None = None) -> Upload:
    """Log the run saved in `directory` (its record and `artifacts/`) into `experiment` (default: the one
    it was made for), unless the store holds it complete already (see the module docstring)."""
    out_dir = record_dir(directory).resolve()
    record = read_run_record(out_dir)
    target = experiment or record.experiment
    with hold_run_lock(out_dir, "memtrace upload"):
        tracker.open_experiment(target)
        existing = tracker.search_run_ids(target, f"tags.`{RECORD_TAG}` = '{record.record_id}'")
        _check_not_elsewhere(tracker, existing, out_dir, record, target)
        complete = [run_id for run_id in existing if tracker.get_run(run_id).tags.get(LOGGED_TAG) == LOGGED_COMPLETE]
        if complete:
            return Upload(complete[0], target, created=False, continued=False)
        continued = existing[-1] if existing else None
        uploaded = {UPLOADED_FROM_TAG: str(out_dir), UPLOADED_HOST_TAG: socket.gethostname(),
                    UPLOADED_PID_TAG: str(os.getpid())}
        with tracker.start_run(None if continued else record.run_name, run_id=continued) as run_id:
            log_record(tracker, record, out_dir / ARTIFACTS_DIR, uploaded)
    return Upload(run_id, target, created=continued is None, continued=continued is not None)


class NotLoggedError(RuntimeError):
    """A run's results are saved on disk but logging them to the tracker failed; the message (see
    `unreachable_message`) names the cause, the folder and the upload command."""


def unreachable_message(out_dir: str | Path, exc: BaseException | str) -> str:
    """The one line an entry point prints when logging to MLflow failed after the results were saved
    (`exc`: the error, or the cause a probe found)."""
    cause = exc if isinstance(exc, str) else failure_cause(exc)
    return (f"MLflow unreachable ({cause}): results saved in {out_dir}; "
            f"upload them with: {command_line('memtrace', 'upload', run_dir=out_dir)}")


def process_tags() -> dict[str, str]:
    """Which machine and process did the work (`memtrace.host`, `memtrace.pid`): the jobs of a sweep run
    in parallel processes (Hydra's joblib launcher) or on cluster nodes (submitit), told apart by these."""
    return {HOST_TAG: socket.gethostname(), PID_TAG: str(os.getpid())}


def folder_tags(folder: Path) -> dict[str, str]:
    """The tags naming a run's locked folder and the machine and process holding it."""
    return {RUN_DIR_TAG: str(Path(folder).resolve()), **process_tags()}


def _is_stale(tags: Mapping[str, str]) -> bool:
    folder = tags.get(RUN_DIR_TAG)
    if not folder or PARENT_TAG in tags or tags.get(HOST_TAG, "") != socket.gethostname():
        return False
    if not Path(folder).is_dir():  # folder gone: its holder, if alive, still holds the unlinked lock
        return not pid_alive(tags.get(PID_TAG, ""))
    return lock_is_free(folder)


def _end_matching(
    tracker: Tracker, experiment: str, filter_string: str, stale: Callable[[Mapping[str, str]], bool]
) -> list[str]:
    """End FAILED, with their RUNNING nested runs, the runs matching `filter_string` whose tags are `stale`."""
    ended = [run for run in tracker.search_run_ids(experiment, filter_string) if stale(tracker.get_run(run).tags)]
    for run_id in ended:
        for child in tracker.search_run_ids(experiment, f"tags.`{PARENT_TAG}` = '{run_id}' AND {RUNNING}"):
            tracker.end_stale_run(child, "FAILED")
        tracker.end_stale_run(run_id, "FAILED")
    return ended


def end_stale_runs(tracker: Tracker, experiment: str) -> list[str]:
    """End FAILED the RUNNING runs of `experiment` whose folder's lock is free (see the module doc)."""
    host = socket.gethostname()  # only this machine's runs are read one by one (a shared server holds many)
    return _end_matching(tracker, experiment, f"{RUNNING} AND tags.`{HOST_TAG}` = '{host}'" if "'" not in host
                         else RUNNING, _is_stale)


def end_runs_of_folder(tracker: Tracker, experiment: str, folder: Path) -> list[str]:
    """End FAILED the RUNNING runs of `experiment` tagged with `folder` (whose lock the caller holds)."""
    wanted = str(Path(folder).resolve())
    return _end_matching(tracker, experiment, RUNNING,
                         lambda tags: tags.get(RUN_DIR_TAG) == wanted and PARENT_TAG not in tags)
