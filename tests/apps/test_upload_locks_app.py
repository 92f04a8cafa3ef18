"""`memtrace upload` of one saved run, never twice into a store: two concurrent uploads (real
processes) leave one store run, the second refused in one line naming the folder and the holder; a
store that already holds the run uploaded from another folder or machine refuses it, exit 2."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from memtrace_loop.experiments.lifecycle import EXIT_USAGE, exit_code
from memtrace_loop.pipeline.core.run_lock import RunLocked, hold_run_lock, lock_holder
from memtrace_loop.pipeline.tracking.mlflow_tracker import MlflowTracker
from memtrace_loop.pipeline.tracking.run_record import (
    RECORD_TAG,
    UPLOADED_HOST_TAG,
    AlreadyInStore,
    RunRecord,
    upload_saved_run,
    write_run_record,
)
from mlflow.tracking import MlflowClient

from tests.support.store import fresh_store

EXPERIMENT = "uploads"


def _saved_run(folder: Path) -> RunRecord:
    """A run saved by `memtrace run` while MLflow was down: its record and its artifacts folder."""
    (folder / "artifacts").mkdir(parents=True)
    (folder / "artifacts" / "results.json").write_text('{"judge_accuracy": 0.5}')
    record = RunRecord(EXPERIMENT, "saved", tags={"memtrace.host": socket.gethostname(), "memtrace.pid": "1"},
                       params={"seed": "0"}, metrics={"eval/judge_accuracy": 0.5})
    write_run_record(folder, record)
    return record


def _store_runs(uri: str, record: RunRecord) -> list[str]:
    return MlflowTracker(uri).search_run_ids(EXPERIMENT, f"tags.`{RECORD_TAG}` = '{record.record_id}'")


@pytest.mark.slow  # two `memtrace upload` processes
def test_two_concurrent_uploads_leave_one_store_run_and_the_second_is_refused(tmp_path):
    record, uri = _saved_run(tmp_path / "run"), fresh_store(tmp_path / "store.db")
    command = [str(Path(sys.executable).parent / "memtrace"), "upload", f"run_dir={tmp_path / 'run'}",
               f"tracking.uri={uri}", f"hydra.run.dir={tmp_path}/hydra"]
    first = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while f"pid {first.pid} " not in lock_holder(tmp_path / "run"):
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()
            time.sleep(0.05)
        first.send_signal(signal.SIGSTOP)  # holds the lock, alive: the second upload runs meanwhile
        second = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
        first.send_signal(signal.SIGCONT)
        _, err_first = first.communicate(timeout=300)
    finally:
        first.kill()
    assert second.returncode == 2, second.stderr[-2000:]
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and str(tmp_path / "run") in lines[0] and f"pid {first.pid} " in lines[0], lines
    assert first.returncode == 0, err_first[-2000:]
    assert len(_store_runs(uri, record)) == 1


def test_a_run_already_uploaded_from_another_folder_or_machine_is_refused(tmp_path, mlflow_uri):
    record = _saved_run(tmp_path / "here")
    shutil.copytree(tmp_path / "here", tmp_path / "copy")  # the folder copied (another machine's disk)
    done = upload_saved_run(MlflowTracker(mlflow_uri), tmp_path / "copy")
    assert done.created
    with pytest.raises(AlreadyInStore) as refused:
        upload_saved_run(MlflowTracker(mlflow_uri), tmp_path / "here")
    message = str(refused.value)
    assert done.run_id in message and str(tmp_path / "copy") in message and "\n" not in message
    assert exit_code(refused.value) == EXIT_USAGE
    assert _store_runs(mlflow_uri, record) == [done.run_id]

    again = upload_saved_run(MlflowTracker(mlflow_uri), tmp_path / "copy")  # the same folder again: a no-op
    assert (again.run_id, again.created, again.continued) == (done.run_id, False, False)
    MlflowClient(tracking_uri=mlflow_uri).set_tag(done.run_id, UPLOADED_HOST_TAG, "another-machine")
    with pytest.raises(AlreadyInStore, match="another-machine"):
        upload_saved_run(MlflowTracker(mlflow_uri), tmp_path / "copy")
    assert _store_runs(mlflow_uri, record) == [done.run_id]


def test_an_upload_of_a_folder_in_use_is_refused_before_touching_the_store(tmp_path, mlflow_uri):
    record = _saved_run(tmp_path / "run")
    with hold_run_lock(tmp_path / "run", "memtrace optimize"), pytest.raises(RunLocked, match="in use by pid"):
        upload_saved_run(MlflowTracker(mlflow_uri), tmp_path / "run")
    assert _store_runs(mlflow_uri, record) == []
