"""`memtrace optimize resume=<folder>` on a corrupted checkpoint of a real killed run: exit 2, one line on
stderr naming the checkpoint file and the field, and MLflow as it was (the killed run still KILLED with
its metric points and nested runs; the run a forged id names untouched)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_module
from memtrace_loop.experiments.lifecycle import EXIT_USAGE, run_app
from memtrace_loop.experiments.optimize import optimize
from memtrace_loop.pipeline.core.run_folder import RunFolder
from memtrace_loop.pipeline.tracking import loop_observer as loop_tracking
from mlflow.tracking import MlflowClient

from tests.support.store import fresh_store


def optimize_cfg(tmp_path: Path, *overrides: str):
    with initialize_config_module(config_module="memtrace_loop.conf", version_base="1.3"):
        return compose("optimize", overrides=[
            f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", f"cache_dir={tmp_path}/cache",
            "dataset.n_conversations=4", "loop.max_iterations=2", "workers=2", *overrides,
        ])


@pytest.fixture(scope="module")
def killed(tmp_path_factory) -> tuple[Path, Path, str, str]:
    """(store folder, run folder, its MLflow run id: KILLED after iteration 1, another FINISHED run's id)."""
    tmp_path = tmp_path_factory.mktemp("killed")
    fresh_store(tmp_path / "mlflow.db")
    original = loop_tracking.TrackingLoopObserver.on_iteration

    def interrupt_after_first(self, record):
        original(self, record)
        if record.iteration == 1:
            raise KeyboardInterrupt

    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)
        patch.setattr(loop_tracking.TrackingLoopObserver, "on_iteration", interrupt_after_first)
        with pytest.raises(KeyboardInterrupt):
            optimize(optimize_cfg(tmp_path))
    run_dir = next((tmp_path / "outputs" / "optimize").iterdir())
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    run_id = json.loads((run_dir / RunFolder.CHECKPOINT).read_text())["mlflow_run_id"]
    other = client.create_run(client.get_run(run_id).info.experiment_id, run_name="another-run")
    client.set_terminated(other.info.run_id, "FINISHED")
    return tmp_path, run_dir, run_id, other.info.run_id


def _state(client: MlflowClient, run_id: str) -> tuple[Any, ...]:
    run = client.get_run(run_id)
    children = client.search_runs([run.info.experiment_id], f"tags.mlflow.parentRunId = '{run_id}'")
    points = len(client.get_metric_history(run_id, "dev/judge_accuracy"))
    return run.info.status, run.info.end_time, points, sorted(c.info.run_id for c in children)


def _set(**fields: Any) -> Callable[[dict[str, Any]], None]:
    return lambda data: data.update(fields)


CORRUPTIONS: dict[str, tuple[Any, str]] = {  # (edit of the checkpoint JSON, the field the line names)
    "iteration 99": (_set(iteration=99), "field iteration"),
    "empty history": (_set(history=[]), "field history"),
    "unknown stage": (lambda d: d["current_prompts"].update(summarize="Sum up."), "field current_prompts"),
    "another run's id": (None, "field mlflow_run_id"),  # None: the id of another real run of the store
    "another config": (_set(config_digest="0123456789abcdef"), "field config_digest"),
    "wrong type": (_set(stale="0"), "field stale"),
    "truncated": ("truncated", "not a JSON checkpoint"),
}


@pytest.mark.slow  # one small optimization killed after iteration 1, then a refused resume per corruption
@pytest.mark.parametrize("name", list(CORRUPTIONS))
def test_a_corrupted_checkpoint_is_refused_with_exit_2_and_mlflow_untouched(killed, name, tmp_path, capsys,
                                                                             monkeypatch):
    store, original_dir, run_id, other_id = killed
    run_dir = tmp_path / original_dir.name
    shutil.copytree(original_dir, run_dir)  # each corruption on its own copy of the killed run's folder
    path = run_dir / RunFolder.CHECKPOINT
    text = path.read_text(encoding="utf-8")
    data = json.loads(text)
    change, field = CORRUPTIONS[name]
    if change == "truncated":
        path.write_text(text[: len(text) // 2], encoding="utf-8")
    else:
        (change or _set(mlflow_run_id=other_id))(data)
        path.write_text(json.dumps(data), encoding="utf-8")
    client = MlflowClient(tracking_uri=f"sqlite:///{store}/mlflow.db")
    before = {rid: _state(client, rid) for rid in (run_id, other_id)}
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()

    with pytest.raises(SystemExit) as exited:
        run_app("optimize", lambda stop: optimize(optimize_cfg(store, f"resume={run_dir}"), stop=stop))
    assert exited.value.code == EXIT_USAGE
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"memtrace optimize: {path}: {field}"), lines
    assert "resume with" not in lines[0]  # never sent back to the folder it refused
    assert {rid: _state(client, rid) for rid in (run_id, other_id)} == before
    assert before[run_id][0] == "KILLED" and before[other_id][0] == "FINISHED"
