"""One process at a time per run: two concurrent resumes of one interrupted optimization (real
`memtrace` processes) — one proceeds, the other is refused in one line naming the folder and the
holder, and the MLflow run gets no duplicate metric point or iteration; a parent run killed before
its first checkpoint is ended FAILED by `resume=`; a stale RUNNING run is ended FAILED on the next
start while a locked one stays RUNNING."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from memtrace_loop.experiments.lifecycle import stop_on_signals
from memtrace_loop.experiments.optimize import optimize
from memtrace_loop.pipeline.core.run_lock import RunLocked, hold_run_lock, lock_holder
from memtrace_loop.pipeline.core.stop import Interrupted, StopToken
from memtrace_loop.pipeline.loop.checkpoint import CheckpointError
from memtrace_loop.pipeline.tracking import loop_observer as loop_tracking
from memtrace_loop.pipeline.tracking.run_record import folder_tags
from mlflow.tracking import MlflowClient

from tests.support.compose import composed

pytestmark = pytest.mark.usefixtures("mlflow_db")

MEMTRACE = str(Path(sys.executable).parent / "memtrace")


def _cfg(tmp_path: Path, *overrides: str):
    return composed("optimize", f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", f"cache_dir={tmp_path}/cache",
                    "dataset.n_conversations=6", "workers=2", *overrides)


def _interrupted_run(tmp_path: Path, monkeypatch, after: int = 1) -> Path:
    """An optimization stopped by a real SIGINT once iteration `after` is logged and checkpointed."""
    original = loop_tracking.TrackingLoopObserver.on_iteration

    def interrupt(self, record):
        original(self, record)
        if record.iteration == after:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(loop_tracking.TrackingLoopObserver, "on_iteration", interrupt)
    stop = StopToken()
    with pytest.raises(Interrupted), stop_on_signals(stop):
        optimize(_cfg(tmp_path, "loop.max_iterations=2", "dataset.n_conversations=4"), stop=stop)
    monkeypatch.setattr(loop_tracking.TrackingLoopObserver, "on_iteration", original)
    return next((tmp_path / "outputs" / "optimize").iterdir())


def _resume(tmp_path: Path, run_dir: Path) -> subprocess.Popen:
    return subprocess.Popen([MEMTRACE, "optimize", f"resume={run_dir}"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_for_lock(run_dir: Path, process: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while f"pid {process.pid} " not in lock_holder(run_dir):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the first resume never took the lock"
        time.sleep(0.05)


@pytest.mark.slow  # an interrupted optimization and two `memtrace optimize` processes
def test_two_concurrent_resumes_one_proceeds_one_is_refused_and_no_point_is_duplicated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_dir = _interrupted_run(tmp_path, monkeypatch)
    parent_id = json.loads((run_dir / "checkpoint.json").read_text())["mlflow_run_id"]
    first = _resume(tmp_path, run_dir)
    try:
        _wait_for_lock(run_dir, first)
        first.send_signal(signal.SIGSTOP)  # it holds the lock and is alive: the second runs while it waits
        second = _resume(tmp_path, run_dir)
        _, err = second.communicate(timeout=300)
        first.send_signal(signal.SIGCONT)
        _, err_first = first.communicate(timeout=600)
    finally:
        first.kill()
    assert second.returncode == 2, err[-2000:]
    refusal = [line for line in err.splitlines() if "in use" in line]
    assert len(refusal) == 1 and str(run_dir) in refusal[0] and f"pid {first.pid} " in refusal[0], err[-2000:]
    assert first.returncode == 0, err_first[-3000:]

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    parent = client.get_run(parent_id)
    assert parent.info.status == "FINISHED"
    for key in parent.data.metrics:
        steps = Counter(m.step for m in client.get_metric_history(parent_id, key))
        assert max(steps.values()) == 1, (key, steps)
    children = client.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{parent_id}'")
    iterations = Counter(c.data.tags["memtrace.iteration"] for c in children)
    assert iterations and max(iterations.values()) == 1, iterations
    for child in children:
        for key in child.data.metrics:
            assert max(Counter(m.step for m in client.get_metric_history(child.info.run_id, key)).values()) == 1


@pytest.mark.slow  # one short optimization
def test_a_stale_running_run_is_ended_failed_on_the_next_start_and_a_locked_one_is_not(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    experiment = client.create_experiment("locks")
    stale_dir, locked_dir = tmp_path / "stale", tmp_path / "locked"
    stale_dir.mkdir()
    locked_dir.mkdir()
    stale = client.create_run(experiment, tags=folder_tags(stale_dir)).info.run_id  # its process died: no lock
    stale_child = client.create_run(experiment, tags={"mlflow.parentRunId": stale}).info.run_id
    locked = client.create_run(experiment, tags=folder_tags(locked_dir)).info.run_id
    elsewhere = client.create_run(experiment, tags={**folder_tags(stale_dir), "memtrace.host": "another-machine"})
    unnamed = client.create_run(experiment).info.run_id  # e.g. a `memtrace run` logging live: not ours to judge
    with hold_run_lock(locked_dir, "a live optimize"):
        optimize(_cfg(tmp_path, "tracking.experiment=locks", "loop.max_iterations=1", "dataset.n_conversations=4"))
    statuses = {run_id: client.get_run(run_id).info.status
                for run_id in (stale, stale_child, locked, elsewhere.info.run_id, unnamed)}
    assert statuses == {stale: "FAILED", stale_child: "FAILED", locked: "RUNNING", elsewhere.info.run_id: "RUNNING",
                        unnamed: "RUNNING"}


@pytest.mark.slow  # one short optimization, stopped
def test_resume_of_a_run_killed_before_its_first_checkpoint_ends_its_run_failed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    original = loop_tracking.TrackingLoopObserver.on_iteration

    def die_before_the_first_checkpoint(self, record):  # as SIGKILL would: the run is left RUNNING
        raise SystemExit(9)

    monkeypatch.setattr(loop_tracking.TrackingLoopObserver, "on_iteration", die_before_the_first_checkpoint)
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    with pytest.raises(SystemExit):
        optimize(_cfg(tmp_path, "loop.max_iterations=1", "dataset.n_conversations=4"))
    monkeypatch.setattr(loop_tracking.TrackingLoopObserver, "on_iteration", original)
    run_dir = next((tmp_path / "outputs" / "optimize").iterdir())
    assert not (run_dir / "checkpoint.json").exists()
    experiment = client.get_experiment_by_name("memtrace").experiment_id
    (parent,) = client.search_runs([experiment], f"tags.`memtrace.run_dir` = '{run_dir.resolve()}'")
    client.set_terminated(parent.info.run_id, "RUNNING")  # what a SIGKILL leaves (SystemExit ended it)
    with hold_run_lock(run_dir, "the killed run, still alive"), pytest.raises(RunLocked, match="in use by"):
        optimize(_cfg(tmp_path, f"resume={run_dir}"))
    assert client.get_run(parent.info.run_id).info.status == "RUNNING"  # a live holder: untouched
    with pytest.raises(CheckpointError, match=r"no checkpoint\.json"):
        optimize(_cfg(tmp_path, f"resume={run_dir}"))
    assert client.get_run(parent.info.run_id).info.status == "FAILED"
