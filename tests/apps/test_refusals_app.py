"""A misconfigured `run` or `optimize` stops before any work (issue 10): a bad knob, an empty dataset
file and an empty split end the app with the key, file or split named, non-zero, with no FINISHED
MLflow run and no exported prompt set."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from memtrace_loop.experiments.optimize import optimize
from memtrace_loop.experiments.run import run
from memtrace_loop.pipeline.data.locomo import DataError
from memtrace_loop.pipeline.data.splits import EmptySplitError
from mlflow.entities import ViewType
from mlflow.tracking import MlflowClient

# every test starts with a fresh, migrated MLflow store at tmp_path/mlflow.db (a copy of a template: tests/conftest.py)
pytestmark = pytest.mark.usefixtures("mlflow_db")


def composed(config: str, tmp_path: Path, *overrides: str):
    with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
        return compose(config, overrides=[f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
                                          f"cache_dir={tmp_path}/cache", *overrides])


def finished_runs(store: Path) -> list[str]:
    """The ids of FINISHED runs in the SQLite store `store` (none when the store was never created)."""
    if not store.exists():
        return []
    client = MlflowClient(tracking_uri=f"sqlite:///{store}")
    experiments = [e.experiment_id for e in client.search_experiments(view_type=ViewType.ALL)]
    runs = client.search_runs(experiments, run_view_type=ViewType.ALL) if experiments else []
    return [r.info.run_id for r in runs if r.info.status == "FINISHED"]


def test_run_refuses_an_empty_dataset_file_before_any_work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    empty = tmp_path / "empty.json"
    empty.write_text("[]", encoding="utf-8")
    with pytest.raises(DataError, match=rf"{empty}: the dataset has no conversations"):
        run(composed("run", tmp_path, "dataset=locomo", f"dataset.path={empty}"))
    assert finished_runs(tmp_path / "mlflow.db") == []


def test_optimize_refuses_an_empty_split_before_any_work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(EmptySplitError, match=r"split=test: .*splits\.fractions=\[0\.5, 0\.25, 0\.25\]"):
        optimize(composed("optimize", tmp_path, "dataset.n_conversations=2"))
    assert finished_runs(tmp_path / "mlflow.db") == []
    assert not list(tmp_path.rglob("best_prompts.*"))


@pytest.mark.slow  # two processes
def test_the_console_script_exits_non_zero_naming_the_bad_key(tmp_path):
    store = tmp_path / "mlflow.db"
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{store}", "MEMTRACE_CACHE_DIR": str(tmp_path / "cache"),
           "COLUMNS": "160"}
    memtrace = Path(sys.executable).parent / "memtrace"
    for command, override, named in (
        ("run", "memory_system.top_k=ten", "memory_system.top_k: expected an integer, got 'ten'"),
        ("optimize", "splits.fractions=[0.5,0.5,0]", "splits.fractions"),
    ):
        done = subprocess.run(
            [str(memtrace), command, override, f"hydra.run.dir={tmp_path}/out-{command}"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
        )
        assert done.returncode != 0, done.stdout[-2000:]
        assert named in done.stderr, done.stderr[-3000:]
        assert finished_runs(store) == []
    assert not list(tmp_path.rglob("best_prompts.*"))
