"""MLflow runs left RUNNING by a process that died, found through their run folder's lock and ended FAILED.

A run that holds a folder's lock (`pipeline.core.run_lock`; `memtrace optimize`) is tagged with its
folder (`folder_tags`: `memtrace.run_dir`, plus the machine that runs it) right after it starts. A
process killed hard (SIGKILL, a crash, a lost machine) cannot end its run, which would stay RUNNING
forever; its lock, though, died with it. So:

- `end_stale_runs(tracker, experiment)`: every RUNNING run of the experiment tagged with a folder of
  THIS machine whose lock is free is ended FAILED, with its RUNNING nested runs; a run whose lock a
  live process holds is left alone, and so is a run of another machine (its lock cannot be seen
  from here) and a run naming no folder (a `memtrace run`, another tool's run). Returns the ids ended.
- `end_runs_of_folder(tracker, experiment, folder)`: the RUNNING runs of one folder ended FAILED (the
  caller holds its lock): `resume=` of a folder without a checkpoint, a parent run killed before its
  first iteration ended.

It starts no run and logs nothing else; it reads tags and statuses through the `Tracker` protocol.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path

from memtrace_loop.pipeline.core.run_lock import lock_is_free, pid_alive
from memtrace_loop.pipeline.tracking.tracker import Tracker

__all__ = ["HOST_TAG", "PID_TAG", "RUN_DIR_TAG", "end_runs_of_folder", "end_stale_runs", "folder_tags", "process_tags"]

RUN_DIR_TAG = "memtrace.run_dir"
HOST_TAG = "memtrace.host"
PID_TAG = "memtrace.pid"
PARENT_TAG = "mlflow.parentRunId"
RUNNING = "attributes.status = 'RUNNING'"


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


def _end_with_children(tracker: Tracker, experiment: str, run_id: str) -> None:
    for child in tracker.search_run_ids(experiment, f"tags.`{PARENT_TAG}` = '{run_id}' AND {RUNNING}"):
        tracker.end_stale_run(child, "FAILED")
    tracker.end_stale_run(run_id, "FAILED")


def end_stale_runs(tracker: Tracker, experiment: str) -> list[str]:
    """End FAILED the RUNNING runs of `experiment` whose folder's lock is free (see the module doc)."""
    ended = []
    host = socket.gethostname()  # only this machine's runs are read one by one (a shared server holds many)
    mine = f"{RUNNING} AND tags.`{HOST_TAG}` = '{host}'" if "'" not in host else RUNNING
    for run_id in tracker.search_run_ids(experiment, mine):
        if _is_stale(tracker.get_run(run_id).tags):
            _end_with_children(tracker, experiment, run_id)
            ended.append(run_id)
    return ended


def end_runs_of_folder(tracker: Tracker, experiment: str, folder: Path) -> list[str]:
    """End FAILED the RUNNING runs of `experiment` tagged with `folder` (whose lock the caller holds)."""
    wanted = str(Path(folder).resolve())
    ended = []
    for run_id in tracker.search_run_ids(experiment, RUNNING):
        tags = tracker.get_run(run_id).tags
        if tags.get(RUN_DIR_TAG) == wanted and PARENT_TAG not in tags:
            _end_with_children(tracker, experiment, run_id)
            ended.append(run_id)
    return ended
