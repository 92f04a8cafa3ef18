"""`memtrace optimize optimizer=gepa|gepa_blame` as a user runs it on the simulated world (whose rewriter
answers GEPA's reflection requests): the loop's MLflow parent and nested runs, GEPA's candidate table,
its resumable state under the run directory, and the export."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from memtrace_loop.experiments.optimize import optimize
from mlflow.tracking import MlflowClient

# every test starts with a fresh, migrated MLflow store at tmp_path/mlflow.db (a copy of a template: tests/conftest.py)
pytestmark = pytest.mark.usefixtures("mlflow_db")

TINY = ["dataset.n_conversations=4", "loop.max_iterations=1", "workers=2", "optimizer.max_metric_calls=60",
        "optimizer.num_threads=2"]


@pytest.mark.slow  # a whole (tiny) optimization with GEPA inside
@pytest.mark.parametrize("name", ["gepa", "gepa_blame"])
def test_memtrace_optimize_runs_gepa_inside_the_loop(tmp_path, name):
    with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
        cfg = compose("optimize", overrides=[f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
                                             f"cache_dir={tmp_path}/cache", f"optimizer={name}", *TINY])
    before = Path.cwd()
    os.chdir(tmp_path)
    try:
        outcome = optimize(cfg)
    finally:
        os.chdir(before)
    run_dir = Path(outcome["run_dir"])
    gepa_dir = run_dir / "optimizer" / name
    assert (gepa_dir / "gepa_state.bin").exists()  # resumable state under the run directory
    table = json.loads((gepa_dir / "iteration-1-gepa_candidates.json").read_text())
    assert table["candidate"][0] == "0" and len(table["candidate"]) >= 2  # GEPA proposed something

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    parent = client.get_run(outcome["run_id"])
    assert parent.data.tags["memtrace.optimizer"] == name
    pool = {f.path for f in client.list_artifacts(outcome["run_id"], f"optimizer/{name}")}
    assert f"optimizer/{name}/iteration-1-gepa_candidates.json" in pool  # GEPA's pool, proposed or not
    assert "program/best_program.json" in {f.path for f in client.list_artifacts(outcome["run_id"], "program")}
    children = client.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{outcome['run_id']}'")
    assert sorted(c.data.tags["memtrace.iteration"] for c in children) == ["0", "1"]
    iteration = next(c for c in children if c.data.tags["memtrace.iteration"] == "1")
    logged = {f.path for f in client.list_artifacts(iteration.info.run_id, "candidates")}
    if int(iteration.data.metrics["loop/candidates"]) > 0:  # each proposed candidate carries GEPA's pool
        assert any(path.endswith("gepa_candidates.json") for path in logged)
    assert (run_dir / "best_prompts.json").exists()
    assert outcome["test_final"] >= outcome["test_start"] or int(iteration.data.metrics["loop/accepted"]) == 0
