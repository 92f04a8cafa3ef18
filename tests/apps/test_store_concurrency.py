"""Runs that start together: a fresh SQLite store is created and migrated once (the others wait for it),
a store locked longer than SQLite's 5 s wait costs a retry and not the results, two `memtrace run`s
started in the same second get separate output folders, and each folder's Hydra job log holds the log."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from memtrace_loop.pipeline.tracking.mlflow_tracker import MlflowTracker
from mlflow.tracking import MlflowClient

# every test starts with a fresh, migrated MLflow store at tmp_path/mlflow.db (a copy of a template: tests/conftest.py)
pytestmark = pytest.mark.usefixtures("mlflow_db")

WRITER = """
import sys
from memtrace_loop.pipeline.tracking.mlflow_tracker import MlflowTracker

tracker = MlflowTracker(sys.argv[1])
tracker.open_experiment("together")
with tracker.start_run(f"writer-{sys.argv[2]}") as run_id:
    tracker.log_params({"writer": sys.argv[2]})
    tracker.log_metrics({"value": float(sys.argv[2])})
print(run_id)
"""


@pytest.mark.slow
def test_three_processes_on_a_fresh_sqlite_store_all_succeed(tmp_path):
    for trial in range(3):
        uri = f"sqlite:///{tmp_path}/trial{trial}/mlflow.db"
        writers = [
            subprocess.Popen([sys.executable, "-c", WRITER, uri, str(n)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
            for n in range(3)
        ]
        outcomes = [(w.wait(timeout=300), *w.communicate()) for w in writers]
        for code, _out, err in outcomes:
            assert code == 0, err[-2000:]
        client = MlflowClient(tracking_uri=uri)
        experiment = client.get_experiment_by_name("together")
        runs = client.search_runs([experiment.experiment_id])
        assert sorted(r.data.params["writer"] for r in runs) == ["0", "1", "2"]
        assert {r.info.run_id for r in runs} == {out.strip().splitlines()[-1] for _code, out, _err in outcomes}


@pytest.mark.slow
def test_a_store_locked_longer_than_sqlites_wait_is_retried_not_lost(tmp_path):
    db = tmp_path / "mlflow.db"
    uri = f"sqlite:///{db}"
    tracker = MlflowTracker(uri, lock_attempts=5, lock_backoff_s=0.5)
    tracker.open_experiment("locked")  # the store exists and is migrated
    held = threading.Event()

    def hold_lock(seconds: float) -> None:
        connection = sqlite3.connect(db, isolation_level=None)
        connection.execute("BEGIN EXCLUSIVE")
        held.set()
        time.sleep(seconds)
        connection.execute("COMMIT")
        connection.close()

    holder = threading.Thread(target=hold_lock, args=(6.5,))  # longer than SQLite's default 5 s busy wait
    holder.start()
    held.wait()
    fresh = MlflowTracker(uri, lock_attempts=5, lock_backoff_s=0.5)
    try:
        fresh.open_experiment("locked-too")
        with fresh.start_run("survivor") as run_id:
            fresh.log_metrics({"value": 1.0})
    finally:
        holder.join()
    assert MlflowClient(tracking_uri=uri).get_run(run_id).data.metrics == {"value": 1.0}


@pytest.mark.slow
def test_two_runs_started_together_get_their_own_folder_store_and_job_log(tmp_path):
    """Neither `hydra.run.dir` nor the store is given beforehand: both runs start on a fresh store."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlflow.db", "COLUMNS": "160",
           "MEMTRACE_CACHE_DIR": str(tmp_path / "cache")}
    memtrace = Path(sys.executable).parent / "memtrace"
    runs = [
        subprocess.Popen([str(memtrace), "run", "dataset.n_conversations=1", f"run_name=together-{n}"], cwd=tmp_path,
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for n in range(2)
    ]
    for process in runs:
        _out, err = process.communicate(timeout=600)
        assert process.returncode == 0, err[-3000:]
    folders = sorted((tmp_path / "outputs" / "run").iterdir())
    assert len(folders) == 2, folders
    for folder in folders:
        stamp, _, run_id = folder.name.rpartition("-")
        assert len(run_id) == 6 and time.strptime(stamp, "%Y-%m-%d_%H-%M-%S")
        log = (folder / "run.log").read_text()
        assert "[memtrace.run][INFO] - running mem0 on sim" in log
        assert (folder / "run_record.json").is_file() and (folder / "artifacts" / "cases.json").is_file()
    client = MlflowClient(tracking_uri=env["MLFLOW_TRACKING_URI"])
    logged = client.search_runs([client.get_experiment_by_name("memtrace").experiment_id])
    assert sorted(r.info.run_name for r in logged) == ["together-0", "together-1"]
