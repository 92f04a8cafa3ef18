"""A sweep on Hydra's submitit launcher (its local executor: every job a process of its own, started
and waited for by submitit as on a cluster) with a real `mlflow server` on loopback as the shared
store: every job lands in the one experiment, from its own process, and the comparison (in the
launching process) reads them back from the server. SLURM itself is `hydra/launcher=submitit_slurm`
with the same overrides (the README's recipe)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.support.mlflow_server import mlflow_server


@pytest.mark.slow  # two tiny optimization jobs through submitit and a server (~40 s)
def test_a_sweep_on_submitit_local_lands_in_one_experiment_of_a_tracking_server(tmp_path):
    env = {**os.environ, "COLUMNS": "200", "DSPY_CACHEDIR": str(tmp_path / "dspy")}
    env.pop("MLFLOW_TRACKING_URI", None)
    memtrace = Path(sys.executable).parent / "memtrace"
    with mlflow_server(tmp_path / "server") as url:
        launcher = subprocess.Popen(
            [str(memtrace), "optimize", "-m", "experiment=compare_optimizers", "hydra/launcher=submitit_local",
             "optimizer=attribution,none", "memory_system=long_context", "seed=0", "dataset.n_conversations=4",
             "loop.max_iterations=1", f"tracking.uri={url}", f"cache_dir={tmp_path}/cache",
             f"hydra.sweep.dir={tmp_path}/multirun"],
            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        stdout, stderr = launcher.communicate(timeout=900)
        assert launcher.returncode == 0, stderr[-3000:]

        client = MlflowClient(tracking_uri=url)
        experiment = client.get_experiment_by_name("compare-optimizers")
        everywhere = [e.experiment_id for e in client.search_experiments()]
        jobs = client.search_runs(everywhere, "tags.`memtrace.command` = 'optimize'")
        assert {r.info.experiment_id for r in jobs} == {experiment.experiment_id}
        assert sorted(r.data.tags["memtrace.optimizer"] for r in jobs) == ["attribution", "none"]
        pids = {r.data.tags["memtrace.pid"] for r in jobs}
        assert len(pids) == 2 and str(launcher.pid) not in pids  # a process per job
        (comparison,) = client.search_runs([experiment.experiment_id], "tags.`memtrace.command` = 'compare'")
        assert set(comparison.data.tags["memtrace.compared_runs"].split(",")) == {r.info.run_id for r in jobs}
    assert (tmp_path / "multirun" / "comparison" / "comparison.md").is_file()
    assert len(list((tmp_path / "multirun" / ".submitit").glob("*/*_result.pkl"))) == 2  # submitit's job folders
    assert "comparison.md" in stdout
