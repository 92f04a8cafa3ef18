"""Ctrl-C in a sweep whose jobs run in parallel processes (the joblib launcher of `make compare`): the
signal reaches every process of the group; each running job ends its MLflow run KILLED and keeps its
checkpoint (with a resume command that runs as printed), the jobs not yet started do not start, and
the sweep exits 130 with one line per job, no traceback, without the comparison."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

# every test starts with a fresh, migrated MLflow store at tmp_path/mlflow.db (a copy of a template: tests/conftest.py)
pytestmark = pytest.mark.usefixtures("mlflow_db")


@pytest.mark.slow  # two jobs started, then stopped (~40 s)
def test_ctrl_c_stops_every_job_of_a_parallel_sweep_cleanly(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "COLUMNS": "200", "DSPY_CACHEDIR": str(tmp_path / "dspy")}
    memtrace = Path(sys.executable).parent / "memtrace"
    sweep = subprocess.Popen(  # 4 jobs, 2 at a time; a new process group, as a terminal gives a command
        [str(memtrace), "optimize", "-m", "experiment=compare_optimizers", "optimizer=attribution,none",
         "memory_system=mem0", "seed=0,1", "dataset.n_conversations=4", "loop.max_iterations=8",
         "loop.patience=8", f"cache_dir={tmp_path}/cache", f"hydra.sweep.dir={tmp_path}/multirun"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 600
        while len(list((tmp_path / "multirun").glob("*/checkpoint.json"))) < 2:  # both first jobs iterate
            assert sweep.poll() is None and time.monotonic() < deadline, "the jobs never started"
            time.sleep(0.5)
        os.killpg(sweep.pid, signal.SIGINT)  # Ctrl-C: every process of the group
        _out, err = sweep.communicate(timeout=300)
    finally:
        if sweep.poll() is None:
            os.killpg(sweep.pid, signal.SIGKILL)
    assert sweep.returncode == 130, err[-3000:]
    assert "Traceback" not in err
    assert err.count("interrupted by SIGINT (Ctrl-C); the last checkpoint is kept; resume with:") == 2
    assert err.count("not started: the sweep was interrupted") == 2
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("compare-optimizers")
    jobs = client.search_runs([experiment.experiment_id], "tags.`memtrace.command` = 'optimize'")
    assert sorted((r.data.tags["memtrace.optimizer"], r.info.status) for r in jobs) == [
        ("attribution", "KILLED"), ("attribution", "KILLED")]  # no job started after the signal
    assert not client.search_runs([experiment.experiment_id], "tags.`memtrace.command` = 'compare'")
    assert not (tmp_path / "multirun" / "comparison").exists()
