"""Sweep runs named by their overrides (`experiments.output_dirs`): a `-m` job's MLflow run is
`<command> <its task overrides>`, a single run keeps the app's default name, `run_name=` wins."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from memtrace_loop.experiments.output_dirs import overrides_name, run_name
from mlflow.tracking import MlflowClient

# every test starts with a fresh, migrated MLflow store at tmp_path/mlflow.db (a copy of a template: tests/conftest.py)
pytestmark = pytest.mark.usefixtures("mlflow_db")


def test_the_name_is_the_command_and_the_overrides_without_paths_or_hydra_keys():
    overrides = ["optimizer=gepa", "seed=1", "memory_system=rag", "cache_dir=/tmp/x/cache",
                 "hydra.sweep.dir=/tmp/m", "run_name=x", "dataset.n_conversations=8"]
    assert overrides_name("optimize", overrides) == (
        "optimize optimizer=gepa seed=1 memory_system=rag dataset.n_conversations=8"
    )
    assert len(overrides_name("run", [f"k{i}=v" for i in range(200)])) == 250  # MLflow's limit


def test_outside_a_sweep_the_default_name_is_kept_unless_one_is_given():
    assert run_name("run", None, "run-mem0-sim-test") == "run-mem0-sim-test"  # no Hydra job (compose API)
    assert run_name("run", "mine", "run-mem0-sim-test") == "mine"


@pytest.mark.slow
def test_the_runs_of_a_sweep_are_named_by_their_overrides_and_a_single_run_is_not(tmp_path):
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlflow.db", "COLUMNS": "160"}
    memtrace = Path(sys.executable).parent / "memtrace"
    common = ["dataset.n_conversations=1", "workers=1", f"cache_dir={tmp_path}/cache"]
    sweep = subprocess.run(
        [str(memtrace), "run", "-m", "seed=1,2", *common, f"hydra.sweep.dir={tmp_path}/multirun"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False,
    )
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    single = subprocess.run(
        [str(memtrace), "run", "seed=3", *common, f"hydra.run.dir={tmp_path}/single"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False,
    )
    assert single.returncode == 0, single.stderr[-3000:]
    client = MlflowClient(tracking_uri=env["MLFLOW_TRACKING_URI"])
    runs = client.search_runs([client.get_experiment_by_name("memtrace").experiment_id])
    names = sorted(r.info.run_name for r in runs)
    assert names == [
        "run seed=1 dataset.n_conversations=1 workers=1",
        "run seed=2 dataset.n_conversations=1 workers=1",
        "run-mem0-sim-all",  # a single run keeps the default name
    ]
