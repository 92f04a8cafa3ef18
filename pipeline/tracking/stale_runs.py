"""MLflow runs left RUNNING by a process that died, found through their run folder's lock and ended FAILED.

A run holding a folder's lock (`pipeline.core.run_lock`; `memtrace optimize`) is tagged right after it
starts with `folder_tags` (`memtrace.run_dir` and `process_tags`: this machine and pid). A process killed
hard cannot end its run, but its lock dies with it, so `end_stale_runs(tracker, experiment)` ends FAILED
(with its RUNNING nested runs) every RUNNING run of this machine whose folder's lock is free, and
`end_runs_of_folder` those of one folder whose lock the caller holds (`resume=` without a checkpoint).
Runs of another machine, or naming no folder, are left alone. It starts no run and logs nothing else.
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
